//! Leader election over the quorum ([`Election`]): a leader is the holder
//! of one fenced, auto-extended lock, its term is that lock's fence, and
//! its value lives beside the lock in a record key that only the lock's
//! holder can write.
//!
//! On each node an election is two keys, apart from every lock's,
//! semaphore's and read-write lock's (they contain `{quorum-lock}`, which
//! no resource may, and a role no other kind uses), in one slot of a
//! cluster (`{name}` is their hash tag):
//!
//! - the lock key, `{name}{quorum-lock}:leader`: a plain lock key (token,
//!   TTL), taken fenced, extended and released exactly as a lock's;
//! - the record key, `{name}{quorum-lock}:record`: the leader's term,
//!   token and value (`record.rs`), written by `OpKind::Proclaim` only
//!   while the lock key holds that token, with no expiry of its own: it
//!   counts only beside a lock key that holds the same token
//!   (`observe.rs`), so a record left by an earlier leader says nothing.
//!
//! The value cannot live in the lock key's own value: extends and
//! releases compare that value whole, so a proclaim would make the next
//! extend fail. docs/safety.md ("Leader election") carries the argument.

// The exhaustive explorer of proclaim and observe (tests only): here, not
// in redlock/checks/, because it runs this module's own `view` and
// `judge`, and the lock's life must not import the election above it.
#[cfg(test)]
mod checks;
mod keys;
mod leadership;
mod observe;
mod proclaim;
mod record;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use self::keys::Keys;
pub use self::leadership::Leadership;
pub use self::observe::Leader;
pub use self::record::MAX_LEADER_VALUE;
use crate::backend::{BackendError, BackendErrorKind};
use crate::error::{Error, Result};
use crate::health::NodeState;
use crate::manager::LockManager;
use crate::options::{LockOptions, RetryPolicy};
use crate::report::NodeOutcome;

/// How long [`Election::campaign`] waits by default: a year, which is as
/// good as "until this caller leads" (a follower's job is to wait).
pub(crate) const DEFAULT_CAMPAIGN_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// One leader at a time among every process that campaigns for the same
/// name on the same nodes. Made by [`LockManager::election`].
///
/// A leader holds a [`Leadership`]: a fenced lock, extended automatically
/// until it is resigned, dropped or lost, whose fence is the leader's
/// [`term`](Leadership::term) (strictly greater than every earlier
/// leader's), with a value that others read with [`observe`](Self::observe).
///
/// ```
/// use quorum_lock::{LockManager, MemoryBackend};
///
/// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))).collect();
/// // Two managers on the same nodes, as two processes would have.
/// let [here, there] = [(); 2].map(|()| {
///     LockManager::builder().nodes(nodes.iter().cloned()).build().unwrap()
/// });
/// let (ours, theirs) = (here.election("scheduler")?, there.election("scheduler")?);
/// let mut leading = ours.campaign(b"host-1:8080")?;
/// assert!(theirs.try_campaign(b"host-2:8080").unwrap_err().is_contended());
///
/// let seen = theirs.observe()?.expect("a leader");
/// assert_eq!((seen.value(), seen.term()), (&b"host-1:8080"[..], leading.term()));
/// leading.proclaim(b"host-1:9090")?;
/// assert_eq!(theirs.observe()?.expect("a leader").value(), b"host-1:9090");
///
/// let first_term = leading.term();
/// leading.resign()?;
/// let next = theirs.try_campaign(b"host-2:8080")?;
/// assert!(next.term() > first_term);
/// # Ok::<(), quorum_lock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locks: LockManager,
    keys: Arc<Keys>,
    /// The highest term this handle (and its clones) reported.
    seen: Arc<AtomicU64>,
}

impl LockManager {
    /// The election named `name`. Its keys
    /// (`{name}{quorum-lock}:leader` and `{name}{quorum-lock}:record`
    /// after the prefix) are no lock's, semaphore's or read-write lock's:
    /// the lock of the same name neither excludes nor is excluded by it.
    ///
    /// It needs scripts on every node (a fenced lock and the proclaim
    /// do): where they are off or denied
    /// ([`Scripts::Never`](crate::Scripts::Never), an ACL without
    /// `@scripting`) a campaign fails, naming why.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, one that contains
    /// `{quorum-lock}`, one that starts with `}` (or any name under a
    /// prefix whose first `{` is followed by `}`: the keys' hash tag would
    /// be empty, and a cluster would put them in two slots), or one whose
    /// keys would be over [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN)
    /// bytes. No node is contacted.
    pub fn election(&self, name: impl AsRef<[u8]>) -> Result<Election> {
        let keys = Keys::new(self, name.as_ref())?;
        Ok(Election {
            locks: self.clone(),
            keys: Arc::new(keys),
            seen: Arc::new(AtomicU64::new(0)),
        })
    }
}

impl Election {
    /// Its name, as given.
    pub fn name(&self) -> &[u8] {
        self.keys.name.first()
    }

    /// Its two keys on the nodes: the lock key and the record key.
    pub fn keys(&self) -> (&[u8], &[u8]) {
        (self.keys.lock.first(), &self.keys.record)
    }

    /// Waits until this caller leads, then proclaims `value`: with the
    /// manager's TTL, for up to a year (as long as it takes). Bound it with
    /// [`campaign_with`](Self::campaign_with) and [`LockOptions::wait`],
    /// or stop it from another thread with [`LockOptions::cancellation`].
    ///
    /// # Errors
    ///
    /// As [`campaign_with`](Self::campaign_with).
    pub fn campaign(&self, value: &[u8]) -> Result<Leadership> {
        self.campaign_with(value, &LockOptions::new())
    }

    /// One attempt to lead: one fenced acquire, and the proclaim of
    /// `value` when it is granted.
    ///
    /// # Errors
    ///
    /// As [`campaign_with`](Self::campaign_with), after a single
    /// attempt: [`Error::Contended`] while another leads.
    pub fn try_campaign(&self, value: &[u8]) -> Result<Leadership> {
        self.campaign_with(value, &LockOptions::new().retry(RetryPolicy::none()))
    }

    /// Waits until this caller leads, with `options`, then proclaims
    /// `value`. A campaign is the fenced acquire of the election's lock
    /// key (its fence is the term), then the proclaim of `value` on a
    /// quorum; a proclaim that falls short releases the lock, and counts
    /// as a failed attempt.
    ///
    /// Of `options`, these apply: the TTL, the wait (by default a year,
    /// not a lock's 60 s) and the retry policy (by default the manager's,
    /// or the default policy's delays when the manager's makes one
    /// attempt only), the
    /// cancellation, and a hold bound when asked for
    /// ([`LockOptions::max_hold`], [`LockOptions::max_extensions`]; by
    /// default none). A leadership is always fenced and extended
    /// automatically, whatever `options` say of it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a value over [`MAX_LEADER_VALUE`]
    /// bytes or unusable options (no node contacted);
    /// [`Error::Contended`] (another leads) or [`Error::NoQuorum`] once
    /// the wait is spent; [`Error::Cancelled`]; [`Error::Deadlock`] when
    /// this thread already leads this election through this manager (it
    /// would wait for itself); otherwise as [`LockManager::lock_with`].
    pub fn campaign_with(&self, value: &[u8], options: &LockOptions) -> Result<Leadership> {
        check_value(value)?;
        let mut options = options.clone().fencing(true).auto_extend(true);
        if options.max_hold.is_none() {
            options = options.max_hold(Duration::MAX);
        }
        // A follower waits: without a policy of the call's own, the
        // manager's, unless that makes one attempt only (then the default
        // policy's delays), bounded by the campaign's wait below.
        if options.retry.is_none() {
            let manager = self.locks.retry();
            options = options.retry(match manager.single_attempt() {
                true => RetryPolicy::new(),
                false => manager.clone(),
            });
        }
        let single = options
            .retry
            .as_ref()
            .is_some_and(RetryPolicy::single_attempt);
        let wait = match (options.wait, single) {
            (Some(wait), _) => Some(wait),
            (None, true) => None,
            (None, false) => Some(DEFAULT_CAMPAIGN_WAIT),
        };
        let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
        let mut made = 0;
        // A retry policy with an attempt count bounds the proclaims that
        // fall short too.
        let most = options
            .retry
            .as_ref()
            .map_or(u32::MAX, RetryPolicy::max_attempts);
        let mut fell_short = 0u32;
        loop {
            let mut this = options.clone();
            if let Some(deadline) = deadline {
                this = this.wait(deadline.saturating_duration_since(Instant::now()));
            }
            let hold = crate::engine::Hold::Lock(self.keys.lock.clone());
            let guard = crate::trace::take(
                crate::trace::Call::Campaign,
                self.locks.quorum(),
                &mut made,
                |made| self.locks.take_as(&self.keys.name, &hold, &this, made),
            )?;
            let term = guard.fence().unwrap_or(0);
            match proclaim::proclaim(&self.locks, &self.keys, &guard, term, value) {
                Ok(()) => {
                    return Ok(Leadership::new(self.clone(), guard, term, value));
                }
                Err(error) => {
                    // Not a leader without its value on a quorum: let go,
                    // and try again as a failed attempt.
                    drop(guard);
                    fell_short = fell_short.saturating_add(1);
                    let spent = deadline.is_some_and(|d| Instant::now() >= d) || fell_short >= most;
                    let again = error.is_retryable() || error.is_lost();
                    if single || spent || !again {
                        return Err(error);
                    }
                    std::thread::sleep(PROCLAIM_RETRY_PAUSE);
                }
            }
        }
    }
}

/// The pause after a campaign whose proclaim fell short, before the next
/// acquire: its release has gone out, and the nodes that failed get a
/// moment.
const PROCLAIM_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// `Ok` when a node in `state` counts for an election (its lock's votes
/// count, or it is marked down but answered); else the outcome that
/// says why not.
pub(crate) fn counts(state: &NodeState) -> std::result::Result<(), NodeOutcome> {
    match state {
        NodeState::Up | NodeState::Down { .. } => Ok(()),
        NodeState::Quarantined { remaining } => Err(NodeOutcome::Quarantined {
            remaining: *remaining,
        }),
        other => Err(NodeOutcome::Failed(BackendError::new(
            BackendErrorKind::Other,
            format!("its view does not count: {other}"),
        ))),
    }
}

/// Refuses a value no record can hold, before any node is contacted.
pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_LEADER_VALUE {
        return Err(Error::InvalidArgument {
            reason: format!(
                "a leader's value is {} bytes; at most {MAX_LEADER_VALUE} are allowed",
                value.len()
            ),
        });
    }
    Ok(())
}
