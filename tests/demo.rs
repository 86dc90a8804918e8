//! The multi-process demo (`cargo run --example processes`) runs as
//! written: four processes over three real servers it starts itself, one
//! killed midway, and an exact count at the end (its own check).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::path::PathBuf;
use std::process::Command;

/// The example's binary, which `cargo test` builds beside the tests
/// (`target/<profile>/examples/`).
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile = deps.parent().and_then(|d| d.parent()).unwrap();
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: `cargo test` builds the examples (run it without target filters)",
        path.display()
    );
    path
}

#[test]
fn the_multi_process_demo_loses_no_update() {
    let out = Command::new(example("processes")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("killed"), "{text}");
    assert!(text.contains("counter: 80 (expected 80)"), "{text}");
}
