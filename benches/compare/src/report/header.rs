//! The report's header: the command, the machine (cores, kernel, server,
//! load), the commit and the plan of the run. Apart from the sections:
//! it reads the plan and the machine, not the results.

use std::fmt::Write as _;
use std::time::Duration;

use crate::machine::Machine;
use crate::plan::Plan;

/// The header: command, machine, plan.
pub fn header(plan: &Plan, machine: &Machine, command: &str, elapsed: Duration) -> String {
    let mut out = String::new();
    let s = &plan.settings;
    let _ = writeln!(out, "- command: `{command}`");
    let _ = writeln!(
        out,
        "- machine: {} cores ({}), Linux {}, {}",
        machine.nproc, machine.cpu, machine.kernel, machine.redis
    );
    let _ = writeln!(out, "- load average at start: {}", machine.load);
    if plan.cpu_hog {
        let _ = writeln!(
            out,
            "- with a CPU hog: a process of the benchmark's own spinning on one core throughout (`--cpu-hog`)"
        );
    }
    if s.reader_in_flight > 1 {
        let _ = writeln!(
            out,
            "- the shared-reader design floor keeps up to {} batches in flight per node (`--in-flight`), not the engine's one",
            s.reader_in_flight
        );
    }
    let _ = writeln!(out, "- quorum-lock commit: {}", machine.commit);
    let _ = writeln!(
        out,
        "- {} runs{}; latency: up to {} rounds per run (redlock and redsync in 1 round of {}), \
         {} warm-up rounds; counters: {} ops per block; scaling: {} ops per measurement; \
         contention: {} threads x {} critical sections; third node: up to {} rounds per run",
        plan.runs,
        if plan.quick { " (--quick)" } else { "" },
        plan.latency.rounds.rounds,
        plan.latency.slow_every,
        plan.latency.rounds.warmup,
        plan.counters.ops,
        plan.scaling.ops,
        plan.contention.threads,
        plan.contention.sections_per_thread,
        plan.third.rounds.rounds,
    );
    let _ = writeln!(
        out,
        "- TTL {:?}, quorum-lock node timeout {:?}, contention retry pause uniform in [0, {:?}); \
         wall time of the run {:.0} s\n",
        s.ttl,
        s.node_timeout,
        s.retry_pause,
        elapsed.as_secs_f64()
    );
    out
}
