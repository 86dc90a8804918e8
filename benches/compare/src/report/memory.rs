//! The memory section: the client's resident memory per held lock, at each
//! number of locks asked for. Apart: it is the one section about space,
//! not time.

use std::fmt::Write as _;

use super::cells::clip;
use super::results::Results;

/// Memory per held lock.
pub fn memory(results: &Results) -> String {
    let mut out = String::new();
    if results.memory.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "#### Memory per held lock (quorum-lock, N=3 real redis-servers: the client's side only)\n"
    );
    let _ = writeln!(
        out,
        "| locks held | RSS delta / locks held | notes |\n|---:|---:|---|"
    );
    for (asked, r) in &results.memory {
        match r {
            Ok((bytes, held)) => {
                let _ = writeln!(
                    out,
                    "| {held} | {bytes:.0} bytes | {} |",
                    if held < asked {
                        format!("{asked} asked, the rest failed or ran out of time")
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(out, "| {asked} | - | failed: {} |", clip(e, 80));
            }
        }
    }
    let _ = writeln!(
        out,
        "\nIncludes the `LockGuard` itself ({} bytes, kept in a `Vec`) and the allocator's overhead.\n",
        std::mem::size_of::<quorum_lock::LockGuard>()
    );
    out
}
