//! The spans and events of the `tracing` feature, captured by a small
//! subscriber of the test's own (only the `Subscriber` trait of `tracing-core`:
//! no subscriber crate), installed for the waiting thread only: the node
//! threads and the watchdog record into the subscriber of the span they
//! record for, so nothing global is needed and the test shares its
//! process. One lock's life on memory nodes: it waits for another
//! manager's holder (a release notice ends the wait), is auto-extended,
//! extended by hand and released. A dropped guard's background release
//! has a span of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use quorum_lock::{LockManager, LockOptions, MemoryBackend, RetryPolicy};
use testkit::wait_until;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// A span as the subscriber saw it.
#[derive(Debug, Clone)]
struct Seen {
    id: u64,
    name: &'static str,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
    follows: Vec<u64>,
    closed: bool,
    meta: &'static Metadata<'static>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

/// An event: its span and fields (with its message as `message`).
#[derive(Debug, Clone)]
struct Told {
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Log {
    spans: BTreeMap<u64, Seen>,
    events: Vec<Told>,
}

/// The capturing subscriber: cheap to clone, all clones share the log.
#[derive(Clone, Default)]
struct Capture {
    log: Arc<Mutex<Log>>,
    next: Arc<AtomicU64>,
}

thread_local! {
    /// The spans this thread is in, innermost last.
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

fn current() -> Option<u64> {
    ENTERED.with(|entered| entered.borrow().last().copied())
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let parent = match span.parent() {
            Some(parent) => Some(parent.into_u64()),
            None if span.is_contextual() => current(),
            None => None,
        };
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let seen = Seen {
            id,
            name: span.metadata().name(),
            parent,
            fields,
            follows: Vec::new(),
            closed: false,
            meta: span.metadata(),
        };
        self.log.lock().unwrap().spans.insert(id, seen);
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut log = self.log.lock().unwrap();
        if let Some(seen) = log.spans.get_mut(&span.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        let mut log = self.log.lock().unwrap();
        if let Some(seen) = log.spans.get_mut(&span.into_u64()) {
            seen.follows.push(follows.into_u64());
        }
    }

    fn event(&self, event: &Event<'_>) {
        let parent = match event.parent() {
            Some(parent) => Some(parent.into_u64()),
            None if event.is_contextual() => current(),
            None => None,
        };
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.log
            .lock()
            .unwrap()
            .events
            .push(Told { parent, fields });
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|entered| entered.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|entered| {
            let mut entered = entered.borrow_mut();
            if let Some(at) = entered.iter().rposition(|id| *id == span.into_u64()) {
                entered.remove(at);
            }
        });
    }

    fn current_span(&self) -> Current {
        let log = self.log.lock().unwrap();
        match current().and_then(|id| log.spans.get(&id)) {
            Some(seen) => Current::new(Id::from_u64(seen.id), seen.meta),
            None => Current::none(),
        }
    }

    fn try_close(&self, span: Id) -> bool {
        // Spans are never reused here (ids only grow): a close is noted,
        // which tells a span that outlives its clones from one still open.
        if let Some(seen) = self.log.lock().unwrap().spans.get_mut(&span.into_u64()) {
            seen.closed = true;
        }
        true
    }
}

impl Capture {
    fn spans(&self, name: &str) -> Vec<Seen> {
        let log = self.log.lock().unwrap();
        log.spans
            .values()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    fn children(&self, parent: u64, name: &str) -> Vec<Seen> {
        self.spans(name)
            .into_iter()
            .filter(|s| s.parent == Some(parent))
            .collect()
    }

    fn events_of(&self, span: u64) -> Vec<Told> {
        let log = self.log.lock().unwrap();
        log.events
            .iter()
            .filter(|e| e.parent == Some(span))
            .cloned()
            .collect()
    }

    /// The votes recorded under round `round`: (node, vote).
    fn votes(&self, round: u64) -> Vec<(String, String)> {
        let mut votes: Vec<_> = self
            .events_of(round)
            .into_iter()
            .map(|e| {
                (
                    e.fields["quorum_lock.node"].clone(),
                    e.fields["quorum_lock.vote"].clone(),
                )
            })
            .collect();
        votes.sort();
        votes
    }
}

/// A dispatcher for `capture`, to install for one thread.
///
/// While a single dispatcher exists, `tracing-core` asks only the
/// thread's default subscriber whether a callsite met for the first time
/// is of interest, and caches the answer: a callsite first met on a
/// thread without `capture` (the other holder's) would stay off for
/// good. A second dispatcher, kept for the whole process, makes it ask
/// every dispatcher.
fn dispatch(capture: &Capture) -> Dispatch {
    static SECOND: OnceLock<Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| Dispatch::new(Capture::default()));
    Dispatch::new(capture.clone())
}

fn nodes() -> Vec<MemoryBackend> {
    (0..3)
        .map(|i| MemoryBackend::new(format!("trace-{i}")))
        .collect()
}

fn manager(nodes: &[MemoryBackend]) -> LockManager {
    LockManager::builder()
        .nodes(nodes.iter().cloned())
        // Only a release notice ends the wait this soon.
        .retry(
            RetryPolicy::new()
                .delay(Duration::from_secs(20))
                .jitter(Duration::from_millis(1)),
        )
        .build()
        .unwrap()
}

/// A lock that waited for another process's holder, was auto-extended,
/// extended and released: its spans, their fields and their links.
#[test]
fn a_lock_that_waited_was_extended_and_released() {
    let nodes = nodes();
    let (theirs, ours) = (manager(&nodes), manager(&nodes));
    let capture = Capture::default();
    let dispatch = dispatch(&capture);
    let held = theirs.lock("orders:42").unwrap();
    // Held on every node before our call tries: a round returns at a
    // quorum and leaves the last node's part to its thread (seen in CI:
    // our first attempt was granted by the node theirs had not reached).
    assert!(theirs.flush(Duration::from_secs(10)));
    // The other holder lets go once our call waits between attempts.
    let holder = {
        let capture = capture.clone();
        thread::spawn(move || {
            assert!(wait_until(Duration::from_secs(20), || !capture
                .spans("wait")
                .is_empty()));
            held.release().unwrap();
        })
    };
    let ttl = Duration::from_millis(900);
    tracing::dispatcher::with_default(&dispatch, || {
        let options = LockOptions::new().ttl(ttl).auto_extend(true);
        let mut guard = ours.lock_with("orders:42", &options).unwrap();
        holder.join().unwrap();
        // The watchdog extends at about a third of the TTL.
        assert!(wait_until(Duration::from_secs(20), || capture
            .spans("auto_extend")
            .iter()
            .any(|s| s.field("quorum_lock.outcome") == Some("extended"))));
        guard.extend(ttl).unwrap();
        guard.release().unwrap();
    });
    // Votes read on node threads after a round was decided are recorded
    // too: every round has one event per node once the nodes are done.
    assert!(ours.flush(Duration::from_secs(10)));

    // The call: its span, fields and outcome.
    let locks = capture.spans("lock");
    assert_eq!(locks.len(), 1, "{locks:#?}");
    let lock = &locks[0];
    assert_eq!(lock.field("quorum_lock.resource"), Some("\"orders:42\""));
    assert_eq!(lock.field("quorum_lock.quorum"), Some("2"));
    assert_eq!(lock.field("quorum_lock.outcome"), Some("acquired"));
    assert_eq!(lock.field("otel.kind"), Some("client"));
    assert_eq!(lock.field("otel.status_code"), None);
    let attempts: u32 = lock.field("quorum_lock.attempts").unwrap().parse().unwrap();
    assert!(attempts >= 2, "{lock:#?}");

    // Its rounds: refused by every node while the other held it, granted
    // by every node at the end; one event per node each.
    let rounds = capture.children(lock.id, "round");
    assert!(rounds.len() >= 2, "{rounds:#?}");
    for round in &rounds {
        assert_eq!(round.field("quorum_lock.round"), Some("acquire"));
        assert_eq!(round.field("quorum_lock.quorum"), Some("2"));
        assert_eq!(capture.votes(round.id).len(), 3, "{round:#?}");
    }
    let all = |vote: &str| {
        (0..3)
            .map(|i| (format!("trace-{i}"), vote.to_owned()))
            .collect::<Vec<_>>()
    };
    assert_eq!(capture.votes(rounds[0].id), all("refused"));
    // The last round: granted by a quorum. The holder's release reaches
    // the nodes one by one, and the first release notice wakes our call:
    // its attempt may meet a node that has not applied the release yet,
    // which refuses (seen in CI). Every node still answers, with a grant
    // or that refusal.
    let last = rounds.last().unwrap();
    let votes = capture.votes(last.id);
    assert_eq!(votes.len(), 3, "{votes:?}");
    let grants = votes.iter().filter(|(_, vote)| vote == "granted").count();
    assert!(grants >= 2, "{votes:?}");
    assert!(
        votes
            .iter()
            .all(|(_, vote)| vote == "granted" || vote == "refused"),
        "{votes:?}"
    );
    // Decided at a quorum: the third answer may come after.
    let granted: usize = last.field("quorum_lock.granted").unwrap().parse().unwrap();
    assert!(granted >= 2, "{last:#?}");

    // The wait between attempts, ended by the other holder's release.
    let waits = capture.children(lock.id, "wait");
    assert!(!waits.is_empty(), "{waits:#?}");
    assert_eq!(
        waits.last().unwrap().field("quorum_lock.woken_by"),
        Some("release_notice"),
        "{waits:#?}"
    );

    // The lock while held: a span of its own, following from the call
    // (the call's span ends with the call), closed once released.
    let helds: Vec<_> = capture
        .spans("held")
        .into_iter()
        .filter(|s| s.follows == vec![lock.id])
        .collect();
    assert_eq!(helds.len(), 1, "{helds:#?}");
    let held = &helds[0];
    assert_eq!(held.parent, None);
    assert!(held.closed, "{held:#?}");
    assert_eq!(held.field("quorum_lock.resource"), Some("\"orders:42\""));

    // The watchdog's extends: spans of their own, following from it, each
    // with its round and an event.
    let renewals = capture.spans("auto_extend");
    let renewal = renewals
        .iter()
        .find(|s| s.field("quorum_lock.outcome") == Some("extended"))
        .unwrap();
    assert_eq!(renewal.parent, None);
    assert_eq!(renewal.follows, vec![held.id]);
    let round = &capture.children(renewal.id, "round")[0];
    assert_eq!(round.field("quorum_lock.round"), Some("extend"));
    assert_eq!(capture.votes(round.id).len(), 3);
    assert!(
        capture
            .events_of(renewal.id)
            .iter()
            .any(|e| e.fields["message"] == "extended")
    );

    // The extend and the release by hand, following from it.
    for (name, outcome, action) in [
        ("extend", "extended", "extend"),
        ("release", "released", "release"),
    ] {
        let spans = capture.spans(name);
        assert_eq!(spans.len(), 1, "{spans:#?}");
        let span = &spans[0];
        assert_eq!(span.field("quorum_lock.outcome"), Some(outcome));
        assert_eq!(span.field("quorum_lock.resource"), Some("\"orders:42\""));
        assert_eq!(span.follows, vec![held.id]);
        let rounds = capture.children(span.id, "round");
        assert_eq!(rounds.len(), 1, "{rounds:#?}");
        assert_eq!(rounds[0].field("quorum_lock.round"), Some(action));
        // Every node answers; every node that granted the acquire grants
        // this too (a node that refused it holds nothing of ours: what it
        // answers is the backend's business).
        let votes = capture.votes(rounds[0].id);
        let refused_before = capture
            .votes(last.id)
            .into_iter()
            .filter(|(_, vote)| vote == "refused")
            .map(|(node, _)| node)
            .collect::<Vec<_>>();
        assert_eq!(votes.len(), 3, "{votes:?}");
        for (node, vote) in &votes {
            if !refused_before.contains(node) {
                assert_eq!(vote, "granted", "{name}: {votes:?}");
            }
        }
    }

    // Nothing lost, and no field carries a token.
    assert!(capture.spans("lost").is_empty());
    let log = capture.log.lock().unwrap();
    let names = log
        .spans
        .values()
        .flat_map(|s| s.fields.keys())
        .chain(log.events.iter().flat_map(|e| e.fields.keys()));
    for name in names {
        assert!(!name.contains("token"), "{name}");
    }
}

/// A dropped guard: its background release is a `release` span of its
/// own (`quorum_lock.ended_by` = `drop`), a root following from the
/// lock's, recorded by the lock's subscriber though the guard is dropped
/// on a thread without one; under it the release round, with each node's
/// answer (read by the node threads after the drop returned). The
/// resource is named, the token never is.
#[test]
fn a_dropped_guard_releases_in_a_span_of_its_own() {
    let nodes = nodes();
    let locks = manager(&nodes);
    let capture = Capture::default();
    let dispatch = dispatch(&capture);
    let guard = tracing::dispatcher::with_default(&dispatch, || locks.try_lock("carts:9").unwrap());
    // Held on every node (a round returns at a quorum).
    assert!(locks.flush(Duration::from_secs(10)));
    let token = guard.token().as_bytes().to_vec();
    let holder = nodes[2].holder(b"carts:9").unwrap();
    assert!(holder.starts_with(&token), "{holder:?}");
    thread::spawn(move || drop(guard)).join().unwrap();
    assert!(locks.flush(Duration::from_secs(10)));

    let held = &capture.spans("held")[0];
    let releases = capture.spans("release");
    assert_eq!(releases.len(), 1, "{releases:#?}");
    let release = &releases[0];
    assert_eq!(release.field("quorum_lock.ended_by"), Some("drop"));
    assert_eq!(release.field("quorum_lock.resource"), Some("\"carts:9\""));
    assert_eq!(release.field("quorum_lock.quorum"), Some("2"));
    assert_eq!(release.parent, None);
    assert_eq!(release.follows, vec![held.id]);
    let rounds = capture.children(release.id, "round");
    assert_eq!(rounds.len(), 1, "{rounds:#?}");
    assert_eq!(rounds[0].field("quorum_lock.round"), Some("release"));
    let all_granted: Vec<_> = (0..3)
        .map(|i| (format!("trace-{i}"), "granted".to_owned()))
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || capture.votes(rounds[0].id)
            == all_granted),
        "{:?}",
        capture.votes(rounds[0].id)
    );
    for node in &nodes {
        assert_eq!(node.holder(b"carts:9"), None);
    }

    // No field is named for the token, and none shows it (in full, or
    // as its `Display` begins).
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    let log = capture.log.lock().unwrap();
    let fields = log
        .spans
        .values()
        .flat_map(|s| &s.fields)
        .chain(log.events.iter().flat_map(|e| &e.fields));
    for (name, value) in fields {
        assert!(!name.contains("token"), "{name}");
        assert!(!value.contains(&hex[..8]), "{name} = {value}");
    }
}

/// A failed call: `error.type` and `otel.status_code` on its span, and
/// each node's failure, with why, on its round.
#[test]
fn a_failed_try_lock_says_why() {
    let nodes = nodes();
    let locks = manager(&nodes);
    let capture = Capture::default();
    let dispatch = dispatch(&capture);
    nodes[1].set_down(true);
    nodes[2].set_down(true);
    tracing::dispatcher::with_default(&dispatch, || {
        let error = locks.try_lock("jobs:7").unwrap_err();
        assert!(error.is_no_quorum(), "{error}");
    });
    assert!(locks.flush(Duration::from_secs(10)));
    let calls = capture.spans("try_lock");
    assert_eq!(calls.len(), 1, "{calls:#?}");
    let call = &calls[0];
    assert_eq!(call.field("quorum_lock.resource"), Some("\"jobs:7\""));
    assert_eq!(call.field("quorum_lock.outcome"), Some("no_quorum"));
    assert_eq!(call.field("error.type"), Some("no_quorum"));
    assert_eq!(call.field("otel.status_code"), Some("ERROR"));
    assert_eq!(call.field("quorum_lock.attempts"), Some("1"));
    let round = &capture.children(call.id, "round")[0];
    let events = capture.events_of(round.id);
    assert_eq!(events.len(), 3, "{events:#?}");
    for event in events {
        let node = &event.fields["quorum_lock.node"];
        let vote = &event.fields["quorum_lock.vote"];
        if node == "trace-0" {
            assert_eq!(vote, "granted");
        } else {
            assert_eq!(vote, "failed", "{event:#?}");
            assert_eq!(event.fields["error.type"], "unreachable", "{event:#?}");
            assert!(event.fields["error.message"].contains("down"), "{event:#?}");
        }
        // Memory nodes have no address.
        assert!(!event.fields.contains_key("server.address"));
    }
}

/// A lock found lost: the extend fails (`error.type` = `lost`), and the
/// loss is an event on a span of its own, following from the lock's.
#[test]
fn a_lost_lock_has_a_span_of_its_own() {
    let nodes = nodes();
    let locks = manager(&nodes);
    let capture = Capture::default();
    let dispatch = dispatch(&capture);
    tracing::dispatcher::with_default(&dispatch, || {
        let mut guard = locks.try_lock("mail:3").unwrap();
        nodes[0].set_down(true);
        nodes[1].set_down(true);
        assert!(guard.extend(Duration::from_secs(5)).unwrap_err().is_lost());
    });
    assert!(locks.flush(Duration::from_secs(10)));
    let held = &capture.spans("held")[0];
    let extend = &capture.spans("extend")[0];
    assert_eq!(extend.field("quorum_lock.outcome"), Some("lost"));
    assert_eq!(extend.field("error.type"), Some("lost"));
    assert_eq!(extend.field("otel.status_code"), Some("ERROR"));
    assert_eq!(extend.follows, vec![held.id]);
    let losses = capture.spans("lost");
    assert_eq!(losses.len(), 1, "{losses:#?}");
    let lost = &losses[0];
    assert_eq!(lost.parent, None);
    assert_eq!(lost.follows, vec![held.id]);
    assert_eq!(lost.field("quorum_lock.resource"), Some("\"mail:3\""));
    assert_eq!(lost.field("error.type"), Some("lost"));
    let events = capture.events_of(lost.id);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert!(
        events[0].fields["error.message"].contains("lost"),
        "{events:#?}"
    );
}

/// A semaphore's acquire: its span names the semaphore, and each slot it
/// tries is a `try_lock` inside it.
#[test]
fn a_permit_is_an_acquire_with_a_try_per_slot() {
    let nodes = nodes();
    let locks = manager(&nodes);
    let uploads = locks.semaphore("uploads", 2).unwrap();
    let capture = Capture::default();
    let dispatch = dispatch(&capture);
    tracing::dispatcher::with_default(&dispatch, || {
        uploads.try_acquire().unwrap().release().unwrap();
    });
    let acquires = capture.spans("acquire");
    assert_eq!(acquires.len(), 1, "{acquires:#?}");
    let acquire = &acquires[0];
    assert_eq!(acquire.field("quorum_lock.resource"), Some("\"uploads\""));
    assert_eq!(acquire.field("quorum_lock.outcome"), Some("acquired"));
    let slots = capture.children(acquire.id, "try_lock");
    assert_eq!(slots.len(), 1, "{slots:#?}");
    assert_eq!(slots[0].field("quorum_lock.outcome"), Some("acquired"));
}
