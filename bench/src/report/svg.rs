//! Hand-built SVG line charts: small, dependency-free, and viewable in any browser or in
//! a GitHub issue. Two charts use it: throughput and outcomes over time (one run), and
//! latency percentiles against offered rate (a sweep).

use std::fmt::Write;

use crate::report::Report;

const W: f64 = 720.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One named line.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" upper bound for an axis: 1, 2 or 5 × a power of ten, at least `v`.
pub fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// The plot area's scale: data to SVG coordinates.
struct Plot {
    xmax: f64,
    ymax: f64,
    /// Plot width and height.
    pw: f64,
    ph: f64,
}

impl Plot {
    fn x(&self, v: f64) -> f64 {
        LEFT + v / self.xmax * self.pw
    }

    fn y(&self, v: f64) -> f64 {
        TOP + self.ph - v / self.ymax * self.ph
    }
}

/// A line chart with linear axes starting at zero.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let plot = Plot {
        xmax: nice_max(pts.clone().map(|p| p.0).fold(0.0, f64::max)),
        ymax: nice_max(pts.map(|p| p.1).fold(0.0, f64::max)),
        pw: W - LEFT - RIGHT,
        ph: H - TOP - BOTTOM,
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    axes(&mut s, &plot, x_label, y_label);
    for (i, se) in series.iter().enumerate() {
        line(&mut s, &plot, i, se);
    }
    s.push_str("</svg>\n");
    s
}

/// The grid with its tick labels, the frame, and the axis labels.
fn axes(s: &mut String, plot: &Plot, x_label: &str, y_label: &str) {
    let (pw, ph) = (plot.pw, plot.ph);
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let (gx, gy) = (plot.x(f * plot.xmax), plot.y(f * plot.ymax));
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            gy + 4.0,
            fmt_num(f * plot.ymax)
        );
        let _ = writeln!(
            s,
            r#"<text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            TOP + ph + 18.0,
            fmt_num(f * plot.xmax)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 10.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(y_label)
    );
}

/// Series `i`: its line, its points and its legend entry.
fn line(s: &mut String, plot: &Plot, i: usize, se: &Series) {
    let c = COLOURS[i % COLOURS.len()];
    let path: Vec<String> = se
        .points
        .iter()
        .map(|(px, py)| format!("{:.1},{:.1}", plot.x(*px), plot.y(*py)))
        .collect();
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
        path.join(" ")
    );
    for p in &path {
        let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
        let _ = writeln!(s, r#"<circle cx="{cx}" cy="{cy}" r="2.5" fill="{c}"/>"#);
    }
    let ly = TOP + 10.0 + 18.0 * i as f64;
    let _ = writeln!(
        s,
        r#"<rect x="{:.1}" y="{:.1}" width="12" height="3" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
        LEFT + plot.pw + 12.0,
        ly - 4.0,
        LEFT + plot.pw + 30.0,
        ly,
        esc(&se.name)
    );
}

fn fmt_num(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Throughput and answers per outcome, per second of the run.
pub fn timeline(r: &Report) -> String {
    let mut names: Vec<&String> = r.timeline.iter().flat_map(|p| p.outcomes.keys()).collect();
    names.sort();
    names.dedup();
    let mut series = vec![Series {
        name: "all answers".into(),
        points: r
            .timeline
            .iter()
            .map(|p| (p.t_s as f64, p.outcomes.values().sum::<u64>() as f64))
            .collect(),
    }];
    for n in names {
        series.push(Series {
            name: n.clone(),
            points: r
                .timeline
                .iter()
                .map(|p| (p.t_s as f64, p.outcomes.get(n).copied().unwrap_or(0) as f64))
                .collect(),
        });
    }
    line_chart(
        &format!("{} — answers per second", r.scenario),
        "time (s)",
        "answers / s",
        &series,
    )
}

/// p50 / p99 / p99.9 latency (ms) against offered rate, one point per sweep step.
pub fn latency_vs_rate(steps: &[Report]) -> String {
    let pick = |name: &str, f: fn(&Report) -> u64| Series {
        name: name.into(),
        points: steps
            .iter()
            .map(|r| (r.offered_rps, f(r) as f64 / 1000.0))
            .collect(),
    };
    line_chart(
        "latency vs offered rate",
        "offered rate (req/s)",
        "latency (ms)",
        &[
            pick("p50", |r| r.latency.p50_us),
            pick("p99", |r| r.latency.p99_us),
            pick("p99.9", |r| r.latency.p999_us),
        ],
    )
}
