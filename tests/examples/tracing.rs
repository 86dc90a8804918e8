//! `examples/tracing.rs` runs as written. Alone in a process of its own
//! (`testkit::alone`), as the example installs the process's global
//! subscriber.
#![allow(clippy::unwrap_used)] // tests fail by panicking

#[path = "../../examples/tracing.rs"]
mod tracing_example;

#[test]
fn tracing_example() {
    if !testkit::alone("tracing::tracing_example") {
        return;
    }
    tracing_example::main().unwrap();
}
