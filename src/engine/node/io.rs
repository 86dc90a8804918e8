//! Every call a node's state makes to its backend, one small function per
//! kind of call, each with panics contained: a backend that panics fails
//! the call, never the node's thread.
//!
//! Nothing else in the engine calls the backend (the engine's start and
//! its rounds read the name and the recovery count through here too), so
//! a change of the `Backend` trait's shape lands here.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use crate::backend::{
    Answers, Backend, BackendError, BackendErrorKind, Holding, InFlight, NoticeWaker, Op,
    ReleaseListener, Reply, ServerInfo, Sources,
};

/// The backend's name for reports and logs ([`Backend::describe`]); a
/// backend that panics there is named by its place, node `index`.
pub(crate) fn describe(backend: &dyn Backend, index: usize) -> String {
    catch_unwind(AssertUnwindSafe(|| backend.describe())).unwrap_or_else(|_| format!("node{index}"))
}

/// The backend's bound on one call ([`Backend::call_timeout`]); a panic:
/// no bound (the node's thread then runs every call, no caller does).
pub(crate) fn call_timeout(backend: &dyn Backend) -> Option<Duration> {
    catch_unwind(AssertUnwindSafe(|| backend.call_timeout())).unwrap_or(None)
}

/// How many recoveries the backend knows of ([`Probe::recoveries`]); 0
/// for a backend without a probe, or whose count panics.
///
/// [`Probe::recoveries`]: crate::backend::Probe::recoveries
pub(crate) fn recoveries(backend: &dyn Backend) -> u64 {
    catch_unwind(AssertUnwindSafe(|| {
        backend.probe().map_or(0, |probe| probe.recoveries())
    }))
    .unwrap_or(0)
}

/// One result per op, and the server (or servers) that gave them, when known.
pub(super) type Results = (Vec<Result<Reply, BackendError>>, Sources);

/// Sends a batch without reading its answers ([`finish`] reads them).
pub(super) fn send(backend: &dyn Backend, ops: &[Op<'_>]) -> Box<dyn InFlight> {
    catch_unwind(AssertUnwindSafe(|| backend.send(ops))).unwrap_or_else(|_| Box::new(Panicked))
}

/// Whether a sent batch's answers have begun to arrive, waiting at most
/// until `until` (a panic counts as arrived: [`finish`] then says how).
pub(super) fn wait(in_flight: &mut dyn InFlight, until: Instant) -> bool {
    catch_unwind(AssertUnwindSafe(|| in_flight.wait(until))).unwrap_or(true)
}

/// Reads a sent batch's answers, with the ops it was sent with.
///
/// This, [`contained`] and [`counted`] are inlined, as are
/// `Sent::read` and `Batch::spread`: the answers carry the server's
/// identity by value (about 150 bytes), and each layer left as a call
/// moved them once more (about 1.5% of the instructions per lock +
/// release at N=1, 1% at N=3, counted with callgrind).
#[inline]
pub(super) fn finish(in_flight: Box<dyn InFlight>, ops: &[Op<'_>]) -> Results {
    contained(ops.len(), || in_flight.finish(ops))
}

/// Runs a batch and reads its answers in one call (release retries).
pub(super) fn call(backend: &dyn Backend, ops: &[Op<'_>]) -> Results {
    contained(ops.len(), || backend.send(ops).finish(ops))
}

/// Asks the server who it is, through the backend's probe: a probe of a
/// down node, or a look at its settings. A backend without a probe knows
/// nothing and contacts nobody: an empty answer, so a probe of it always
/// succeeds and a look at its settings finds none.
pub(super) fn server_info(backend: &dyn Backend) -> Result<ServerInfo, BackendError> {
    catch_unwind(AssertUnwindSafe(|| {
        backend
            .probe()
            .map_or_else(|| Ok(ServerInfo::default()), |probe| probe.server_info())
    }))
    .unwrap_or_else(|_| Err(panicked()))
}

/// What `key` holds on the server.
pub(super) fn inspect(backend: &dyn Backend, key: &[u8]) -> Result<Option<Holding>, BackendError> {
    catch_unwind(AssertUnwindSafe(|| match backend.inspector() {
        Some(inspector) => inspector.inspect(key),
        None => Err(BackendError::new(
            BackendErrorKind::Config,
            format!(
                "{}: this backend does not support inspection (Backend::inspector)",
                backend.describe()
            ),
        )),
    }))
    .unwrap_or_else(|_| Err(panicked()))
}

/// The backend's release listener, if it has one.
pub(super) fn listener(backend: &dyn Backend) -> Option<Box<dyn ReleaseListener>> {
    catch_unwind(AssertUnwindSafe(|| backend.release_listener())).unwrap_or(None)
}

/// A listener's call that panicked.
pub(super) struct ListenerPanicked;

/// Subscribes `listener` for exactly `keys`.
pub(super) fn listen(
    listener: &mut dyn ReleaseListener,
    keys: &[&[u8]],
) -> Result<Result<(), BackendError>, ListenerPanicked> {
    catch_unwind(AssertUnwindSafe(|| listener.listen(keys))).map_err(|_| ListenerPanicked)
}

/// The notices that have arrived, without waiting for more (the node
/// thread waits on its queue, and looks here between jobs).
pub(super) fn take(
    listener: &mut dyn ReleaseListener,
) -> Result<Result<Vec<Vec<u8>>, BackendError>, ListenerPanicked> {
    catch_unwind(AssertUnwindSafe(|| listener.receive())).map_err(|_| ListenerPanicked)
}

/// Whether `listener` lets its notices be taken inside its waker (a
/// panic: no).
pub(super) fn may_receive_in_wake(listener: &dyn ReleaseListener) -> bool {
    catch_unwind(AssertUnwindSafe(|| listener.may_receive_in_wake())).unwrap_or(false)
}

/// Whether `listener` will ring `waker` at each arrival (a panic: no).
pub(super) fn wake_on_arrival(listener: &mut dyn ReleaseListener, waker: NoticeWaker) -> bool {
    catch_unwind(AssertUnwindSafe(|| listener.wake_on_arrival(waker))).unwrap_or(false)
}

/// A send that panicked: every op failed.
struct Panicked;

impl InFlight for Panicked {
    fn finish(self: Box<Self>, ops: &[Op<'_>]) -> Answers {
        Answers::new(vec![Err(panicked()); ops.len()], None)
    }
}

fn panicked() -> BackendError {
    BackendError::new(BackendErrorKind::Panicked, "the backend panicked")
}

/// The answers to `n` ops that `call` gets from a backend, with a panic
/// contained (every op failed) and the result count checked.
#[inline]
fn contained(n: usize, call: impl FnOnce() -> Answers) -> Results {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(answers) => {
            let (results, sources) = answers.into_sources();
            let sources = match sources {
                // A per-answer list as long as the results, or none at all.
                Sources::Each(each) if each.len() != n => Sources::One(None),
                sources => sources,
            };
            (counted(results, n), sources)
        }
        Err(_) => (vec![Err(panicked()); n], Sources::One(None)),
    }
}

/// `results` made exactly `n` long: missing ones (or extra ones) are a
/// protocol error of the backend.
#[inline]
fn counted(
    mut results: Vec<Result<Reply, BackendError>>,
    n: usize,
) -> Vec<Result<Reply, BackendError>> {
    if results.len() != n {
        let e = BackendError::new(
            BackendErrorKind::Protocol,
            format!("backend returned {} results for {n} ops", results.len()),
        );
        results.truncate(n);
        results.resize(n, Err(e));
    }
    results
}
