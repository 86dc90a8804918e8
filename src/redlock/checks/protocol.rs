//! An exhaustive check of the protocol for small bounds: two clients,
//! three nodes, key expiry, restarts that forget, first contact with a
//! restarted server, restart quarantine and fencing tokens, explored
//! breadth-first over every order of their steps up to [`DEPTH`].
//!
//! The model's actions call the crate's own pure functions, so the check
//! covers the arithmetic that ships: the validity and drift
//! ([`validity`], [`drift`]), the vote count ([`Tally`]), the identity
//! judgement with its uptime credit and quarantine ([`Identity::judge`])
//! and the fence choice ([`next_fence`]). What is abstracted: a round is
//! one step (every node answers at once, `elapsed` = 0; slow rounds are
//! the validity arithmetic's unit tests), nodes are always reachable, and
//! the extend ordering of one lease is left to the lease explorer
//! (`lease.rs`).
//!
//! Properties, checked in every state reached: never two valid holders;
//! fences strictly increase from one grant to the next; a valid guard
//! never claims more than a quorum of nodes holds (a node restarted less
//! than `max_ttl` ago counts as holding: quarantine keeps it from voting
//! until then); an inspection ([`Inspection::judge`]) sees a valid holder
//! whose keys a quorum holds as held by that holder, for about as long as
//! it claims. Each protection, removed, makes a property fail with a
//! printed counterexample (the canary tests below).

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::backend::{Holding, ServerInfo};
use crate::clock::Reading;
use crate::engine::{Identity, Registry, Standing, Tally};
use crate::inspection::Inspection;
use crate::owner::OWNER_MARK;
use crate::redlock::fencing::next_fence;
use crate::redlock::validity::{drift, validity};

/// Steps explored from the initial state.
const DEPTH: usize = 8;
const NODES: usize = 3;
const CLIENTS: usize = 2;
const QUORUM: usize = 2;
const TTL: Duration = Duration::from_millis(1000);
const DRIFT_FACTOR: f64 = 0.01;
/// Clock steps the environment may take, in ms: short enough to land
/// inside a first-contact window, long enough to outlive a lock.
const TICKS_MS: [u64; 2] = [60, 500];
/// Where each node's wall clock is within its second at time 0 (Redis
/// reports uptime as whole seconds of the wall clock).
const WALL_PHASE_MS: [u64; NODES] = [950, 500, 0];
/// Restarts per explored schedule, at most.
const MAX_RESTARTS: u8 = 2;
/// New managers (first contact with every node) per schedule, at most.
const MAX_RENEWALS: u8 = 1;

/// Which protections are on.
#[derive(Debug, Clone, Copy)]
struct Protections {
    quarantine: bool,
    /// Credit a server's reported uptime less its one-second resolution.
    uptime_resolution: bool,
    /// Write the new fence back to a quorum before handing it out.
    fence_write_back: bool,
}

const ALL_ON: Protections = Protections {
    quarantine: true,
    uptime_resolution: true,
    fence_write_back: true,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Acquire(usize),
    Release(usize),
    /// The client's manager is replaced: first contact with every node.
    Renew(usize),
    Restart(usize),
    Tick(u64),
}

/// One node: the lock key, the fence counter, and its incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Node {
    /// (holder's token, expiry in ms).
    key: Option<(u32, u64)>,
    counter: u64,
    incarnation: u32,
    /// When it last (re)started, in ms; `None`: never restarted.
    started: Option<u64>,
}

#[derive(Debug, Clone)]
struct Client {
    identities: Vec<Identity>,
    registry: Registry,
    /// (token, deadline in ms, fence).
    holding: Option<(u32, u64, u64)>,
}

#[derive(Debug, Clone)]
struct State {
    now: u64,
    nodes: Vec<Node>,
    clients: Vec<Client>,
    next_token: u32,
    /// The highest fence granted so far.
    last_fence: u64,
    restarts: u8,
    renewals: u8,
}

/// What a state is, for the visited set (identities by what they decide
/// with).
type Fingerprint = (u64, Vec<Node>, Vec<ClientPrint>, u32, u64, u8, u8);
type ClientPrint = (Option<(u32, u64, u64)>, Vec<IdentityPrint>);
type IdentityPrint = (Option<String>, Option<Instant>, Option<usize>);

struct Model {
    base: Instant,
    protections: Protections,
    quarantine: Option<Duration>,
    /// Canary: expect an inspection to see every valid holder, also one
    /// whose keys only quarantine covers.
    inspection_sees_through_restarts: bool,
}

impl Model {
    fn new(protections: Protections) -> Self {
        let quarantine = protections
            .quarantine
            .then(|| TTL + drift(TTL, DRIFT_FACTOR));
        Self {
            base: Instant::now(),
            protections,
            quarantine,
            inspection_sees_through_restarts: false,
        }
    }

    fn client(&self) -> Client {
        Client {
            identities: (0..NODES)
                .map(|i| Identity::new(i, self.quarantine, false))
                .collect(),
            registry: Registry::default(),
            holding: None,
        }
    }

    fn initial(&self) -> State {
        State {
            now: 0,
            nodes: (0..NODES)
                .map(|_| Node {
                    key: None,
                    counter: 0,
                    incarnation: 0,
                    started: None,
                })
                .collect(),
            clients: (0..CLIENTS).map(|_| self.client()).collect(),
            next_token: 1,
            last_fence: 0,
            restarts: 0,
            renewals: 0,
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    /// What node `i` says about itself at `now`, as Redis does: its run id
    /// and `uptime_in_seconds` = floor(wall now) - floor(wall at start).
    fn server_info(&self, i: usize, node: &Node, now: u64) -> ServerInfo {
        let uptime = match node.started {
            // Up since long before anything in the model.
            None => Duration::from_secs(365 * 24 * 3600),
            Some(started) => {
                let wall = |t: u64| (t + WALL_PHASE_MS[i]) / 1000;
                let secs = wall(now) - wall(started);
                // Without the resolution protection, the engine's deduction
                // of one second is cancelled: the uptime is credited in full.
                let secs = secs + u64::from(!self.protections.uptime_resolution);
                Duration::from_secs(secs)
            }
        };
        ServerInfo::new(format!("n{i}#{}", node.incarnation), Some(uptime))
    }

    fn actions(&self, s: &State) -> Vec<Action> {
        let mut out = Vec::new();
        for (c, client) in s.clients.iter().enumerate() {
            match client.holding {
                None => out.push(Action::Acquire(c)),
                Some(_) => out.push(Action::Release(c)),
            }
            if s.renewals < MAX_RENEWALS {
                out.push(Action::Renew(c));
            }
        }
        if s.restarts < MAX_RESTARTS {
            out.extend((0..NODES).map(Action::Restart));
        }
        out.extend(TICKS_MS.map(Action::Tick));
        out
    }

    fn apply(&self, s: &State, action: Action) -> State {
        let mut s = s.clone();
        match action {
            Action::Tick(ms) => s.now += ms,
            Action::Restart(i) => {
                let node = &mut s.nodes[i];
                node.key = None;
                node.counter = 0;
                node.incarnation += 1;
                node.started = Some(s.now);
                s.restarts += 1;
            }
            Action::Renew(c) => {
                let held = s.clients[c].holding;
                s.clients[c] = self.client();
                s.clients[c].holding = held;
                s.renewals += 1;
            }
            Action::Release(c) => {
                if let Some((token, _, _)) = s.clients[c].holding.take() {
                    release(&mut s.nodes, token, s.now);
                }
            }
            Action::Acquire(c) => self.acquire(&mut s, c),
        }
        s
    }

    /// One fenced Redlock attempt by client `c` at `s.now`: every node
    /// answers at once (elapsed 0), each grant is judged by the client's
    /// view of that server's identity, and the attempt keeps the lock only
    /// with a quorum, a positive validity and (with the write-back) a
    /// quorum that acknowledged the fence.
    fn acquire(&self, s: &mut State, c: usize) {
        let token = s.next_token;
        s.next_token += 1;
        let now = s.now;
        let mut tally = Tally::new(NODES, QUORUM);
        let mut reads = Vec::new();
        let mut granted = Vec::new();
        for i in 0..NODES {
            let free = s.nodes[i].key.is_none_or(|(_, exp)| exp <= now);
            if free {
                s.nodes[i].key = Some((token, now + ms(TTL)));
            }
            let info = self.server_info(i, &s.nodes[i], now);
            let client = &mut s.clients[c];
            let standing = client.identities[i].judge(
                Some(&info),
                &mut Reading::at(self.at(now)),
                &client.registry,
            );
            let vote = free && standing == Standing::Voting;
            tally.record(vote);
            if vote {
                reads.push(s.nodes[i].counter);
                granted.push(i);
            }
        }
        let drift = drift(TTL, DRIFT_FACTOR);
        if !tally.reached() || validity(TTL, Duration::ZERO, drift).is_none() {
            release(&mut s.nodes, token, now);
            return;
        }
        let deadline = now + ms(TTL - drift);
        // The client's wall clock, in microseconds, moves with the model's.
        let wall = 1_000_000 + now * 1000;
        let Ok(fence) = next_fence(reads, wall) else {
            release(&mut s.nodes, token, now);
            return;
        };
        if self.protections.fence_write_back {
            let mut acknowledged = 0;
            for node in &mut s.nodes {
                if node.key.is_some_and(|(t, exp)| t == token && exp > now) {
                    node.counter = node.counter.max(fence);
                    acknowledged += 1;
                }
            }
            if acknowledged < QUORUM {
                release(&mut s.nodes, token, now);
                return;
            }
        }
        s.clients[c].holding = Some((token, deadline, fence));
        // The fencing property, at the grant.
        if fence <= s.last_fence {
            s.last_fence = u64::MAX; // marks the violation for `check`
        } else {
            s.last_fence = fence;
        }
    }

    /// The first property that `s` breaks, if any.
    fn check(&self, s: &State) -> Option<String> {
        if s.last_fence == u64::MAX {
            return Some("a fence did not exceed every earlier fence".into());
        }
        let valid: Vec<(usize, (u32, u64, u64))> = s
            .clients
            .iter()
            .enumerate()
            .filter_map(|(c, cl)| cl.holding.map(|h| (c, h)))
            .filter(|(_, (_, deadline, _))| s.now < *deadline)
            .collect();
        if valid.len() > 1 {
            return Some(format!("two valid holders: {valid:?} at {} ms", s.now));
        }
        for (c, (token, deadline, _)) in valid {
            let holding = s
                .nodes
                .iter()
                .filter(|n| {
                    let ours = n.key.is_some_and(|(t, exp)| t == token && exp >= deadline);
                    let covered = self.protections.quarantine
                        && n.started.is_some_and(|at| at + ms(TTL) >= deadline);
                    ours || covered
                })
                .count();
            if holding < QUORUM {
                return Some(format!(
                    "client {c} claims validity until {deadline} ms, held on {holding} nodes"
                ));
            }
            let backed = !self.inspection_sees_through_restarts;
            if let Some(broken) = inspection_misjudges(&s.nodes, token, deadline, s.now, backed) {
                return Some(format!("client {c}: {broken}"));
            }
        }
        None
    }

    fn fingerprint(s: &State) -> Fingerprint {
        let clients = s
            .clients
            .iter()
            .map(|c| {
                let ids = c
                    .identities
                    .iter()
                    .map(|i| {
                        (
                            i.run_id().map(str::to_owned),
                            i.quarantined_until(),
                            i.duplicate_of(),
                        )
                    })
                    .collect();
                (c.holding, ids)
            })
            .collect();
        (
            s.now,
            s.nodes.clone(),
            clients,
            s.next_token,
            s.last_fence,
            s.restarts,
            s.renewals,
        )
    }

    /// Explores every schedule up to [`DEPTH`] steps; returns the states
    /// visited, or the first counterexample (its steps and the broken
    /// property).
    fn explore(&self) -> Result<usize, String> {
        let initial = self.initial();
        let mut seen: HashSet<Fingerprint> = HashSet::new();
        seen.insert(Self::fingerprint(&initial));
        let mut queue = VecDeque::from([(initial, Vec::<Action>::new())]);
        while let Some((state, path)) = queue.pop_front() {
            if path.len() == DEPTH {
                continue;
            }
            for action in self.actions(&state) {
                let next = self.apply(&state, action);
                let mut steps = path.clone();
                steps.push(action);
                if let Some(broken) = self.check(&next) {
                    return Err(format!("{broken}; steps: {steps:?}"));
                }
                if seen.insert(Self::fingerprint(&next)) {
                    queue.push_back((next, steps));
                }
            }
        }
        Ok(seen.len())
    }
}

/// The inspection property, checked with the crate's own judgement
/// ([`Inspection::judge`]): a holder whose key a quorum of nodes really
/// holds until its deadline (not a quorum that quarantine covers: a node
/// that restarted answers "absent", and an inspection, stale by
/// construction, does not apply quarantine) is seen held, by its own
/// owner, with a time left short of its deadline by at most the drift.
/// Every node answers, at `now`, in no time.
/// With `backed` false (the canary), every valid holder is expected seen.
fn inspection_misjudges(
    nodes: &[Node],
    token: u32,
    deadline: u64,
    now: u64,
    backed: bool,
) -> Option<String> {
    let ours = nodes
        .iter()
        .filter(|n| n.key.is_some_and(|(t, exp)| t == token && exp >= deadline))
        .count();
    if backed && ours < QUORUM {
        return None;
    }
    let label = |t: u32| format!("t{t}");
    let answers = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let holding = n.key.filter(|(_, exp)| *exp > now).map(|(t, exp)| {
                let mut value = format!("{t:020}").into_bytes();
                value.extend_from_slice(OWNER_MARK);
                value.extend_from_slice(label(t).as_bytes());
                Holding::new(&value, value.len(), Some(Duration::from_millis(exp - now)))
            });
            (format!("n{i}"), Ok(holding))
        })
        .collect();
    let seen = Inspection::judge(
        "r".into(),
        QUORUM,
        answers,
        |left| drift(left, DRIFT_FACTOR),
        Duration::ZERO,
    );
    let claimed = Duration::from_millis(deadline - now);
    let fine = seen.is_held()
        && seen.owner() == Some(label(token).as_str())
        && seen.time_left() + drift(TTL, DRIFT_FACTOR) >= claimed;
    (!fine)
        .then(|| format!("valid until {deadline} ms, but the inspection at {now} ms says: {seen}"))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Compare-and-delete of `token` on every node at `now`.
fn release(nodes: &mut [Node], token: u32, now: u64) {
    for node in nodes {
        if node.key.is_some_and(|(t, exp)| t == token && exp > now) {
            node.key = None;
        }
    }
}

#[test]
fn no_schedule_breaks_the_protocol_within_the_bound() {
    let states = Model::new(ALL_ON)
        .explore()
        .unwrap_or_else(|e| panic!("{e}"));
    println!("protocol check: {states} states, every schedule of {DEPTH} steps");
    assert!(states > 10_000, "the exploration is too small: {states}");
}

/// Canary: without restart quarantine, two restarts under a holder let a
/// second client in.
#[test]
fn without_quarantine_a_counterexample_is_found() {
    let off = Protections {
        quarantine: false,
        ..ALL_ON
    };
    let found = Model::new(off).explore().expect_err("a counterexample");
    println!("quarantine off: {found}");
    // The shortest one: the holder's keys are gone from a majority (two
    // valid holders follow one step later).
    assert!(found.contains("held on 1 nodes"), "{found}");
}

/// Canary: crediting a whole second of reported uptime in full lets a
/// late manager trust a server that restarted milliseconds ago.
#[test]
fn crediting_the_uptime_in_full_is_found() {
    let full = Protections {
        uptime_resolution: false,
        ..ALL_ON
    };
    let found = Model::new(full).explore().expect_err("a counterexample");
    println!("uptime credited in full: {found}");
    assert!(found.contains("two valid holders"), "{found}");
}

/// Canary: without the write-back, the next holder can read the same
/// counters and pick the same fence.
#[test]
fn skipping_the_fence_write_back_is_found() {
    let skip = Protections {
        fence_write_back: false,
        ..ALL_ON
    };
    let found = Model::new(skip).explore().expect_err("a counterexample");
    println!("fence write-back skipped: {found}");
    assert!(found.contains("fence"), "{found}");
}

/// Canary of the inspection property, and the limit it documents: a
/// holder whose keys a restarted majority forgot (quarantine still keeps
/// others out) is not seen held by an inspection.
#[test]
fn an_inspection_does_not_see_through_restarts() {
    let mut model = Model::new(ALL_ON);
    model.inspection_sees_through_restarts = true;
    let found = model.explore().expect_err("a counterexample");
    println!("inspection expected through restarts: {found}");
    assert!(found.contains("the inspection at"), "{found}");
    assert!(found.contains("Restart"), "{found}");
}
