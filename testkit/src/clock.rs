//! Stepped server clocks: an `LD_PRELOAD` shim of our own
//! (`testkit/shim/clockstep.c`) that adds an offset to every clock a
//! server reads, and the offset as a type.
//!
//! [`RedisServer::start_with_clock`](crate::RedisServer::start_with_clock)
//! starts a server with the shim;
//! [`RedisServer::set_clock_offset`](crate::RedisServer::set_clock_offset)
//! steps its wall clock and its monotonic clock together (`CLOCK_REALTIME`,
//! `CLOCK_MONOTONIC`, their `_COARSE` forms, `gettimeofday` and `time`),
//! forward or back, by writing the offset file the shim reads.
//!
//! The shim is compiled on first use, with `cc -shared -fPIC ... -ldl`,
//! into the directory of the running test binary's build (`target/<profile>/
//! clockstep-<hash of the source>/`, kept for the next run), or a temporary
//! directory when that is not writable. A missing `cc` fails the test,
//! with how to install it: the clock tests are never skipped. (Libfaketime
//! is no substitute: it aborts with Debian's redis-server 7, see the
//! shim's header.)

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable through which the shim finds its offset file.
pub const CLOCK_FILE_ENV: &str = "QUORUM_LOCK_CLOCK_FILE";

/// The shim's source, compiled by [`shim`].
const SOURCE: &str = include_str!("../shim/clockstep.c");

/// How long a server may go on reading its previous offset after the file
/// was replaced (the shim reads the file again at most every 2 ms).
pub const REREAD: Duration = Duration::from_millis(2);

const NANOS_PER_SEC: i128 = 1_000_000_000;

/// How far a server's clocks are set from the real ones: ahead (forward)
/// or behind (back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ClockOffset {
    nanos: i64,
}

impl ClockOffset {
    /// The real time.
    pub const ZERO: Self = Self { nanos: 0 };

    /// `by` ahead of the real clocks (saturating at about 292 years).
    pub fn ahead(by: Duration) -> Self {
        Self {
            nanos: i64::try_from(by.as_nanos()).unwrap_or(i64::MAX),
        }
    }

    /// `by` behind the real clocks.
    pub fn behind(by: Duration) -> Self {
        Self {
            nanos: -Self::ahead(by).nanos,
        }
    }

    /// `nanos` ahead (negative: behind).
    pub const fn from_nanos(nanos: i64) -> Self {
        Self { nanos }
    }

    /// This offset moved by `by` (saturating).
    pub fn plus(self, by: Self) -> Self {
        Self {
            nanos: self.nanos.saturating_add(by.nanos),
        }
    }

    /// Signed nanoseconds (positive: ahead).
    pub fn as_nanos(self) -> i64 {
        self.nanos
    }

    /// How far from the real clocks, whichever way.
    pub fn magnitude(self) -> Duration {
        Duration::from_nanos(self.nanos.unsigned_abs())
    }

    /// Whether the clocks are ahead of the real ones.
    pub fn is_ahead(self) -> bool {
        self.nanos > 0
    }

    /// The step from `self` to `to`: how far the clocks move, forward
    /// (positive) or back, when the offset changes.
    pub fn step_to(self, to: Self) -> Self {
        Self {
            nanos: to.nanos.saturating_sub(self.nanos),
        }
    }

    /// `time` seen with this offset, as Unix nanoseconds (`time` is Unix
    /// nanoseconds on the real clock).
    pub fn apply(self, unix_nanos: i128) -> i128 {
        unix_nanos + i128::from(self.nanos)
    }
}

impl fmt::Display for ClockOffset {
    /// `+1.5s`, `-8ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = match self.nanos {
            n if n > 0 => "+",
            n if n < 0 => "-",
            _ => "",
        };
        write!(f, "{sign}{:?}", self.magnitude())
    }
}

/// The compiled shim (built once per test process).
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(build)
}

/// Compiles [`SOURCE`] unless a build of this very source is there.
fn build() -> PathBuf {
    // The source's hash names the directory: an edited shim is rebuilt.
    let hash = SOURCE.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let name = format!("clockstep-{hash:016x}");
    let dir = build_root().join(&name);
    let lib = dir.join("libclockstep.so");
    if lib.is_file() {
        return lib;
    }
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {} for the clock shim: {e}", dir.display()));
    // Another test process may build it at the same time: each writes its
    // own files and renames the library into place (atomic).
    let pid = std::process::id();
    let source = dir.join(format!("clockstep-{pid}.c"));
    let built = dir.join(format!("libclockstep-{pid}.so"));
    std::fs::write(&source, SOURCE)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", source.display()));
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&built)
        .arg(&source)
        .arg("-ldl")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "`cc` is needed to build the clock shim (testkit/shim/clockstep.c) for the \
                 clock-step tests, and could not be run ({e}): install a C compiler, e.g. \
                 `apt-get install -y build-essential`"
            )
        });
    let _ = std::fs::remove_file(&source);
    assert!(
        output.status.success(),
        "cc could not build the clock shim (testkit/shim/clockstep.c): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&built, &lib).unwrap_or_else(|e| {
        panic!(
            "cannot move the clock shim into place ({}): {e}",
            lib.display()
        )
    });
    lib
}

/// `target/<profile>` of the running test binary (it runs from
/// `target/<profile>/deps/`), when writable; else a temporary directory.
fn build_root() -> PathBuf {
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        let deps = exe.parent()?;
        let profile = if deps.file_name().is_some_and(|n| n == "deps") {
            deps.parent()?
        } else {
            deps
        };
        let probe = profile.join(format!(".clockstep-probe-{}", std::process::id()));
        std::fs::write(&probe, b"").ok()?;
        let _ = std::fs::remove_file(&probe);
        Some(profile.to_path_buf())
    });
    from_exe.unwrap_or_else(|| std::env::temp_dir().join("quorum-lock-testkit"))
}

/// Writes `offset` to the shim's `file` (a new file renamed over it, so the
/// shim never reads half a number).
pub(crate) fn write_offset(file: &Path, offset: ClockOffset) {
    let tmp = file.with_extension("next");
    std::fs::write(&tmp, format!("{}\n", offset.as_nanos()))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, file)
        .unwrap_or_else(|e| panic!("cannot replace {}: {e}", file.display()));
}

/// Whether the process `pid` has the shim mapped (it honoured
/// `LD_PRELOAD`; a static binary would not).
pub(crate) fn loaded_in(pid: u32) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let shim = shim().to_string_lossy();
    maps.lines().any(|line| line.ends_with(shim.as_ref()))
}

/// Unix time in nanoseconds on the real clock.
pub(crate) fn unix_nanos() -> i128 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i128::try_from(since.as_nanos()).unwrap_or(i128::MAX)
}

/// Microseconds of `TIME` (seconds, microseconds) as Unix nanoseconds.
pub(crate) fn time_reply_nanos(reply: &[String]) -> i128 {
    let part = |i: usize| -> i128 {
        reply
            .get(i)
            .and_then(|s| s.parse::<i128>().ok())
            .unwrap_or_else(|| panic!("TIME answered {reply:?}"))
    };
    part(0) * NANOS_PER_SEC + part(1) * 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RedisServer;

    #[test]
    fn offsets_step_both_ways_and_print_signed() {
        let ahead = ClockOffset::ahead(Duration::from_millis(1500));
        let behind = ClockOffset::behind(Duration::from_millis(8));
        assert_eq!(ahead.to_string(), "+1.5s");
        assert_eq!(behind.to_string(), "-8ms");
        assert_eq!(ClockOffset::ZERO.to_string(), "0ns");
        assert!(ahead.is_ahead() && !behind.is_ahead());
        assert_eq!(
            behind.step_to(ahead),
            ClockOffset::ahead(Duration::from_millis(1508))
        );
        assert_eq!(
            ahead.step_to(ClockOffset::ZERO),
            ClockOffset::behind(Duration::from_millis(1500))
        );
        assert_eq!(behind.magnitude(), Duration::from_millis(8));
        assert_eq!(ahead.apply(0), 1_500_000_000);
        assert_eq!(ahead.plus(behind), ClockOffset::from_nanos(1_492_000_000));
    }

    /// A C program that prints every clock the shim steps (and one it
    /// does not), run without and with the shim: the stepped clocks move
    /// by the offset, forward and back; the other does not.
    #[test]
    fn the_shim_steps_every_clock_redis_reads_and_no_other() {
        let dir = crate::TempDir::new("clockstep-probe");
        let probe_c = dir.path().join("probe.c");
        std::fs::write(
            &probe_c,
            r#"
#include <stdio.h>
#include <sys/time.h>
#include <time.h>
static long long ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
int main(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    printf("%lld %lld %lld %lld %lld %lld %lld\n", ns(CLOCK_REALTIME), ns(CLOCK_MONOTONIC),
        ns(CLOCK_REALTIME_COARSE), ns(CLOCK_MONOTONIC_COARSE),
        (long long)tv.tv_sec * 1000000000LL + (long long)tv.tv_usec * 1000LL,
        (long long)time(NULL) * 1000000000LL, ns(CLOCK_BOOTTIME));
    return 0;
}
"#,
        )
        .unwrap();
        let probe = dir.path().join("probe");
        let status = Command::new("cc")
            .arg("-o")
            .arg(&probe)
            .arg(&probe_c)
            .status()
            .expect("cc");
        assert!(status.success());
        let offset_file = dir.path().join("offset");
        let run = |offset: Option<ClockOffset>| -> Vec<i128> {
            let mut cmd = Command::new(&probe);
            if let Some(offset) = offset {
                write_offset(&offset_file, offset);
                cmd.env("LD_PRELOAD", shim())
                    .env(CLOCK_FILE_ENV, &offset_file);
            }
            let out = cmd.output().expect("run the probe");
            assert!(out.status.success());
            String::from_utf8(out.stdout)
                .unwrap()
                .split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect()
        };
        for offset in [
            ClockOffset::ahead(Duration::from_secs(100)),
            ClockOffset::behind(Duration::from_secs(100)),
        ] {
            let before = run(None);
            let stepped = run(Some(offset));
            let after = run(None);
            let names = [
                "REALTIME",
                "MONOTONIC",
                "REALTIME_COARSE",
                "MONOTONIC_COARSE",
                "gettimeofday",
                "time",
            ];
            for (i, name) in names.iter().enumerate() {
                // Real time passes between the runs: well under a second
                // here, against a 100 s step (`time` has 1 s resolution).
                let moved = stepped[i] - before[i];
                let expected = i128::from(offset.as_nanos());
                assert!(
                    (moved - expected).abs() < 2 * NANOS_PER_SEC && after[i] >= before[i],
                    "{name} moved {moved} ns with the shim at {offset}"
                );
            }
            let boottime = stepped[6] - before[6];
            assert!(
                boottime.abs() < 2 * NANOS_PER_SEC,
                "BOOTTIME is not stepped, it moved {boottime} ns"
            );
        }
    }

    /// A real server with the shim: its `TIME` follows the offset both
    /// ways, a key expires early when its clock steps past the key's TTL,
    /// and a backward step makes its uptime negative (what FAULTS.md says).
    #[test]
    fn a_server_with_the_shim_expires_keys_on_its_stepped_clock() {
        let server = RedisServer::start_with_clock();
        let ahead = ClockOffset::ahead(Duration::from_secs(30));
        server.set_clock_offset(ahead);
        let (real, seen) = server.time_now();
        assert!(
            (seen - ahead.apply(real)).abs() < NANOS_PER_SEC,
            "TIME {seen} against real {real} at {ahead}"
        );
        server.set(b"short", b"v");
        let _: () = server.cmd(redis::cmd("PEXPIRE").arg("short").arg(60_000));
        assert!(server.get(b"short").is_some());
        server.set_clock_offset(ClockOffset::ahead(Duration::from_secs(91)));
        assert_eq!(server.get(b"short"), None, "expired by the 61 s step");
        server.set_clock_offset(ClockOffset::behind(Duration::from_secs(60)));
        let info: String = server.cmd(redis::cmd("INFO").arg("server"));
        let uptime = info
            .lines()
            .find_map(|l| l.trim_end().strip_prefix("uptime_in_seconds:"))
            .unwrap();
        assert!(
            uptime.starts_with('-'),
            "uptime after a 60 s step back: {uptime}"
        );
        assert_eq!(
            server.clock_offset(),
            ClockOffset::behind(Duration::from_secs(60))
        );
    }
}
