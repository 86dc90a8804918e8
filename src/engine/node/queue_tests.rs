//! The node's job queue, without loom: the order of jobs, the wake-ups
//! of a sleeping receiver, and a driver's share of the queue.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::Duration;

use super::*;

/// The node thread's way: wait for a job, then take one (`None`
/// would be a wait that returned with nothing queued).
fn next<T>(queue: &Receiver<T>, deadline: Option<Instant>) -> Result<Option<T>, Empty> {
    queue.wait_until(deadline)?;
    let mut one = Vec::new();
    queue.take_queued(1, &mut one);
    Ok(one.pop())
}

#[test]
fn jobs_come_in_order_and_the_last_sender_closes_a_drained_queue() {
    let (jobs, queue) = queue();
    let other = jobs.clone();
    jobs.send(1).unwrap();
    other.send(2).unwrap();
    let mut more = Vec::new();
    assert_eq!(next(&queue, None), Ok(Some(1)));
    queue.take_queued(10, &mut more);
    assert_eq!(more, [2]);
    let soon = Instant::now() + Duration::from_millis(5);
    assert_eq!(queue.wait_until(Some(soon)), Err(Empty::Timeout));
    jobs.send(3).unwrap();
    drop((jobs, other));
    assert_eq!(next(&queue, None), Ok(Some(3)), "queued before the close");
    assert_eq!(queue.wait_until(None), Err(Empty::Closed));
}

#[test]
fn a_sleeping_receiver_is_woken_by_a_send_and_by_the_last_drop() {
    let (jobs, queue) = queue::<u32>();
    let far = Some(Instant::now() + Duration::from_secs(30));
    let receiver = thread::spawn(move || (next(&queue, far), queue.wait_until(far)));
    thread::sleep(Duration::from_millis(20));
    jobs.send(7).unwrap();
    thread::sleep(Duration::from_millis(20));
    drop(jobs);
    assert_eq!(receiver.join().unwrap(), (Ok(Some(7)), Err(Empty::Closed)));
}

/// The jobs a driver does the work of in their place (the wake-ups of
/// a ring) are removed wherever they sit in the head it takes, and
/// counted; the first job it neither takes nor skips ends the head
/// (what follows stays queued, skippable jobs too), and a full batch
/// ends the taking, not the skipping.
#[test]
fn a_driver_skips_the_jobs_it_does_itself_within_the_head_it_takes() {
    let (jobs, queue) = queue::<u32>();
    let driving = jobs.drive();
    for job in [100, 1, 100, 2, 30, 100] {
        jobs.send(job).unwrap();
    }
    let mut taken = Vec::new();
    let skipped = driving.take_front(10, |&job| job < 10, |&job| job == 100, &mut taken);
    assert_eq!((taken.as_slice(), skipped), ([1, 2].as_slice(), 2));
    for job in [3, 100, 4] {
        jobs.send(job).unwrap();
    }
    drop(driving);
    let mut rest = Vec::new();
    queue.take_queued(10, &mut rest);
    assert_eq!(rest, [30, 100, 3, 100, 4], "past the head: left queued");
    let driving = jobs.drive();
    for job in [5, 100] {
        jobs.send(job).unwrap();
    }
    let mut full = Vec::new();
    let skipped = driving.take_front(1, |&job| job < 10, |&job| job == 100, &mut full);
    assert_eq!((full.as_slice(), skipped), ([5].as_slice(), 1));
}

/// A job queued while a caller drives is the driver's: it takes the
/// plain ones at the head, in order, and stops at the first it does
/// not run, which the receiver gets after the driver's end. (That the
/// end wakes a receiver that slept through the sends is loom's to
/// check, over every interleaving: `unread.rs`.)
#[test]
fn a_driver_takes_the_head_of_the_queue_and_leaves_the_rest_to_the_receiver() {
    let (jobs, queue) = queue::<u32>();
    let driving = jobs.drive();
    for job in [1, 2, 30, 4] {
        jobs.send(job).unwrap();
    }
    let mut taken = Vec::new();
    driving.take_front(10, |&job| job < 10, |_| false, &mut taken);
    assert_eq!(
        taken,
        [1, 2],
        "the head, up to the first job it does not run"
    );
    let far = Some(Instant::now() + Duration::from_secs(30));
    let receiver = thread::spawn(move || {
        let mut rest = Vec::new();
        queue
            .wait_until(far)
            .map(|()| queue.take_queued(10, &mut rest))?;
        Ok::<_, Empty>(rest)
    });
    drop(driving);
    assert_eq!(receiver.join().unwrap(), Ok(vec![30, 4]));
}

/// Waits (bounded) until the receiver sleeps.
fn until_asleep<T>(jobs: &Sender<T>) {
    let asleep = (0..10_000).any(|_| {
        let asleep = jobs.0.state.lock().asleep;
        if !asleep {
            thread::sleep(Duration::from_millis(1));
        }
        asleep
    });
    assert!(asleep, "the receiver never slept");
}

/// A wake time earlier than the receiver's deadline wakes it, and it
/// then times out at that time, without a job; a later one wakes
/// nobody. One sent while the receiver is awake shortens its next
/// sleep.
#[test]
fn a_wake_time_wakes_the_receiver_only_if_it_sleeps_past_it() {
    let (jobs, queue) = queue::<u32>();
    let far = Instant::now() + Duration::from_secs(60);
    let receiver = thread::spawn(move || {
        let woke = queue.wait_until(Some(far));
        (woke, Instant::now(), queue)
    });
    until_asleep(&jobs);
    assert!(!jobs.wake_by(far + Duration::from_secs(1)), "a later time");
    let soon = Instant::now() + Duration::from_millis(20);
    assert!(jobs.wake_by(soon), "an earlier time");
    let (woke, at, queue) = receiver.join().unwrap();
    assert_eq!(woke, Err(Empty::Timeout));
    assert!(at < far, "woke before its own deadline");

    // Awake: the time is kept for its next sleep.
    let soon = Instant::now() + Duration::from_millis(20);
    assert!(!jobs.wake_by(soon), "nobody asleep to wake");
    assert_eq!(queue.wait_until(Some(far)), Err(Empty::Timeout));
    assert!(Instant::now() < far);
}

#[test]
fn a_send_to_a_gone_receiver_gives_the_job_back() {
    let (jobs, queue) = queue();
    drop(queue);
    assert_eq!(jobs.send(5), Err(5));
}
