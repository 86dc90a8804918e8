//! The read-write lock on in-memory nodes: readers share, a writer is
//! alone, each reader expires on its own, a waiting writer is not
//! overtaken by later readers, no upgrade, bad input is a typed error.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use quorum_lock::{CancellationToken, Error, LockOptions, ManualClock};
use testkit::{builder_on, cluster_on, memory_nodes, wait_until};

use crate::support::{TTL, manager};

#[test]
fn readers_share_and_a_writer_is_alone_across_managers() {
    let nodes = memory_nodes(3);
    let [ra, rb, rc] = [(); 3].map(|()| manager(&nodes).rw_lock("config").unwrap());
    let first = ra.try_read().expect("a free lock");
    let second = rb.try_read().expect("readers share");
    let refused = rc.try_write().expect_err("readers are in");
    assert!(refused.is_contended(), "{refused}");
    // Released, not dropped: a dropped guard's release is queued to its
    // manager's node threads, and another manager may reach the nodes
    // first (`LockGuard`'s Drop docs).
    first.release().unwrap();
    assert!(
        rc.try_write().unwrap_err().is_contended(),
        "one reader left"
    );
    second.release().unwrap();
    let writer = rc.try_write().expect("no reader left");
    assert!(writer.is_valid());
    for refused in [ra.try_read(), ra.try_write(), rb.try_read()] {
        let error = refused.expect_err("the writer is alone");
        assert!(error.is_contended(), "{error}");
    }
    writer.release().unwrap();
    drop(ra.try_read().expect("free again"));
}

#[test]
fn the_rw_lock_x_is_not_the_mutex_or_the_semaphore_x() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let mutex = locks.try_lock("x").unwrap();
    let permit = locks.semaphore("x", 1).unwrap().try_acquire().unwrap();
    let rw = locks.rw_lock("x").unwrap();
    let writer = rw.try_write().expect("its own keys");
    assert_ne!(rw.keys().1, locks.key_for("x"));
    // And the other way round: the rw lock held takes nothing from them.
    drop((mutex, permit));
    drop(locks.try_lock("x").expect("the mutex is free"));
    drop(writer);
}

#[test]
fn a_crashed_reader_expires_on_its_own_while_another_reader_extends() {
    let clock = ManualClock::new();
    let (nodes, locks) = cluster_on(&clock, TTL);
    let rw = locks.rw_lock("report").unwrap();
    let short = LockOptions::new().ttl(Duration::from_secs(3));
    // The crashed reader, in another process: never released, never
    // extended.
    let crashed = builder_on(&nodes, &clock)
        .ttl(TTL)
        .build()
        .unwrap()
        .rw_lock("report")
        .unwrap();
    std::mem::forget(crashed.read_with(&short).unwrap());
    let mut live = rw.read_with(&short).unwrap();
    // The live reader extends every second, for longer than the crashed
    // one's TTL: its extends move only its own entry.
    for _ in 0..4 {
        clock.advance(Duration::from_secs(1));
        live.extend(Duration::from_secs(3)).unwrap();
    }
    assert!(locks.flush(Duration::from_secs(10)));
    live.release().unwrap();
    // The crashed reader's 3 s are over (4 s passed): no reader is left.
    let writer = rw
        .try_write()
        .expect("the crashed reader expired on its own");
    drop(writer);
}

#[test]
fn a_reader_that_has_not_expired_keeps_the_writer_out() {
    let clock = ManualClock::new();
    let (nodes, locks) = cluster_on(&clock, TTL);
    let rw = locks.rw_lock("report").unwrap();
    let short = LockOptions::new().ttl(Duration::from_secs(3));
    // The crashed reader, in another process.
    let crashed = builder_on(&nodes, &clock)
        .ttl(TTL)
        .build()
        .unwrap()
        .rw_lock("report")
        .unwrap();
    std::mem::forget(crashed.read_with(&short).unwrap());
    clock.advance(Duration::from_secs(2));
    let error = rw.try_write().expect_err("a reader is still in");
    assert!(error.is_contended(), "{error}");
    // The refused writer left nothing behind: a reader may enter.
    drop(rw.try_read().expect("the intent was released"));
    clock.advance(Duration::from_secs(2));
    drop(rw.try_write().expect("and now it expired"));
}

#[test]
fn a_writers_intent_stops_new_readers_until_it_is_done() {
    let nodes = memory_nodes(3);
    let (a, b) = (manager(&nodes), manager(&nodes));
    let (ra, rb) = (a.rw_lock("feed").unwrap(), b.rw_lock("feed").unwrap());
    let reader = ra.read().unwrap();
    let admitted = Arc::new(AtomicBool::new(false));
    let writer = {
        let (rb, admitted) = (rb.clone(), Arc::clone(&admitted));
        thread::spawn(move || {
            let guard = rb.write().expect("admitted once the reader leaves");
            admitted.store(true, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(50));
            guard.release().unwrap();
        })
    };
    // Until the writer's intent is on the nodes, a new reader may still
    // enter; once it is, every later reader is refused.
    let refused = wait_until(Duration::from_secs(30), || match ra.try_read() {
        Ok(guard) => {
            drop(guard);
            false
        }
        Err(e) if e.is_contended() => true,
        Err(e) => panic!("{e}"),
    });
    assert!(refused, "the writer's intent stopped new readers");
    assert!(
        !admitted.load(Ordering::SeqCst),
        "the first reader is still in"
    );
    for _ in 0..20 {
        let later = ra
            .try_read()
            .expect_err("a later reader waits behind the writer");
        assert!(later.is_contended(), "{later}");
    }
    drop(reader);
    writer.join().unwrap();
    assert!(admitted.load(Ordering::SeqCst));
    drop(ra.try_read().expect("the writer is done"));
}

#[test]
fn a_waiting_writer_gets_in_under_a_steady_stream_of_readers() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let rw = locks.rw_lock("stream").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    // Four readers in other managers, each holding for a moment and
    // coming straight back: there is always a reader in.
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let rw = manager(&nodes).rw_lock("stream").unwrap();
            let (stop, reads) = (Arc::clone(&stop), Arc::clone(&reads));
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let wait = LockOptions::new().wait(Duration::from_secs(30));
                    let guard = rw.read_with(&wait).expect("the writer leaves");
                    reads.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(5));
                    drop(guard);
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(30), || reads
        .load(Ordering::SeqCst)
        >= 20));
    let writer = rw
        .write_with(&LockOptions::new().wait(Duration::from_secs(30)))
        .expect("the writer is not starved");
    assert!(writer.is_valid());
    drop(writer);
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().unwrap();
    }
}

#[test]
fn there_is_no_upgrade_and_no_wait_for_oneself() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let rw = locks.rw_lock("doc").unwrap();
    let reader = rw.read().unwrap();
    for attempt in [rw.write(), rw.try_write()] {
        let error = attempt.expect_err("an upgrade would deadlock");
        assert!(matches!(error, Error::Deadlock { .. }), "{error}");
    }
    // A second reader on the same thread shares.
    let again = rw.try_read().expect("readers share, also on one thread");
    drop((reader, again));
    let writer = rw.write().unwrap();
    let error = rw.read().expect_err("the writer would wait for itself");
    assert!(matches!(error, Error::Deadlock { .. }), "{error}");
    let error = rw
        .try_read()
        .expect_err("one attempt says what the nodes say");
    assert!(error.is_contended(), "{error}");
    drop(writer);
}

#[test]
fn a_reader_of_this_process_stands_back_for_a_local_writer() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let other = manager(&nodes).rw_lock("ledger").unwrap();
    let rw = locks.rw_lock("ledger").unwrap();
    // Another process's reader keeps this process's writer waiting.
    let reader = other.read().unwrap();
    let writer = {
        let rw = rw.clone();
        thread::spawn(move || rw.write().map(|guard| guard.release()))
    };
    let mut stood_back = None;
    let refused = wait_until(Duration::from_secs(30), || match rw.try_read() {
        Ok(guard) => {
            drop(guard);
            false
        }
        Err(e) => {
            stood_back = Some(e);
            true
        }
    });
    assert!(refused, "a local reader stands back");
    let error = stood_back.expect("refused");
    assert!(error.is_contended(), "{error}");
    drop(reader);
    writer.join().unwrap().unwrap().unwrap();
}

#[test]
fn write_guards_are_fenced_in_order_and_readers_have_no_fence() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let rw = locks.rw_lock("ledger").unwrap();
    let fenced = LockOptions::new().fencing(true);
    let mut last = 0;
    for _ in 0..3 {
        let writer = rw.write_with(&fenced).unwrap();
        let fence = writer.fence().expect("a fenced writer");
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        drop(rw.try_read().expect_err("the writer is alone"));
        writer.release().unwrap();
        let reader = rw.read().unwrap();
        assert_eq!(reader.fence(), None);
        drop(reader);
    }
    let error = rw.read_with(&fenced).expect_err("a reader has no fence");
    assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
}

#[test]
fn a_cancelled_writer_leaves_nothing_behind() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    let rw = locks.rw_lock("cancel").unwrap();
    let reader = manager(&nodes).rw_lock("cancel").unwrap().read().unwrap();
    let token = CancellationToken::new();
    let writer = {
        let (rw, token) = (rw.clone(), token.clone());
        thread::spawn(move || rw.write_with(&LockOptions::new().cancellation(&token)))
    };
    thread::sleep(Duration::from_millis(100));
    token.cancel();
    let error = writer.join().unwrap().expect_err("cancelled");
    assert!(matches!(error, Error::Cancelled { .. }), "{error}");
    assert!(locks.flush(Duration::from_secs(10)));
    // The intent is gone from every node: a new reader enters.
    let (_, writer_key) = rw.keys();
    for node in &nodes {
        assert_eq!(node.holder(writer_key), None);
    }
    drop(rw.try_read().expect("no intent left"));
    drop(reader);
}

#[test]
fn bad_names_are_typed_errors_before_any_node() {
    let nodes = memory_nodes(3);
    let locks = manager(&nodes);
    for name in [
        &b""[..],
        b"a{quorum-lock}b",
        &[b'x'; quorum_lock::MAX_RESOURCE_LEN][..],
    ] {
        let error = locks.rw_lock(name).expect_err("refused");
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
    }
    for node in &nodes {
        assert_eq!(node.key_count(), 0, "no key anywhere");
    }
}
