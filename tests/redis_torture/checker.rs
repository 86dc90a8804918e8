//! The checker: overlaps between holders' windows, lost updates on the
//! unfenced counter, and what the fenced register saw. Pure functions of
//! a recorded history, tested on synthetic histories in `checker_tests`.

use std::time::{Duration, Instant};

use crate::clients::*;
use crate::faults::*;
use crate::recorder::*;

/// Lost updates on the counter, split by cause.
///
/// A write "interferes" when another write landed between its read and its
/// own write; it then replaced a value other than the one it read, and
/// `replaced - seen` increments are lost by it (these add up to
/// `writes - counter`). If this writer or one of the writes that landed in
/// between was late (completed after its writer's claimed deadline), the
/// loss is put down to a late writer: a descheduled process, which a lock
/// with a deadline cannot exclude. Otherwise both writes were made within
/// their writers' claimed validity, so the two windows overlap: a lock
/// failure, which the overlap checker sees too.
#[derive(Debug, Default)]
pub(crate) struct LostUpdates {
    pub(crate) writes: u64,
    pub(crate) counter: u64,
    /// `writes - counter`.
    pub(crate) total: u64,
    /// Writes that completed after their writer's claimed deadline.
    pub(crate) late_writes: u64,
    /// Increments lost where a late writer was involved, and the number of
    /// interfering writes concerned.
    pub(crate) by_late_writers: i64,
    pub(crate) late_interferences: u64,
    /// Increments lost between writers that were both within their claimed
    /// validity (an overlap), and the number of such interfering writes.
    pub(crate) within_validity: i64,
    pub(crate) valid_interferences: u64,
    /// The first such pair: the write that landed in between, and the one
    /// that overwrote it.
    pub(crate) first_within_validity: Option<(Write, Write)>,
}

pub(crate) fn lost_updates(resource: &Resource) -> LostUpdates {
    let writes = &resource.writes;
    let mut lost = LostUpdates {
        writes: writes.len() as u64,
        counter: resource.value,
        total: writes.len() as u64 - resource.value,
        late_writes: writes.iter().filter(|w| w.late()).count() as u64,
        ..LostUpdates::default()
    };
    for (i, write) in writes.iter().enumerate() {
        let between = &writes[write.read_seq.min(i)..i];
        if between.is_empty() {
            continue; // nothing landed in between: it replaced what it read
        }
        let lost_here = write.replaced as i64 - write.seen as i64;
        if write.late() || between.iter().any(Write::late) {
            lost.by_late_writers += lost_here;
            lost.late_interferences += 1;
        } else {
            lost.within_validity += lost_here;
            lost.valid_interferences += 1;
            lost.first_within_validity
                .get_or_insert((between[0], *write));
        }
    }
    lost
}

/// What the fenced register saw, and lost.
///
/// A lost update on the fenced counter is an accepted increment that the
/// final value does not contain: `accepted - counter`. Every accepted
/// write stores (value read) + 1, so this equals the sum over accepted
/// writes of `replaced - seen`, the increments a write overwrote because
/// an accepted write landed between its read and its own write (the
/// checker computes both and they must agree). Fencing must keep it at 0:
/// a holder's read raises the register's fence to its own, so once a
/// newer holder has read, every read or write of an older one is refused;
/// an accepted write with fence `f`, read at `r`, can therefore only
/// follow writes with fences `<= f` after `r`, and a fence equal to `f`
/// is its own holder's (fences differ from one holder to the next), whose
/// steps are sequential. So no accepted write lands between a holder's
/// read and its accepted write: none is overwritten. A stale write
/// (refused) changes nothing, and counts apart.
#[derive(Debug, Default)]
pub(crate) struct FencedFigures {
    /// Writes attempted, accepted, and refused because the register had
    /// seen a higher fence: after the writer's claimed deadline (a stale
    /// write of a paused holder), or within it (which would mean a newer
    /// holder while this one was valid).
    pub(crate) attempted: u64,
    pub(crate) accepted: u64,
    pub(crate) refused_stale: u64,
    pub(crate) refused_within_validity: u64,
    /// Accepted writes that completed after their writer's deadline
    /// (a pause the register could not tell: nobody newer came).
    pub(crate) accepted_late: u64,
    pub(crate) counter: u64,
    /// `accepted - counter`.
    pub(crate) lost: i64,
    /// Sum of `replaced - seen` over accepted writes, and how many
    /// accepted writes overwrote an accepted write made after their read.
    pub(crate) lost_by_interference: i64,
    pub(crate) interferences: u64,
    /// Pairs of fenced holds where the later one (it began after the
    /// earlier one ended) has a fence not above the earlier one's, and
    /// pairs of holds with the same fence.
    pub(crate) fence_order_violations: u64,
    pub(crate) duplicate_fences: u64,
    /// A violating pair: (earlier fence, later fence).
    pub(crate) first_violation: Option<(u64, u64)>,
    /// The first stale write refused, and the first accepted write that
    /// overwrote another (for the report).
    pub(crate) first_refused: Option<FencedWrite>,
    pub(crate) first_interference: Option<FencedWrite>,
}

pub(crate) fn fenced_figures(
    writes: &[FencedWrite],
    counter: u64,
    windows: &[Window],
) -> FencedFigures {
    let mut f = FencedFigures {
        attempted: writes.len() as u64,
        counter,
        ..FencedFigures::default()
    };
    for w in writes {
        match w.replaced {
            Some(replaced) => {
                f.accepted += 1;
                if w.late() {
                    f.accepted_late += 1;
                }
                let lost_here = replaced as i64 - w.seen as i64;
                if lost_here != 0 {
                    f.lost_by_interference += lost_here;
                    f.interferences += 1;
                    f.first_interference.get_or_insert(*w);
                }
            }
            None if w.late() => {
                f.refused_stale += 1;
                f.first_refused.get_or_insert(*w);
            }
            None => f.refused_within_validity += 1,
        }
    }
    f.lost = f.accepted as i64 - counter as i64;
    let mut fenced: Vec<&Window> = windows.iter().filter(|w| w.fence.is_some()).collect();
    fenced.sort_by_key(|w| w.start);
    for (i, b) in fenced.iter().enumerate() {
        for a in &fenced[..i] {
            let (fa, fb) = (a.fence.unwrap_or(0), b.fence.unwrap_or(0));
            if fa == fb {
                f.duplicate_fences += 1;
            }
            if a.end <= b.start && fa >= fb {
                f.fence_order_violations += 1;
                f.first_violation.get_or_insert((fa, fb));
            }
        }
    }
    f
}

/// What a randomized run measured.
#[derive(Debug)]
pub(crate) struct Figures {
    /// Acquisitions, indexed like [`Family::ALL`].
    pub(crate) acquisitions: [u64; Family::ALL.len()],
    /// Turns of [`OPENING`] completed (all of them once every family
    /// exercised its ingredient).
    pub(crate) opening_turns: usize,
    pub(crate) failed_locks: u64,
    pub(crate) failed_releases: u64,
    pub(crate) cut_short: u64,
    pub(crate) manual_extends_ok: u64,
    pub(crate) manual_extends_failed: u64,
    pub(crate) auto_extends: u64,
    pub(crate) hand_overs: u64,
    pub(crate) ended_by_drop: u64,
    pub(crate) ended_by_release: u64,
    pub(crate) late_managers: u64,
    pub(crate) set_holds: u64,
    pub(crate) stalls: u64,
    pub(crate) stalls_overtaken: u64,
    pub(crate) fenced_pauses: u64,
    pub(crate) fenced_pauses_overtaken: u64,
    pub(crate) refused_reads: u64,
    pub(crate) fenced: FencedFigures,
    pub(crate) faults: Faults,
    /// Overlapping holders, of either resource (and of the fenced one).
    pub(crate) overlaps: u64,
    pub(crate) fenced_overlaps: u64,
    pub(crate) longest_overlap: Duration,
    pub(crate) first_overlap: Option<(Window, Window)>,
    pub(crate) lost: LostUpdates,
    /// Inspections made, and what they say against the windows.
    pub(crate) inspections: u64,
    pub(crate) inspected: Inspections,
}

impl Figures {
    pub(crate) fn acquisitions(&self) -> u64 {
        self.acquisitions.iter().sum()
    }

    pub(crate) fn of(&self, family: Family) -> u64 {
        self.acquisitions[family.index()]
    }
}

/// Pairs of windows of different clients that intersect, the longest
/// intersection, and the earliest such pair.
pub(crate) fn count_overlaps(windows: &mut [Window]) -> (u64, Duration, Option<(Window, Window)>) {
    windows.sort_by_key(|w| w.start);
    let mut count = 0;
    let mut longest = Duration::ZERO;
    let mut first = None;
    for (i, a) in windows.iter().enumerate() {
        for b in &windows[i + 1..] {
            if b.start >= a.end {
                break; // sorted by start: no later window meets `a` either
            }
            if a.client != b.client && b.start < b.end {
                count += 1;
                longest = longest.max(a.end.min(b.end) - b.start);
                first.get_or_insert((*a, *b));
            }
        }
    }
    (count, longest, first)
}

/// A window for the report, times from the run's start.
pub(crate) fn describe(w: &Window, started: Instant) -> String {
    format!(
        "client {} ({}{}) held [{:.3?}, {:.3?}), end from {:?}, {} extends ({} manual)",
        w.client,
        w.family.name(),
        if w.handed_over { ", handed over" } else { "" },
        w.start.saturating_duration_since(started),
        w.end.saturating_duration_since(started),
        w.seen,
        w.extensions,
        w.manual_extends,
    )
}

/// A write for the report, times from the run's start.
pub(crate) fn describe_write(w: &Write, started: Instant) -> String {
    format!(
        "client {} wrote {} over {} at {:.3?} (its deadline {:.3?})",
        w.client,
        w.seen + 1,
        w.replaced,
        w.at.saturating_duration_since(started),
        w.deadline.saturating_duration_since(started),
    )
}

/// A fenced write for the report, times from the run's start.
pub(crate) fn describe_fenced_write(w: &FencedWrite, started: Instant) -> String {
    let outcome = match w.replaced {
        Some(replaced) => format!("accepted over {replaced}"),
        None => "refused".to_owned(),
    };
    format!(
        "client {} with fence {} wrote {} at {:.3?} (its deadline {:.3?}): {outcome}",
        w.client,
        w.fence,
        w.seen + 1,
        w.at.saturating_duration_since(started),
        w.deadline.saturating_duration_since(started),
    )
}

/// What the inspections say against the holders' windows: sights checked
/// (the named holder's window covers the whole inspection), and sights
/// contradicted: a holder of another manager began within the time left
/// the inspection gave, while the named holder had not let go yet. The
/// first contradiction, with the two windows.
#[derive(Debug, Default)]
pub(crate) struct Inspections {
    pub(crate) checked: u64,
    pub(crate) contradicted: u64,
    pub(crate) first: Option<(Sight, Window, Window)>,
}

pub(crate) fn check_inspections(sights: &[Sight], windows: &[Window]) -> Inspections {
    let mut out = Inspections::default();
    for sight in sights {
        let Some(seen) = windows
            .iter()
            .find(|w| w.owner == sight.owner && w.start <= sight.start && sight.end <= w.end)
        else {
            continue;
        };
        out.checked += 1;
        let Some(until) = sight.end.checked_add(sight.time_left) else {
            continue;
        };
        let next = windows.iter().find(|w| {
            w.owner != sight.owner && w.start > sight.end && w.start < until && seen.end > w.start
        });
        if let Some(next) = next {
            out.contradicted += 1;
            out.first.get_or_insert((*sight, *seen, *next));
        }
    }
    out
}

/// A stretch of a run beyond the assumptions of docs/safety.md: at `at` a
/// clock step left some holder's keys on fewer than a quorum of nodes
/// whose clocks did not jump forward past the drift allowance (a majority
/// stepped forward, or one node while the lock was on a bare quorum).
/// A holder that began before `at` may then lose its keys early, until
/// `until` (the step plus `max_ttl` and the drift allowance: every key set
/// before the step is gone by then).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exposure {
    pub(crate) at: Instant,
    pub(crate) until: Instant,
}

impl Exposure {
    /// Whether this step explains an overlap between `earlier` (the holder
    /// that began first) and `later`: `earlier` began before the step,
    /// `later` after it, before the exposure ended.
    fn explains(&self, earlier: &Window, later: &Window) -> bool {
        earlier.start < self.at && self.at <= later.start && later.start < self.until
    }

    /// Whether `t` lies in the exposure.
    fn covers(&self, t: Instant) -> bool {
        self.at <= t && t < self.until
    }
}

/// Overlaps split by the assumptions: those an [`Exposure`] explains
/// (expected, counted) and the others (violations: the verdict is strict
/// within the assumptions).
#[derive(Debug, Default)]
pub(crate) struct OverlapVerdict {
    pub(crate) within: u64,
    pub(crate) beyond: u64,
    pub(crate) longest_beyond: Duration,
    /// The longest time a holder from before a step stayed valid after
    /// the first other holder got the lock (two valid holders, whoever
    /// the second one was at each moment).
    pub(crate) longest_two_valid: Duration,
    /// Per exposure: whether it explains some overlap (its step let a
    /// second holder in).
    pub(crate) hit: Vec<bool>,
    pub(crate) first_within: Option<(Window, Window)>,
    pub(crate) first_beyond: Option<(Window, Window)>,
}

/// [`count_overlaps`]' pairs, each classified by `exposures`.
pub(crate) fn classify_overlaps(windows: &mut [Window], exposures: &[Exposure]) -> OverlapVerdict {
    windows.sort_by_key(|w| w.start);
    let mut v = OverlapVerdict {
        hit: vec![false; exposures.len()],
        ..OverlapVerdict::default()
    };
    for (i, a) in windows.iter().enumerate() {
        let mut overtaken = false;
        for b in &windows[i + 1..] {
            if b.start >= a.end {
                break;
            }
            if a.client == b.client || b.start >= b.end {
                continue;
            }
            if let Some(e) = exposures.iter().position(|e| e.explains(a, b)) {
                v.hit[e] = true;
                if !overtaken {
                    // Sorted by start: the first other holder of `a`'s time.
                    overtaken = true;
                    v.longest_two_valid = v.longest_two_valid.max(a.end - b.start);
                }
                v.beyond += 1;
                v.longest_beyond = v.longest_beyond.max(a.end.min(b.end) - b.start);
                v.first_beyond.get_or_insert((*a, *b));
            } else {
                v.within += 1;
                v.first_within.get_or_insert((*a, *b));
            }
        }
    }
    v
}

/// Updates of the unfenced counter lost between writers both within their
/// validity ([`lost_updates`]' "within validity" interferences), split:
/// explained by an [`Exposure`] (the overwritten write came after its
/// step, the write over it before it ended), or not. (explained,
/// unexplained, the first unexplained pair.)
pub(crate) fn classify_losses(
    resource: &Resource,
    exposures: &[Exposure],
) -> (u64, u64, Option<(Write, Write)>) {
    let writes = &resource.writes;
    let (mut explained, mut unexplained, mut first) = (0, 0, None);
    for (i, write) in writes.iter().enumerate() {
        let between = &writes[write.read_seq.min(i)..i];
        if between.is_empty() || write.late() || between.iter().any(Write::late) {
            continue;
        }
        if exposures
            .iter()
            .any(|e| e.at <= between[0].at && write.at < e.until)
        {
            explained += 1;
        } else {
            unexplained += 1;
            first.get_or_insert((between[0], *write));
        }
    }
    (explained, unexplained, first)
}

/// Fenced writes refused while their writer was still within its claimed
/// validity (a newer holder had used the register: two valid holders),
/// split: made during an [`Exposure`] (fencing doing its job beyond the
/// assumptions), or not. (explained, unexplained.)
pub(crate) fn classify_refusals(writes: &[FencedWrite], exposures: &[Exposure]) -> (u64, u64) {
    let refused = writes.iter().filter(|w| w.replaced.is_none() && !w.late());
    let (explained, unexplained): (Vec<&FencedWrite>, Vec<&FencedWrite>) =
        refused.partition(|w| exposures.iter().any(|e| e.covers(w.at)));
    (explained.len() as u64, unexplained.len() as u64)
}
