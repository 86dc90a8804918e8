//! The `metrics` feature: a scripted run on in-memory nodes, recorded by a
//! recorder of this test's own, checked name by name against what the run
//! did and against `health()`. (One test, alone in a process of its own,
//! `testkit::alone`: the recorder is global.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use quorum_lock::{LockManager, LockOptions, RetryPolicy};
use testkit::memory_nodes;

/// Every metric by its name and labels (`name{k=v,...}`).
#[derive(Default)]
struct Recorded {
    counters: Mutex<HashMap<String, Arc<Value>>>,
    gauges: Mutex<HashMap<String, Arc<Value>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Value(AtomicU64);

impl CounterFn for Value {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Value {
    fn increment(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::SeqCst)) + value);
    }
    fn decrement(&self, value: f64) {
        GaugeFn::increment(self, -value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn name(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    if labels.is_empty() {
        key.name().to_owned()
    } else {
        format!("{}{{{}}}", key.name(), labels.join(","))
    }
}

#[derive(Clone, Default)]
struct TestRecorder(Arc<Recorded>);

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut all = self.0.counters.lock().unwrap();
        Counter::from_arc(Arc::clone(all.entry(name(key)).or_default()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut all = self.0.gauges.lock().unwrap();
        Gauge::from_arc(Arc::clone(all.entry(name(key)).or_default()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut all = self.0.histograms.lock().unwrap();
        Histogram::from_arc(Arc::clone(all.entry(name(key)).or_default()))
    }
}

impl TestRecorder {
    fn counter(&self, name: &str) -> u64 {
        let all = self.0.counters.lock().unwrap();
        all.get(name).map_or(0, |v| v.0.load(Ordering::SeqCst))
    }
    fn gauge(&self, name: &str) -> Option<f64> {
        let all = self.0.gauges.lock().unwrap();
        all.get(name)
            .map(|v| f64::from_bits(v.0.load(Ordering::SeqCst)))
    }
    fn samples(&self, name: &str) -> usize {
        let all = self.0.histograms.lock().unwrap();
        all.get(name).map_or(0, |s| s.0.lock().unwrap().len())
    }
}

#[test]
fn a_scripted_run_records_the_documented_names_and_counts() {
    if !testkit::alone("metrics::a_scripted_run_records_the_documented_names_and_counts") {
        return;
    }
    let recorder = TestRecorder::default();
    metrics::set_global_recorder(recorder.clone()).expect("the only recorder");
    let nodes = memory_nodes(3);
    let build = || {
        LockManager::builder()
            .nodes(nodes.iter().cloned())
            .retry(RetryPolicy::none())
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());

    // Two locks taken, one contended attempt, one extend, three guards
    // ended (release, drop, forget).
    let mut first = a.try_lock("job").unwrap();
    assert!(b.try_lock("job").unwrap_err().is_contended());
    first.extend(Duration::from_secs(5)).unwrap();
    first.release().unwrap();
    drop(a.lock_with("other", &LockOptions::new()).unwrap());
    b.try_lock("third").unwrap().forget();
    assert!(a.flush(Duration::from_secs(10)) && b.flush(Duration::from_secs(10)));

    // A node that stops answering is marked down after two failed round
    // trips. A round decided by nodes 0 and 2 may leave node 1's part to
    // its thread, which can batch several rounds' ops into one round trip:
    // flushing after each lock makes each one (at least) one round trip.
    nodes[1].set_down(true);
    for _ in 0..3 {
        let _ = a.try_lock("while-down");
        assert!(a.flush(Duration::from_secs(10)));
    }

    let counted = |field: &str| recorder.counter(&format!("quorum_lock_{field}_total"));
    let (ha, hb) = (a.health().locks, b.health().locks);
    assert_eq!(counted("acquired"), ha.acquired + hb.acquired);
    assert_eq!(
        counted("acquired"),
        6,
        "job, other, third, and three while node 1 is down"
    );
    assert_eq!(counted("contended"), ha.contended + hb.contended);
    assert_eq!(counted("contended"), 1);
    assert_eq!(counted("extends_ok"), 1);
    assert_eq!(counted("lost"), 0);
    assert_eq!(
        recorder.samples("quorum_lock_acquire_seconds{outcome=acquired}"),
        6
    );
    assert_eq!(
        recorder.samples("quorum_lock_acquire_seconds{outcome=contended}"),
        1
    );
    assert_eq!(
        recorder.counter("quorum_lock_acquire_attempts_total{outcome=acquired}"),
        6,
        "one round each"
    );
    // The guards of "job", "other", "third" and the three "while-down"
    // ones (each dropped at once) have ended.
    assert_eq!(recorder.samples("quorum_lock_hold_seconds"), 6);
    assert!(recorder.samples("quorum_lock_node_round_trip_seconds{node=mem-0}") >= 6);
    assert_eq!(recorder.gauge("quorum_lock_node_up{node=mem-0}"), Some(1.0));
    assert_eq!(recorder.gauge("quorum_lock_node_up{node=mem-1}"), Some(0.0));
    let state = a.health().nodes[1].state.to_string();
    assert!(state.contains("down"), "health() agrees: {state}");
}
