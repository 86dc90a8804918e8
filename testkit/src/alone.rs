//! A test alone in a process of its own, inside a test binary that holds
//! many: for a test that counts its process' threads, reads its peak
//! memory, or installs a process-wide recorder or logger. Another test of
//! the binary, running beside it, would change what it counts, or record
//! into what it installs.
//!
//! ```ignore
//! #[test]
//! fn one_timer_thread() {
//!     if !testkit::alone("watchdog::one_timer_thread") {
//!         return; // it ran, and passed, in a process of its own
//!     }
//!     // ... the test, alone in this process ...
//! }
//! ```

use std::process::Command;

/// Set, in the child process, to the name of the test it runs alone.
const ALONE_ENV: &str = "TESTKIT_ALONE";

/// Whether the calling test runs alone in its process: true in the child
/// process this function starts, where the test goes on with its body.
/// Elsewhere it runs the current test binary again with only `name`
/// selected (the test's full name in its binary, `module::test`), one
/// test thread and `TESTKIT_ALONE` set; waits for it; panics with its
/// output (indented) unless that test ran and passed; and returns false, after which
/// the test returns at once.
///
/// A `name` that selects no test fails (the child would pass with no test
/// run, silently).
pub fn alone(name: &str) -> bool {
    if std::env::var_os(ALONE_ENV).is_some_and(|running| running == name) {
        return true;
    }
    let binary = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(&binary)
        .args(["--exact", name, "--test-threads=1"])
        .env(ALONE_ENV, name)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} again: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Indented, so that a script reading the parent's output for failed
    // tests (scripts/test.sh) finds this test once, not twice.
    let said: String = stdout
        .lines()
        .chain(stderr.lines())
        .map(|line| format!("  | {line}\n"))
        .collect();
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, alone in a process of its own ({}):\n{said}",
        out.status
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_runs_in_a_child_process_and_a_wrong_name_fails() {
        let name = "alone::tests::the_test_runs_in_a_child_process_and_a_wrong_name_fails";
        if alone(name) {
            assert_eq!(std::env::var(ALONE_ENV).unwrap(), name, "in the child");
            return;
        }
        assert!(std::env::var_os(ALONE_ENV).is_none(), "in the parent");
        let wrong = std::panic::catch_unwind(|| alone("alone::tests::no_such_test"));
        assert!(wrong.is_err(), "a name that selects no test fails");
    }
}
