//! The examples a user would copy run, as written, in the test suite:
//! each one's `main` checks what it shows and returns an error otherwise.
//! (The quickstart, long_job, health and fenced_write examples are run by
//! hand or need Redis; `cargo test` builds them all.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "../../examples/election.rs"]
mod election;
#[path = "../../examples/inspection.rs"]
mod inspection;
#[path = "../../examples/semaphore.rs"]
mod semaphore;
#[path = "../../examples/sets.rs"]
mod sets;
#[path = "../../examples/worker_under_faults.rs"]
mod worker_under_faults;

#[test]
fn sets_example() {
    sets::main().unwrap();
}

#[test]
fn semaphore_example() {
    semaphore::main().unwrap();
}

#[test]
fn election_example() {
    election::main().unwrap();
}

#[test]
fn inspection_example() {
    inspection::main().unwrap();
}

#[test]
fn worker_under_faults_example() {
    worker_under_faults::main().unwrap();
}
