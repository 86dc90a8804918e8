//! The tool on a Sentinel node (`redis+sentinel://`): `run` locks
//! through the master the sentinels name, `status` shows the holder
//! there, `break --force` releases it there, and `doctor` checks that
//! master without failing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use common::{HANG, code, output, stdout, tool_on};
use testkit::{SentinelSet, wait_until};

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
    let holder = tool_on(&urls, &["run", "job", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let held = || code(&output(&mut tool_on(&urls, &["status", "job"]))) == 0;
    assert!(wait_until(HANG, held), "the lock was never held");
    let text = stdout(&output(&mut tool_on(&urls, &["status", "job"])));
    assert!(text.contains("job: held by "), "{text}");
    assert!(set.master().get(b"job").is_some(), "on the master");
    let broken = output(&mut tool_on(&urls, &["break", "--force", "job"]));
    assert_eq!(code(&broken), 0, "{broken:?}");
    assert_eq!(set.master().get(b"job"), None, "broken on the master");
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(holder.id().to_string())
        .status();
    let _ = common::wait_for(holder);
}
