//! The SVG charts of a run, from its results: latency by N (absolute and
//! as a ratio to the floor), throughput by threads (N=3, N=5).

use std::path::Path;

use crate::clients::Client;
use crate::report::Results;
use crate::stats::Spread;
use crate::svg::{Chart, Point, Series};

fn point(s: Option<Spread>, scale: f64) -> Point {
    s.map(|s| (s.median * scale, s.min * scale, s.max * scale))
}

fn name(label: &str) -> String {
    label
        .parse::<Client>()
        .map_or_else(|_| label.to_string(), |c| c.short().to_string())
}

/// The charts, as (file name, SVG text).
pub fn charts(results: &Results) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !results.latency.is_empty() {
        let mut labels: Vec<String> = Vec::new();
        for (_, p, _) in &results.latency {
            for l in &p.labels {
                // redlock and redsync are 3-8x the floor: they would squash
                // the others; the tables have them.
                let slow = l.parse::<Client>().is_ok_and(Client::connects_per_call);
                if !slow && !labels.contains(l) {
                    labels.push(l.clone());
                }
            }
        }
        let categories: Vec<String> = results
            .latency
            .iter()
            .map(|(n, _, _)| format!("N={n}"))
            .collect();
        let series = |f: &dyn Fn(&crate::paired::Paired, &str) -> Point| -> Vec<Series> {
            labels
                .iter()
                .map(|l| Series {
                    name: name(l),
                    points: results.latency.iter().map(|(_, p, _)| f(p, l)).collect(),
                })
                .collect()
        };
        out.push((
            "latency.svg".to_string(),
            Chart {
                title: "lock + release, 1 thread: p50, this machine (whiskers: min-max of runs)"
                    .into(),
                x_label: "nodes".into(),
                y_label: "p50 (us)".into(),
                categories: categories.clone(),
                series: series(&|p, l| point(p.p50(l), 1e6)),
                reference: None,
            }
            .render(),
        ));
        out.push((
            "latency-ratio.svg".to_string(),
            Chart {
                title:
                    "lock + release, 1 thread: p50 / floor p50 of the same run (median, min-max)"
                        .into(),
                x_label: "nodes".into(),
                y_label: "ratio to the floor".into(),
                categories,
                series: series(&|p, l| point(p.ratio(l, Client::Floor.key()), 1.0)),
                reference: Some((1.0, "floor".into())),
            }
            .render(),
        ));
    }
    if let Some(sc) = &results.scaling {
        for n in [3usize, 5] {
            let mut threads: Vec<usize> = sc
                .cells
                .iter()
                .filter(|c| c.n == n)
                .map(|c| c.threads)
                .collect();
            threads.sort_unstable();
            threads.dedup();
            if threads.is_empty() {
                continue;
            }
            let series = crate::scaling::CLIENTS
                .into_iter()
                .filter(|c| sc.cells.iter().any(|x| x.client == *c && x.n == n))
                .map(|c| Series {
                    name: c.short().to_string(),
                    points: threads
                        .iter()
                        .map(|t| point(sc.cell(n, *t, c).and_then(|x| x.rate()), 1.0))
                        .collect(),
                })
                .collect();
            out.push((
                format!("throughput-n{n}.svg"),
                Chart {
                    title: format!(
                        "lock + release, distinct keys, N={n}: ops/s, this machine (min-max)"
                    ),
                    x_label: "caller threads".into(),
                    y_label: "lock + release per second".into(),
                    categories: threads.iter().map(|t| t.to_string()).collect(),
                    series,
                    reference: None,
                }
                .render(),
            ));
        }
    }
    out
}

/// Writes the charts and the markdown into `dir`.
pub fn write(dir: &Path, charts: &[(String, String)], markdown: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (file, svg) in charts {
        let path = dir.join(file);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let path = dir.join("results.md");
    std::fs::write(&path, markdown).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
