//! The recorder: what every holder did (its window, its writes of the
//! counter and of the fenced register), and the run's shared state.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::clients::*;
use crate::config::*;

/// Where a window's end came from: the last observation of the guard's
/// validity before the holder let go (or the let-go itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Right after `lock` returned.
    Acquired,
    /// The check before a read or a write of the counter.
    Step,
    /// Right after a successful manual `extend`.
    Extended,
    /// A manual `extend` that asked for less than the claim (it may have
    /// shortened the keys) and was not followed by a valid observation
    /// (it failed, or the guard was lost right after).
    ExtendAsked,
}

/// One holder's time with the lock: from `lock` returning to the moment it
/// let go (start of `release`, or `drop`), cut at the deadline the holder
/// last observed (its last valid observation plus the validity it had
/// then, a lower bound on the guard's deadline at that time). An extended
/// lock's window thus covers the validity it really claimed, and a lock
/// shortened by its holder no longer claims the old deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) client: usize,
    pub(crate) family: Family,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// Which observation set `end` (when the holder let go after its last
    /// claim, `end` is the let-go time instead).
    pub(crate) seen: Seen,
    /// The lock came by hand-over from another thread of the same manager.
    pub(crate) handed_over: bool,
    /// Successful extends of the guard (manual and automatic) by the end.
    pub(crate) extensions: u32,
    /// Manual extends that succeeded on this guard.
    pub(crate) manual_extends: u32,
    /// The guard's fence (fenced clients).
    pub(crate) fence: Option<u64>,
    /// The holder's manager, by the number in its owner label
    /// (`torture-<n>`, see [`owner_label`]).
    pub(crate) owner: u64,
}

/// The owner label of the manager numbered `n`.
pub(crate) fn owner_label(n: u64) -> String {
    format!("torture-{n}")
}

/// The number in an owner label made by [`owner_label`].
pub(crate) fn owner_number(label: &str) -> Option<u64> {
    label.strip_prefix("torture-")?.parse().ok()
}

/// What one inspection of the resource saw (only sights of a holder the
/// inspection named are kept).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sight {
    /// Before and after the inspection.
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// The holder's manager ([`owner_number`]).
    pub(crate) owner: u64,
    /// The time left the inspection gave, from `end`.
    pub(crate) time_left: Duration,
}

/// One write of the shared counter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write {
    pub(crate) client: usize,
    /// Writes done before this writer's read (the sequence number it saw).
    pub(crate) read_seq: usize,
    /// The value it read, and the value its write replaced.
    pub(crate) seen: u64,
    pub(crate) replaced: u64,
    /// The clock read right after the write, in the same critical section
    /// of the counter.
    pub(crate) at: Instant,
    /// The deadline the writer observed at its check right before the
    /// write.
    pub(crate) deadline: Instant,
}

impl Write {
    /// The write completed after the writer's claimed deadline: its thread
    /// was descheduled between the validity check and the write (the
    /// process-pause hazard Redlock cannot exclude), not a lock failure.
    pub(crate) fn late(&self) -> bool {
        self.at >= self.deadline
    }
}

/// The shared resource: a counter that holders read, pause, and write back
/// plus one, with a log of every write for the checker.
#[derive(Debug, Default)]
pub(crate) struct Resource {
    pub(crate) value: u64,
    pub(crate) writes: Vec<Write>,
}

/// One write attempted on the fenced register.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FencedWrite {
    pub(crate) client: usize,
    pub(crate) fence: u64,
    /// The value read (through the register, with the same fence).
    pub(crate) seen: u64,
    /// The value the write replaced, or `None` when the register refused
    /// it (it had seen a higher fence).
    pub(crate) replaced: Option<u64>,
    /// The clock read right after the register answered.
    pub(crate) at: Instant,
    /// The deadline the writer observed at its last check before the write.
    pub(crate) deadline: Instant,
}

impl FencedWrite {
    /// Completed after the writer's claimed deadline (a paused holder).
    pub(crate) fn late(&self) -> bool {
        self.at >= self.deadline
    }
}

/// The fenced register, as one client sees it: a connection to its server
/// and the two scripts.
pub(crate) struct Register {
    pub(crate) conn: redis::Connection,
}

impl Register {
    pub(crate) fn connect(url: &str) -> Self {
        Self {
            conn: testkit::connect(url),
        }
    }

    pub(crate) fn eval(&mut self, script: &str, fence: u64, value: Option<u64>) -> Option<u64> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script)
            .arg(2)
            .arg(REGISTER_FENCE)
            .arg(REGISTER_VALUE)
            .arg(fence);
        if let Some(value) = value {
            cmd.arg(value);
        }
        let answer: i64 = cmd
            .query(&mut self.conn)
            .unwrap_or_else(|e| panic!("the fenced register failed: {e}"));
        u64::try_from(answer).ok()
    }

    /// The counter, or `None` when the register has seen a higher fence.
    pub(crate) fn read(&mut self, fence: u64) -> Option<u64> {
        self.eval(REGISTER_READ, fence, None)
    }

    /// Writes `value`; the value replaced, or `None` when refused.
    pub(crate) fn write(&mut self, fence: u64, value: u64) -> Option<u64> {
        self.eval(REGISTER_WRITE, fence, Some(value))
    }

    /// Whether a holder newer than `fence` has used the register, or the
    /// counter no longer holds `seen`.
    pub(crate) fn overtaken(&mut self, fence: u64, seen: u64) -> bool {
        let (highest, value): (Option<u64>, Option<u64>) = redis::cmd("MGET")
            .arg(REGISTER_FENCE)
            .arg(REGISTER_VALUE)
            .query(&mut self.conn)
            .unwrap_or_else(|e| panic!("the fenced register failed: {e}"));
        highest.unwrap_or(0) > fence || value.unwrap_or(0) != seen
    }
}

/// Counters of the randomized runs, by family where it matters.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) acquisitions: [AtomicU64; Family::ALL.len()],
    pub(crate) failed_locks: AtomicU64,
    pub(crate) failed_releases: AtomicU64,
    /// Holds that stopped early because the guard was no longer valid.
    pub(crate) cut_short: AtomicU64,
    pub(crate) manual_extends_ok: AtomicU64,
    pub(crate) manual_extends_failed: AtomicU64,
    /// Extends done by the watchdog (guard's extensions minus manual).
    pub(crate) auto_extends: AtomicU64,
    /// Shared-manager acquisitions that came by hand-over.
    pub(crate) hand_overs: AtomicU64,
    pub(crate) ended_by_drop: AtomicU64,
    pub(crate) ended_by_release: AtomicU64,
    pub(crate) late_managers: AtomicU64,
    /// Holds of the resource together with a side resource (`lock_all`).
    pub(crate) set_holds: AtomicU64,
    /// Holders stalled between a check and a write past their deadline.
    pub(crate) stalls: AtomicU64,
    /// ...of which another client wrote the counter during the stall.
    pub(crate) stalls_overtaken: AtomicU64,
    /// Fenced holds paused between the read and the write past their
    /// deadline...
    pub(crate) fenced_pauses: AtomicU64,
    /// ...of which a newer holder used the register during the pause.
    pub(crate) fenced_pauses_overtaken: AtomicU64,
    /// Fenced reads the register refused (a newer fence was seen).
    pub(crate) refused_reads: AtomicU64,
}

/// What the clients and the checker share.
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    pub(crate) windows: Mutex<Vec<Window>>,
    /// The inspector's sights of a named holder, and how many inspections
    /// it made.
    pub(crate) sights: Mutex<Vec<Sight>>,
    pub(crate) inspections: AtomicU64,
    /// Per client: when its current hold is planned to end.
    pub(crate) holding: Mutex<Vec<Option<Instant>>>,
    /// Set by the fault schedule before it restarts a majority: the next
    /// client to get the lock holds it until shortly before its validity
    /// ends (or, auto-extended, for its planned time), so the restart hits
    /// a live holder.
    pub(crate) want_long_hold: AtomicBool,
    /// Restarts done by the fault schedule so far (one node or three): the
    /// late-manager clients build a new manager when it changes.
    pub(crate) restarts: AtomicU64,
    pub(crate) resource: Mutex<Resource>,
    /// Every write attempted on the fenced register.
    pub(crate) fenced_writes: Mutex<Vec<FencedWrite>>,
    /// Per shared-manager group: the token of the guard a thread dropped
    /// last (a later acquisition with the same token was handed over).
    pub(crate) dropped_tokens: Vec<Mutex<Option<Vec<u8>>>>,
    /// Index into [`OPENING`] of the family whose turn it is;
    /// `OPENING.len()` once the opening is over.
    pub(crate) opening: AtomicUsize,
    /// Set by the first fenced hold of the run (it pauses).
    pub(crate) fenced_opened: AtomicBool,
    /// Set once a hold ended with an extension by the watchdog: until
    /// then every shared-manager hold is auto-extended.
    pub(crate) watchdog_seen: AtomicBool,
    pub(crate) counts: Counts,
    /// Holds neither stall, pause nor last long (the clock-step arm, which
    /// waits for every holder to finish before each step).
    pub(crate) quick_holds: bool,
    /// While set, clients start no lock call ([`Shared::quiet`]).
    pub(crate) gate: AtomicBool,
    /// Lock calls in progress plus holds not ended yet.
    pub(crate) active: AtomicUsize,
}

impl Shared {
    pub(crate) fn new(clients: usize) -> Self {
        Self {
            stop: AtomicBool::new(false),
            windows: Mutex::new(Vec::new()),
            sights: Mutex::new(Vec::new()),
            inspections: AtomicU64::new(0),
            holding: Mutex::new(vec![None; clients]),
            want_long_hold: AtomicBool::new(false),
            restarts: AtomicU64::new(0),
            resource: Mutex::new(Resource::default()),
            fenced_writes: Mutex::new(Vec::new()),
            dropped_tokens: SHARED_GROUPS.iter().map(|_| Mutex::new(None)).collect(),
            opening: AtomicUsize::new(0),
            fenced_opened: AtomicBool::new(false),
            watchdog_seen: AtomicBool::new(false),
            counts: Counts::default(),
            quick_holds: false,
            gate: AtomicBool::new(false),
            active: AtomicUsize::new(0),
        }
    }

    /// Closes the gate and waits (at most `limit`) until no lock call is
    /// in progress and no hold is left: nobody holds, nobody is about to.
    /// Whether that happened. A client counts itself active before it
    /// looks at the gate, and the gate is closed before the count is read
    /// (both `SeqCst`), so no lock call can start unseen.
    pub(crate) fn quiet(&self, limit: Duration) -> bool {
        self.gate.store(true, Ordering::SeqCst);
        testkit::wait_until_with(
            limit,
            Duration::from_millis(1),
            || false,
            || self.active.load(Ordering::SeqCst) == 0,
        )
    }

    /// Lets the clients lock again.
    pub(crate) fn open_gate(&self) {
        self.gate.store(false, Ordering::SeqCst);
    }

    /// A hold (or a lock call that failed) is over.
    pub(crate) fn done(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether a client of `family` may try to lock [`RESOURCE`] now: the
    /// opening is over, or it is this family's turn.
    pub(crate) fn may_lock(&self, family: Family) -> bool {
        OPENING
            .get(self.opening.load(Ordering::SeqCst))
            .is_none_or(|turn| *turn == family)
    }

    /// A client of `family` acquired the lock: if it was the family's turn
    /// in the opening, the next family's turn begins. Whether this call
    /// ended the turn.
    pub(crate) fn exercised(&self, family: Family) -> bool {
        let Some(turn) = OPENING.iter().position(|f| *f == family) else {
            return false;
        };
        self.opening
            .compare_exchange(turn, turn + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// How much of the longest current hold is left, if anyone holds.
    pub(crate) fn holder_left(&self) -> Option<Duration> {
        let now = Instant::now();
        self.holding
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .map(|end| end.saturating_duration_since(now))
            .max()
    }

    /// Reads the counter: its value and how many writes were done so far.
    pub(crate) fn read(&self) -> (u64, usize) {
        let resource = self.resource.lock().unwrap();
        (resource.value, resource.writes.len())
    }

    /// Writes `seen + 1`, reads the clock right after, and logs the write.
    /// Returns whether it was late (completed after `deadline`).
    pub(crate) fn write(
        &self,
        client: usize,
        seen: u64,
        read_seq: usize,
        deadline: Instant,
    ) -> bool {
        let mut resource = self.resource.lock().unwrap();
        let replaced = resource.value;
        resource.value = seen + 1;
        let write = Write {
            client,
            read_seq,
            seen,
            replaced,
            at: Instant::now(),
            deadline,
        };
        resource.writes.push(write);
        write.late()
    }
}
