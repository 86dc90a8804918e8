//! futex calls per lock + release, 8 threads on distinct keys, N=3:
//! the wake-ups issue 46 counts (at most 2.5 per lock), for quorum-lock,
//! the floor and the two design floors; and, on the same blocks, the
//! context switches of the process and its servers together.
//!
//! A thread that wakes another makes a `FUTEX_WAKE` call, and one that
//! sleeps until woken a `FUTEX_WAIT`: counted, they are the thread
//! hand-offs per lock that the machine's noise barely moves. This binary
//! runs itself under `perf stat` for the `--wakes` block of each client
//! (`3:8:ours`, `3:8:floor`, `3:8:shared-reader`), with two counters on
//! the kernel's tracepoint `syscalls:sys_enter_futex`: one filtered to
//! the wake operations (`FUTEX_WAKE`, `FUTEX_WAKE_OP`,
//! `FUTEX_WAKE_BITSET`, private or not), one with every call. `perf stat`
//! counts the process's threads and the children it starts: the block's
//! three servers too, which wake a handful of times in a block (67
//! of the 31,925 `FUTEX_WAKE`s in a `perf record` of one block, counted
//! by thread name: 0.2%). Each count is divided by the block's lock + release
//! calls, the warm-up's included (the block prints them, `CALLS_LINE`).
//! The blocks run in an order that turns run by run (`paired::order`).
//!
//! The third counter, `context-switches`, counts the switches of every
//! thread of the process and of its servers. The Targets row on switches
//! counts the process's alone (`wakes.rs`): a thread woken by the kernel
//! when a server's answer comes (the floor's) preempts the server, and
//! that switch is the server's; one woken by another thread of the client
//! (the engine's, the design floors') preempts the client. Counted
//! together, neither side can be charged to the other.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;

use crate::clients::Client;
use crate::stats::Spread;
use crate::under_tool::{each_block, failed, perf_on_block};
use crate::wakes::CALLS_LINE;

/// The clients counted, each in its block `3:8:<client>`.
const CLIENTS: [Client; 4] = [
    Client::Ours,
    Client::Floor,
    Client::SharedReader,
    Client::CallersRead,
];

/// The wake operations, with and without `FUTEX_PRIVATE_FLAG` (128):
/// `FUTEX_WAKE` (1), `FUTEX_WAKE_OP` (5), `FUTEX_WAKE_BITSET` (10).
const WAKE_FILTER: &str = "op == 1 || op == 129 || op == 5 || op == 133 || op == 10 || op == 138";

/// One block's counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counted {
    pub client: Client,
    /// `FUTEX_WAKE*` calls.
    pub wakes: u64,
    /// Every futex call (waits, wakes and the rest).
    pub all: u64,
    /// Context switches of the process and its servers (`None`: perf
    /// could not count them).
    pub switches: Option<u64>,
    /// Lock + release calls, the warm-up's included.
    pub calls: u64,
}

impl Counted {
    fn per_lock(&self, n: u64) -> f64 {
        n as f64 / self.calls.max(1) as f64
    }
}

/// The counts of every run's blocks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Futex {
    pub blocks: Vec<Counted>,
}

impl Futex {
    /// `client`'s wake-ups per lock over the runs.
    pub fn wakes(&self, client: Client) -> Option<Spread> {
        self.spread(client, |b| Some(b.per_lock(b.wakes)))
    }

    /// `client`'s futex calls per lock over the runs.
    pub fn all(&self, client: Client) -> Option<Spread> {
        self.spread(client, |b| Some(b.per_lock(b.all)))
    }

    /// `client`'s context switches per lock, its servers' included, over
    /// the runs.
    pub fn switches(&self, client: Client) -> Option<Spread> {
        self.spread(client, |b| Some(b.per_lock(b.switches?)))
    }

    fn spread(&self, client: Client, f: impl Fn(&Counted) -> Option<f64>) -> Option<Spread> {
        let values: Vec<f64> = self
            .blocks
            .iter()
            .filter(|b| b.client == client)
            .filter_map(f)
            .collect();
        Spread::of(&values)
    }

    pub fn render(&self) -> String {
        let mut out = String::from(
            "futex calls per lock + release, 8 threads on distinct keys, N=3, counted by \
             `perf stat` on the tracepoint `syscalls:sys_enter_futex` over each block run \
             alone (the process's threads and its servers), divided by the block's calls, \
             warm-up included; median (min-max) over the runs. Rerun one: `perf stat -e \
             syscalls:sys_enter_futex --filter 'op == 129' target/release/quorum-bench \
             --wakes 1 3:8:ours`, divided by the calls it prints. The last column counts \
             `perf stat -e context-switches` over the same blocks: the process's threads and \
             its servers' together.\n\n\
             | client | wake-ups (`FUTEX_WAKE*`) per lock | futex calls per lock | runs | \
             context switches per lock, the servers' included |\n\
             |---|---|---|---|---|\n",
        );
        for client in CLIENTS {
            let (Some(w), Some(a)) = (self.wakes(client), self.all(client)) else {
                continue;
            };
            let switches = self.switches(client).map_or_else(
                || "not counted".into(),
                |s| format!("{:.2} ({:.2}-{:.2})", s.median, s.min, s.max),
            );
            let _ = writeln!(
                out,
                "| {} | {:.2} ({:.2}-{:.2}) | {:.2} ({:.2}-{:.2}) | {} | {switches} |",
                client.short(),
                w.median,
                w.min,
                w.max,
                a.median,
                a.min,
                a.max,
                w.runs
            );
        }
        out
    }
}

/// Counts every client's block `runs` times, each under `perf stat` in a
/// process of its own.
pub fn measure(runs: usize) -> Result<Futex, String> {
    let blocks = each_block("futex", &CLIENTS, runs, count_block)?;
    Ok(Futex { blocks })
}

fn count_block(exe: &Path, dir: &Path, client: Client, block: &str) -> Result<Counted, String> {
    let out = dir.join(format!("perf.{}", client.key()));
    let (futex, wake, switches) = ("syscalls:sys_enter_futex", WAKE_FILTER, "context-switches");
    let mut args: Vec<&OsStr> = ["stat", "-x,", "-o"].map(OsStr::new).to_vec();
    args.push(out.as_os_str());
    args.extend(["-e", futex, "--filter", wake, "-e", futex, "-e", switches].map(OsStr::new));
    let ran = perf_on_block(&args, exe, block)?;
    let stats = std::fs::read_to_string(&out).unwrap_or_default();
    if !ran.status.success() {
        return Err(failed(
            &format!("perf stat of the block {block}"),
            &ran,
            &stats,
        ));
    }
    let (wakes, all) = parse_stat(&stats).ok_or_else(|| {
        format!(
            "perf stat of the block {block}: no two futex counts (are the kernel's \
             tracepoints open to this user?): {}",
            stats.lines().rev().take(2).collect::<Vec<_>>().join(" / ")
        )
    })?;
    let calls = parse_calls(&String::from_utf8_lossy(&ran.stdout))
        .ok_or_else(|| format!("the block {block} printed no count of its calls"))?;
    Ok(Counted {
        client,
        wakes,
        all,
        switches: parse_switches(&stats),
        calls,
    })
}

/// The two counts of `perf stat -x,` output (the filtered one first), in
/// the order the events were given.
pub fn parse_stat(text: &str) -> Option<(u64, u64)> {
    let mut counts = text
        .lines()
        .filter(|l| l.contains("syscalls:sys_enter_futex"))
        .map(|l| l.split(',').next()?.trim().parse::<u64>().ok());
    Some((counts.next()??, counts.next()??))
}

/// The `context-switches` count of `perf stat -x,` output.
pub fn parse_switches(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.split(',').nth(2) == Some("context-switches"))
        .and_then(|l| l.split(',').next()?.trim().parse().ok())
}

/// The calls a block run alone printed ([`CALLS_LINE`]).
pub fn parse_calls(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(CALLS_LINE))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&c| c > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_and_calls_are_read_from_perf_and_the_block() {
        let stat = "# started on Tue Dec  1 08:07:48 2026\n\n\
                    31793,,syscalls:sys_enter_futex,1102649725,100.00,,\n\
                    63508,,syscalls:sys_enter_futex,1102649725,100.00,,\n";
        assert_eq!(parse_stat(stat), Some((31793, 63508)));
        assert_eq!(
            parse_stat("<not counted>,,syscalls:sys_enter_futex,0,100.00,,\n"),
            None,
            "a counter perf could not read is no count"
        );
        assert_eq!(
            parse_stat("31793,,syscalls:sys_enter_futex,1,100.00,,\n"),
            None
        );
        let with_switches = format!("{stat}91234,,context-switches,1102649725,100.00,,\n");
        assert_eq!(parse_stat(&with_switches), Some((31793, 63508)));
        assert_eq!(parse_switches(&with_switches), Some(91234));
        assert_eq!(parse_switches(stat), None);
        assert_eq!(
            parse_switches("<not supported>,,context-switches,0,100.00,,\n"),
            None
        );
        let printed = format!("| table |\n{CALLS_LINE}16400\n");
        assert_eq!(parse_calls(&printed), Some(16400));
        assert_eq!(parse_calls("| table |\n"), None);
        assert_eq!(parse_calls(&format!("{CALLS_LINE}0\n")), None);
    }

    #[test]
    fn per_lock_counts_are_medians_over_the_runs() {
        let b = |client, wakes, all, switches| Counted {
            client,
            wakes,
            all,
            switches,
            calls: 1000,
        };
        let f = Futex {
            blocks: vec![
                b(Client::Ours, 1900, 3800, Some(5300)),
                b(Client::Floor, 10, 3900, None),
                b(Client::Ours, 2100, 4000, Some(5100)),
                b(Client::Ours, 2000, 3900, Some(5200)),
            ],
        };
        let w = f.wakes(Client::Ours).unwrap();
        assert_eq!((w.median, w.min, w.max, w.runs), (2.0, 1.9, 2.1, 3));
        assert_eq!(f.all(Client::Floor).unwrap().median, 3.9);
        assert!(f.wakes(Client::SharedReader).is_none());
        assert!(f.render().contains(
            "| quorum-lock release() | 2.00 (1.90-2.10) | 3.90 (3.80-4.00) | 3 | 5.20 (5.10-5.30) |"
        ));
        assert!(f.switches(Client::Floor).is_none(), "not counted");
        assert!(f.render().contains("| 1 | not counted |"), "{}", f.render());
    }
}
