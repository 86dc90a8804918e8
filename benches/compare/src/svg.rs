//! Line charts as hand-written SVG text: categories on x (evenly spaced),
//! one line per series, each point the median over runs with a whisker
//! from the smallest to the largest run.

use std::fmt::Write as _;

/// One point: median, min, max.
pub type Point = Option<(f64, f64, f64)>;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

/// A chart to draw.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
    /// A horizontal reference line (e.g. 1.0 for ratios), with its label.
    pub reference: Option<(f64, String)>,
}

const COLORS: [&str; 7] = [
    "#444444", "#1f77b4", "#2ca02c", "#9467bd", "#d62728", "#ff7f0e", "#8c564b",
];
const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" step for about `ticks` ticks up to `max`.
fn step_for(max: f64, ticks: f64) -> f64 {
    let raw = max / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_tick(v: f64) -> String {
    if v >= 1000.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

impl Chart {
    pub fn render(&self) -> String {
        let mut max = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().flatten())
            .map(|p| p.2)
            .fold(0.0f64, f64::max);
        if let Some((r, _)) = &self.reference {
            max = max.max(*r);
        }
        if !max.is_finite() || max <= 0.0 {
            max = 1.0;
        }
        let step = step_for(max * 1.05, 5.0);
        let top = (max * 1.05 / step).ceil() * step;
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let n = self.categories.len().max(1);
        let x = |i: usize| LEFT + pw * (i as f64 + 0.5) / n as f64;
        let y = |v: f64| TOP + ph * (1.0 - v / top);
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
            W / 2.0,
            esc(&self.title)
        );
        // Grid and y ticks.
        let mut v = 0.0;
        while v <= top + step / 2.0 {
            let yy = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#dddddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                yy + 4.0,
                fmt_tick(v)
            );
            v += step;
        }
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#000"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000"/>"##,
            TOP + ph,
            TOP + ph,
            LEFT + pw,
            TOP + ph
        );
        for (i, c) in self.categories.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x(i),
                TOP + ph + 18.0,
                esc(c)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 14.0,
            esc(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            esc(&self.y_label)
        );
        if let Some((r, label)) = &self.reference {
            let yy = y(*r);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#888" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#666">{}</text>"##,
                LEFT + pw,
                LEFT + 4.0,
                yy - 4.0,
                esc(label)
            );
        }
        for (k, series) in self.series.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            // Offsets keep the whiskers of different series apart.
            let off = (k as f64 - (self.series.len() as f64 - 1.0) / 2.0) * 4.0;
            let mut path = String::new();
            for (i, p) in series.points.iter().enumerate() {
                let Some((m, lo, hi)) = p else { continue };
                let (xx, yy) = (x(i) + off, y(*m));
                let _ = write!(
                    path,
                    "{}{xx:.1},{yy:.1} ",
                    if path.is_empty() { "M" } else { "L" }
                );
                let _ = writeln!(
                    s,
                    r#"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="{color}"/><circle cx="{xx:.1}" cy="{yy:.1}" r="3.5" fill="{color}"/>"#,
                    y(*lo),
                    y(*hi)
                );
            }
            if !path.is_empty() {
                let _ = writeln!(
                    s,
                    r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                    path.trim_end()
                );
            }
            let ly = TOP + 10.0 + 20.0 * k as f64;
            let lx = W - RIGHT + 16.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                lx + 20.0,
                lx + 26.0,
                ly + 4.0,
                esc(&series.name)
            );
        }
        let _ = writeln!(s, "</svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_chart() {
        let chart = Chart {
            title: "t <1>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            categories: vec!["1".into(), "3".into()],
            series: vec![Series {
                name: "a&b".into(),
                points: vec![Some((1.0, 0.5, 2.0)), None],
            }],
            reference: Some((1.0, "floor".into())),
        };
        let svg = chart.render();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("t &lt;1&gt;") && svg.contains("a&amp;b"));
        assert_eq!(step_for(105.0, 5.0), 50.0);
    }
}
