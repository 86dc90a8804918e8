//! The tool on a Sentinel node (`redis+sentinel://`): `run` locks
//! through the master the sentinels name, `status` shows the holder
//! there, `break --force` releases it there, and `doctor` checks that
//! master without failing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use common::{code, output, stdout, tool_on};
use testkit::SentinelSet;

#[test]
fn run_status_break_and_doctor_work_through_a_sentinel_node() {
    let set = SentinelSet::start();
    let urls = [set.url()];
    let doctor = output(&mut tool_on(&urls, &["doctor"]));
    let text = stdout(&doctor);
    assert!(!text.contains("verdict: fail"), "{text}");
    assert_ne!(code(&doctor), 3, "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", set.master().port())),
        "doctor names the master the sentinels name: {text} {}",
        common::stderr(&doctor)
    );
    common::run_status_break(&urls, |key| set.master().get(key));
}
