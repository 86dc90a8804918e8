//! The partition arm: five servers reached only through testkit's proxies,
//! whose links are cut (one node or a majority; the requests, the replies
//! or both; the bytes dropped, or held and delivered late) and healed,
//! while plain, auto-extended and fenced clients compete for their
//! resources.
//!
//! Every cut is within the assumptions of docs/safety.md: a reply that
//! comes late is never counted, an acquire whose reply was lost is
//! "maybe applied" and undone, a release whose outcome is unknown is sent
//! again until the key must have expired, and a key set late by a held
//! request expires on the server's clock no earlier than the holder's
//! validity ends. So the verdict is strict: no overlap, no update lost
//! within validity, fencing intact.
//!
//! The kinds of cut come in a fixed order ([`CUTS`], again and again),
//! only the nodes and durations are drawn. A prober checks each cut from
//! the side, on a resource of its own (a new name each time, so no key of
//! an earlier probe is in the way): during a majority cut one attempt
//! (`try_lock`) must fail; during a one-node cut a `lock` call must
//! succeed.

use std::thread;
use std::time::{Duration, Instant};

use quorum_lock::LockOptions;
use testkit::RedisServers;
use testkit::proxy::{Cut, Link};

use crate::arms::*;
use crate::clients::{Family, nap};
use crate::config::*;
use crate::recorder::Window;

/// How many nodes a cut takes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    One,
    Majority,
}

/// The kinds of cut, in the order they come: the first six cover each
/// side, each direction and each way of cutting.
const CUTS: [(Side, Link, Cut); 12] = [
    (Side::One, Link::Requests, Cut::Drop),
    (Side::Majority, Link::Both, Cut::Drop),
    (Side::One, Link::Replies, Cut::Hold),
    (Side::Majority, Link::Requests, Cut::Hold),
    (Side::One, Link::Both, Cut::Hold),
    (Side::Majority, Link::Replies, Cut::Drop),
    (Side::One, Link::Requests, Cut::Hold),
    (Side::Majority, Link::Both, Cut::Hold),
    (Side::One, Link::Replies, Cut::Drop),
    (Side::Majority, Link::Requests, Cut::Drop),
    (Side::One, Link::Both, Cut::Drop),
    (Side::Majority, Link::Replies, Cut::Hold),
];
/// How long a cut lasts, and the time between cuts, in ms.
const CUT_MS: (u64, u64) = (150, 600);
const GAP_MS: (u64, u64) = (100, 250);
/// Seconds of cuts in the suite's run (`QUORUM_LOCK_TORTURE_SECS`
/// overrides).
const PARTITION_SECS: u64 = 5;
/// How long a probe during a one-node cut may wait for its lock.
const MINORITY_PROBE_WAIT: Duration = Duration::from_secs(1);
/// Holds begun this long after a majority cut began (the lock call
/// returned then) are counted apart: none should be.
const MAJORITY_MARGIN: Duration = Duration::from_millis(250);

/// One cut made.
#[derive(Debug, Clone)]
struct CutDone {
    side: Side,
    link: Link,
    how: Cut,
    nodes: Vec<usize>,
    from: Instant,
    to: Instant,
    /// The prober's attempt during the cut: granted or not.
    probe_granted: bool,
}

/// No cut (one node or a majority; either direction or both; dropped or
/// held bytes) lets two holders in, loses an update within validity or
/// gets past fencing; a majority cut refuses every attempt and a one-node
/// cut refuses none.
#[test]
fn partitions_never_overlap_a_majority_cut_refuses_and_a_minority_cut_does_not() {
    let _serial = crate::serial();
    let label = "partitions, quarantine ON";
    let servers = RedisServers::start(NODES);
    let families = [
        (Family::Plain, PLAIN_CLIENTS),
        (Family::AutoExtend, 1),
        (Family::Fenced, FENCED_CLIENTS),
    ];
    let started = Instant::now();
    let secs = arm_secs(PARTITION_SECS);
    let (record, cuts) = run_arm(label, (servers, secs), &families, false, cut_links);
    let verdict = ArmVerdict::of(&record, &[]);
    let began_during = |side: Side, margin: Duration| {
        let windows: Vec<&Window> = record
            .windows
            .iter()
            .chain(&record.fenced_windows)
            .collect();
        cuts.iter()
            .filter(|c| c.side == side)
            .map(|c| {
                windows
                    .iter()
                    .filter(|w| c.from + margin <= w.start && w.start < c.to)
                    .count()
            })
            .sum::<usize>()
    };
    let of = |side: Side| cuts.iter().filter(move |c| c.side == side);
    let granted = |side: Side| of(side).filter(|c| c.probe_granted).count();
    let kinds: Vec<String> = CUTS
        .iter()
        .map(|k| {
            let n = cuts
                .iter()
                .filter(|c| (c.side, c.link, c.how) == *k)
                .count();
            format!("{:?} {:?} {:?}: {n}", k.0, k.1, k.2)
        })
        .collect();
    eprintln!(
        "partitions: {} cuts ({}); one-node cuts {}: probes granted {}, holds begun during \
         them {}; majority cuts {}: probes granted {}, holds begun more than {MAJORITY_MARGIN:?} \
         into them {}",
        cuts.len(),
        kinds.join(", "),
        of(Side::One).count(),
        granted(Side::One),
        began_during(Side::One, Duration::ZERO),
        of(Side::Majority).count(),
        granted(Side::Majority),
        began_during(Side::Majority, MAJORITY_MARGIN),
    );
    for c in &cuts {
        eprintln!(
            "  at {:.3?} for {:.0?}: {:?} {:?} {:?} on {:?}, probe {}",
            c.from.saturating_duration_since(started),
            c.to.saturating_duration_since(c.from),
            c.side,
            c.link,
            c.how,
            c.nodes,
            if c.probe_granted {
                "granted"
            } else {
                "refused"
            },
        );
    }
    verdict.print(label, &record, started);
    verdict.assert_safe(label);
    assert_eq!(
        verdict.beyond(),
        0,
        "no exposure here: every overlap is a violation"
    );
    let distinct = CUTS
        .iter()
        .filter(|k| cuts.iter().any(|c| (c.side, c.link, c.how) == **k))
        .count();
    assert!(
        distinct >= cuts.len().min(CUTS.len()) && cuts.len() >= 6,
        "too few kinds of cut: {kinds:?}"
    );
    assert_eq!(
        granted(Side::Majority),
        0,
        "a lock was granted while a majority was cut off"
    );
    assert_eq!(
        granted(Side::One),
        of(Side::One).count(),
        "a lock was refused while only one node was cut off"
    );
    assert!(
        record.acquisitions[Family::Plain.index()] >= 10
            && record.acquisitions[Family::Fenced.index()] >= 3,
        "too few acquisitions to mean anything: {:?}",
        record.acquisitions
    );
}

/// The arm's fault loop: cuts of [`CUTS`]' kinds, in order, until the
/// deadline (six at least), each checked by a probe, then healed.
fn cut_links(cx: &mut ArmContext<'_>) -> Vec<CutDone> {
    let mut probes = 0u64;
    let mut probe_name = || {
        probes += 1;
        format!("torture:probe:{probes}")
    };
    // The fresh servers' quarantine first: the cuts begin once the prober
    // can lock.
    let first = cx
        .prober
        .lock_with(
            probe_name(),
            &LockOptions::new().wait(Duration::from_secs(5)),
        )
        .unwrap_or_else(|e| panic!("the prober cannot lock before the cuts: {e}"));
    let _ = first.release();
    let mut cuts = Vec::new();
    while Instant::now() < cx.deadline || cuts.len() < 6 {
        nap(cx.shared, cx.rng.millis(GAP_MS.0, GAP_MS.1));
        let (side, link, how) = CUTS[cuts.len() % CUTS.len()];
        let count = match side {
            Side::One => 1,
            Side::Majority => NODES / 2 + 1,
        };
        let mut nodes: Vec<usize> = (0..NODES).collect();
        while nodes.len() > count {
            nodes.swap_remove(cx.rng.below(nodes.len() as u64) as usize);
        }
        nodes.sort_unstable();
        let length = cx.rng.millis(CUT_MS.0, CUT_MS.1);
        for &n in &nodes {
            cx.proxies[n].cut(link, how);
        }
        let from = Instant::now();
        let name = probe_name();
        let probe = match side {
            Side::Majority => cx.prober.try_lock(&name),
            Side::One => cx
                .prober
                .lock_with(&name, &LockOptions::new().wait(MINORITY_PROBE_WAIT)),
        };
        let probe_granted = match probe {
            Ok(guard) => {
                let _ = guard.release();
                true
            }
            Err(e) if e.is_retryable() => false,
            Err(e) => panic!("the prober failed during a cut: {e}"),
        };
        thread::sleep((from + length).saturating_duration_since(Instant::now()));
        for &n in &nodes {
            cx.proxies[n].heal();
        }
        cuts.push(CutDone {
            side,
            link,
            how,
            nodes,
            from,
            to: Instant::now(),
            probe_granted,
        });
    }
    cuts
}
