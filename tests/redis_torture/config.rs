//! The configuration of the torture runs: cluster size, client counts,
//! timings, the fenced register's scripts, and the run's length and seed
//! (from the environment).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clients::Family;

/// Nodes in every scenario.
pub(crate) const NODES: usize = 5;
/// Plain clients (each its own manager) in the randomized runs.
pub(crate) const PLAIN_CLIENTS: usize = 3;
/// Threads per shared manager in the randomized runs (one manager per
/// entry).
pub(crate) const SHARED_GROUPS: [usize; 2] = [3, 2];
/// How long the `lock` calls of the auto-extended, manual-extend and
/// late-manager clients may retry: longer than the others', so that these
/// rarer clients seldom give up (right after a restart the late-manager
/// client may have to outwait a quarantine and a holder).
pub(crate) const PATIENT_WAIT: Duration = Duration::from_millis(3000);
/// Late-manager clients (each builds its own managers).
pub(crate) const LATE_CLIENTS: usize = 2;
/// Fenced clients (each its own manager): the first one's manager has
/// fencing on by default (`LockManagerBuilder::fencing`), the others ask
/// for it per lock (`LockOptions::fencing`).
pub(crate) const FENCED_CLIENTS: usize = 3;
/// Every this many holds of a fenced client (about 15 %), the hold pauses
/// between its read and its write of the register until past its validity
/// (the first fenced hold of the run always does).
pub(crate) const FENCED_PAUSE_EVERY: u64 = 7;
/// How far past the validity a pause sleeps at least, in milliseconds
/// (lower and upper bound) before it waits for a newer holder.
pub(crate) const PAUSE_PAST: (u64, u64) = (50, 300);
/// After sleeping past its deadline, a paused holder (fenced or plain)
/// waits at most this long for another holder to use the resource, so
/// that its late write meets a newer one (the case a pause makes harmful).
pub(crate) const TAKEOVER_WAIT: Duration = Duration::from_millis(2000);
/// Acquisitions made with each manager a late-manager client builds.
pub(crate) const LATE_ACQUISITIONS: usize = 2;
/// A late-manager client makes its first contact at once after a
/// restart, or (every other manager) up to this much later.
pub(crate) const LATE_CONTACT_MAX: Duration = Duration::from_millis(1200);
/// Seconds per randomized run unless `QUORUM_LOCK_TORTURE_SECS` says more.
pub(crate) const DEFAULT_SECS: u64 = 15;
/// Late managers' owner numbers start here (the long-lived managers are
/// numbered from 0, the inspector is [`INSPECTOR_OWNER`]).
pub(crate) const LATE_OWNERS: u64 = 1_000_000;
pub(crate) const INSPECTOR_OWNER: u64 = 999_999;
/// How often the inspector looks at the resource, and the most sights it
/// keeps.
pub(crate) const INSPECT_EVERY: Duration = Duration::from_millis(20);
pub(crate) const MAX_SIGHTS: usize = 5_000;

/// The one resource everybody fights over.
pub(crate) const RESOURCE: &str = "{torture}:resource";
/// Every third hold of a plain or auto-extended client (its first one
/// included) takes the resource together with one of these (`lock_all`): sets that overlap each other
/// on a side resource, and every single lock of the resource, contend.
/// One hash tag for all three: on the cluster arm's cluster node a set
/// must be in one slot.
pub(crate) const SIDES: [&str; 2] = ["{torture}:side-a", "{torture}:side-b"];
/// The lock of the fenced clients: their own resource (the fenced register
/// is what it protects), so that they get the lock often enough, on the
/// same nodes and under the same faults as the others.
pub(crate) const FENCED_RESOURCE: &str = "torture:fenced";
/// The fenced register's keys on its own server: the highest fence seen,
/// and the counter.
pub(crate) const REGISTER_FENCE: &str = "register:fence";
pub(crate) const REGISTER_VALUE: &str = "register:value";
/// The register's read: refused (-1) when the register has seen a higher
/// fence than `ARGV[1]`; else it raises the fence seen to `ARGV[1]` and
/// returns the counter. A read must be fenced too, not only the write: with
/// fenced writes alone, a paused holder's stale write can land between a
/// newer holder's read and its write (the register has not seen the newer
/// fence yet, so it accepts), and the newer write then overwrites it: a
/// lost update with both writes accepted.
pub(crate) const REGISTER_READ: &str = "\
     local highest = tonumber(redis.call('get', KEYS[1]) or '0') \
     if highest > tonumber(ARGV[1]) then return -1 end \
     if highest < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end \
     return tonumber(redis.call('get', KEYS[2]) or '0')";
/// The register's write of `ARGV[2]` with fence `ARGV[1]`: refused (-1)
/// when the register has seen a higher fence (the same holder may write
/// again with its fence); else it records the fence, writes the value and
/// returns the value it replaced (so the checker sees interfering writes).
pub(crate) const REGISTER_WRITE: &str = "\
     if tonumber(redis.call('get', KEYS[1]) or '0') > tonumber(ARGV[1]) then return -1 end \
     redis.call('set', KEYS[1], ARGV[1]) \
     local replaced = tonumber(redis.call('get', KEYS[2]) or '0') \
     redis.call('set', KEYS[2], ARGV[2]) \
     return replaced";
/// Fences stay below this (`LockGuard::fence`).
pub(crate) const FENCE_LIMIT: u64 = 1 << 53;

/// Lock TTL (and `max_ttl`, so the quarantine is this plus drift) in the
/// randomized runs, in milliseconds.
pub(crate) const TTL_MS: u64 = 1000;
pub(crate) const TTL: Duration = Duration::from_millis(TTL_MS);
/// The shorter TTL that manual extends often ask for.
pub(crate) const SHORT_EXTEND_TTL: Duration = Duration::from_millis(300);
/// Per-node timeout in the randomized runs.
pub(crate) const NODE_TIMEOUT: Duration = Duration::from_millis(60);
/// How long one `lock` call may retry.
pub(crate) const LOCK_WAIT: Duration = Duration::from_millis(1500);
/// Every this many plain holds of a client (about 8 %), the holder stalls
/// once between its validity check and its write until past its deadline
/// (a simulated process pause), so that late writers occur and the checker
/// must tell them from overlaps (the plain hold that opens the run always
/// does, see [`OPENING`]).
pub(crate) const STALL_EVERY: u64 = 12;
/// Every this many holds of a client (about 3 %), the hold is long without
/// being asked for by the fault schedule.
pub(crate) const LONG_HOLD_EVERY: u64 = 33;
/// The opening of a randomized run: the families that lock [`RESOURCE`]
/// with long-lived managers take turns in this order, each until one of
/// its clients has acquired the lock, while the others do not try. Then
/// everybody competes. Coverage is thus scheduled, not left to who wins
/// the lock: a family with one client can lose every race of a run. (A
/// turn ends at the acquisition, not later: a holder that waited for its
/// watchdog would be the only holder the fault schedule's majority
/// restart can aim at, so the turn could last the whole run.)
pub(crate) const OPENING: [Family; 4] = [
    Family::Plain,
    Family::AutoExtend,
    Family::ManualExtend,
    Family::SharedManager,
];
/// How often a client waiting for its family's turn in the opening looks.
pub(crate) const OPENING_POLL: Duration = Duration::from_millis(2);
/// The fault schedule restarts a majority at least this often.
pub(crate) const MAJORITY_RESTART_EVERY: Duration = Duration::from_millis(2500);
/// A long hold ends this long before the guard's validity does.
pub(crate) const LONG_HOLD_MARGIN: Duration = Duration::from_millis(100);
/// The fault schedule restarts a majority only once a holder has at least
/// this much of its hold left (it waits at most [`HOLDER_WAIT`] for one).
pub(crate) const HOLDER_LEFT: Duration = Duration::from_millis(500);
pub(crate) const HOLDER_WAIT: Duration = Duration::from_secs(2);

/// TTL (and `max_ttl`) of the deterministic scenario.
pub(crate) const SCENARIO_TTL: Duration = Duration::from_secs(2);

/// Hang detector: a randomized run that has not finished this long after
/// its planned end kills its servers and exits the test process.
pub(crate) const HANG_GRACE: Duration = Duration::from_secs(120);

/// Round-robin choice: true on every `period`-th turn, the first time at
/// turn `period - 1 - offset % period` (clients with different offsets do
/// not move in step). Which holds get an ingredient is scheduled, so
/// every ingredient shows in a run with enough holds; only durations are
/// drawn at random.
pub(crate) fn every(turn: u64, period: u64, offset: usize) -> bool {
    (turn + offset as u64 + 1).is_multiple_of(period)
}

pub(crate) fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

pub(crate) fn run_secs() -> u64 {
    arm_secs(DEFAULT_SECS)
}

/// Seconds of a run whose default is `default` (an arm's own), unless
/// `QUORUM_LOCK_TORTURE_SECS` says.
pub(crate) fn arm_secs(default: u64) -> u64 {
    env_u64("QUORUM_LOCK_TORTURE_SECS").unwrap_or(default)
}

pub(crate) fn seed() -> u64 {
    env_u64("QUORUM_LOCK_TORTURE_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}
