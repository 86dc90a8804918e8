//! Who leads: [`Election::observe`] reads every node's lock key and
//! record key and judges them ([`judge`], a pure function), and
//! [`Election::wait_change`] waits for another term,
//! [`Election::wait_update`] for another term or value.
//!
//! A node's view is one of: nothing (no lock key), a leader (a lock key
//! and, beside it, a record with the same token: its term and value), or
//! something else (a lock key without its record: a campaign between its
//! acquire and its proclaim, or a key of another program). The lock key
//! is read before the record, so a record with the lock key's token was
//! written while that key held it (tokens are never reused, and the
//! proclaim writes only while the key holds the token).

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::{Election, counts, record};
use crate::backend::{BackendError, BackendErrorKind, Holding};
use crate::error::{Error, Result};
use crate::redlock::{Woken, drift};
use crate::report::{NodeOutcome, NodeReport, Report, Round};
use crate::token::TOKEN_LEN;

/// The first pause of [`Election::wait_change`] after a read, and after
/// each release notice: it doubles up to [`LONGEST_QUIET_READ`].
const FIRST_QUIET_READ: Duration = Duration::from_millis(50);

/// The longest [`Election::wait_change`] goes without reading the nodes
/// again: what sends no notice (an expiry, a new leader's acquire, a
/// notice lost) is seen within this.
pub(crate) const LONGEST_QUIET_READ: Duration = Duration::from_secs(1);

/// The leader an [`Election::observe`] found: the term and value that a
/// quorum of counted nodes agree on. A snapshot: it may change as soon
/// as the nodes were read.
#[derive(Clone, PartialEq, Eq)]
pub struct Leader {
    term: u64,
    value: Vec<u8>,
    time_left: Duration,
}

impl Leader {
    /// Its term ([`Leadership::term`](crate::Leadership::term)).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value it proclaimed last.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// How long its lock lives at least without another extend: the
    /// quorum-th longest time left among the nodes that agree, less the
    /// clock drift and the time the read took.
    pub fn time_left(&self) -> Duration {
        self.time_left
    }
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("term", &self.term)
            .field("value", &String::from_utf8_lossy(&self.value))
            .field("time_left", &self.time_left)
            .finish()
    }
}

/// What one node says, for [`judge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum View {
    /// No lock key.
    Nobody,
    /// A lock key and its record: its token, term and value, and the lock
    /// key's time left.
    Leads {
        token: [u8; TOKEN_LEN],
        term: u64,
        value: Vec<u8>,
        ttl: Duration,
    },
    /// A lock key without its record.
    Other,
}

/// One node's view from its two reads (lock key first, then record).
pub(crate) fn view(
    lock: Result<Option<Holding>, BackendError>,
    record: Result<Option<Holding>, BackendError>,
) -> Result<View, BackendError> {
    let Some(lock) = lock? else {
        return Ok(View::Nobody);
    };
    let Some(record) = record? else {
        return Ok(View::Other);
    };
    let token = lock.value().get(..TOKEN_LEN);
    match record::decode(record.value(), record.len()) {
        Some(r) if token == Some(&r.token[..]) => Ok(View::Leads {
            token: r.token,
            term: r.term,
            value: r.value,
            ttl: lock.ttl().unwrap_or(Duration::ZERO),
        }),
        _ => Ok(View::Other),
    }
}

/// What the views say together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Judged {
    /// A quorum of counted nodes agree on this leader; `ttls` are the
    /// lock key's time left on each of them.
    Leads {
        term: u64,
        value: Vec<u8>,
        ttls: Vec<Duration>,
        on: Vec<usize>,
    },
    /// A quorum of counted nodes hold nothing.
    Nobody { on: Vec<usize> },
    /// Neither.
    Unknown,
}

/// The verdict on `views` (one per node; `Err` for a node that did not
/// answer or whose view does not count) with `quorum`.
pub(crate) fn judge(views: &[Result<View, ()>], quorum: usize) -> Judged {
    let nobody: Vec<usize> = (0..views.len())
        .filter(|&i| views[i] == Ok(View::Nobody))
        .collect();
    if nobody.len() >= quorum {
        return Judged::Nobody { on: nobody };
    }
    for view in views.iter().flatten() {
        let View::Leads {
            token, term, value, ..
        } = view
        else {
            continue;
        };
        let on: Vec<usize> = (0..views.len())
            .filter(|&i| {
                matches!(&views[i], Ok(View::Leads { token: t, term: n, value: v, .. })
                    if t == token && n == term && v == value)
            })
            .collect();
        if on.len() >= quorum {
            let ttls = on
                .iter()
                .filter_map(|&i| match &views[i] {
                    Ok(View::Leads { ttl, .. }) => Some(*ttl),
                    _ => None,
                })
                .collect();
            return Judged::Leads {
                term: *term,
                value: value.clone(),
                ttls,
                on,
            };
        }
    }
    Judged::Unknown
}

impl Election {
    /// Who leads now, read from the servers: the lock key and the record
    /// key on every node (in line with what this manager queued there
    /// before; each node answers within twice the node timeout).
    ///
    /// `Some` only for a leader (term and value) that a quorum of nodes
    /// whose views count hold: a node in restart quarantine, a duplicate,
    /// a replica or a node that may evict does not count
    /// ([`health`](crate::LockManager::health) says which). `None` only
    /// when a quorum of counted nodes hold nothing. Through one
    /// `Election` handle (and its clones), the terms reported never
    /// decrease. Stale by construction: act as the leader only with a
    /// [`Leadership`](crate::Leadership).
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when neither holds: too few nodes answered or
    /// count, or their views disagree (a campaign between its acquire and
    /// its proclaim, a leader's failed proclaim, a split after failures),
    /// or a quorum shows a term below one this handle reported; its
    /// report (round `Observe`) says what each node showed.
    pub fn observe(&self) -> Result<Option<Leader>> {
        let rounds = self.locks.core().rounds();
        let config = rounds.config();
        let wait = config.node_timeout.saturating_mul(2);
        let started = rounds.now();
        let begun = Instant::now();
        let engine = rounds.engine();
        let locks = engine.inspect(self.keys.lock.first(), wait);
        let records = engine.inspect(&self.keys.record, wait);
        let took = rounds.now().saturating_duration_since(started);
        let health = engine.health(rounds.now());
        let mut outcomes = Vec::with_capacity(health.len());
        let views: Vec<Result<View, ()>> = locks
            .into_iter()
            .zip(records)
            .zip(&health)
            .map(
                |((lock, record), node)| match (view(lock, record), counts(&node.state)) {
                    (Ok(view), Ok(())) => {
                        outcomes.push(NodeOutcome::Refused);
                        Ok(view)
                    }
                    (Ok(_), Err(not_counted)) => {
                        outcomes.push(not_counted);
                        Err(())
                    }
                    (Err(e), _) => {
                        outcomes.push(match e.kind() {
                            BackendErrorKind::Timeout => NodeOutcome::TimedOut,
                            _ => NodeOutcome::Failed(e),
                        });
                        Err(())
                    }
                },
            )
            .collect();
        let quorum = config.quorum;
        let judged = judge(&views, quorum);
        let on = match &judged {
            Judged::Leads { on, .. } | Judged::Nobody { on } => on.clone(),
            Judged::Unknown => Vec::new(),
        };
        for &i in &on {
            outcomes[i] = NodeOutcome::Granted;
        }
        let report = |outcomes: Vec<NodeOutcome>| Report {
            round: Round::Observe,
            resource: self.keys.name.to_string().into(),
            quorum,
            nodes: health
                .iter()
                .zip(outcomes)
                .map(|(node, outcome)| NodeReport {
                    node: node.name.as_str().into(),
                    outcome,
                })
                .collect(),
            elapsed: begun.elapsed(),
            attempts: 1,
            waited: Duration::ZERO,
            held_here: false,
            writer_here: false,
        };
        match judged {
            Judged::Nobody { .. } => Ok(None),
            Judged::Unknown => Err(Error::NoQuorum {
                report: Box::new(report(outcomes)),
            }),
            Judged::Leads {
                term,
                value,
                mut ttls,
                on,
            } => {
                let seen = self.seen.fetch_max(term, Ordering::AcqRel);
                if term < seen {
                    let behind = BackendError::new(
                        BackendErrorKind::Other,
                        format!(
                            "shows term {term}, below the term {seen} this election handle \
                             reported before (keys forgotten without quarantine?)"
                        ),
                    );
                    for i in on {
                        outcomes[i] = NodeOutcome::Failed(behind.clone());
                    }
                    return Err(Error::NoQuorum {
                        report: Box::new(report(outcomes)),
                    });
                }
                // The quorum-th longest time left, less drift and the read.
                ttls.sort_unstable_by(|a, b| b.cmp(a));
                let left = ttls.get(quorum - 1).copied().unwrap_or_default();
                let time_left = left
                    .saturating_sub(drift(left, config.drift_factor))
                    .saturating_sub(took);
                Ok(Some(Leader {
                    term,
                    value,
                    time_left,
                }))
            }
        }
    }

    /// Waits until the leader's term is another than `last` (the term
    /// last seen; `None`: no leader), for at most `timeout`, and returns
    /// the observation that shows it; or, when `timeout` passes first,
    /// the last observation (whose term is `last` then). A new value
    /// proclaimed within one term is not a change here: wait for it with
    /// [`wait_update`](Self::wait_update).
    ///
    /// It sleeps between reads, woken by the release notices of the
    /// election's lock key (a resignation: at once) and the notices its
    /// proclaims send, and reads again at least once a second (for what
    /// sends no notice: an expiry, a new leader's acquire, a notice
    /// lost).
    ///
    /// # Errors
    ///
    /// The last read's error, when the nodes could not tell who leads
    /// when `timeout` passed (as [`observe`](Self::observe)).
    pub fn wait_change(&self, last: Option<u64>, timeout: Duration) -> Result<Option<Leader>> {
        self.wait_for(timeout, |seen| seen.map(Leader::term) != last)
    }

    /// Waits until what [`observe`](Self::observe) shows differs from
    /// `last` (the observation last seen; `None`: no leader): another
    /// leader, no leader, or the same leader proclaiming another value
    /// ([`Leadership::proclaim`](crate::Leadership::proclaim)). Only the
    /// term and the value are compared, never the time left. For at most
    /// `timeout`; returns the observation that shows the difference, or,
    /// when `timeout` passes first, the last observation (the same term
    /// and value as `last` then).
    ///
    /// A proclaim announces itself on the election's own channel (Redis:
    /// `quorum-lock:released:` and the record key), which this wait
    /// listens on with the lock key's: a new value is seen about one
    /// round trip after the proclaim, without reading the nodes in the
    /// meantime; lock waiters, campaigns included, are not woken by it.
    /// As [`wait_change`](Self::wait_change), it reads again at least
    /// once a second for what sends no notice.
    ///
    /// ```
    /// use std::time::Duration;
    /// use quorum_lock::{LockManager, MemoryBackend};
    ///
    /// let nodes: Vec<MemoryBackend> = (0..3).map(|i| MemoryBackend::new(format!("mem-{i}"))).collect();
    /// let locks = LockManager::builder().nodes(nodes).build()?;
    /// let election = locks.election("scheduler")?;
    /// let mut leading = election.campaign(b"host-1:8080")?;
    /// let seen = election.observe()?;
    /// std::thread::scope(|s| {
    ///     let waiting = s.spawn(|| election.wait_update(seen.as_ref(), Duration::from_secs(30)));
    ///     leading.proclaim(b"host-1:9090")?;
    ///     let now = waiting.join().expect("no panic")?.expect("a leader");
    ///     assert_eq!((now.term(), now.value()), (leading.term(), &b"host-1:9090"[..]));
    ///     Ok::<(), quorum_lock::Error>(())
    /// })?;
    /// # Ok::<(), quorum_lock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`wait_change`](Self::wait_change).
    pub fn wait_update(&self, last: Option<&Leader>, timeout: Duration) -> Result<Option<Leader>> {
        let shown = |leader: Option<&Leader>| leader.map(|l| (l.term, l.value.clone()));
        let last = shown(last);
        self.wait_for(timeout, |seen| shown(seen) != last)
    }

    /// Reads until `changed` holds of what a read shows, or `timeout`
    /// passes (then the last read), sleeping between reads until a notice
    /// of either key (the lock key's release, the record key's proclaim)
    /// or the next quiet read.
    fn wait_for(
        &self,
        timeout: Duration,
        changed: impl Fn(Option<&Leader>) -> bool,
    ) -> Result<Option<Leader>> {
        let deadline = crate::redlock::after(timeout);
        let rounds = self.locks.core().rounds();
        let mut watch = None;
        // Reads come soon after a notice (a resignation: the next leader
        // usually campaigns at once), then further apart, up to a second.
        let mut quiet = FIRST_QUIET_READ;
        loop {
            let seen = self.observe();
            match &seen {
                Ok(leader) if changed(leader.as_ref()) => return seen,
                _ if Instant::now() >= deadline => return seen,
                _ => {}
            }
            // Listen from the first quiet read on: a notice after the
            // subscription is heard; a change between the first read and
            // the subscription is seen by the next read, 50 ms later.
            let watch = watch.get_or_insert_with(|| rounds.watch(&self.keys.watched));
            let until = crate::redlock::after(quiet).min(deadline);
            let woken = rounds.wait_for_release(watch, until, None::<&Receiver<()>>);
            quiet = match woken {
                Woken::Notice => FIRST_QUIET_READ,
                Woken::Timer | Woken::Interrupted => {
                    quiet.saturating_mul(2).min(LONGEST_QUIET_READ)
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn leads(token: u8, term: u64, value: &[u8]) -> Result<View, ()> {
        Ok(View::Leads {
            token: [token; TOKEN_LEN],
            term,
            value: value.to_vec(),
            ttl: S,
        })
    }

    /// `Some` only for one leader on a quorum, `None` only for nothing on
    /// a quorum, else unknown: the same token, term and value must agree.
    #[test]
    fn a_verdict_needs_a_quorum_of_the_same_view() {
        let nobody = Ok(View::Nobody);
        assert!(matches!(
            judge(&[leads(1, 5, b"a"), leads(1, 5, b"a"), nobody.clone()], 2),
            Judged::Leads { term: 5, .. }
        ));
        assert!(matches!(
            judge(&[nobody.clone(), nobody.clone(), leads(1, 5, b"a")], 2),
            Judged::Nobody { .. }
        ));
        for views in [
            // Two values, two terms, two tokens: no quorum for any.
            [leads(1, 5, b"a"), leads(1, 5, b"b"), nobody.clone()],
            [leads(1, 5, b"a"), leads(1, 6, b"a"), nobody.clone()],
            [leads(1, 5, b"a"), leads(2, 5, b"a"), nobody.clone()],
            // Failed or uncounted nodes say nothing.
            [leads(1, 5, b"a"), Err(()), Err(())],
            [nobody.clone(), Err(()), Ok(View::Other)],
            [Ok(View::Other), Ok(View::Other), Ok(View::Other)],
        ] {
            assert_eq!(judge(&views, 2), Judged::Unknown, "{views:?}");
        }
    }

    /// A record counts only beside a lock key holding its token.
    #[test]
    fn a_record_counts_only_beside_its_lock() {
        let token = crate::token::Token::random().unwrap_or_else(|e| panic!("{e}"));
        let bytes = record::encode(9, &token, b"v");
        let rec = || Ok(Some(Holding::new(&bytes, bytes.len(), None)));
        let lock = |value: &[u8]| Ok(Some(Holding::new(value, value.len(), Some(S))));
        let mut ours = token.as_bytes().to_vec();
        ours.extend_from_slice(b";owner=x");
        assert!(matches!(
            view(lock(&ours), rec()),
            Ok(View::Leads { term: 9, .. })
        ));
        assert_eq!(
            view(lock(b"another token entirely"), rec()).ok(),
            Some(View::Other)
        );
        assert_eq!(view(lock(&ours), Ok(None)).ok(), Some(View::Other));
        assert_eq!(view(Ok(None), rec()).ok(), Some(View::Nobody));
    }
}
