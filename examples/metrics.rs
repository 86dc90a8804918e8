//! The library's metrics through the `metrics` facade (feature `metrics`).
//!
//! quorum-lock records through whatever recorder the program installs:
//! in production an exporter crate's (for instance
//! `metrics-exporter-prometheus`); here a small recorder of the example's
//! own that keeps counters and gauges, so the example needs no exporter.
//! A few locks are taken on three in-memory nodes, one node goes down,
//! and the counters are printed in Prometheus' text form and checked
//! against `health()`.
//!
//! ```text
//! cargo run --example metrics --features metrics
//! ```
#![allow(clippy::print_stdout)] // an example talks to its user

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use quorum_lock::{LockManager, MemoryBackend, RetryPolicy};

/// `pub(crate)`: `tests/examples/metrics.rs` runs it too.
pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Once per process, before the first manager is built. (The metrics
    // carry no per-manager label: with several managers in one process
    // the counters are their sum, while each `health()` counts its own.)
    let recorder = Registry::default();
    metrics::set_global_recorder(recorder.clone())
        .map_err(|_| "a metrics recorder was already installed")?;

    let nodes: Vec<MemoryBackend> = (0..3)
        .map(|i| MemoryBackend::new(format!("mem-{i}")))
        .collect();
    let locks = LockManager::builder()
        .nodes(nodes.iter().cloned())
        .retry(RetryPolicy::none())
        .build()?;

    for job in ["report", "invoice", "backup"] {
        locks.try_lock(job)?.release()?;
    }
    let held = locks.try_lock("backup")?;
    let refused = locks.try_lock("backup"); // held by this thread: refused
    drop(held);
    if refused.is_ok() {
        return Err("a second holder of one lock".into());
    }
    // A node that stops answering is marked down after failed round trips:
    // the locks go on with the other two, and the node's gauge says so.
    nodes[1].set_down(true);
    // (A round decided by the two live nodes may leave the third's part to
    // its thread; flushing after each lock makes each its own round trip.)
    for _ in 0..3 {
        locks.try_lock("while-down")?.release()?;
        if !locks.flush(Duration::from_secs(10)) {
            return Err("queued work did not finish".into());
        }
    }

    print!("{}", recorder.render());
    let acquired = recorder.value("quorum_lock_acquired_total");
    let health = locks.health();
    println!("health(): {} acquired", health.locks.acquired);
    if acquired != health.locks.acquired as f64 {
        return Err(format!(
            "the counter says {acquired}, health() {}",
            health.locks.acquired
        )
        .into());
    }
    if recorder.value("quorum_lock_node_up{node=\"mem-1\"}") != 0.0 {
        return Err("the node that went down is not reported down".into());
    }
    println!("ok");
    Ok(())
}

/// Counters and gauges by name and labels, in Prometheus' text form
/// (`name{label="value"}`); histograms are not kept.
#[derive(Clone, Default)]
struct Registry(Arc<Mutex<BTreeMap<String, Arc<Value>>>>);

/// A counter's count, or a gauge's value as `f64` bits.
#[derive(Default)]
struct Value {
    bits: AtomicU64,
    is_gauge: bool,
}

impl Registry {
    fn entry(&self, key: &Key, is_gauge: bool) -> Arc<Value> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}=\"{}\"", l.key(), l.value()))
            .collect();
        let name = if labels.is_empty() {
            key.name().to_owned()
        } else {
            format!("{}{{{}}}", key.name(), labels.join(","))
        };
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let value = all.entry(name).or_insert_with(|| {
            Arc::new(Value {
                bits: AtomicU64::new(if is_gauge { 0f64.to_bits() } else { 0 }),
                is_gauge,
            })
        });
        Arc::clone(value)
    }

    fn value(&self, name: &str) -> f64 {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(name).map_or(0.0, |v| v.get())
    }

    fn render(&self) -> String {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter()
            .map(|(name, value)| format!("{name} {}\n", value.get()))
            .collect()
    }
}

impl Value {
    fn get(&self) -> f64 {
        let bits = self.bits.load(Ordering::Relaxed);
        if self.is_gauge {
            f64::from_bits(bits)
        } else {
            bits as f64
        }
    }
}

impl CounterFn for Value {
    fn increment(&self, by: u64) {
        self.bits.fetch_add(by, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.bits.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Value {
    fn increment(&self, by: f64) {
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + by).to_bits())
            });
    }
    fn decrement(&self, by: f64) {
        GaugeFn::increment(self, -by);
    }
    fn set(&self, value: f64) {
        self.bits.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl Recorder for Registry {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.entry(key, false))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.entry(key, true))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}
