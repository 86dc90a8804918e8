//! Instructions per lock + release, counted by callgrind: quorum-lock's
//! engine against its `RedisBackend` called directly, 1 thread at N=1 and
//! N=3 (the target: at most 1.3x the bare backend's), and, for
//! what a user would run instead, against the floor (plain
//! `redis::Connection`s, the `redis` crate's encoding and parsing) and
//! rslock (its current-thread runtime runs on the caller's thread, so its
//! work is counted as ours is).
//!
//! `perf stat -e instructions` is "not supported" on this kind of VM, and
//! callgrind counts every instruction a thread runs whatever else the
//! machine does. The engine's path still varies a little with timing
//! (which thread reads a late answer, whether a reply is in before a
//! read): over four runs of the same binary quorum-lock's count moved by
//! under 0.1% (N=1: 21,178-21,196 per lock; N=3: 52,400-52,450) and the
//! backend's by under 0.01%, so one run of each block is the figure. This
//! binary runs itself under `valgrind --tool=callgrind` for the `--wakes`
//! block of each client (`N:1:ours`, `N:1:backend`, `N:1:floor`,
//! `N:1:rslock`), collecting only inside `Locker::lock_release` (the
//! process's set-up and the servers left out; the other threads of
//! quorum-lock and of rslock ran under 1% of the caller's count,
//! `--separate-threads=yes`),
//! and divides the instructions counted by the calls made (warm-up
//! included, the same in every block). The servers' own work is not
//! counted: it is the same commands in each.
//!
//! What runs per second rather than per lock is counted as many times
//! more often as valgrind slows the block down: the backend's settings
//! look (`INFO` every 500 ms on a busy connection) is 2.2% of
//! quorum-lock's count at N=1 and 2.9% of the bare backend's (a build
//! with the look every hour: 19,775 and 8,322 per lock against 20,224 and
//! 8,567), which leaves their ratio as it is.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::clients::Client;
use crate::under_tool::{failed, in_scratch};

/// The function callgrind collects inside, and whose calls divide the
/// count: every client's lock + release (`<X as Locker>::lock_release`).
const LOCK_RELEASE: &str = "Locker>::lock_release";

/// The blocks counted: (nodes, client).
const BLOCKS: [(usize, Client); 8] = [
    (1, Client::Ours),
    (1, Client::Backend),
    (1, Client::Floor),
    (1, Client::Rslock),
    (3, Client::Ours),
    (3, Client::Backend),
    (3, Client::Floor),
    (3, Client::Rslock),
];

/// The clients quorum-lock's count is divided by, in the order shown.
const AGAINST: [Client; 3] = [Client::Backend, Client::Floor, Client::Rslock];

/// One block's count.
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    pub n: usize,
    pub client: Client,
    /// Instructions inside `lock_release`, all calls together.
    pub instructions: u64,
    /// Calls of `lock_release` (warm-up included).
    pub calls: u64,
}

impl Counted {
    pub fn per_lock(&self) -> f64 {
        self.instructions as f64 / self.calls.max(1) as f64
    }
}

/// The counts of every block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Instructions {
    pub blocks: Vec<Counted>,
}

impl Instructions {
    /// Instructions per lock of `client` at N=`n`.
    pub fn per_lock(&self, n: usize, client: Client) -> Option<f64> {
        self.blocks
            .iter()
            .find(|b| b.n == n && b.client == client)
            .map(Counted::per_lock)
    }

    /// quorum-lock's instructions per lock over the bare backend's, at N=`n`.
    pub fn vs_backend(&self, n: usize) -> Option<f64> {
        self.vs(n, Client::Backend)
    }

    /// quorum-lock's instructions per lock over `client`'s, at N=`n`.
    pub fn vs(&self, n: usize, client: Client) -> Option<f64> {
        Some(self.per_lock(n, Client::Ours)? / self.per_lock(n, client)?)
    }

    pub fn render(&self) -> String {
        let mut out = String::from(
            "Instructions per lock + release, 1 thread, counted by callgrind inside \
             `Locker::lock_release` (one run of each block: the counts move by under 0.1% between runs). Rerun one: \
             `valgrind --tool=callgrind --toggle-collect='*Locker>::lock_release' \
             target/release/quorum-bench --wakes 1 1:1:ours`, its total divided by the calls.\n\n\
             | N | client | instructions per lock + release | calls |\n|---|---|---|---|\n",
        );
        for b in &self.blocks {
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {} |",
                b.n,
                b.client.short(),
                b.per_lock(),
                b.calls
            );
        }
        for n in [1, 3] {
            let ratios: Vec<String> = AGAINST
                .iter()
                .filter_map(|&c| {
                    Some(format!(
                        "quorum-lock / {} = {:.2}x",
                        c.short(),
                        self.vs(n, c)?
                    ))
                })
                .collect();
            if !ratios.is_empty() {
                let _ = writeln!(out, "\nN={n}: {}", ratios.join(", "));
            }
        }
        out
    }
}

/// Counts every block, each under callgrind in a process of its own.
pub fn measure() -> Result<Instructions, String> {
    in_scratch("callgrind", count_blocks)
}

fn count_blocks(exe: &Path, dir: &Path) -> Result<Instructions, String> {
    let mut blocks = Vec::new();
    for (n, client) in BLOCKS {
        let out = dir.join(format!("callgrind.{n}.{}", client.key()));
        let ran = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(format!("--toggle-collect=*{LOCK_RELEASE}"))
            .arg(exe)
            .args(["--wakes", "1", &format!("{n}:1:{}", client.key())])
            .output()
            .map_err(|e| format!("valgrind (Debian's package valgrind) did not start: {e}"))?;
        if !ran.status.success() {
            let what = format!("callgrind of the block {n}:1:{}", client.key());
            return Err(failed(&what, &ran, ""));
        }
        let text =
            std::fs::read_to_string(&out).map_err(|e| format!("reading {}: {e}", out.display()))?;
        let (instructions, calls) = parse(&text, LOCK_RELEASE)
            .ok_or_else(|| format!("{}: no total or no calls of lock_release", out.display()))?;
        blocks.push(Counted {
            n,
            client,
            instructions,
            calls,
        });
    }
    Ok(Instructions { blocks })
}

/// The total instructions of a callgrind output file (`summary:` or
/// `totals:`) and the calls of the functions whose name contains `name`
/// (the `calls=` line after each call to them).
pub fn parse(text: &str, name: &str) -> Option<(u64, u64)> {
    let mut names = std::collections::HashMap::new();
    let mut total = None;
    let mut calls = 0u64;
    let mut counting = false;
    for line in text.lines() {
        if let Some(v) = line
            .strip_prefix("summary:")
            .or_else(|| line.strip_prefix("totals:"))
        {
            total = v.split_whitespace().next().and_then(|v| v.parse().ok());
            continue;
        }
        if counting && let Some(v) = line.strip_prefix("calls=") {
            calls += v.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        counting = false;
        let Some(rest) = line
            .strip_prefix("cfn=")
            .or_else(|| line.strip_prefix("fn="))
        else {
            continue;
        };
        // `(id) name` the first time, `(id)` after.
        let (id, named) = match rest.split_once(") ") {
            Some((id, named)) => (id.trim_start_matches('('), Some(named)),
            None => (rest.trim_start_matches('(').trim_end_matches(')'), None),
        };
        if let Some(named) = named {
            names.insert(id.to_owned(), named.contains(name));
        }
        counting = line.starts_with("cfn=") && names.get(id).copied().unwrap_or(false);
    }
    Some((total?, calls)).filter(|&(_, c)| c > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_calls_are_read_from_a_callgrind_file() {
        let text = "events: Ir\nsummary: 1000\n\nfn=(1) main\n3 5\n\
                    cfn=(2) <x::Ours as x::Locker>::lock_release\ncalls=20 70\n4 900\n\
                    fn=(3) other\ncfn=(2)\ncalls=5 70\n5 95\n\
                    cfn=(4) something_else\ncalls=7 1\n1 1\n\
                    fn=(2)\n70 3\ntotals: 1000\n";
        assert_eq!(parse(text, "Locker>::lock_release"), Some((1000, 25)));
        assert_eq!(parse(text, "not_there"), None);
        assert_eq!(parse("fn=(1) a\n", "a"), None, "no total");
    }

    #[test]
    fn the_ratio_is_ours_over_the_backend_at_the_same_n() {
        let count = |n, client, instructions| Counted {
            n,
            client,
            instructions,
            calls: 100,
        };
        let i = Instructions {
            blocks: vec![
                count(1, Client::Ours, 2_000_000),
                count(1, Client::Backend, 1_000_000),
                count(1, Client::Floor, 4_000_000),
                count(3, Client::Ours, 3_000_000),
            ],
        };
        assert_eq!(i.per_lock(1, Client::Ours), Some(20_000.0));
        assert_eq!(i.vs_backend(1), Some(2.0));
        assert_eq!(i.vs(1, Client::Floor), Some(0.5));
        assert_eq!(i.vs(1, Client::Rslock), None, "no rslock block");
        assert_eq!(i.vs_backend(3), None, "no backend block at N=3");
        let shown = i.render();
        assert!(
            shown.contains(
                "N=1: quorum-lock / RedisBackend direct = 2.00x, quorum-lock / floor = 0.50x\n"
            ),
            "{shown}"
        );
        assert!(!shown.contains("N=3:"), "no ratio without its two blocks");
    }
}
