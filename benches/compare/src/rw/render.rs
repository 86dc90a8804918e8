//! The markdown of `--rw-cost`: the summary of the paired single calls
//! and of the throughput blocks, per layout; each run's blocks; the
//! managers' counters; what went wrong. Apart from the measuring: it only
//! reads what the run measured.

use std::time::Duration;

use super::throughput::{Block, Layout, Pair, THREADS};
use crate::ab::Ab;
use crate::stats::{Spread, median};

fn micros(d: Duration) -> String {
    format!("{:.0} us", d.as_secs_f64() * 1e6)
}

fn per_sec(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1}k/s", v / 1000.0)
    } else {
        format!("{v:.0}/s")
    }
}

fn spread_text(s: Option<Spread>) -> String {
    s.map_or_else(|| "-".into(), |s| s.ratio_text())
}

pub(super) fn render(
    version: &str,
    reads: &Ab,
    writes: &Ab,
    pairs: &[(Layout, Vec<Pair>)],
    runs: usize,
    elapsed: Duration,
) -> String {
    let mut md = format!(
        "## quorum-bench --rw-cost\n\nOn {version} x3 (loopback, N=3), {runs} runs, {:.0} s.\n\n",
        elapsed.as_secs_f64()
    );
    md.push_str("### Summary\n\n");
    md.push_str(
        "| what | read-write lock | mutex | rw / mutex: median of the per-run ratios (min-max) |\n\
         |---|---:|---:|---:|\n",
    );
    for (ab, side) in [(reads, "read"), (writes, "write")] {
        for (k, (label, _)) in ab.percentiles.iter().enumerate() {
            let (mutex, rw) = ab.medians(k);
            md.push_str(&format!(
                "| {side} + release(), 1 thread, {label} | {} | {} | {} |\n",
                micros(rw),
                micros(mutex),
                spread_text(ab.ratio(k))
            ));
        }
    }
    for (layout, runs) in pairs {
        let ops = |f: fn(&Pair) -> &Block| {
            let v: Vec<f64> = runs.iter().map(|p| f(p).ops_per_sec()).collect();
            median(&v)
        };
        let ratios: Vec<f64> = runs.iter().map(Pair::ratio).collect();
        md.push_str(&format!(
            "| 8 threads x {} ops, {}: read + release() / lock + release(), throughput | {} | {} | {} |\n",
            layout.ops_per_thread(),
            layout.name(),
            per_sec(ops(|p| &p.read)),
            per_sec(ops(|p| &p.mutex)),
            spread_text(Spread::of(&ratios)),
        ));
    }
    md.push_str(
        "\n(Latency rows: the median over the runs of each side's percentile; \
         throughput rows: the median over the runs of each block's operations / wall time.)\n\n",
    );
    md.push_str("### read + release() against lock + release(), paired\n\n");
    md.push_str(&reads.table("read + release() at N=3"));
    md.push_str("\n### write + release() against lock + release(), paired\n\n");
    md.push_str(&writes.table("write + release() at N=3"));
    md.push_str(
        "\n### 8 threads: readers on one read-write lock against one mutex\n\n\
         Per lock of the mutex's block: attempts refused, waits a release notice ended, \
         locks that let the waiting managers go first, hand-overs to a thread of the same \
         manager (`health().locks`).\n\n\
         | layout | ops | run | first | readers | mutex | readers / mutex | most inside at once (readers, mutex) | errors (readers, mutex) | mutex: refused, woken, yielded, handed over per lock |\n\
         |---|---:|---|---|---:|---:|---:|---|---|---|\n",
    );
    for (layout, runs) in pairs {
        for (r, p) in runs.iter().enumerate() {
            let c = p.mutex.counters;
            let per = |n: u64| n as f64 / p.mutex.ops.max(1) as f64;
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {:.2}x | {}, {} | {}, {} | {:.2}, {:.2}, {:.2}, {:.2} |\n",
                layout.name(),
                THREADS * layout.ops_per_thread(),
                r + 1,
                if p.read_first { "readers" } else { "mutex" },
                per_sec(p.read.ops_per_sec()),
                per_sec(p.mutex.ops_per_sec()),
                p.ratio(),
                p.read.most_at_once,
                p.mutex.most_at_once,
                p.read.errors,
                p.mutex.errors,
                per(c.contended),
                per(c.woken),
                per(c.yielded),
                per(c.hand_overs),
            ));
        }
    }
    md.push('\n');
    for (layout, runs) in pairs {
        let ratios: Vec<f64> = runs.iter().map(Pair::ratio).collect();
        let clean = runs.iter().filter(|p| p.clean()).count();
        md.push_str(&format!(
            "readers / mutex throughput, 8 threads, {}: median {}; \
             {clean} of {} runs without an error and with one mutex holder at a time\n",
            layout.name(),
            spread_text(Spread::of(&ratios)),
            runs.len(),
        ));
        for p in runs {
            for (who, b) in [("readers", &p.read), ("mutex", &p.mutex)] {
                if let Some(e) = &b.first_error {
                    md.push_str(&format!("- {}, {who}: first error: {e}\n", layout.name()));
                }
            }
            if p.mutex.most_at_once > 1 {
                md.push_str(&format!(
                    "- {}: {} mutex holders at once: EXCLUSION BROKEN\n",
                    layout.name(),
                    p.mutex.most_at_once
                ));
            }
        }
    }
    md
}
