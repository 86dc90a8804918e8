//! What the clock-step arm (`clock_steps.rs`) and the partition arm
//! (`partitions.rs`) share: five servers (each behind a proxy), the fenced
//! register on a server of its own, client threads of the randomized runs'
//! families (each its own manager, quarantine on), a prober (a manager of
//! the arm's own, driven by the arm's fault loop on the test's thread),
//! and the checker's verdicts, split by whether the arm's faults stayed
//! within the assumptions of docs/safety.md ([`Exposure`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::{LockGuard, LockManager};
use testkit::proxy::Proxy;
use testkit::{RedisServer, RedisServers, Rng};

use crate::checker::*;
use crate::clients::*;
use crate::config::*;
use crate::faults::*;
use crate::recorder::*;

/// What an arm's fault loop is given.
pub(crate) struct ArmContext<'a> {
    pub(crate) servers: &'a RedisServers,
    pub(crate) proxies: &'a [Proxy],
    pub(crate) shared: &'a Shared,
    /// The prober's manager (owner [`PROBER_OWNER`]), fencing off by
    /// default; its windows and writes are recorded like a client's, as
    /// client [`ArmContext::prober`].
    pub(crate) prober: &'a LockManager,
    /// The prober's client number (after the clients').
    pub(crate) prober_id: usize,
    pub(crate) register_url: &'a str,
    pub(crate) rng: Rng,
    /// When the run is planned to end (the loop may finish its schedule
    /// first: the clock arm runs its schedule at least once).
    pub(crate) deadline: Instant,
}

/// The prober's manager number.
pub(crate) const PROBER_OWNER: u64 = 3_000_000;

/// What an arm recorded, for its checks.
pub(crate) struct ArmRecord {
    pub(crate) run_time: Duration,
    pub(crate) seed: u64,
    /// The plain resource's windows, and the fenced one's.
    pub(crate) windows: Vec<Window>,
    pub(crate) fenced_windows: Vec<Window>,
    pub(crate) resource: Resource,
    pub(crate) fenced_writes: Vec<FencedWrite>,
    pub(crate) register_value: u64,
    pub(crate) acquisitions: [u64; Family::ALL.len()],
    pub(crate) failed_locks: u64,
    pub(crate) failed_releases: u64,
}

/// Runs an arm: `servers` behind proxies (the clients and the prober go
/// through the proxies) for about `secs` seconds (the deadline the fault
/// loop is given), `families` (how many clients of each, each its
/// own manager; `Plain`, `AutoExtend` and `Fenced` only), the fault loop
/// `faults` on this thread until it returns; then every client stops and
/// the history is returned with the loop's own result.
pub(crate) fn run_arm<T>(
    label: &str,
    (servers, secs): (RedisServers, u64),
    families: &[(Family, usize)],
    quick_holds: bool,
    faults: impl FnOnce(&mut ArmContext<'_>) -> T,
) -> (ArmRecord, T) {
    let seed = seed();
    let mut clients = Vec::new();
    let mut fenced_nth = 0;
    for &(family, n) in families {
        for _ in 0..n {
            let group = (family == Family::Fenced).then(|| {
                fenced_nth += 1;
                fenced_nth - 1
            });
            clients.push(ClientSpec {
                family,
                manager: Some(clients.len()),
                group,
            });
        }
    }
    eprintln!(
        "torture [{label}]: {NODES} nodes behind proxies, {} client threads ({}) and a prober, \
         TTL = max_ttl = {TTL:?}, node timeout {NODE_TIMEOUT:?}, seed {seed} \
         (QUORUM_LOCK_TORTURE_SEED={seed} replays the choices), server {}",
        clients.len(),
        families
            .iter()
            .map(|(f, n)| format!("{n} {}", f.name()))
            .collect::<Vec<_>>()
            .join(", "),
        testkit::ServerKind::chosen().name(),
    );
    let register = RedisServer::start();
    let register_url = register.url();
    let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let pids = Arc::new(Mutex::new(Vec::new()));
    record_pids(&servers, None, &pids);
    // The clock arm runs its schedule once at least, about 6 s.
    let hang = hang_detector(
        Arc::clone(&pids),
        Some(register.pid()),
        Duration::from_secs(secs.max(10)) + HANG_GRACE,
    );
    let managers: Vec<LockManager> = clients
        .iter()
        .enumerate()
        .map(|(m, spec)| {
            // The first fenced client asks for fencing in its builder, the
            // others per lock (as in the randomized runs).
            let fencing = spec.group == Some(0);
            client_manager(&urls, true, fencing, m as u64)
        })
        .collect();
    let prober = client_manager(&urls, true, false, PROBER_OWNER);
    let shared = Shared {
        quick_holds,
        // Every family may lock at once: no opening here.
        opening: OPENING.len().into(),
        ..Shared::new(clients.len() + 1)
    };
    let mut rng = Rng::new(seed);
    let client_seeds: Vec<u64> = clients.iter().map(|_| rng.next_u64()).collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let result = thread::scope(|scope| {
        let _stop = StopOnDrop(&shared.stop);
        for (id, spec) in clients.iter().enumerate() {
            let (shared, seed, spec) = (&shared, client_seeds[id], *spec);
            let (locks, register_url) = (&managers[id], register_url.as_str());
            thread::Builder::new()
                .name(format!("torture-arm-client-{id}"))
                .spawn_scoped(scope, move || match spec.family {
                    Family::Fenced => {
                        let nth = spec.group.unwrap_or(0);
                        fenced_client(id, nth, locks, register_url, shared, seed);
                    }
                    _ => client(id, spec, locks, shared, seed),
                })
                .unwrap();
        }
        let mut context = ArmContext {
            servers: &servers,
            proxies: &proxies,
            shared: &shared,
            prober: &prober,
            prober_id: clients.len(),
            register_url: &register_url,
            rng,
            deadline,
        };
        faults(&mut context)
    });
    let run_time = started.elapsed();
    let _ = prober.flush(Duration::from_secs(2));
    drop(prober);
    drop(managers);
    let _ = hang.send(());
    let register_value = register.get(REGISTER_VALUE.as_bytes()).map_or(0, |v| {
        String::from_utf8_lossy(&v)
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("register value {v:?}: {e}"))
    });
    drop(register);
    drop(servers);
    let windows = std::mem::take(&mut *shared.windows.lock().unwrap());
    let (fenced_windows, windows): (Vec<Window>, Vec<Window>) =
        windows.into_iter().partition(|w| w.fence.is_some());
    let c = &shared.counts;
    let load = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let record = ArmRecord {
        run_time,
        seed,
        windows,
        fenced_windows,
        resource: std::mem::take(&mut *shared.resource.lock().unwrap()),
        fenced_writes: std::mem::take(&mut *shared.fenced_writes.lock().unwrap()),
        register_value,
        acquisitions: std::array::from_fn(|i| load(&c.acquisitions[i])),
        failed_locks: load(&c.failed_locks),
        failed_releases: load(&c.failed_releases),
    };
    (record, result)
}

/// The verdicts on an arm's history.
#[derive(Debug)]
pub(crate) struct ArmVerdict {
    /// Overlaps of the plain resource's holders and of the fenced one's.
    pub(crate) overlaps: OverlapVerdict,
    pub(crate) fenced_overlaps: OverlapVerdict,
    pub(crate) lost: LostUpdates,
    /// Updates lost within validity that an exposure explains, and those
    /// it does not (with the first such pair).
    pub(crate) losses_explained: u64,
    pub(crate) losses_unexplained: u64,
    pub(crate) first_unexplained_loss: Option<(Write, Write)>,
    pub(crate) fenced: FencedFigures,
    /// Fenced writes refused within their writer's validity: during an
    /// exposure (fencing refusing a holder that still thought itself
    /// valid), and outside one.
    pub(crate) refused_explained: u64,
    pub(crate) refused_unexplained: u64,
}

impl ArmVerdict {
    pub(crate) fn of(record: &ArmRecord, exposures: &[Exposure]) -> Self {
        let mut windows = record.windows.clone();
        let mut fenced_windows = record.fenced_windows.clone();
        let (refused_explained, refused_unexplained) =
            classify_refusals(&record.fenced_writes, exposures);
        let (losses_explained, losses_unexplained, first_unexplained_loss) =
            classify_losses(&record.resource, exposures);
        Self {
            overlaps: classify_overlaps(&mut windows, exposures),
            fenced_overlaps: classify_overlaps(&mut fenced_windows, exposures),
            lost: lost_updates(&record.resource),
            losses_explained,
            losses_unexplained,
            first_unexplained_loss,
            fenced: fenced_figures(
                &record.fenced_writes,
                record.register_value,
                &record.fenced_windows,
            ),
            refused_explained,
            refused_unexplained,
        }
    }

    /// Overlaps beyond the assumptions, of either resource.
    pub(crate) fn beyond(&self) -> u64 {
        self.overlaps.beyond + self.fenced_overlaps.beyond
    }

    /// Exposures that let a second holder in: of the plain resource, of
    /// the fenced one, and in all.
    pub(crate) fn exposures_hit(&self) -> (usize, usize, usize) {
        let count = |hit: &[bool]| hit.iter().filter(|h| **h).count();
        (
            count(&self.overlaps.hit),
            count(&self.fenced_overlaps.hit),
            self.overlaps.hit.len(),
        )
    }

    /// Prints the figures every arm has.
    pub(crate) fn print(&self, label: &str, record: &ArmRecord, started: Instant) {
        let (o, fo, l, fe) = (
            &self.overlaps,
            &self.fenced_overlaps,
            &self.lost,
            &self.fenced,
        );
        let of = |f: Family| record.acquisitions[f.index()];
        eprintln!(
            "torture [{label}] figures after {:.1?} (seed {}):\n\
             \x20 acquisitions: plain {}, auto-extended {}, fenced {} (lock calls that gave up \
             {}, releases without quorum {})\n\
             \x20 overlaps within the assumptions {} (fenced resource {}); beyond them {} \
             (fenced resource {}; longest {:.1?}; a holder from before a step valid for up to \
             {:.1?} after another got the lock; steps beyond the assumptions that let a second \
             holder in: {} of {} on the plain resource, {} on the fenced one)\n\
             \x20 unfenced counter {} of {} writes: lost {} = by late writers {} + within \
             validity {} ({} interfering writes: {} beyond the assumptions, {} within)\n\
             \x20 fenced: increments attempted {}, accepted {}, stale writes refused {} (after \
             the writer's deadline) + {} within its validity beyond the assumptions + {} \
             within it otherwise; register {}: lost updates {} (by interference {}); fence \
             order violations {}, duplicate fences {}",
            record.run_time,
            record.seed,
            of(Family::Plain),
            of(Family::AutoExtend),
            of(Family::Fenced),
            record.failed_locks,
            record.failed_releases,
            o.within + fo.within,
            fo.within,
            self.beyond(),
            fo.beyond,
            o.longest_beyond.max(fo.longest_beyond),
            o.longest_two_valid.max(fo.longest_two_valid),
            self.exposures_hit().0,
            self.exposures_hit().2,
            self.exposures_hit().1,
            l.counter,
            l.writes,
            l.total,
            l.by_late_writers,
            l.within_validity,
            l.valid_interferences,
            self.losses_explained,
            self.losses_unexplained,
            fe.attempted,
            fe.accepted,
            fe.refused_stale,
            self.refused_explained,
            self.refused_unexplained,
            fe.counter,
            fe.lost,
            fe.lost_by_interference,
            fe.fence_order_violations,
            fe.duplicate_fences,
        );
        for (what, pair) in [
            ("first overlap within the assumptions", &o.first_within),
            (
                "first fenced overlap within the assumptions",
                &fo.first_within,
            ),
            ("first overlap beyond the assumptions", &o.first_beyond),
        ] {
            if let Some((a, b)) = pair {
                eprintln!(
                    "  {what}:\n    {}\n    {}",
                    describe(a, started),
                    describe(b, started)
                );
            }
        }
        if let Some((between, over)) = &self.first_unexplained_loss {
            eprintln!(
                "  first update lost within validity, within the assumptions:\n    {}\n    {}",
                describe_write(between, started),
                describe_write(over, started),
            );
        }
    }

    /// The verdict within the assumptions, strict: no two holders at
    /// once that no exposure explains, no update lost between writers
    /// within their validity outside an exposure, no fenced write refused
    /// within its writer's validity outside one; and fencing intact
    /// everywhere, exposures included: the fenced counter loses nothing,
    /// fences rise from one holder to the next, no fence is given twice.
    pub(crate) fn assert_safe(&self, label: &str) {
        assert_eq!(
            (self.overlaps.within, self.fenced_overlaps.within),
            (0, 0),
            "[{label}] two valid holders at once within the assumptions: {self:?}"
        );
        assert_eq!(
            self.losses_unexplained, 0,
            "[{label}] updates lost between writers within their validity, within the \
             assumptions: {self:?}"
        );
        assert_eq!(
            self.refused_unexplained, 0,
            "[{label}] a fenced write refused within its writer's validity, within the \
             assumptions: {self:?}"
        );
        let fe = &self.fenced;
        assert_eq!(
            (fe.lost, fe.lost_by_interference, fe.interferences),
            (0, 0, 0),
            "[{label}] fencing let a stale write through: {self:?}"
        );
        assert_eq!(
            (fe.fence_order_violations, fe.duplicate_fences),
            (0, 0),
            "[{label}] fences out of order: {self:?}"
        );
    }
}

/// The prober's hold of `resource`: its guard, when it was taken, and the
/// deadline it last observed.
pub(crate) struct ProbeHold {
    pub(crate) guard: LockGuard,
    pub(crate) start: Instant,
    pub(crate) claim: Instant,
}

impl ProbeHold {
    pub(crate) fn new(guard: LockGuard) -> Self {
        let start = Instant::now();
        let claim = observe(&guard, false).unwrap_or(start);
        Self {
            guard,
            start,
            claim,
        }
    }

    /// Observes the guard again: its deadline, or `None` once invalid
    /// (the claim stays the last one observed).
    pub(crate) fn observe(&mut self) -> Option<Instant> {
        let deadline = observe(&self.guard, false)?;
        self.claim = deadline;
        Some(deadline)
    }

    /// The window to record, ending at `let_go` or the last claim.
    pub(crate) fn window(&self, client: usize, let_go: Instant) -> Window {
        let fence = self.guard.fence();
        Window {
            client,
            family: if fence.is_some() {
                Family::Fenced
            } else {
                Family::Plain
            },
            start: self.start,
            end: let_go.min(self.claim),
            seen: Seen::Step,
            handed_over: false,
            extensions: self.guard.extensions(),
            manual_extends: 0,
            fence,
            owner: PROBER_OWNER,
        }
    }
}
