//! [`RedisSentinelBackend`]: a master set managed by Redis (or Valkey)
//! Sentinel as one lock node (one vote): the master the sentinels agree
//! on, its holds confirmed by its replicas.
//!
//! * **Which master**: every sentinel given is asked at once
//!   (`SENTINEL GET-MASTER-ADDR-BY-NAME`, `SENTINEL REPLICAS`); an
//!   address counts only when a majority of the sentinels given name it,
//!   and the server there must say `master` (`ROLE`) before any of its
//!   grants counts. Asked at the first batch, and again at the batch
//!   after the master was out of reach or slow, refused a write
//!   (`READONLY`: it was turned into a replica), or did not have a hold
//!   confirmed (a master that counts more replicas than the sentinels
//!   list has its holds confirmed by all of them, with a second `WAIT`:
//!   the sentinels, who would list the same, are not asked again).
//!   When they name the same master with as many replicas, its backend
//!   serves again (its connections, its scripts loaded). The
//!   ops a master turned replica refused (`READONLY`: they did not run)
//!   run once more, within the call, on the master the sentinels name
//!   now, so a lock held across a failover is extended there.
//! * **Holds confirmed as on a cluster shard** (`redis/confirm.rs`):
//!   each acquire, extend and fence raise counts only when `WAIT`
//!   acknowledges it from the larger of the replicas the sentinels see up
//!   and the replicas the master counts (`INFO replication`,
//!   `connected_slaves`), in the same pipeline (and, when the master
//!   counts more, a second `WAIT` for its count). An old master cut off in
//!   a minority (its replicas gone to the new master) cannot have a hold
//!   acknowledged, so it counts none.
//! * **Identity per master**: each answer carries the identity of the
//!   master that gave it ([`Answers::per_answer`]): a promoted replica is
//!   a server of its own, judged by its own uptime, as a cluster's
//!   promoted replica is (`docs/safety.md`, "A Sentinel master set as
//!   one node").
//! * **A bounded call**: every call ends within [`CALL_TIMEOUTS`] node
//!   timeouts ([`Backend::call_timeout`]).
//!
//! * **Release notices**: a subscriber on the master.
//!
//! Not yet: the sentinels' `+switch-master` announcements (a failover is
//! seen by the old master's refusals or silence instead).

mod resolve;
mod url;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::redis::confirm::unconfirmed;
use crate::backend::redis::{RedisBackend, Scripts, redact_url};
use crate::backend::{
    Answers, Backend, BackendError, BackendErrorKind, Holding, InFlight, Inspect, Op, Probe,
    ReleaseListener, Reply, ServerInfo,
};

use self::url::{SCHEMES, parse};

/// The bound on one call, in node timeouts: the sentinels asked (at once:
/// one) and `ROLE` on the master (one) when no master is known, one
/// batch (one); or, when a known master refused the batch as a replica,
/// the batch (one), the sentinels and `ROLE` (two), and the refused ops
/// on the new master (one).
const CALL_TIMEOUTS: u32 = 4;

/// A master set managed by Redis or Valkey Sentinel as one lock node:
/// one vote, cast by the master a majority of the sentinels name, each
/// hold confirmed by its replicas.
///
/// Cheap to clone (clones share the master found and its pool). Its
/// `Debug` output and its errors never show a password.
///
/// ```no_run
/// use std::time::Duration;
/// use quorum_lock::RedisSentinelBackend;
/// use quorum_lock::backend::Backend;
///
/// let node = RedisSentinelBackend::open(
///     "redis+sentinel://:secret@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/main",
///     Duration::from_millis(100),
/// )?;
/// assert_eq!(
///     node.describe(),
///     "redis+sentinel://:***@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/main"
/// );
/// # Ok::<(), quorum_lock::backend::BackendError>(())
/// ```
#[derive(Clone)]
pub struct RedisSentinelBackend {
    inner: Arc<Set>,
}

/// A Sentinel node's state.
struct Set {
    /// One backend per sentinel, with the sentinels' credentials.
    sentinels: Vec<RedisBackend>,
    /// The data nodes' settings (credentials, TLS, db, timeout, scripts):
    /// the master's backend is made from it (`shard_at`).
    template: RedisBackend,
    /// The master name the sentinels monitor.
    name: String,
    described: String,
    /// The master last found (it said so to `ROLE`).
    master: Mutex<Option<Found>>,
}

/// A master found, and whether the next batch goes to it.
struct Found {
    backend: RedisBackend,
    /// `false` once the sentinels are to be asked again. It is kept then:
    /// when they name the same address with as many replicas, it serves
    /// again (its connections, its scripts loaded), so that asking again
    /// costs the master a `ROLE`, not a new connection and every script
    /// loaded again.
    current: bool,
}

/// Whether `url` names a Sentinel node (`redis+sentinel://`,
/// `rediss+sentinel://`).
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    SCHEMES.iter().any(|(scheme, _)| url.starts_with(scheme))
}

impl RedisSentinelBackend {
    /// Prepares a Sentinel node, without connecting:
    /// `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/MASTER-NAME[/db]`,
    /// or `rediss+sentinel://...` for TLS to the sentinels and the data
    /// nodes (the `tls` feature). The user and password are the data
    /// nodes'; the sentinels' come from the query
    /// (`?sentinel_user=U&sentinel_password=P`), none by default. A
    /// sentinel without a port is at 26379. Other query settings and a
    /// `#insecure` fragment apply as on a `redis://` URL. `timeout`
    /// bounds each round trip.
    ///
    /// # Errors
    ///
    /// [`BackendErrorKind::Config`] for a URL of another scheme, without a
    /// master name, a host, or with a bad port, or one that
    /// [`RedisBackend::open`] refuses; the message names the URL without
    /// its passwords.
    pub fn open(url: &str, timeout: Duration) -> Result<Self, BackendError> {
        let config = |why: &str| {
            BackendError::new(
                BackendErrorKind::Config,
                format!("invalid Sentinel URL `{}`: {why}", redact_url(url)),
            )
        };
        let parsed = parse(url).map_err(|why| config(&why))?;
        let opened = |url: &str| RedisBackend::open(url, timeout).map_err(|e| config(e.message()));
        let template = opened(&parsed.data)?;
        let sentinels = parsed
            .sentinels
            .iter()
            .map(|host_port| opened(&parsed.sentinel(host_port)))
            .collect::<Result<Vec<_>, _>>()?;
        let scheme = SCHEMES
            .iter()
            .find(|(_, plain)| *plain == parsed.plain)
            .map_or("redis+sentinel://", |(scheme, _)| scheme);
        let shown = template.url_redacted();
        let creds = shown
            .strip_prefix(parsed.plain)
            .and_then(|rest| rest.split_once('@'))
            .map_or_else(String::new, |(creds, _)| format!("{creds}@"));
        let described = format!(
            "{scheme}{creds}{}/{}",
            parsed.sentinels.join(","),
            parsed.name
        );
        Ok(Self {
            inner: Arc::new(Set {
                sentinels,
                template,
                name: parsed.name,
                described,
                master: Mutex::new(None),
            }),
        })
    }

    /// The same node with ops run as [`Scripts`] says on its masters
    /// (see [`RedisBackend::with_scripts`]).
    #[must_use]
    pub fn with_scripts(self, scripts: Scripts) -> Self {
        let set = &*self.inner;
        Self {
            inner: Arc::new(Set {
                sentinels: set.sentinels.clone(),
                template: set.template.clone().with_scripts(scripts),
                name: set.name.clone(),
                described: set.described.clone(),
                master: Mutex::new(None),
            }),
        }
    }

    /// The address (host, port) of the master a majority of the
    /// sentinels name now, checked with `ROLE`: the server this node's
    /// next batch goes to. Asks the sentinels (within two node timeouts).
    ///
    /// # Errors
    ///
    /// No majority of the sentinels names a master, or the server they
    /// name does not answer `ROLE` with `master` (the message names the
    /// node, without passwords).
    pub fn master_address(&self) -> Result<(String, u16), BackendError> {
        let set = &self.inner;
        let master = set.resolve(set.deadline_in(CALL_TIMEOUTS - 1))?;
        let (host, port) = master.host_port().unwrap_or(("", 0));
        Ok((host.to_owned(), port))
    }

    /// The node's URL without the passwords, as [`describe`](Backend::describe):
    /// `redis+sentinel://[user:***@]host:port,.../MASTER-NAME`.
    pub fn url_redacted(&self) -> &str {
        &self.inner.described
    }
}

impl fmt::Debug for RedisSentinelBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let master = self
            .inner
            .master
            .lock()
            .as_ref()
            .filter(|found| found.current)
            .map(|found| found.backend.url_redacted().to_owned());
        f.debug_struct("RedisSentinelBackend")
            .field("url", &self.inner.described)
            .field("master", &master)
            .finish()
    }
}

impl Set {
    /// `timeouts` node timeouts from now.
    fn deadline_in(&self, timeouts: u32) -> Instant {
        self.template.deadline_in(timeouts)
    }

    /// The master found before, or the one the sentinels name now.
    fn master(&self, until: Instant) -> Result<RedisBackend, BackendError> {
        if let Some(found) = self.master.lock().as_ref().filter(|f| f.current) {
            return Ok(found.backend.clone());
        }
        self.resolve(until)
    }

    /// Whether the next batch asks the sentinels first.
    fn to_ask(&self) -> bool {
        !self.master.lock().as_ref().is_some_and(|f| f.current)
    }

    /// The sentinels are to be asked again before the next batch, when
    /// `master` is still the one found.
    fn forget(&self, master: &RedisBackend) {
        if let Some(found) = self.master.lock().as_mut()
            && found.backend.host_port() == master.host_port()
        {
            found.current = false;
        }
    }

    fn error(&self, kind: BackendErrorKind, detail: &str) -> BackendError {
        BackendError::new(kind, format!("{}: {detail}", self.described))
    }
}

/// Whether an op's error says the master may no longer be the master:
/// out of reach or slow (it may have failed over), refusing writes (a
/// replica now), or its hold not confirmed by the replicas (an old master
/// cut off from them).
fn asks_again(e: &BackendError) -> bool {
    matches!(
        e.kind(),
        BackendErrorKind::Unreachable | BackendErrorKind::Timeout | BackendErrorKind::ReadOnly
    ) || unconfirmed(e)
}

/// A batch in flight on the master, or the error that kept it from being
/// sent.
struct SentinelFlight {
    set: Arc<Set>,
    sent: Result<(RedisBackend, Box<dyn InFlight>), BackendError>,
    /// Whether the master was found in this call (its refusals are then
    /// not followed: the sentinels were just asked).
    found_here: bool,
    /// The end of the call ([`CALL_TIMEOUTS`] after it began).
    until: Instant,
}

/// One op's answer, with the identity of the server that gave it.
type Answer = (Result<Reply, BackendError>, Option<Arc<ServerInfo>>);

impl SentinelFlight {
    /// The answers of a batch on `master`, and whether the node is to
    /// ask the sentinels again: the master was out of reach or slow,
    /// refused writes, or did not have a hold confirmed. A master that
    /// counts other replicas than the sentinels list is no reason of its
    /// own: one that counts more had its holds confirmed by all it
    /// counts (`redis/confirm.rs`), and the sentinels, slower to see a
    /// replica than the master (right after a failover) or told not to
    /// list it (`replica-announced no`), would list the same; each answer
    /// of theirs makes a new backend (a new connection, `ROLE`, the
    /// scripts loaded again), which every hold would then pay. One that
    /// counts fewer cannot confirm a hold, and asks again for that.
    fn answers(got: Answers) -> (Vec<Answer>, bool) {
        let again = got
            .results()
            .iter()
            .any(|r| r.as_ref().is_err_and(asks_again));
        // A master turned replica by a failover answers without an
        // identity: it grants nothing (its writes are refused), and its
        // keys are not lost to the node, they are on the new master (every
        // hold that counted was acknowledged by the replica promoted), so
        // its new role is no forget of this node's.
        let server = got
            .server()
            .filter(|s| s.replica != Some(true))
            .cloned()
            .map(Arc::new);
        let answers = got
            .into_results()
            .into_iter()
            .map(|r| (r, server.clone()))
            .collect();
        (answers, again)
    }
}

/// Whether an answer says the server refused the write as a replica
/// (`READONLY`): the op did not run there.
fn refused_as_replica(answer: &Answer) -> bool {
    matches!(&answer.0, Err(e) if e.kind() == BackendErrorKind::ReadOnly)
}

impl InFlight for SentinelFlight {
    fn wait(&mut self, until: Instant) -> bool {
        match &mut self.sent {
            Ok((_, flight)) => flight.wait(until),
            Err(_) => true,
        }
    }

    /// Reads the master's answers. The ops it refused as a replica
    /// (`READONLY`: they did not run) are sent once more, in the batch's
    /// order, to the master the sentinels name now, when it is another
    /// and the call has time left: a lock held across a failover is
    /// extended on the new master, which has it.
    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        let Self {
            set,
            sent,
            found_here,
            until,
        } = *self;
        let (master, flight) = match sent {
            Ok(sent) => sent,
            Err(e) => return Answers::per_answer(ops.iter().map(|_| (Err(e.clone()), None))),
        };
        let (mut answers, again) = Self::answers(flight.finish(ops));
        if again {
            set.forget(&master);
        }
        let refused: Vec<usize> = (0..answers.len())
            .filter(|&i| refused_as_replica(&answers[i]))
            .collect();
        if refused.is_empty() || found_here || Instant::now() >= until {
            return Answers::per_answer(answers);
        }
        let Ok(new) = set.master(until) else {
            return Answers::per_answer(answers);
        };
        if new.host_port() == master.host_port() {
            return Answers::per_answer(answers);
        }
        let sub: Vec<Op<'_>> = refused.iter().map(|&i| ops[i]).collect();
        let got = new
            .send_by(&sub, set.deadline_in(1).min(until))
            .finish(&sub);
        let (followed, again) = Self::answers(got);
        if again {
            set.forget(&new);
        }
        for (i, answer) in refused.into_iter().zip(followed) {
            answers[i] = answer;
        }
        Answers::per_answer(answers)
    }
}

impl Backend for RedisSentinelBackend {
    fn describe(&self) -> String {
        self.inner.described.clone()
    }

    /// Finds the master if it has none (asking the sentinels, then `ROLE`),
    /// and sends it the ops in one pipeline, each hold followed by its
    /// confirmation (`INFO replication`, `WAIT`).
    fn send(&self, ops: &[Op<'_>]) -> Box<dyn InFlight> {
        let set = &self.inner;
        let until = set.deadline_in(CALL_TIMEOUTS);
        let found_here = set.to_ask();
        let sent = set.master(until).map(|master| {
            let flight = master.send_by(ops, set.deadline_in(1).min(until));
            (master, flight)
        });
        Box::new(SentinelFlight {
            set: Arc::clone(set),
            sent,
            found_here,
            until,
        })
    }

    /// Four timeouts: the sentinels (asked at once), `ROLE` on the
    /// master they name, one batch; or a batch refused by a master turned
    /// replica, the sentinels, `ROLE`, and the refused ops again.
    fn call_timeout(&self) -> Option<Duration> {
        Some(self.inner.template.timeout().saturating_mul(CALL_TIMEOUTS))
    }

    fn probe(&self) -> Option<&dyn Probe> {
        Some(self)
    }

    fn inspector(&self) -> Option<&dyn Inspect> {
        Some(self)
    }

    /// A subscriber on the master (found now if none is known, within
    /// two node timeouts; `None` when none can be found: waiters then
    /// retry on their timer). Called once, when someone first waits.
    /// After a failover it stays on the old master, which as a replica
    /// of the new one still hears its releases (a `PUBLISH` travels with
    /// the replication stream); were the old master gone, the lost
    /// connection leaves the waiters to their timers.
    fn release_listener(&self) -> Option<Box<dyn ReleaseListener>> {
        let set = &self.inner;
        set.master(set.deadline_in(CALL_TIMEOUTS - 1))
            .ok()?
            .release_listener()
    }
}

impl Probe for RedisSentinelBackend {
    /// The identity of the master: the one found before, or the one the
    /// sentinels name now. A master that does not answer (or refuses) is
    /// forgotten: the next call asks the sentinels again. One that says
    /// it is a replica now (a failover) is forgotten at once, and the
    /// identity is the new master's.
    fn server_info(&self) -> Result<ServerInfo, BackendError> {
        let set = &self.inner;
        let until = set.deadline_in(CALL_TIMEOUTS - 1);
        let master = set.master(until)?;
        match Probe::server_info(&master) {
            Ok(info) if info.replica == Some(true) => {
                set.forget(&master);
                Probe::server_info(&set.master(until)?)
            }
            Ok(info) => Ok(info),
            Err(e) => {
                if asks_again(&e) {
                    set.forget(&master);
                }
                Err(e)
            }
        }
    }
}

impl Inspect for RedisSentinelBackend {
    /// Asks the master.
    fn inspect(&self, key: &[u8]) -> Result<Option<Holding>, BackendError> {
        let set = &self.inner;
        Inspect::inspect(&set.master(set.deadline_in(CALL_TIMEOUTS - 1))?, key)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn urls_name_the_node_without_secrets() {
        let node = RedisSentinelBackend::open(
            "redis+sentinel://u:s3cret@127.0.0.1:1,127.0.0.1:2/main?sentinel_password=sp4ss",
            Duration::from_millis(50),
        )
        .unwrap();
        assert_eq!(
            node.describe(),
            "redis+sentinel://u:***@127.0.0.1:1,127.0.0.1:2/main"
        );
        let debug = format!("{node:?}");
        assert!(
            !debug.contains("s3cret") && !debug.contains("sp4ss"),
            "{debug}"
        );
        assert!(is_sentinel_url("rediss+sentinel://h/m"));
        assert!(!is_sentinel_url("redis://h:1"));
        let bad = RedisSentinelBackend::open(
            "redis+sentinel://:pw@h:99999/m?sentinel_password=sp4ss",
            Duration::from_millis(50),
        )
        .unwrap_err();
        assert_eq!(bad.kind(), BackendErrorKind::Config);
        assert!(!bad.to_string().contains("pw@") && !bad.to_string().contains("sp4ss"));
    }
}
