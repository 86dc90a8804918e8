//! `examples/metrics.rs` runs as written: its `main` checks that the
//! counters it prints agree with `health()`. Its own test binary, as the
//! example installs the process's global recorder.
#![allow(clippy::unwrap_used)] // tests fail by panicking

#[path = "../examples/metrics.rs"]
mod metrics_example;

#[test]
fn metrics_example() {
    metrics_example::main().unwrap();
}
