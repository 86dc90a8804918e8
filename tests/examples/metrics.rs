//! `examples/metrics.rs` runs as written: its `main` checks that the
//! counters it prints agree with `health()`. Alone in a process of its own
//! (`testkit::alone`), as the example installs the process's global
//! recorder.
#![allow(clippy::unwrap_used)] // tests fail by panicking

#[path = "../../examples/metrics.rs"]
mod metrics_example;

#[test]
fn metrics_example() {
    if !testkit::alone("metrics::metrics_example") {
        return;
    }
    metrics_example::main().unwrap();
}
