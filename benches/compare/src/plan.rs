//! The command line and the counts and time bounds it selects.

use std::path::PathBuf;
use std::time::Duration;

use crate::clients::{Client, Settings};
use crate::paired::Rounds;

pub const USAGE: &str = "\
quorum-bench: quorum-lock vs the round-trip floor and the redlock, redsync
and rslock crates, on redis-server nodes started on loopback.

Usage: cargo run --release -p quorum-lock-bench -- [OPTIONS]

Options:
  --fencing-cost [R]  only: the cost of fencing tokens, paired and interleaved, R runs (default 5)
  --scripts-cost [R]  only: the server's own commands against Lua scripts for lock + extend +
                    release, paired, R runs (default 5); on a server that has them (Valkey 9.1)
  --rw-cost [R]       only: the read-write lock against the mutex: read / write + release, paired,
                    and 8 threads' throughput, readers on one lock vs one mutex, R runs (default 5)
  --cross-process [R] [--processes K]
                    only: 4 processes (K: 2 to 16; each its own client) contend for one key,
                    quorum-lock and rslock taking turns, R runs (default 5); also the `cross`
                    section of a run (always 4)
  --election-cost [R] only: a leader's campaign + resign() against a fenced lock + release(),
                    paired, N=3, R runs (default 5)
  --wakes [R [BLOCK]] only: context switches and allocations per lock, for quorum-lock (release()
                    and drop), its RedisBackend direct, the floor and rslock: 1 thread at N=1 and
                    N=3, 8 threads on distinct keys at N=3 (floor, quorum-lock), R runs (default 5);
                    BLOCK = N:THREADS:CLIENT (e.g. 3:8:ours) runs that block alone, for a profiler
  --wake-cost [R]     only: what waking a sleeping thread costs on this machine (two threads
                    taking turns, on one CPU, on two, unpinned), R runs (default 5)
  --runs R          runs of every comparison; ratios are per run, then median and min-max
                    (default 5; 2 with --quick)
  --quick           small counts: a smoke test that the benchmark runs (under a minute)
  --only LIST       clients, comma-separated: floor,ours,ours-drop,backend,redlock,redsync,rslock,
                    shared-reader,callers-read (default: all; the floor is needed for the ratios)
  --sections LIST   what to run, comma-separated: latency,counters,scaling,contention,third,memory,
                    waiting,cross,wakes (default: all; wakes always counts its own fixed set of
                    clients, whatever --only says, and in a run also the instructions per lock
                    under callgrind, needs valgrind, and futex calls per lock at 8 threads
                    under perf stat and their switches by kind of thread under perf record,
                    needs the kernel's tracepoints)
  --retry-ms D      contention: pause after a failed attempt, uniform in [0, D) ms (default 4)
  --out DIR         where the SVG charts and results.md go (default: target/bench of the
                    repository; docs/bench holds the published run, copied there by hand)
  --cpu-hog         run everything beside a process that keeps one core busy (a loaded host)
  --in-flight K     the shared-reader design floor of the scaling section keeps up to K batches
                    in flight per node (1 to 8; default 1, the engine's rule): what the rule costs
  -h, --help        this text
";

/// The parts of a run.
pub const SECTIONS: [&str; 9] = [
    "latency",
    "counters",
    "scaling",
    "contention",
    "third",
    "memory",
    "waiting",
    "cross",
    "wakes",
];

/// The run parameters of a paired comparison.
#[derive(Debug, Clone, Copy)]
pub struct PairedPlan {
    pub rounds: Rounds,
    /// Clients that connect per call take one round in `slow_every`.
    pub slow_every: usize,
}

/// The third-node comparison's parameters.
#[derive(Debug, Clone, Copy)]
pub struct ThirdPlan {
    pub rounds: Rounds,
    pub warmup: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct CountersPlan {
    pub ops: usize,
    pub budget: Duration,
}

#[derive(Debug, Clone)]
pub struct ScalingPlan {
    pub threads: Vec<usize>,
    /// Operations per measurement, split over its threads.
    pub ops: usize,
    pub min_ops_per_thread: usize,
    pub budget: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct ContentionPlan {
    pub threads: usize,
    pub sections_per_thread: usize,
    pub budget: Duration,
}

#[derive(Debug, Clone)]
pub struct MemoryPlan {
    pub held: Vec<usize>,
    pub budget: Duration,
}

/// Counts and time bounds of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub runs: usize,
    pub quick: bool,
    pub clients: Vec<Client>,
    pub sections: Vec<String>,
    pub out: PathBuf,
    pub settings: Settings,
    pub latency: PairedPlan,
    pub counters: CountersPlan,
    pub scaling: ScalingPlan,
    pub contention: ContentionPlan,
    pub third: ThirdPlan,
    pub memory: MemoryPlan,
    /// How long each block of the waiting section lasts (idle, then one
    /// thread waiting for a held key, or the other way round).
    pub waiting_block: Duration,
    /// Whether a process spinning on one core runs beside the measurements.
    pub cpu_hog: bool,
}

impl Plan {
    pub fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut runs = None;
        let mut quick = false;
        let mut clients = Client::ALL.to_vec();
        let mut sections: Vec<String> = SECTIONS.iter().map(|s| s.to_string()).collect();
        let mut retry_ms = 4u64;
        let mut cpu_hog = false;
        let mut reader_in_flight = 1usize;
        // Not into tracked files: a run on a developer's machine must not
        // replace the published figures by accident.
        let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "--quick" => quick = true,
                "--cpu-hog" => cpu_hog = true,
                "--runs" => {
                    let v = value("--runs")?;
                    let r: usize = v.parse().map_err(|_| format!("bad --runs {v:?}"))?;
                    if !(1..=20).contains(&r) {
                        return Err("--runs must be in 1..=20".into());
                    }
                    runs = Some(r);
                }
                "--only" => {
                    clients = value("--only")?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::parse)
                        .collect::<Result<_, _>>()?;
                    clients.sort();
                    clients.dedup();
                }
                "--sections" => {
                    sections = value("--sections")?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|s| {
                            if SECTIONS.contains(&s) {
                                Ok(s.to_string())
                            } else {
                                Err(format!(
                                    "unknown section {s:?}; one of {}",
                                    SECTIONS.join(", ")
                                ))
                            }
                        })
                        .collect::<Result<_, _>>()?;
                }
                "--retry-ms" => {
                    let v = value("--retry-ms")?;
                    retry_ms = v.parse().map_err(|_| format!("bad --retry-ms {v:?}"))?;
                    if !(1..=1000).contains(&retry_ms) {
                        return Err("--retry-ms must be in 1..=1000".into());
                    }
                }
                "--in-flight" => {
                    let v = value("--in-flight")?;
                    reader_in_flight = v.parse().map_err(|_| format!("bad --in-flight {v:?}"))?;
                    if !(1..=8).contains(&reader_in_flight) {
                        return Err("--in-flight must be in 1..=8".into());
                    }
                }
                "--out" => out = PathBuf::from(value("--out")?),
                other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
            }
        }
        let settings = Settings {
            ttl: Duration::from_secs(10),
            node_timeout: Duration::from_millis(100),
            retry_pause: Duration::from_millis(retry_ms),
            reader_in_flight,
        };
        // (quick, full)
        let pick = |q: usize, f: usize| if quick { q } else { f };
        let secs = |q: u64, f: u64| Duration::from_secs(if quick { q } else { f });
        Ok(Some(Plan {
            runs: runs.unwrap_or(pick(2, 5)),
            quick,
            clients,
            sections,
            out,
            settings,
            latency: PairedPlan {
                rounds: Rounds {
                    warmup: pick(10, 50),
                    rounds: pick(150, 1000),
                    budget: secs(2, 8),
                },
                slow_every: 4,
            },
            counters: CountersPlan {
                ops: pick(200, 2000),
                budget: secs(2, 5),
            },
            scaling: ScalingPlan {
                threads: vec![1, 8, 32, 128],
                ops: pick(400, 4000),
                min_ops_per_thread: pick(4, 20),
                budget: secs(5, 20),
            },
            contention: ContentionPlan {
                threads: 8,
                sections_per_thread: pick(20, 200),
                budget: secs(10, 60),
            },
            third: ThirdPlan {
                rounds: Rounds {
                    warmup: pick(5, 20),
                    rounds: pick(100, 600),
                    budget: secs(2, 6),
                },
                warmup: Duration::from_millis(pick(500, 1500) as u64),
            },
            memory: MemoryPlan {
                held: if quick {
                    vec![1_000, 10_000]
                } else {
                    vec![10_000, 100_000]
                },
                budget: secs(20, 60),
            },
            waiting_block: secs(1, 3),
            cpu_hog,
        }))
    }

    pub fn has(&self, client: Client) -> bool {
        self.clients.contains(&client)
    }

    pub fn runs_section(&self, name: &str) -> bool {
        self.sections.iter().any(|s| s == name)
    }
}
