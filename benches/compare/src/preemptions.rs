//! Who switches out per lock + release, and who preempts whom: the
//! context switches of the `--wakes` block `3:8:<client>` (8 threads on
//! distinct keys, N=3) split by the kind of thread that switched out
//! (the callers, the client's own threads, the servers) and, for the
//! involuntary ones, by the kind of thread that took the CPU.
//!
//! The Targets row on switches counts the process alone (`wakes.rs`);
//! counted with its servers (`futex.rs`), quorum-lock and the floor are
//! within a few percent of each other, either side. This section shows
//! where the difference lies. It names the thread that took the CPU, not
//! the one that woke it; the likely reading: a thread woken while both
//! cores are busy may take the CPU from the thread that woke it, and that
//! switch is the waker's. A caller of the floor is
//! woken by the kernel when a server's answer arrives, so the server
//! process is the one preempted; a caller whose operation went out in a
//! batch with others' (one batch in flight per node, issue 46) is woken
//! by the thread of the client that read the batch, and the client is.
//!
//! This binary runs itself under `perf record -e sched:sched_switch` for
//! each client's block (the process's threads and the servers it starts,
//! which are its children) and reads the events back with `perf script`:
//! each names the thread that switched out, its state (`R`: it was still
//! runnable, an involuntary switch) and the thread that came in. A
//! thread's kind is read from its process and name: the block's process
//! is the one with a thread named like this program (its callers are
//! unnamed and carry the process's name, as does its main thread); its
//! other threads are the client's own (quorum-lock's node threads and
//! reader, the design floors' reader); the other processes are the
//! servers; a thread that never switched out in the recording (the
//! kernel's, the idle task) is "other". Counts are divided by the block's
//! lock + release calls, warm-up included (`CALLS_LINE`).

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::clients::Client;
use crate::futex::parse_calls;
use crate::stats::Spread;
use crate::under_tool::{each_block, failed, perf_on_block};

/// The clients counted, each in its block `3:8:<client>` (those of
/// `futex.rs`).
const CLIENTS: [Client; 4] = [
    Client::Ours,
    Client::Floor,
    Client::SharedReader,
    Client::CallersRead,
];

/// The name the kernel gives this program's threads that were not named
/// (the first 15 bytes of the executable's name).
const PROGRAM: &str = "quorum-bench";

/// The kind of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The block's caller threads (and the process's main thread).
    Callers,
    /// The client's own threads: quorum-lock's node threads and reader, a
    /// design floor's reader.
    Own,
    /// The block's servers.
    Servers,
    /// A thread outside the recording: the kernel's, the idle task.
    Other,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Callers, Kind::Own, Kind::Servers, Kind::Other];

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Callers => "callers",
            Kind::Own => "the client's own threads",
            Kind::Servers => "the servers",
            Kind::Other => "other",
        }
    }
}

/// The switches of one block, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Switches {
    /// Voluntary switches (the thread slept), by the kind that switched out.
    pub voluntary: [u64; 4],
    /// Involuntary switches, by the kind that switched out (first index)
    /// and the kind that took the CPU (second).
    pub involuntary: [[u64; 4]; 4],
}

/// One block's counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counted {
    pub client: Client,
    pub switches: Switches,
    /// Lock + release calls, the warm-up's included.
    pub calls: u64,
}

/// The counts of every run's blocks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preemptions {
    pub blocks: Vec<Counted>,
}

impl Preemptions {
    /// `client`'s per-lock figure `f` over the runs.
    fn spread(&self, client: Client, f: impl Fn(&Switches) -> u64) -> Option<Spread> {
        let values: Vec<f64> = self
            .blocks
            .iter()
            .filter(|b| b.client == client)
            .map(|b| f(&b.switches) as f64 / b.calls.max(1) as f64)
            .collect();
        Spread::of(&values)
    }

    /// The involuntary switches per lock of the threads of `kind` that
    /// `client`'s block made, whoever took the CPU.
    pub fn involuntary(&self, client: Client, kind: Kind) -> Option<Spread> {
        self.spread(client, |s| s.involuntary[kind.index()].iter().sum())
    }

    pub fn render(&self) -> String {
        let mut out = String::from(
            "Context switches per lock + release, 8 threads on distinct keys, N=3, by the \
             kind of thread that switched out and, for the involuntary ones (the thread was \
             still runnable: preempted), by the kind that took the CPU; recorded by `perf \
             record -e sched:sched_switch` over each block run alone (the process's threads \
             and its servers), divided by the block's calls, warm-up included; medians over \
             the runs. Rerun one: `perf record -e sched:sched_switch -- \
             target/release/quorum-bench --wakes 1 3:8:ours`, then `perf script -F \
             pid,tid,trace`.\n\n\
             | client | threads | voluntary | involuntary | preempted by the callers | by the \
             client's own threads | by the servers | by other | runs |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        let cell = |s: Option<Spread>| s.map_or_else(|| "-".into(), |s| format!("{:.2}", s.median));
        for client in CLIENTS {
            for kind in [Kind::Callers, Kind::Own, Kind::Servers] {
                let k = kind.index();
                let Some(voluntary) = self.spread(client, |s| s.voluntary[k]) else {
                    continue;
                };
                let by: Vec<String> = Kind::ALL
                    .iter()
                    .map(|by| cell(self.spread(client, |s| s.involuntary[k][by.index()])))
                    .collect();
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.2} | {} | {} | {} |",
                    client.short(),
                    kind.name(),
                    voluntary.median,
                    cell(self.involuntary(client, kind)),
                    by.join(" | "),
                    voluntary.runs
                );
            }
        }
        out
    }
}

/// Records every client's block `runs` times, each under `perf record`
/// in a process of its own.
pub fn measure(runs: usize) -> Result<Preemptions, String> {
    let blocks = each_block("sched", &CLIENTS, runs, record_block)?;
    Ok(Preemptions { blocks })
}

fn record_block(exe: &Path, dir: &Path, client: Client, block: &str) -> Result<Counted, String> {
    let data = dir.join(format!("perf.{}.data", client.key()));
    let args = [
        OsStr::new("record"),
        OsStr::new("-q"),
        OsStr::new("-e"),
        OsStr::new("sched:sched_switch"),
        OsStr::new("-o"),
        data.as_os_str(),
    ];
    let ran = perf_on_block(&args, exe, block)?;
    if !ran.status.success() {
        return Err(failed(
            &format!("perf record of the block {block}"),
            &ran,
            "",
        ));
    }
    let calls = parse_calls(&String::from_utf8_lossy(&ran.stdout))
        .ok_or_else(|| format!("the block {block} printed no count of its calls"))?;
    let script = Command::new("perf")
        .args(["script", "-F", "pid,tid,trace", "-i"])
        .arg(&data)
        .output()
        .map_err(|e| format!("perf script did not start: {e}"))?;
    let _ = std::fs::remove_file(&data);
    if !script.status.success() {
        return Err(failed(
            &format!("perf script of the block {block}"),
            &script,
            "",
        ));
    }
    let switches = parse_script(&String::from_utf8_lossy(&script.stdout)).ok_or_else(|| {
        format!(
            "perf record of the block {block}: no switch of this program's threads (are the \
             kernel's tracepoints open to this user?)"
        )
    })?;
    Ok(Counted {
        client,
        switches,
        calls,
    })
}

/// One `sched_switch` event of `perf script -F pid,tid,trace`.
#[derive(Debug, PartialEq)]
struct Event<'a> {
    /// The process (thread group) and thread that switched out.
    pid: u32,
    tid: u32,
    comm: &'a str,
    /// It was still runnable (`R`, `R+`): preempted.
    involuntary: bool,
    /// The thread that came in.
    next: u32,
}

/// `value` of `field=value` in `line` (up to the next ` name=`; a
/// thread's name may hold spaces).
fn field<'a>(line: &'a str, field: &str, next: &str) -> Option<&'a str> {
    let start = line.find(&format!("{field}="))? + field.len() + 1;
    let rest = &line[start..];
    Some(
        rest.find(&format!(" {next}="))
            .map_or(rest, |end| &rest[..end]),
    )
}

fn parse_event(line: &str) -> Option<Event<'_>> {
    let line = line.trim_start();
    let (ids, _) = line.split_once(' ')?;
    let (pid, tid) = ids.split_once('/')?;
    let state = field(line, "prev_state", "==>")?;
    Some(Event {
        pid: pid.parse().ok()?,
        tid: tid.parse().ok()?,
        comm: field(line, "prev_comm", "prev_pid")?,
        involuntary: state.starts_with('R'),
        next: field(line, "next_pid", "next_prio")?.parse().ok()?,
    })
}

/// The switches of a `perf script -F pid,tid,trace` text, by kind; `None`
/// when no thread of this program switched out.
fn parse_script(text: &str) -> Option<Switches> {
    let events: Vec<Event> = text.lines().filter_map(parse_event).collect();
    let program = events.iter().find(|e| e.comm == PROGRAM)?.pid;
    let kind_of = |pid: u32, comm: &str| match (pid == program, comm == PROGRAM) {
        (true, true) => Kind::Callers,
        (true, false) => Kind::Own,
        (false, _) => Kind::Servers,
    };
    let kinds: std::collections::HashMap<u32, Kind> = events
        .iter()
        .map(|e| (e.tid, kind_of(e.pid, e.comm)))
        .collect();
    let mut switches = Switches::default();
    for e in &events {
        let out = kinds[&e.tid].index();
        if e.involuntary {
            let by = kinds.get(&e.next).copied().unwrap_or(Kind::Other);
            switches.involuntary[out][by.index()] += 1;
        } else {
            switches.voluntary[out] += 1;
        }
    }
    Some(switches)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
 100/100 prev_comm=quorum-bench prev_pid=100 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
 100/101 prev_comm=quorum-bench prev_pid=101 prev_prio=120 prev_state=R+ ==> next_comm=redis-server next_pid=200 next_prio=120
 100/102 prev_comm=quorum-lock-rea prev_pid=102 prev_prio=120 prev_state=R+ ==> next_comm=quorum-bench next_pid=101 next_prio=120
 100/102 prev_comm=quorum-lock-rea prev_pid=102 prev_prio=120 prev_state=R ==> next_comm=kworker/1:1 next_pid=41 next_prio=120
 200/200 prev_comm=redis-server prev_pid=200 prev_prio=120 prev_state=S ==> next_comm=quorum-lock-rea next_pid=102 next_prio=120
 200/200 prev_comm=redis-server prev_pid=200 prev_prio=120 prev_state=R+ ==> next_comm=quorum-bench next_pid=100 next_prio=120
not an event
";

    #[test]
    fn switches_are_counted_by_who_switched_out_and_who_came_in() {
        let s = parse_script(SCRIPT).unwrap();
        let (c, o, sv, other) = (0, 1, 2, 3);
        assert_eq!(s.voluntary, [1, 0, 1, 0]);
        assert_eq!(
            s.involuntary[c],
            [0, 0, 1, 0],
            "a caller preempted by a server"
        );
        assert_eq!(
            s.involuntary[o],
            [1, 0, 0, 1],
            "the reader preempted by a caller, and by a kernel thread (other)"
        );
        assert_eq!(s.involuntary[sv], [1, 0, 0, 0]);
        assert_eq!(s.involuntary[other], [0; 4]);
        assert_eq!(parse_script("not an event\n"), None);
    }

    #[test]
    fn a_thread_name_with_spaces_is_read_whole() {
        let e = parse_event(
            " 7/8 prev_comm=a b prev_pid=8 prev_prio=120 prev_state=D ==> next_comm=c next_pid=9 next_prio=120",
        )
        .unwrap();
        assert_eq!(
            e,
            Event {
                pid: 7,
                tid: 8,
                comm: "a b",
                involuntary: false,
                next: 9
            }
        );
    }

    #[test]
    fn per_lock_figures_are_medians_over_the_runs() {
        let s = parse_script(SCRIPT).unwrap();
        let block = |calls| Counted {
            client: Client::Ours,
            switches: s,
            calls,
        };
        let p = Preemptions {
            blocks: vec![block(1), block(2), block(4)],
        };
        let own = p.involuntary(Client::Ours, Kind::Own).unwrap();
        assert_eq!((own.median, own.min, own.max, own.runs), (1.0, 0.5, 2.0, 3));
        let table = p.render();
        assert!(
            table.contains(
                "| quorum-lock release() | the client's own threads | 0.00 | 1.00 | 0.50 | 0.00 | 0.00 | 0.50 | 3 |"
            ),
            "{table}"
        );
        assert!(
            !table.contains("| floor |"),
            "a client not counted has no row"
        );
    }
}
