//! The tracing interface with the `tracing` feature (see `mod.rs` and
//! docs/operations.md for the names). Field names follow OpenTelemetry's
//! conventions where one exists (`db.system`, `server.address`,
//! `server.port`, `error.type`, `otel.kind`, `otel.status_code`); the
//! crate's own are under `quorum_lock.`. A resource is shown as the
//! crate's logs show it (lossy UTF-8, cut after 64 characters); a token
//! never is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::span::EnteredSpan;
use tracing::{Span, field};

use super::Call;
use super::names::{Node, error_type, kind, vote};
use crate::backend::KeySet;
use crate::error::{Error, Result};
use crate::report::NodeOutcome;
use crate::words::Shortened;

/// A call's span, named `$name`, at INFO.
macro_rules! call_span {
    ($name:literal, $quorum:expr) => {
        tracing::info_span!(
            $name,
            otel.kind = "client",
            otel.status_code = field::Empty,
            "error.type" = field::Empty,
            quorum_lock.resource = field::Empty,
            quorum_lock.quorum = $quorum,
            quorum_lock.outcome = field::Empty,
            quorum_lock.attempts = field::Empty,
        )
    };
}

fn call_span(call: Call, quorum: usize) -> Span {
    match call {
        Call::Lock => call_span!("lock", quorum),
        Call::TryLock => call_span!("try_lock", quorum),
        Call::LockAll => call_span!("lock_all", quorum),
        Call::Acquire => call_span!("acquire", quorum),
        Call::Read => call_span!("read", quorum),
        Call::Write => call_span!("write", quorum),
        Call::Campaign => call_span!("campaign", quorum),
        Call::Extend => call_span!("extend", quorum),
        Call::Release => call_span!("release", quorum),
    }
}

/// Records how a call ended on its span.
fn record_end<T>(span: &Span, call: Call, result: &Result<T>) {
    match result {
        Ok(_) => {
            span.record(
                "quorum_lock.outcome",
                match call {
                    Call::Extend => "extended",
                    Call::Release => "released",
                    _ => "acquired",
                },
            );
        }
        Err(error) => {
            let kind = error_type(error);
            span.record("quorum_lock.outcome", kind);
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Runs `body`, a call that takes a lock, in its span: the quorum, then
/// the resource (recorded by the body, see [`resources`]), how it ended
/// and the attempts it made (counted by the body in `attempts`).
pub(crate) fn take<T>(
    call: Call,
    quorum: usize,
    attempts: &mut u32,
    body: impl FnOnce(&mut u32) -> Result<T>,
) -> Result<T> {
    let span = call_span(call, quorum);
    let result = span.in_scope(|| body(attempts));
    record_end(&span, call, &result);
    span.record("quorum_lock.attempts", *attempts);
    result
}

/// Runs `body`, a call on a held lock (extend, release), in its span,
/// which follows from the lock's ([`Held`]).
pub(crate) fn act<T>(
    call: Call,
    quorum: usize,
    held: &Held,
    resources: &KeySet,
    body: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let span = call_span(call, quorum);
    if span.is_disabled() {
        return body();
    }
    span.follows_from(&held.0);
    span.record("quorum_lock.resource", field::display(shown(resources)));
    let result = span.in_scope(body);
    record_end(&span, call, &result);
    result
}

/// Names the resources of the call whose span is current.
pub(crate) fn resources(keys: &KeySet) {
    let span = Span::current();
    if !span.is_disabled() {
        span.record("quorum_lock.resource", field::display(shown(keys)));
    }
}

/// Names the resource of the call whose span is current.
pub(crate) fn resource(name: &[u8]) {
    let span = Span::current();
    if !span.is_disabled() {
        let name = String::from_utf8_lossy(name);
        span.record("quorum_lock.resource", field::display(Shortened(&name)));
    }
}

fn shown(keys: &KeySet) -> String {
    Shortened(&keys.to_string()).to_string()
}

/// Runs `body` with `span`'s subscriber as the thread's default: what a
/// node's thread or the watchdog's records for a span goes to the
/// subscriber that made it, even one that is not the global default.
fn with_its_subscriber<T>(span: &Span, body: impl FnOnce() -> T) -> T {
    match span.with_subscriber(|(_, dispatch)| dispatch.clone()) {
        Some(dispatch) => tracing::dispatcher::with_default(&dispatch, body),
        None => body(),
    }
}

/// The nodes, as spans name them, and the quorum: built once per manager.
#[derive(Debug, Clone)]
pub(crate) struct Nodes {
    nodes: Arc<[Node]>,
    quorum: usize,
}

impl Nodes {
    pub(crate) fn new(names: &[String], quorum: usize) -> Self {
        Self {
            nodes: names.iter().map(|name| Node::of(name)).collect(),
            quorum,
        }
    }

    /// `db.system` when every node has the same.
    fn system(&self) -> Option<&'static str> {
        let first = self.nodes.first()?.system;
        self.nodes
            .iter()
            .all(|n| n.system == first)
            .then_some(first)?
    }
}

/// A round's span, kept with the round's ballot box (`engine/ballots.rs`):
/// a node's answer read later, on the node's thread, after the round was
/// decided, is still an event of this span (marked late).
#[derive(Debug)]
pub(crate) struct Round {
    span: Span,
    /// `None` when the span is off (nothing to name, nothing cloned).
    nodes: Option<Nodes>,
    /// Set once the caller stopped waiting for answers.
    decided: AtomicBool,
}

impl Round {
    /// A round of `action` on `nodes`, a child of the current span (the
    /// call's, or the watchdog's).
    pub(crate) fn begin(nodes: &Nodes, action: &'static str) -> Self {
        let span = tracing::debug_span!(
            "round",
            quorum_lock.round = action,
            quorum_lock.quorum = nodes.quorum,
            quorum_lock.nodes = nodes.nodes.len(),
            quorum_lock.granted = field::Empty,
            quorum_lock.unanswered = field::Empty,
            quorum_lock.timed_out = field::Empty,
            db.system = nodes.system(),
        );
        let nodes = (!span.is_disabled()).then(|| nodes.clone());
        Self {
            span,
            nodes,
            decided: AtomicBool::new(false),
        }
    }

    /// A round with no span (the ballot box's own tests, not built for
    /// loom).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn none() -> Self {
        Self {
            span: Span::none(),
            nodes: None,
            decided: AtomicBool::new(false),
        }
    }

    /// Whether a span records the round (a subscriber wants it).
    pub(crate) fn is_on(&self) -> bool {
        self.nodes.is_some()
    }

    /// Node `slot` answered (on any thread).
    pub(crate) fn vote(&self, slot: usize, outcome: &NodeOutcome) {
        self.event(slot, outcome, self.decided.load(Ordering::Relaxed));
    }

    /// The caller stopped waiting, with `granted` grants and `unanswered`
    /// nodes not heard from (each one's answer, read later by its thread,
    /// is an event of this span all the same, marked late), because the
    /// round was decided or (`timed_out`) its time was up.
    pub(crate) fn decided(&self, granted: usize, unanswered: usize, timed_out: bool) {
        self.decided.store(true, Ordering::Relaxed);
        self.span.record("quorum_lock.granted", granted);
        self.span.record("quorum_lock.unanswered", unanswered);
        self.span.record("quorum_lock.timed_out", timed_out);
    }

    fn event(&self, slot: usize, outcome: &NodeOutcome, late: bool) {
        let Some(node) = self.nodes.as_ref().and_then(|n| n.nodes.get(slot)) else {
            return;
        };
        let (failure, message) = match outcome {
            NodeOutcome::Failed(error) => (Some(kind(error.kind())), Some(error)),
            NodeOutcome::TimedOut => (Some("timeout"), None),
            _ => (None, None),
        };
        let remaining = match outcome {
            NodeOutcome::Quarantined { remaining } => Some(*remaining),
            _ => None,
        };
        with_its_subscriber(&self.span, || {
            tracing::debug!(
                parent: &self.span,
                quorum_lock.node = &*node.name,
                server.address = node.address.as_deref(),
                server.port = node.port,
                db.system = node.system,
                quorum_lock.vote = vote(outcome),
                quorum_lock.late = late,
                quorum_lock.quarantine_left = remaining.map(field::debug),
                "error.type" = failure,
                error.message = message.map(field::display),
                "node answered"
            );
        });
    }
}

/// A wait's span, entered while the thread waits.
#[derive(Debug)]
pub(crate) struct Pause(EnteredSpan);

/// The wait between two attempts after the retry delay `delay` (a wait
/// that listens for a release may last longer, see `redlock/wakeups.rs`).
pub(crate) fn pause(delay: Duration) -> Pause {
    Pause(
        tracing::debug_span!(
            "wait",
            quorum_lock.delay = ?delay,
            quorum_lock.woken_by = field::Empty,
        )
        .entered(),
    )
}

/// The wait in the manager's local line (threads of this manager that
/// want the same lock take turns).
pub(crate) fn local_line() -> Pause {
    Pause(tracing::debug_span!("local_line", quorum_lock.woken_by = field::Empty).entered())
}

impl Pause {
    /// The wait ended, for this reason.
    pub(crate) fn ended(self, why: &'static str) {
        self.0.record("quorum_lock.woken_by", why);
    }
}

/// The span of a held lock: from the grant until the lease is gone
/// (released, handed over, lost or expired, and no handle left). The
/// watchdog's spans, a loss's and the explicit extends and release follow
/// from it. A root that follows from the call that took the lock (not its
/// child: a subscriber keeps a parent open while a child is, and the
/// call's span would then last as long as the lock is held).
#[derive(Debug)]
pub(crate) struct Held(Span);

impl Held {
    pub(crate) fn new(resources: &KeySet) -> Self {
        let span = tracing::info_span!(
            parent: None,
            "held",
            quorum_lock.resource = field::Empty
        );
        if !span.is_disabled() {
            span.follows_from(Span::current());
            span.record("quorum_lock.resource", field::display(shown(resources)));
        }
        Self(span)
    }
}

/// Runs `body`, a dropped guard's release (queued, not awaited), in a
/// span of its own: `release` with `quorum_lock.ended_by = "drop"`, a
/// root following from the lock's ([`Held`]), recorded by the lock's
/// subscriber whatever thread drops the guard. The release `body` sends
/// in it goes out with a round begun in it (the engine's
/// `release_detached`), whose span the node threads record each answer in.
pub(crate) fn dropped<T>(
    quorum: usize,
    held: &Held,
    resources: &KeySet,
    body: impl FnOnce() -> T,
) -> T {
    with_its_subscriber(&held.0, || {
        let span = tracing::info_span!(
            parent: None,
            "release",
            otel.kind = "client",
            quorum_lock.resource = field::Empty,
            quorum_lock.quorum = quorum,
            quorum_lock.ended_by = "drop",
        );
        if span.is_disabled() {
            return body();
        }
        span.follows_from(&held.0);
        span.record("quorum_lock.resource", field::display(shown(resources)));
        span.in_scope(body)
    })
}

/// The span of one auto-extension (a root, following from the lock's).
#[derive(Debug)]
pub(crate) struct Renewal(Span);

impl Renewal {
    pub(crate) fn begin(held: &Held, resources: &KeySet) -> Self {
        let span = with_its_subscriber(&held.0, || {
            tracing::info_span!(
                parent: None,
                "auto_extend",
                otel.kind = "client",
                otel.status_code = field::Empty,
                "error.type" = field::Empty,
                quorum_lock.resource = field::Empty,
                quorum_lock.outcome = field::Empty,
            )
        });
        if !span.is_disabled() {
            span.follows_from(&held.0);
            span.record("quorum_lock.resource", field::display(shown(resources)));
        }
        Self(span)
    }

    /// Runs `body` (a half of the extend) in this span.
    pub(crate) fn run<T>(&self, body: impl FnOnce() -> T) -> T {
        with_its_subscriber(&self.0, || self.0.in_scope(body))
    }

    /// The extend ended: extended, or `failed`.
    pub(crate) fn ended(&self, failed: Option<&Error>) {
        with_its_subscriber(&self.0, || self.record_end(failed));
    }

    fn record_end(&self, failed: Option<&Error>) {
        match failed {
            None => {
                self.0.record("quorum_lock.outcome", "extended");
                tracing::info!(parent: &self.0, quorum_lock.outcome = "extended", "extended");
            }
            Some(error) => {
                let kind = error_type(error);
                self.0.record("quorum_lock.outcome", kind);
                self.0.record("error.type", kind);
                self.0.record("otel.status_code", "ERROR");
                tracing::warn!(
                    parent: &self.0,
                    quorum_lock.outcome = kind,
                    "error.type" = kind,
                    error.message = %error,
                    "auto-extension failed"
                );
            }
        }
    }
}

/// A lock found lost (once per lock): an event on a span of its own, a
/// root following from the lock's.
pub(crate) fn lost(held: &Held, resources: &KeySet, error: &Error) {
    with_its_subscriber(&held.0, || lost_span(held, resources, error));
}

fn lost_span(held: &Held, resources: &KeySet, error: &Error) {
    let span = tracing::warn_span!(
        parent: None,
        "lost",
        otel.status_code = "ERROR",
        quorum_lock.resource = field::Empty,
        "error.type" = "lost",
    );
    if span.is_disabled() {
        return;
    }
    span.follows_from(&held.0);
    span.record("quorum_lock.resource", field::display(shown(resources)));
    tracing::warn!(
        parent: &span,
        quorum_lock.outcome = "lost",
        "error.type" = "lost",
        error.message = %error,
        "the lock may be lost"
    );
}
