//! The vote over in-memory nodes: every split of yes / no / error / timeout
//! for N = 1..=7, and the cleanup of failed rounds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::time::Duration;

use quorum_lock::backend::{self, Backend};
use quorum_lock::report::NodeOutcome;
use quorum_lock::{Error, LockManager, MemoryBackend, RetryPolicy};
use testkit::faces::Face;
use testkit::{memory_nodes, wait_until};

const TTL: Duration = Duration::from_secs(10);
const RESOURCE: &[u8] = b"quorum-test";

fn manager<B: Backend + Clone>(nodes: &[B], node_timeout: Duration) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        .ttl(TTL)
        .node_timeout(node_timeout)
        .retry(RetryPolicy::none())
        .build()
        .unwrap()
}

/// For every N in 1..=7 and every way to split the nodes into "grants",
/// "held by someone else", "fails" and "never answers in time": the lock is
/// granted exactly when grants >= N/2+1, the error kind matches the split,
/// and afterwards no node holds our token.
#[test]
fn every_split_of_one_to_seven_nodes() {
    for n in 1..=7usize {
        for yes in 0..=n {
            for no in 0..=n - yes {
                for err in 0..=n - yes - no {
                    // The slow nodes are paused past a 20 ms node timeout;
                    // the others answer in microseconds, unless the machine
                    // stalls the test for longer: such a run says nothing
                    // about the split, and the case runs again (bounded).
                    let ran = (0..20).any(|_| split_case(n, yes, no, err));
                    assert!(
                        ran,
                        "n={n} yes={yes} no={no} err={err}: a live node timed out 20 times"
                    );
                }
            }
        }
    }
}

/// One split of [`every_split_of_one_to_seven_nodes`]; `false` when a node
/// that was neither paused nor down timed out (the machine stalled the
/// test), so the case says nothing.
fn split_case(n: usize, yes: usize, no: usize, err: usize) -> bool {
    let other = b"someone-else";
    let q = n / 2 + 1;
    let slow = n - yes - no - err;
    let nodes = memory_nodes(n);
    for node in &nodes[yes..yes + no] {
        assert!(backend::acquire(node, RESOURCE, other, TTL).unwrap());
    }
    for node in &nodes[yes + no..yes + no + err] {
        node.set_down(true);
    }
    for node in &nodes[yes + no + err..] {
        node.pause();
    }
    let locks = manager(&nodes, Duration::from_millis(20));
    let result = locks.try_lock(RESOURCE);
    let case = format!("n={n} yes={yes} no={no} err={err} slow={slow}");
    let live_timed_out = result
        .as_ref()
        .err()
        .and_then(|e| e.report())
        .is_some_and(|r| {
            r.nodes()[..yes + no + err]
                .iter()
                .any(|node| matches!(node.outcome(), NodeOutcome::TimedOut))
        });
    let token = match result {
        _ if live_timed_out => Vec::new(),
        Ok(guard) => {
            assert!(yes >= q, "{case}: granted without a quorum");
            let token = guard.token().as_bytes().to_vec();
            drop(guard);
            token
        }
        Err(e) => {
            assert!(yes < q, "{case}: refused with a quorum: {e}");
            let report = e.report().unwrap();
            assert_eq!(report.nodes().len(), n);
            // The round stops as soon as a quorum is out of
            // reach, so the kind follows the answers seen:
            // Contended when the refusals alone rule out a
            // quorum, NoQuorum otherwise.
            let refused_seen = report.refused();
            assert_eq!(e.is_contended(), refused_seen > n - q, "{case}: {e}");
            assert_eq!(e.is_no_quorum(), refused_seen <= n - q, "{case}: {e}");
            if err + slow == 0 {
                assert!(e.is_contended(), "{case}: only refusals: {e}");
            }
            if no == 0 {
                assert!(e.is_no_quorum(), "{case}: no refusals: {e}");
            }
            // The token is not exposed on failure: check that
            // only the other client's keys remain.
            Vec::new()
        }
    };
    for node in &nodes {
        node.resume();
    }
    assert!(locks.flush(Duration::from_secs(10)), "{case}");
    for (i, node) in nodes.iter().enumerate() {
        let holder = node.holder(RESOURCE);
        if (yes..yes + no).contains(&i) {
            assert_eq!(holder.as_deref(), Some(&other[..]), "{case} node {i}");
        } else if !token.is_empty() || holder.is_some() {
            assert!(
                !holder.as_deref().is_some_and(|h| h.starts_with(&token)),
                "{case} node {i} kept our key"
            );
            assert_eq!(holder, None, "{case} node {i}");
        }
    }
    !live_timed_out
}

/// A node that answers "yes" after the round gave up must not keep the key:
/// its release is queued behind the acquire on the same worker.
#[test]
fn late_yes_after_a_failed_round_is_cleaned_up() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes, Duration::from_millis(20));
    // Two nodes are held by another client; node 0 is slow.
    for node in &nodes[1..] {
        assert!(backend::acquire(node, RESOURCE, b"other", TTL).unwrap());
    }
    nodes[0].pause();
    let err = locks.try_lock(RESOURCE).unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert_eq!(
        nodes[0].holder(RESOURCE),
        None,
        "paused: nothing applied yet"
    );
    nodes[0].resume();
    assert!(locks.flush(Duration::from_secs(10)));
    // The late acquire was applied (the node saw two ops) and then undone.
    assert_eq!(nodes[0].operations(), 2, "acquire then release");
    assert_eq!(nodes[0].holder(RESOURCE), None);
}

/// An acquire whose reply is lost (applied, but reported as an error) is
/// "maybe applied": the failed round must still release there.
#[test]
fn maybe_applied_acquire_is_released() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes, Duration::from_secs(1));
    nodes[0].lose_replies_next(1);
    nodes[1].lose_replies_next(1);
    let err = locks.try_lock(RESOURCE).unwrap_err();
    assert!(err.is_no_quorum(), "{err}");
    assert!(locks.flush(Duration::from_secs(10)));
    for node in &nodes {
        assert_eq!(node.holder(RESOURCE), None, "{node:?}");
    }
}

/// The report names each node with what it did.
#[test]
fn report_names_dead_nodes() {
    let nodes = memory_nodes(5);
    nodes[1].set_down(true);
    nodes[3].set_down(true);
    let locks = manager(&nodes, Duration::from_secs(1));
    let guard = locks.try_lock(RESOURCE).unwrap();
    drop(guard);
    nodes[2].set_down(true);
    let err = locks.try_lock(RESOURCE).unwrap_err();
    let Error::NoQuorum { report } = &err else {
        panic!("expected NoQuorum, got {err}");
    };
    let failed = report.nodes_where(|o| matches!(o, NodeOutcome::Failed(_) | NodeOutcome::Down));
    assert_eq!(failed, ["mem-1", "mem-2", "mem-3"]);
    let text = err.to_string();
    // Each dead node shows as failed (unreachable), or as skipped once it
    // has failed often enough to be marked down (a release retried in the
    // background counts too).
    for node in ["mem-1", "mem-2", "mem-3"] {
        let said = testkit::said_of(&text, node);
        assert!(
            said.starts_with("failed (unreachable") || said.starts_with("skipped: marked down"),
            "{text}"
        );
    }
}

/// A node that keeps failing is marked down and skipped without waiting,
/// then probed in the background and used again once it is back.
#[test]
fn down_node_is_skipped_then_probed_back() {
    // Through a face, which cannot tell the engine that the node is back:
    // the background probe finds it.
    let nodes = memory_nodes(3);
    let faces: Vec<Face> = nodes.iter().cloned().map(Face::of).collect();
    let locks = manager(&faces, Duration::from_secs(1));
    nodes[2].set_down(true);
    // Two failed round trips mark it down.
    for i in 0..2 {
        drop(locks.try_lock(format!("r{i}")).unwrap());
        assert!(locks.flush(Duration::from_secs(10)));
    }
    let before = nodes[2].operations();
    let guard = locks.try_lock("skipped").unwrap();
    // The round may end at a quorum: let every node run what it was sent.
    assert!(locks.flush(Duration::from_secs(10)));
    assert_eq!(nodes[2].operations(), before, "a down node gets no acquire");
    drop(guard);
    nodes[2].set_down(false);
    // Bounded wait (10 s) for the background probe: a new lock each try.
    let mut i = 0;
    let back = wait_until(Duration::from_secs(10), || {
        let guard = locks.try_lock(format!("probe{i}")).unwrap();
        i += 1;
        assert!(locks.flush(Duration::from_secs(10)));
        nodes[2].holder(guard.key()).is_some()
    });
    assert!(back, "the node was never probed back up");
}

/// A `MemoryBackend` brought back with `set_down(false)` votes in the very
/// next round (the engine probes it first), so a test needs no sleep for
/// the background probe. Before, it was skipped until the probe, 50 ms to
/// 2 s later.
#[test]
fn a_memory_node_brought_back_up_votes_in_the_next_round() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes, Duration::from_secs(1));
    nodes[2].set_down(true);
    for i in 0..2 {
        drop(locks.try_lock(format!("r{i}")).unwrap());
        assert!(locks.flush(Duration::from_secs(10)));
    }
    assert!(
        locks.health().nodes[2]
            .state
            .to_string()
            .starts_with("down"),
        "marked down: {}",
        locks.health()
    );
    nodes[2].set_down(false);
    let guard = locks
        .lock_with(
            "back",
            &quorum_lock::LockOptions::new().retry(RetryPolicy::none()),
        )
        .unwrap();
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        nodes[2].holder(guard.key()).is_some(),
        "the node brought back was skipped: {}",
        locks.health()
    );
}

/// A panicking backend is reported as a failed node; the engine lives on.
#[test]
fn panicking_backend_does_not_kill_the_engine() {
    let nodes = memory_nodes(3);
    nodes[0].set_hook(Some(std::sync::Arc::new(
        |_: &quorum_lock::backend::Op<'_>| panic!("injected backend panic"),
    )));
    let locks = manager(&nodes, Duration::from_secs(1));
    for _ in 0..3 {
        let guard = locks.try_lock(RESOURCE).unwrap();
        drop(guard);
    }
    nodes[0].set_hook(None);
    let guard = locks.try_lock(RESOURCE).unwrap();
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(nodes[0].holder(RESOURCE).is_some(), "worker 0 still serves");
    drop(guard);
}

/// Regression (found with a SIGSTOPped Redis): a release that cannot reach
/// its node must not be dropped, or an acquire the node applies later (or
/// already holds) outlives the round. It is retried until the node answers.
#[test]
fn release_that_could_not_reach_a_node_is_retried() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes, Duration::from_secs(1));
    let guard = locks.try_lock(RESOURCE).unwrap();
    assert!(locks.flush(Duration::from_secs(10)));
    nodes[0].set_down(true);
    drop(guard);
    assert!(locks.flush(Duration::from_secs(10)));
    assert!(
        nodes[0].holder(RESOURCE).is_some(),
        "unreachable: not released yet"
    );
    assert!(nodes[1..].iter().all(|n| n.holder(RESOURCE).is_none()));
    nodes[0].set_down(false);
    // Bounded wait (10 s) for the background retry (probe backoff
    // included).
    let released = wait_until(Duration::from_secs(10), || {
        nodes[0].holder(RESOURCE).is_none()
    });
    assert!(released, "the release was never retried");
}

/// Once a node is marked down, an explicit release does not wait for it
/// (its release is still queued for it), so a blackholed node costs no
/// timeout per lock.
#[test]
fn release_does_not_wait_for_a_node_marked_down() {
    let nodes = memory_nodes(3);
    // A long node timeout: waiting for the stalled node would show.
    let locks = manager(&nodes, Duration::from_secs(8));
    nodes[2].set_down(true);
    for i in 0..2 {
        drop(locks.try_lock(format!("mark-down-{i}")).unwrap());
        assert!(locks.flush(Duration::from_secs(10)));
    }
    // Now it stalls instead of refusing, as a blackholed server would.
    nodes[2].pause();
    nodes[2].set_down(false);
    let guard = locks.try_lock(RESOURCE).unwrap();
    let (done_tx, done) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = done_tx.send(guard.release());
    });
    let report = done
        .recv_timeout(Duration::from_secs(5))
        .expect("release waited for a node marked down")
        .unwrap();
    assert_eq!(report.granted(), 2);
    assert!(
        matches!(report.nodes()[2].outcome(), NodeOutcome::Down),
        "{report}"
    );
    nodes[2].resume();
}

/// Regression (the caller-run path): a grant from the node the caller ran
/// itself counts. It was once tallied as a refusal, so every lock needing
/// all nodes failed with one grant short.
#[test]
fn grants_from_the_node_run_on_the_callers_thread_count() {
    for (n, quorum) in [(1, 1), (3, 3), (5, 5)] {
        let nodes: Vec<Face> = (0..n)
            .map(|i| {
                Face::bounded(
                    MemoryBackend::new(format!("mem-{i}")),
                    Duration::from_millis(1),
                )
            })
            .collect();
        let locks = LockManager::builder()
            .nodes(nodes.iter().cloned())
            .quorum(quorum)
            .node_timeout(Duration::from_secs(1))
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        for _ in 0..20 {
            let guard = locks.try_lock(RESOURCE).unwrap();
            let report = guard.release().unwrap();
            assert_eq!(report.granted(), n, "{report}");
        }
        // Contention is still seen on the directly run node (held through
        // another manager: this thread asking again would be a deadlock).
        let other = LockManager::builder()
            .nodes(nodes.iter().cloned())
            .quorum(quorum)
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        let held = other.try_lock(RESOURCE).unwrap();
        assert!(locks.try_lock(RESOURCE).unwrap_err().is_contended());
        drop(held);
        assert!(other.flush(Duration::from_secs(5)));
        assert!(locks.flush(Duration::from_secs(5)));
        assert!(nodes.iter().all(|face| face.node.key_count() == 0));
    }
}

/// Regression (caller-run): a node marked down by an operation the caller
/// ran itself must still be probed back. The node's thread was asleep and
/// nothing woke it, so a single-node manager stayed down for good.
#[test]
fn a_node_marked_down_by_a_direct_run_is_probed_back() {
    let node = Face::bounded(MemoryBackend::new("mem-0"), Duration::from_millis(1));
    let locks = LockManager::builder()
        .node(node.clone())
        .node_timeout(Duration::from_secs(1))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let guard = locks.try_lock(RESOURCE).unwrap();
    node.node.set_down(true);
    // Both run on this thread: the release fails (kept for retry), the
    // next acquire fails too and marks the node down.
    assert!(guard.release().is_err());
    assert!(locks.try_lock("other").is_err());
    node.node.set_down(false);
    // Bounded wait (10 s) for the background probe (50 ms first backoff).
    let back = wait_until(Duration::from_secs(10), || {
        locks.try_lock(RESOURCE).map(drop).is_ok()
    });
    assert!(back, "the node was never probed back up");
}

/// A failed attempt releases on every node its acquire reached, including
/// the node the caller ran itself whose answer timed out (the acquire may
/// have been applied): every node here applies the acquire and loses the
/// reply, the attempt fails, and no key may stay. (The node run directly
/// was once counted as "never reached" when its run failed, and kept its
/// key for the TTL.)
#[test]
fn a_failed_attempt_releases_on_the_node_the_caller_ran_itself() {
    let nodes = memory_nodes(3);
    let faces: Vec<Face> = nodes
        .iter()
        .map(|n| Face::bounded(n.clone(), Duration::from_millis(500)))
        .collect();
    let locks = LockManager::builder()
        .nodes(faces)
        .quorum(3)
        .ttl(TTL)
        .node_timeout(Duration::from_millis(500))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    for round in 0..5 {
        for node in &nodes {
            node.lose_replies_next(1);
        }
        let err = locks.try_lock(format!("lost-{round}")).unwrap_err();
        assert!(!err.is_contended(), "{err}");
        assert!(locks.flush(Duration::from_secs(10)));
        for node in &nodes {
            assert_eq!(
                node.key_count(),
                0,
                "round {round}: {node:?} kept a key: {err}"
            );
        }
    }
}

/// A node that answered "held by another token" did not take the key, so
/// a failed attempt sends it no release: the undo goes only where the
/// acquire may have landed (a grant, an error, no answer, or an answer
/// the round did not wait for once two refusals decided it).
#[test]
fn a_node_that_refused_gets_no_undo() {
    let nodes = memory_nodes(3);
    let holder = manager(&nodes, Duration::from_millis(200));
    let waiter = manager(&nodes, Duration::from_millis(200));
    let _held = holder.try_lock("job").unwrap();
    assert!(holder.flush(Duration::from_secs(10)));
    let before: Vec<u64> = nodes.iter().map(MemoryBackend::operations).collect();
    let err = waiter.try_lock("job").unwrap_err();
    assert!(err.is_contended(), "{err}");
    assert!(waiter.flush(Duration::from_secs(10)));
    let report = err.report().unwrap();
    let refused = report
        .nodes()
        .iter()
        .filter(|n| matches!(n.outcome(), NodeOutcome::Refused))
        .count();
    assert!(refused >= 2, "decided by refusals: {report}");
    for ((node, before), said) in nodes.iter().zip(&before).zip(report.nodes()) {
        let sent = node.operations() - before;
        let expected = if matches!(said.outcome(), NodeOutcome::Refused) {
            1 // the acquire alone
        } else {
            2 // the acquire and its undo
        };
        assert_eq!(sent, expected, "{}: {:?}", said.node(), said.outcome());
    }
}
