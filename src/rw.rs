//! A read-write lock over the same quorum: any number of readers (up to
//! [`MAX_READERS`](crate::MAX_READERS)) or one writer, each reader expiring on its own, and a
//! waiting writer that new readers do not overtake.
//!
//! On each node the lock is two keys, apart from every mutex's and
//! semaphore's (they contain `{quorum-lock}`, which no resource may):
//!
//! - the readers: one entry per reader, each with its own expiry on the
//!   server's clock (a sorted set scored by expiry on Redis); a reader's
//!   extend moves only its own entry, and never adds one;
//! - the writer's key: a plain lock key (token, TTL), taken, extended,
//!   fenced and released exactly as a mutex's.
//!
//! A reader enters a node only while the writer's key is absent there
//! (one atomic step: `OpKind::ReadAcquire`), and holds the lock with a
//! quorum of entries, with the validity of a lock. A writer first takes
//! the writer's key as a plain Redlock lock: that is its *intent*, which
//! readers do not block, and from then on no new reader gets a quorum (the
//! key is on a quorum). It is then admitted by a quorum of nodes on which
//! no reader is left (`OpKind::Admit`, which also sets the key's expiry
//! anew, as an extend): its validity counts from that round. docs/safety.md
//! carries the argument; `src/redlock/checks/rw/` explores it.
//!
//! A read guard's lease holds `Hold::Reader`, a write guard's
//! `Hold::Writer` (`src/engine/hold.rs`): the engine makes each side's
//! ops from that, and refuses what a side has no op for.

use crate::backend::KeySet;
use crate::engine::{Hold, Pair};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::manager::take::measured;
use crate::options::{LockOptions, RetryPolicy};
use crate::redlock::Admission;
use crate::report::{NodeOutcome, NodeReport, Report, Round};
use crate::resource::{MAX_RESOURCE_LEN, split_by_a_cluster};
use crate::trace::{self, Call};
use crate::waiting::{Tried, Waiting};

/// What the lock's two keys add to its name: `{name}` first, so that on a
/// cluster node both keys hash to the slot of the name (unless the prefix
/// has a hash tag of its own, which then decides for both; a name whose
/// tag would be empty is refused: `resource::split_by_a_cluster`), then the
/// crate's mark and the role. The readers' suffix sorts before the
/// writer's.
const READERS: &[u8] = b"}{quorum-lock}:readers";
const WRITER: &[u8] = b"}{quorum-lock}:writer";

/// The kind, as its refusals name it.
const KIND: &str = "read-write lock";

/// Shared readers or one exclusive writer of one name, across every
/// process that uses the same nodes. Made by [`LockManager::rw_lock`].
///
/// Each side's guard is a [`LockGuard`]: it has a validity, extends (also
/// automatically), releases on drop, can be lost and cancelled, exactly
/// like a lock's; a write guard may carry a fence
/// ([`LockOptions::fencing`]), strictly above every earlier writer's.
///
/// ```
/// use quorum_lock::{LockManager, MemoryBackend};
///
/// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))).collect();
/// // Two managers on the same nodes, as two processes would have.
/// let [here, there] = [(); 2].map(|()| {
///     LockManager::builder().nodes(nodes.iter().cloned()).build().unwrap()
/// });
/// let (config, theirs) = (here.rw_lock("config")?, there.rw_lock("config")?);
/// let first = config.try_read()?;
/// let second = config.try_read()?; // readers share
/// assert!(theirs.try_write().unwrap_err().is_contended());
/// // `release` waits for the nodes' answers; a drop only queues the
/// // releases, and the other manager could still find the readers.
/// first.release()?;
/// second.release()?;
/// let writer = theirs.try_write()?; // alone now
/// assert!(config.try_read().unwrap_err().is_contended());
/// # drop(writer);
/// # Ok::<(), quorum_lock::Error>(())
/// ```
///
/// # Writers are not starved
///
/// A waiting writer's intent stops new readers on a quorum within its
/// first round (unless another writer holds the lock: among writers no
/// order is promised), and readers that arrive after that wait behind it,
/// however many there are; readers already in keep their lock until they
/// release it or it expires (their extends are not refused). Within one
/// manager, a reader also stands back from the moment a thread asks for
/// the write side, before its intent reaches the servers.
///
/// # No upgrade
///
/// A thread that holds a read guard and asks for the write side of the
/// same lock through the same manager gets [`Error::Deadlock`] at once:
/// its own reader would keep it waiting forever, and two such upgraders
/// would wait for each other. Release the read guard first and take the
/// write side; read again what was read under it, since another writer
/// may have come between. Likewise a thread holding the write guard that
/// waits for the read side, and a thread holding a read guard whose wait
/// for another read guard meets a writer's intent (it waits behind that
/// writer, which waits for it).
#[derive(Debug, Clone)]
pub struct RwLock {
    locks: LockManager,
    /// The name, as given, for the guards' and reports' resource.
    name: KeySet,
    /// The lock's two keys on the nodes, by role: a waiting reader
    /// listens for the writer's key's release, a waiting writer for the
    /// readers'.
    pair: Pair,
    /// What a read guard holds: its entry among the readers.
    reader: Hold,
    /// What a write guard holds: the writer's key, taken as a lock (its
    /// intent) and admitted.
    writer: Hold,
}

impl LockManager {
    /// The read-write lock named `name`. It is its own lock: it neither
    /// excludes nor is excluded by the mutex or the semaphore of the same
    /// name (its keys, `{name}{quorum-lock}:readers` and
    /// `{name}{quorum-lock}:writer` after the prefix, are no other lock's).
    ///
    /// It needs scripts on every node: on a node where scripts are off or
    /// denied ([`Scripts::Never`](crate::Scripts::Never), an ACL without
    /// `@scripting`) each of its calls fails at once, naming why.
    ///
    /// On a Redis or Valkey cluster node both keys live in the slot of
    /// `{name}` (the hash tag: the text between the first `{` and the
    /// first `}` after it), whatever braces the name holds, unless that
    /// tag would be empty: a name that starts with `}` (or a prefix whose
    /// first `{` is followed by `}`) would put the two keys in two slots,
    /// and is refused on every manager, so that a name means the same
    /// lock on every kind of node.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, one that contains
    /// `{quorum-lock}`, one that starts with `}` (or any name under a
    /// prefix whose first `{` is followed by `}`: the keys' hash tag
    /// would be empty), or one whose keys would be over
    /// [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes. No node is
    /// contacted.
    pub fn rw_lock(&self, name: impl AsRef<[u8]>) -> Result<RwLock> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(Error::InvalidArgument {
                reason: "the read-write lock's name is empty".into(),
            });
        }
        self.check_resource(name)?;
        let role = |suffix: &[u8]| [b"{", name, suffix].concat();
        let (readers, writer) = (role(READERS), role(WRITER));
        if writer.len().max(readers.len()) > MAX_RESOURCE_LEN {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "the read-write lock's name is {} bytes: its keys add {} to it, over \
                     the {} bytes a resource may have",
                    name.len(),
                    READERS.len().max(WRITER.len()) + 1,
                    MAX_RESOURCE_LEN
                ),
            });
        }
        let rounds = self.core().rounds();
        let unprefixed = readers.len();
        let (readers, writer) = (rounds.key_for(&readers), rounds.key_for(&writer));
        if let Some(reason) = split_by_a_cluster(&readers, readers.len() - unprefixed, KIND) {
            return Err(Error::InvalidArgument { reason });
        }
        let pair = Pair::new(&readers, &writer).ok_or_else(|| Error::InvalidArgument {
            reason: "the read-write lock's two keys are the same".into(),
        })?;
        Ok(RwLock {
            locks: self.clone(),
            name: KeySet::one(name),
            reader: Hold::Reader(pair.clone()),
            writer: Hold::Writer(pair.clone()),
            pair,
        })
    }
}

impl RwLock {
    /// Its name, as given.
    pub fn name(&self) -> &[u8] {
        self.name.first()
    }

    /// Its two keys on the nodes: the readers' and the writer's.
    pub fn keys(&self) -> (&[u8], &[u8]) {
        (self.pair.readers().first(), self.pair.writer().first())
    }

    /// Takes the read side, waiting while a writer holds or waits for the
    /// lock, with the manager's default options (as [`LockManager::lock`]).
    ///
    /// # Errors
    ///
    /// As [`read_with`](Self::read_with).
    pub fn read(&self) -> Result<LockGuard> {
        self.read_with(&LockOptions::new())
    }

    /// One attempt at the read side.
    ///
    /// # Errors
    ///
    /// As [`read_with`](Self::read_with), after a single attempt:
    /// [`Error::Contended`] while a writer holds or waits for the lock.
    pub fn try_read(&self) -> Result<LockGuard> {
        self.read_with(&LockOptions::new().retry(RetryPolicy::none()))
    }

    /// Takes the read side with `options` (TTL, wait, retry policy,
    /// auto-extension, cancellation, as for a lock). A reader has no
    /// fence: the manager's default fencing does not apply to it.
    ///
    /// # Errors
    ///
    /// As [`LockManager::lock_with`]; [`Error::InvalidArgument`] when
    /// `options` ask for a fence; [`Error::Deadlock`] when this thread
    /// holds the write side (at once, for a call that would wait), or holds
    /// a read guard of this lock while a writer waits for it.
    pub fn read_with(&self, options: &LockOptions) -> Result<LockGuard> {
        measured(Call::Read, self.locks.quorum(), |n| {
            self.take_read(options, n)
        })
    }

    /// [`read_with`](Self::read_with), counting its attempts in
    /// `attempts` (for the metrics).
    fn take_read(&self, options: &LockOptions, attempts: &mut u32) -> Result<LockGuard> {
        if options.fencing == Some(true) {
            return Err(Error::InvalidArgument {
                reason: "a read guard has no fence: fencing is for the write side".into(),
            });
        }
        trace::resources(&self.name);
        let locks = &self.locks;
        let ttl = locks.checked_ttl(options)?;
        let rounds = locks.core().rounds();
        let mut waiting = Waiting::new(options, locks.retry(), locks.default_wait(), attempts);
        waiting.check_cancelled()?;
        let now = rounds.now();
        if !waiting.single_attempt() && rounds.owners().held_by_me(&self.writer, now) {
            return Err(self.deadlock());
        }
        // A reader this thread holds keeps a writer's intent waiting, so
        // a wait behind that intent would wait for itself.
        let reading_here = rounds.owners().held_by_me(&self.reader, now);
        // Wake-ups, as a lock's waiter: the writer's release.
        let listen = || Some(self.pair.writer().clone());
        waiting.until_done(rounds, listen, None, |waiting| {
            let error = if rounds.intents().pending(self.pair.writer()) {
                // A writer of this manager is on its way: stand back.
                self.local_writer_waits()
            } else {
                match Tried::of(rounds.acquire_once(&self.name, &self.reader, ttl, false))? {
                    Tried::Done(lease) => {
                        let guard = locks.guard(lease);
                        return locks.deliver(guard, ttl, options, waiting).map(Tried::Done);
                    }
                    Tried::Again(error, _) => error,
                }
            };
            if reading_here && error.is_contended() && !waiting.single_attempt() {
                return Err(self.deadlock());
            }
            Ok(Tried::Again(error, None))
        })
    }

    /// Takes the write side, waiting while readers or another writer hold
    /// it, with the manager's default options.
    ///
    /// # Errors
    ///
    /// As [`write_with`](Self::write_with).
    pub fn write(&self) -> Result<LockGuard> {
        self.write_with(&LockOptions::new())
    }

    /// One attempt at the write side: one round for the intent and one
    /// for the admission; the intent is released when readers are in.
    ///
    /// # Errors
    ///
    /// As [`write_with`](Self::write_with), after a single attempt:
    /// [`Error::Contended`] while readers or another writer hold the lock.
    pub fn try_write(&self) -> Result<LockGuard> {
        self.write_with(&LockOptions::new().retry(RetryPolicy::none()))
    }

    /// Takes the write side with `options` (TTL, wait, retry policy,
    /// auto-extension, fencing, cancellation, as for a lock): first the
    /// intent (the writer's key, as a lock: waiting while another writer
    /// holds it), then the admission once no reader is left, keeping the
    /// intent meanwhile. The whole call is bounded by the wait budget; on
    /// any failure the intent is released.
    ///
    /// # Errors
    ///
    /// As [`LockManager::lock_with`]; [`Error::Contended`] (the last
    /// admission's report) when readers were still in once the budget was
    /// spent; [`Error::Lost`] when the intent was lost while waiting for
    /// readers; [`Error::Deadlock`] at once when this thread holds a read
    /// guard of this lock (no upgrade, see [`RwLock`]).
    pub fn write_with(&self, options: &LockOptions) -> Result<LockGuard> {
        measured(Call::Write, self.locks.quorum(), |n| {
            self.take_write(options, n)
        })
    }

    /// [`write_with`](Self::write_with), counting its rounds (intent and
    /// admissions) in `attempts` (for the metrics).
    fn take_write(&self, options: &LockOptions, attempts: &mut u32) -> Result<LockGuard> {
        let (mut intent_rounds, mut admissions) = (0, 0);
        let taken = self.intent_then_admission(options, &mut intent_rounds, &mut admissions);
        *attempts = intent_rounds.saturating_add(admissions);
        taken
    }

    /// The intent, then admission rounds until admitted, counting each.
    fn intent_then_admission(
        &self,
        options: &LockOptions,
        intent_rounds: &mut u32,
        admissions: &mut u32,
    ) -> Result<LockGuard> {
        let locks = &self.locks;
        let ttl = locks.checked_ttl(options)?;
        let rounds = locks.core().rounds();
        let mut waiting = Waiting::new(options, locks.retry(), locks.default_wait(), admissions);
        waiting.check_cancelled()?;
        if rounds.owners().held_by_me(&self.reader, rounds.now()) {
            return Err(self.deadlock());
        }
        // From here until this call returns, this manager's readers of the
        // lock stand back.
        let _intent = rounds.intents().announce(self.pair.writer());
        // The intent: the writer's key as a plain lock, with this call's
        // budget; auto-extension starts only once admitted.
        let intent_options = options.clone().auto_extend(false);
        let mut guard = locks.take_as(&self.name, &self.writer, &intent_options, intent_rounds)?;
        // Listen for readers' releases; never pause past the moment the
        // intent needs its extend.
        let listen = || Some(self.pair.readers().clone());
        waiting.until_done(rounds, listen, None, |_| {
            // Keep the intent: the admission sets the key's expiry only
            // where it admits.
            if guard.validity() < ttl / 2 {
                guard.extend(ttl)?;
            }
            let report = match rounds.admit(guard.lease())? {
                Admission::Admitted => return Ok(Tried::Done(())),
                Admission::NotYet(report) => report,
            };
            // Refused by readers: contended. Too few answers (or failures
            // no retry fixes, as a server that cannot run the script):
            // no quorum, which ends the call at once when out of reach.
            let error = match report.refused() {
                0 => Error::NoQuorum {
                    report: Box::new(report),
                },
                _ => Error::Contended {
                    report: Box::new(report),
                },
            };
            if !error.is_retryable() {
                return Err(error);
            }
            let refresh = guard.validity().saturating_sub(ttl / 2);
            Ok(Tried::Again(error, Some(refresh)))
        })?;
        locks.deliver(guard, ttl, options, &waiting)
    }

    /// The error of a wait that would wait for this thread itself.
    fn deadlock(&self) -> Error {
        Error::Deadlock {
            resource: self.name.to_string(),
        }
    }

    /// A reader's refusal, without asking the servers, while a writer of
    /// this manager is on its way.
    fn local_writer_waits(&self) -> Error {
        let nodes = self
            .locks
            .nodes()
            .into_iter()
            .map(|node| NodeReport {
                node: node.into(),
                outcome: NodeOutcome::NotAwaited,
            })
            .collect();
        Error::Contended {
            report: Box::new(Report {
                round: Round::Acquire,
                resource: self.name.to_string().into(),
                quorum: self.locks.quorum(),
                nodes,
                elapsed: std::time::Duration::ZERO,
                attempts: 1,
                waited: std::time::Duration::ZERO,
                held_here: false,
                writer_here: true,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::backend::memory::MemoryBackend;

    fn manager(prefix: &str) -> LockManager {
        LockManager::builder()
            .node(MemoryBackend::new("a"))
            .prefix(prefix)
            .build()
            .unwrap()
    }

    /// Every name, under every prefix, is either refused before any node
    /// is contacted or has its two keys in one slot of a cluster.
    #[test]
    fn a_name_keeps_both_keys_in_one_slot_or_is_refused() {
        let names = [
            "job", "}job", "}", "{", "{}", "}{", "a}b", "{a}b", "a{b", "{}x", "x{}", "}}", "{{",
            "a{}", "{tag}x", "}{x}",
        ];
        let mut refused = Vec::new();
        for prefix in ["", "app:", "app{", "app{}", "app{t}", "app}", "{", "}"] {
            let locks = manager(prefix);
            for name in names {
                match locks.rw_lock(name) {
                    Ok(rw) => {
                        let readers = rw.keys().0;
                        #[cfg(feature = "redis")]
                        {
                            use crate::backend::cluster::slot::{hash_tag, slot_of};
                            let writer = rw.keys().1;
                            assert_eq!(slot_of(readers), slot_of(writer), "{prefix} {name}");
                            assert_ne!(hash_tag(readers), readers, "{prefix} {name}");
                        }
                        assert!(split_by_a_cluster(readers, prefix.len(), KIND).is_none());
                    }
                    Err(Error::InvalidArgument { reason }) => {
                        assert!(reason.contains("hash tag"), "{prefix} {name}: {reason}");
                        refused.push(format!("{prefix}|{name}"));
                    }
                    Err(e) => panic!("{prefix} {name}: {e}"),
                }
            }
        }
        // A leading `}` under a prefix without `{`, and every name under
        // a prefix whose first `{` is followed by `}`.
        let expected: Vec<String> = ["", "app:", "app}", "}"]
            .iter()
            .flat_map(|p| ["}job", "}", "}{", "}}", "}{x}"].map(|n| format!("{p}|{n}")))
            .chain(names.map(|n| format!("app{{}}|{n}")))
            .collect();
        let mut expected = expected;
        expected.sort();
        refused.sort();
        assert_eq!(refused, expected);
    }
}
