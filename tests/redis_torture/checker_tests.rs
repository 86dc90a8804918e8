//! The checker on synthetic histories: no servers, no threads, a few
//! microseconds each. Each test states one rule of the checker and a
//! history that the rule decides, so a checker bug fails here, by name,
//! instead of looking like a lock bug (or hiding one) in a torture run.

use std::time::{Duration, Instant};

use crate::checker::{
    Exposure, check_inspections, classify_losses, classify_overlaps, classify_refusals,
    count_overlaps, fenced_figures, lost_updates,
};
use crate::clients::Family;
use crate::recorder::{FencedWrite, Resource, Seen, Sight, Window, Write};

/// `ms` milliseconds after `t0`.
fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

/// A plain holder's window `[from, to)` in milliseconds after `t0`.
fn window(t0: Instant, client: usize, from: u64, to: u64) -> Window {
    Window {
        client,
        family: Family::Plain,
        start: at(t0, from),
        end: at(t0, to),
        seen: Seen::Step,
        handed_over: false,
        extensions: 0,
        manual_extends: 0,
        fence: None,
        owner: client as u64,
    }
}

/// A fenced holder's window.
fn fenced_window(t0: Instant, client: usize, from: u64, to: u64, fence: u64) -> Window {
    Window {
        family: Family::Fenced,
        fence: Some(fence),
        ..window(t0, client, from, to)
    }
}

/// A write of the unfenced counter at `at_ms`, by a writer whose deadline
/// was `deadline_ms`: it read `seen` after `read_seq` writes and replaced
/// `replaced`.
fn write(
    t0: Instant,
    client: usize,
    read_seq: usize,
    (seen, replaced): (u64, u64),
    (at_ms, deadline_ms): (u64, u64),
) -> Write {
    Write {
        client,
        read_seq,
        seen,
        replaced,
        at: at(t0, at_ms),
        deadline: at(t0, deadline_ms),
    }
}

/// A write of the fenced register; `replaced: None` is a refusal.
fn fenced_write(
    t0: Instant,
    fence: u64,
    (seen, replaced): (u64, Option<u64>),
    (at_ms, deadline_ms): (u64, u64),
) -> FencedWrite {
    FencedWrite {
        client: fence as usize,
        fence,
        seen,
        replaced,
        at: at(t0, at_ms),
        deadline: at(t0, deadline_ms),
    }
}

// ---------------------------------------------------------------------------
// Overlaps
// ---------------------------------------------------------------------------

#[test]
fn two_holders_at_once_are_one_overlap() {
    let t0 = Instant::now();
    let mut windows = [window(t0, 1, 0, 100), window(t0, 2, 60, 160)];
    let (count, longest, first) = count_overlaps(&mut windows);
    assert_eq!(count, 1, "two holders of one resource for 40 ms");
    assert_eq!(longest, Duration::from_millis(40));
    let (a, b) = first.expect("the overlapping pair is reported");
    assert_eq!((a.client, b.client), (1, 2));
}

#[test]
fn windows_that_only_touch_do_not_overlap() {
    let t0 = Instant::now();
    // The second holder starts the instant the first one's validity ends.
    let mut windows = [window(t0, 1, 0, 100), window(t0, 2, 100, 200)];
    let (count, longest, first) = count_overlaps(&mut windows);
    assert_eq!(
        (count, longest),
        (0, Duration::ZERO),
        "half-open windows that touch"
    );
    assert!(first.is_none());
}

#[test]
fn one_client_does_not_overlap_itself() {
    let t0 = Instant::now();
    // A client's next hold may begin before its last claimed deadline
    // (it released early): that is one holder, not two.
    let mut windows = [window(t0, 1, 0, 100), window(t0, 1, 50, 150)];
    assert_eq!(count_overlaps(&mut windows).0, 0);
}

#[test]
fn an_empty_window_overlaps_nothing() {
    let t0 = Instant::now();
    // A holder that found its guard invalid at once claims nothing.
    let mut windows = [window(t0, 1, 0, 100), window(t0, 2, 50, 50)];
    assert_eq!(count_overlaps(&mut windows).0, 0);
}

#[test]
fn overlaps_are_found_past_a_short_window_and_in_any_order() {
    let t0 = Instant::now();
    // Recorded out of order; client 1's long window meets both others,
    // which do not meet each other: two overlaps, the longest 100 ms.
    let mut windows = [
        window(t0, 3, 200, 400),
        window(t0, 1, 0, 300),
        window(t0, 2, 10, 20),
    ];
    let (count, longest, first) = count_overlaps(&mut windows);
    assert_eq!(count, 2);
    assert_eq!(longest, Duration::from_millis(100));
    let (a, b) = first.expect("a pair");
    assert_eq!((a.client, b.client), (1, 2), "the earliest pair first");
}

// ---------------------------------------------------------------------------
// Lost updates on the unfenced counter
// ---------------------------------------------------------------------------

#[test]
fn sequential_writes_lose_nothing() {
    let t0 = Instant::now();
    let resource = Resource {
        value: 2,
        writes: vec![
            write(t0, 1, 0, (0, 0), (10, 100)),
            write(t0, 2, 1, (1, 1), (20, 100)),
        ],
    };
    let lost = lost_updates(&resource);
    assert_eq!((lost.writes, lost.counter, lost.total), (2, 2, 0));
    assert_eq!((lost.within_validity, lost.by_late_writers), (0, 0));
    assert_eq!(lost.late_writes, 0);
}

#[test]
fn an_update_overwritten_within_validity_is_lost_within_validity() {
    let t0 = Instant::now();
    // Both read 0; the second write replaced the first one's 1 with 1.
    let resource = Resource {
        value: 1,
        writes: vec![
            write(t0, 1, 0, (0, 0), (10, 100)),
            write(t0, 2, 0, (0, 1), (20, 100)),
        ],
    };
    let lost = lost_updates(&resource);
    assert_eq!(lost.total, 1);
    assert_eq!((lost.within_validity, lost.valid_interferences), (1, 1));
    assert_eq!((lost.by_late_writers, lost.late_interferences), (0, 0));
    let (between, overwriting) = lost.first_within_validity.expect("the pair");
    assert_eq!((between.client, overwriting.client), (1, 2));
}

#[test]
fn a_late_writers_loss_counts_apart() {
    let t0 = Instant::now();
    // The same history, but the second write completed at its deadline:
    // a paused writer, which no lock excludes.
    let resource = Resource {
        value: 1,
        writes: vec![
            write(t0, 1, 0, (0, 0), (10, 100)),
            write(t0, 2, 0, (0, 1), (100, 100)),
        ],
    };
    let lost = lost_updates(&resource);
    assert_eq!(lost.late_writes, 1);
    assert_eq!((lost.by_late_writers, lost.late_interferences), (1, 1));
    assert_eq!((lost.within_validity, lost.valid_interferences), (0, 0));
    assert!(lost.first_within_validity.is_none());
}

// ---------------------------------------------------------------------------
// The fenced register
// ---------------------------------------------------------------------------

#[test]
fn a_stale_fenced_write_counts_as_refused_stale() {
    let t0 = Instant::now();
    // Fence 1 paused past its deadline (100) while fence 2 wrote; the
    // register refused fence 1's write.
    let writes = [
        fenced_write(t0, 2, (0, Some(0)), (150, 300)),
        fenced_write(t0, 1, (0, None), (200, 100)),
    ];
    let f = fenced_figures(&writes, 1, &[]);
    assert_eq!((f.attempted, f.accepted), (2, 1));
    assert_eq!((f.refused_stale, f.refused_within_validity), (1, 0));
    assert_eq!(f.first_refused.map(|w| w.fence), Some(1));
    assert_eq!((f.lost, f.lost_by_interference, f.interferences), (0, 0, 0));
}

#[test]
fn a_fenced_write_refused_within_validity_counts_apart() {
    let t0 = Instant::now();
    // Refused while its writer still claimed validity: a newer holder
    // during this one's validity, which the test must report, not excuse.
    let writes = [fenced_write(t0, 1, (0, None), (50, 100))];
    let f = fenced_figures(&writes, 0, &[]);
    assert_eq!((f.refused_stale, f.refused_within_validity), (0, 1));
    assert!(f.first_refused.is_none());
}

#[test]
fn an_accepted_fenced_write_over_a_newer_value_is_a_lost_update() {
    let t0 = Instant::now();
    // Fence 1 read 0, fence 2 wrote 1, then fence 1's write of 1 was
    // accepted over it (a register that failed to refuse): one lost.
    let writes = [
        fenced_write(t0, 2, (0, Some(0)), (20, 100)),
        fenced_write(t0, 1, (0, Some(1)), (30, 100)),
    ];
    let f = fenced_figures(&writes, 1, &[]);
    assert_eq!(f.lost, 1, "accepted 2, counter 1");
    assert_eq!((f.lost_by_interference, f.interferences), (1, 1));
    assert_eq!(f.first_interference.map(|w| w.fence), Some(1));
}

#[test]
fn a_later_hold_with_a_lower_fence_is_an_order_violation() {
    let t0 = Instant::now();
    let windows = [
        fenced_window(t0, 1, 0, 100, 5),
        fenced_window(t0, 2, 150, 250, 4),
    ];
    let f = fenced_figures(&[], 0, &windows);
    assert_eq!(f.fence_order_violations, 1);
    assert_eq!(f.first_violation, Some((5, 4)));
    assert_eq!(f.duplicate_fences, 0);
}

#[test]
fn fences_are_ordered_only_between_holds_that_follow_each_other() {
    let t0 = Instant::now();
    // Overlapping holds say nothing about fence order (the overlap
    // checker reports them); touching holds do: the later one began when
    // the earlier one ended. Unfenced windows are ignored.
    let windows = [
        fenced_window(t0, 1, 0, 100, 5),
        fenced_window(t0, 2, 50, 150, 4),
        fenced_window(t0, 3, 150, 200, 6),
        window(t0, 4, 300, 400),
    ];
    let f = fenced_figures(&[], 0, &windows);
    assert_eq!(f.fence_order_violations, 0);
    let touching = [
        fenced_window(t0, 1, 0, 100, 5),
        fenced_window(t0, 2, 100, 200, 5),
    ];
    let f = fenced_figures(&[], 0, &touching);
    assert_eq!(
        (f.fence_order_violations, f.duplicate_fences),
        (1, 1),
        "a hold beginning as another ended, with the same fence"
    );
}

/// An inspection at `[from, to)` ms that named owner `owner` with
/// `left_ms` of time left.
fn sight(t0: Instant, owner: u64, from: u64, to: u64, left_ms: u64) -> Sight {
    Sight {
        start: at(t0, from),
        end: at(t0, to),
        owner,
        time_left: Duration::from_millis(left_ms),
    }
}

#[test]
fn a_holder_of_another_manager_within_the_time_left_contradicts_an_inspection() {
    let t0 = Instant::now();
    let sights = [sight(t0, 0, 100, 110, 500)];
    // Client 1 starts at 300 while client 0 holds until 400: the
    // inspection's 500 ms were wrong.
    let windows = [window(t0, 0, 50, 400), window(t0, 1, 300, 900)];
    let seen = check_inspections(&sights, &windows);
    assert_eq!((seen.checked, seen.contradicted), (1, 1), "{seen:?}");
    assert!(seen.first.is_some());
}

#[test]
fn a_holder_after_the_named_one_let_go_or_after_the_time_left_is_fine() {
    let t0 = Instant::now();
    let sights = [sight(t0, 0, 100, 110, 500), sight(t0, 0, 100, 110, 100)];
    // Released early at 400, then client 1 (within the first time left).
    let windows = [window(t0, 0, 50, 400), window(t0, 1, 450, 900)];
    assert_eq!(check_inspections(&sights, &windows).contradicted, 0);
    // A sight no window of its owner covers is not checked.
    let lone = [sight(t0, 7, 100, 110, 500)];
    assert_eq!(check_inspections(&lone, &windows).checked, 0);
}

// ---------------------------------------------------------------------------
// Within or beyond the assumptions (the clock-step arm)

/// A step at `at_ms` beyond the assumptions, exposing holders until
/// `until_ms`.
fn exposure(t0: Instant, at_ms: u64, until_ms: u64) -> Exposure {
    Exposure {
        at: at(t0, at_ms),
        until: at(t0, until_ms),
    }
}

#[test]
fn an_overlap_of_a_holder_from_before_a_step_beyond_the_assumptions_is_expected() {
    let t0 = Instant::now();
    // Holder 1 began before the step at 50 ms; holder 2 after it.
    let mut windows = [window(t0, 1, 0, 100), window(t0, 2, 60, 160)];
    let v = classify_overlaps(&mut windows, &[exposure(t0, 50, 1000)]);
    assert_eq!((v.within, v.beyond), (0, 1));
    assert_eq!(v.longest_beyond, Duration::from_millis(40));
    assert_eq!(v.longest_two_valid, Duration::from_millis(40));
    // The step at 50 ms explains it; one at 500 ms explains nothing.
    let v = classify_overlaps(
        &mut windows,
        &[exposure(t0, 50, 1000), exposure(t0, 500, 1000)],
    );
    assert_eq!(v.hit, [true, false]);
    // Two short holders one after the other during holder 1's 200 ms
    // after the step: two overlaps of 10 ms, two valid holders for 140.
    let mut windows = [
        window(t0, 1, 0, 200),
        window(t0, 2, 60, 70),
        window(t0, 3, 80, 90),
    ];
    let v = classify_overlaps(&mut windows, &[exposure(t0, 50, 1000)]);
    assert_eq!((v.within, v.beyond), (0, 2));
    assert_eq!(v.longest_beyond, Duration::from_millis(10));
    assert_eq!(v.longest_two_valid, Duration::from_millis(140));
    assert!(v.first_beyond.is_some() && v.first_within.is_none());
}

#[test]
fn an_overlap_no_step_explains_is_a_violation() {
    let t0 = Instant::now();
    let pair = || [window(t0, 1, 0, 100), window(t0, 2, 60, 160)];
    // No step at all; both holders began after the step; both before it;
    // the later one after the exposure ended.
    for exposures in [
        vec![],
        vec![exposure(t0, 0, 1000)],
        vec![exposure(t0, 70, 1000)],
        vec![exposure(t0, 10, 55)],
    ] {
        let v = classify_overlaps(&mut pair(), &exposures);
        assert_eq!((v.within, v.beyond), (1, 0), "{exposures:?}");
        let (a, b) = v.first_within.expect("the violating pair");
        assert_eq!((a.client, b.client), (1, 2));
    }
}

#[test]
fn a_loss_within_validity_is_explained_only_inside_an_exposure() {
    let t0 = Instant::now();
    // Client 1 reads 0, client 2 writes 1 at 60, client 1 writes 1 over it
    // at 90: both within their validity.
    let resource = Resource {
        value: 1,
        writes: vec![
            write(t0, 2, 0, (0, 0), (60, 500)),
            write(t0, 1, 0, (0, 1), (90, 500)),
        ],
    };
    assert_eq!(classify_losses(&resource, &[exposure(t0, 50, 1000)]).0, 1);
    let (explained, unexplained, first) = classify_losses(&resource, &[exposure(t0, 70, 1000)]);
    assert_eq!((explained, unexplained), (0, 1));
    assert_eq!(first.map(|(a, b)| (a.client, b.client)), Some((2, 1)));
    // A late writer's loss is not a lock's: left to `lost_updates`.
    let late = Resource {
        value: 1,
        writes: vec![
            write(t0, 2, 0, (0, 0), (60, 500)),
            write(t0, 1, 0, (0, 1), (90, 80)),
        ],
    };
    let (explained, unexplained, first) = classify_losses(&late, &[]);
    assert_eq!((explained, unexplained), (0, 0));
    assert!(first.is_none());
}

#[test]
fn a_fenced_write_refused_within_validity_is_explained_only_inside_an_exposure() {
    let t0 = Instant::now();
    let writes = [
        fenced_write(t0, 5, (3, None), (100, 200)), // refused, valid, exposed
        fenced_write(t0, 6, (3, None), (300, 400)), // refused, valid, not exposed
        fenced_write(t0, 7, (3, None), (120, 110)), // refused after its deadline: stale
        fenced_write(t0, 8, (3, Some(3)), (130, 400)), // accepted
    ];
    assert_eq!(classify_refusals(&writes, &[exposure(t0, 50, 250)]), (1, 1));
}
