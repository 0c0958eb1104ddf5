//! Text, SVG and JSON renderings of a [`Report`]. Pure: strings out.

use crate::report::Report;
use serde_json::json;
use std::fmt::Write;

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const WIDTH: usize = 100;

fn short(name: &str) -> String {
    let n: String = name.chars().take(26).collect();
    format!("{n:<26}")
}

/// Sums of consecutive groups of `per` values.
fn columns(v: &[f64], per: usize) -> Vec<f64> {
    v.chunks(per).map(|c| c.iter().sum()).collect()
}

fn strip(v: &[f64]) -> String {
    let max = v.iter().copied().fold(0.0, f64::max);
    v.iter().map(|x| if max <= 0.0 || *x <= 0.0 { ' ' } else { BARS[((x / max) * 7.0).round() as usize] }).collect()
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn matrix(out: &mut String, r: &Report, m: &[Vec<f64>]) {
    let _ = write!(out, "{}", short(""));
    for i in 0..r.series.len() {
        let _ = write!(out, " {:>7}", format!("[{i}]"));
    }
    out.push('\n');
    for (i, row) in m.iter().enumerate() {
        let _ = write!(out, "{}", short(&format!("[{i}] {}", r.series[i].name)));
        for c in row {
            let _ = write!(out, " {:>7}", if c.is_finite() { format!("{c:+.2}") } else { "-".into() });
        }
        out.push('\n');
    }
}

/// The report as text: strips (PEM Figure 4), correlations, periods and peaks.
pub fn text(r: &Report) -> String {
    let n = r.series.first().map_or(0, |s| s.values.len());
    let per = n.div_ceil(WIDTH).max(1);
    let mut out = String::new();
    let lens: Vec<u64> = r.iterations.iter().map(|i| i.end - i.begin).collect();
    let med = crate::report::median_u64(&lens);
    let _ = writeln!(
        out,
        "{n} intervals of {}, {} iterations (median {}); one column = {per} interval(s)\n",
        ms(r.bucket_ns),
        r.iterations.len(),
        med.map_or("-".into(), ms)
    );
    let mut marks = vec![' '; n.div_ceil(per)];
    for it in &r.iterations {
        if let Some(m) = marks.get_mut(((it.begin - r.t0) / r.bucket_ns) as usize / per) {
            *m = '|';
        }
    }
    let _ = writeln!(out, "{}{}", short("iteration starts"), marks.iter().collect::<String>());
    for s in &r.series {
        let cols = columns(&s.values, per);
        let max = cols.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(out, "{}{}  max {max:.0}", short(&s.name), strip(&cols));
    }
    let basis = if r.series.iter().any(|s| s.name == "task-clock") { "per CPU time, intervals where it ran" } else { "all intervals" };
    let _ = writeln!(out, "\ncorrelation ({basis}: {} intervals)", r.active);
    matrix(&mut out, r, &r.correlation);
    for (p, m) in &r.per_phase {
        let _ = writeln!(out, "\ncorrelation within phase {p}");
        matrix(&mut out, r, m);
    }
    let base = if r.series.iter().any(|s| s.name == "task-clock") { "CPU time" } else { "wall time" };
    let _ = writeln!(out, "\nperiods on {base}; median iteration {}", r.median_iteration.map_or("-".into(), ms));
    let _ = writeln!(out, "{}{:>10}  peak within iteration", short("series"), "period");
    for (i, s) in r.series.iter().enumerate() {
        let p = r.periods[i].map_or("-".into(), ms);
        let k = r.peak_position[i].map_or("-".into(), |f| format!("{:.0}% into it", f * 100.0));
        let _ = writeln!(out, "{}{p:>10}  {k}", short(&s.name));
    }
    out
}

/// The report as JSON (every number, for scripts and tests).
pub fn to_json(r: &Report) -> serde_json::Value {
    let f = |x: f64| if x.is_finite() { json!(x) } else { json!(null) };
    json!({
        "bucket_ns": r.bucket_ns,
        "series": r.series.iter().map(|s| json!({"name": s.name, "values": s.values})).collect::<Vec<_>>(),
        "iterations": r.iterations.iter().map(|i| json!({"phase": i.phase, "iteration": i.iteration,
            "begin_ns": i.begin - r.t0, "end_ns": i.end - r.t0})).collect::<Vec<_>>(),
        "active_intervals": r.active,
        "correlation": r.correlation.iter().map(|row| row.iter().map(|&x| f(x)).collect::<Vec<_>>()).collect::<Vec<_>>(),
        "per_phase": r.per_phase.iter().map(|(p, m)| json!({"phase": p,
            "correlation": m.iter().map(|row| row.iter().map(|&x| f(x)).collect::<Vec<_>>()).collect::<Vec<_>>()})).collect::<Vec<_>>(),
        "period_ns": r.periods,
        "median_iteration_ns": r.median_iteration,
        "peak_position": r.peak_position,
    })
}

/// The strips as an SVG plot: one band per series, iteration starts as lines.
pub fn svg(r: &Report) -> String {
    let (w, band, left) = (1000.0, 70.0, 190.0);
    let n = r.series.first().map_or(1, |s| s.values.len()).max(1) as f64;
    let h = band * r.series.len() as f64 + 20.0;
    let mut out =
        format!("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{h}' font-family='monospace' font-size='11'>\n", w + left);
    for (i, s) in r.series.iter().enumerate() {
        let y0 = 10.0 + band * i as f64;
        let max = s.values.iter().copied().fold(0.0, f64::max).max(1e-9);
        let pts: Vec<String> = s
            .values
            .iter()
            .enumerate()
            .map(|(k, v)| format!("{:.1},{:.1}", left + w * k as f64 / n, y0 + band - 10.0 - (band - 20.0) * v / max))
            .collect();
        let _ = writeln!(out, "<text x='4' y='{}'>{}</text>", y0 + band / 2.0, s.name.replace('<', "&lt;"));
        let _ = writeln!(out, "<polyline fill='none' stroke='steelblue' points='{}'/>", pts.join(" "));
    }
    for it in &r.iterations {
        let x = left + w * ((it.begin - r.t0) as f64 / r.bucket_ns as f64) / n;
        let _ = writeln!(out, "<line x1='{x:.1}' y1='0' x2='{x:.1}' y2='{h}' stroke='red' stroke-opacity='0.4'/>");
    }
    out.push_str("</svg>\n");
    out
}
