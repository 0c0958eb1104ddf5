//! `loupe trace report`: PEM's Figure 4 and §4.1 as numbers. Per-interval
//! frequency strips of every series (counters from `HW::Counters::Interval`,
//! and the count of every application event per interval) aligned with the
//! phase markers; the correlation matrix between series, over the whole run
//! and within each phase; the period of each series (autocorrelation); and
//! where in an iteration each series peaks. Pure: no IO.
//!
//! PEM counts per 4 million cycles, i.e. per unit of the program's own CPU
//! time. Without a cycle counter, correlations here use the `task-clock`
//! counter the same way when the trace has it: each series is scaled to
//! "per interval of CPU time", and intervals where the program ran less than
//! a fifth of the time are left out, so a descheduled program (a loaded
//! machine) does not read as a program doing nothing.

use crate::record::Value;
use crate::spec::{PHASE_BEGIN, PHASE_END};
use crate::tracefile::Trace;

/// One iteration of a phase, from its Begin marker to its End marker.
#[derive(Clone, Debug, PartialEq)]
pub struct Iteration {
    pub phase: u64,
    pub iteration: u64,
    pub begin: u64,
    pub end: u64,
}

/// A per-interval series.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub t0: u64,
    pub bucket_ns: u64,
    pub series: Vec<Series>,
    pub iterations: Vec<Iteration>,
    /// Pearson correlation between series over every interval (per CPU time
    /// and over intervals where the program ran, when task-clock is known).
    pub correlation: Vec<Vec<f64>>,
    /// Intervals used for correlations (all, or those where the program ran).
    pub active: usize,
    /// Per phase number: the correlation over the intervals inside its iterations.
    pub per_phase: Vec<(u64, Vec<Vec<f64>>)>,
    /// Dominant period of each series in ns, if it has one: of the
    /// program's CPU time when task-clock is known (iterations stretched by
    /// preemption then still line up), else of wall time.
    pub periods: Vec<Option<u64>>,
    /// Median iteration length on the same time base as `periods`.
    pub median_iteration: Option<u64>,
    /// Median position of each series' peak within an iteration (0 = start, 1 = end).
    pub peak_position: Vec<Option<f64>>,
}

/// Pearson correlation; NaN when either side is constant.
pub fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len()) as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        cov += (x - ma) * (y - mb);
        va += (x - ma) * (x - ma);
        vb += (y - mb) * (y - mb);
    }
    cov / (va * vb).sqrt()
}

/// The period of a series in buckets: after the autocorrelation first dips
/// below zero, the first lag whose autocorrelation is within 60% of the
/// highest (multiples of the period score about as high, or higher when
/// noise favors them; the shortest wins).
/// None if the series has no clear period (highest below 0.2).
pub fn period(v: &[f64]) -> Option<usize> {
    let ac = |k: usize| pearson(&v[..v.len() - k], &v[k..]);
    let lags: Vec<(usize, f64)> = (1..v.len() / 2).map(|k| (k, ac(k))).filter(|(_, r)| r.is_finite()).collect();
    let first_neg = lags.iter().position(|&(_, r)| r < 0.0)?;
    let best = lags[first_neg..].iter().map(|&(_, r)| r).fold(f64::MIN, f64::max);
    if best < 0.2 {
        return None;
    }
    lags[first_neg..].iter().find(|&&(_, r)| r >= 0.6 * best).map(|&(k, _)| k)
}

/// The median of integers (the upper one of an even count).
pub fn median_u64(v: &[u64]) -> Option<u64> {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).copied()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Adds `amount`, spread evenly over [from, to), into the buckets it overlaps.
fn spread(values: &mut [f64], t0: u64, bucket: u64, from: u64, to: u64, amount: f64) {
    let (from, to) = (from.max(t0), to.max(t0 + 1));
    let len = (to - from).max(1) as f64;
    let mut t = from;
    while t < to {
        let b = ((t - t0) / bucket) as usize;
        let edge = (t0 + (b as u64 + 1) * bucket).min(to);
        if let Some(slot) = values.get_mut(b) {
            *slot += amount * (edge - t) as f64 / len;
        }
        t = edge;
    }
}

fn iterations(t: &Trace) -> Vec<Iteration> {
    let mut open: Vec<(u64, u64, u64)> = Vec::new();
    let mut out = Vec::new();
    for e in &t.entries {
        let (Some(Value::U(phase)), Some(Value::U(it))) = (e.rec.fields.first(), e.rec.fields.get(1)) else { continue };
        match e.rec.id {
            PHASE_BEGIN => open.push((*phase, *it, e.rec.ts)),
            PHASE_END => {
                if let Some(i) = open.iter().rposition(|&(p, n, _)| p == *phase && n == *it) {
                    let (p, n, b) = open.remove(i);
                    out.push(Iteration { phase: p, iteration: n, begin: b, end: e.rec.ts });
                }
            }
            _ => {}
        }
    }
    out.sort_by_key(|i| i.begin);
    out
}

fn build_series(t: &Trace, counters: &[String], t0: u64, bucket: u64, n: usize) -> Vec<Series> {
    let mut series: Vec<Series> = counters.iter().map(|c| Series { name: c.clone(), values: vec![0.0; n] }).collect();
    let counter_id = t.spec.by_name("HW::Counters::Interval").map(|e| e.id);
    for e in &t.entries {
        if Some(e.rec.id) == counter_id {
            let (Some(Value::U(dur)), Some(Value::List(vals))) = (e.rec.fields.get(1), e.rec.fields.get(2)) else { continue };
            for (s, v) in series.iter_mut().zip(vals) {
                let Value::U(v) = v else { continue };
                spread(&mut s.values, t0, bucket, e.rec.ts.saturating_sub(*dur), e.rec.ts, *v as f64);
            }
        } else if e.rec.id != PHASE_BEGIN && e.rec.id != PHASE_END {
            let name = t.spec.by_id(e.rec.id).map_or_else(|| format!("id {}", e.rec.id), |ev| ev.full_name());
            let idx = match series.iter().position(|s| s.name == name) {
                Some(i) => i,
                None => {
                    series.push(Series { name, values: vec![0.0; n] });
                    series.len() - 1
                }
            };
            if let Some(slot) = series[idx].values.get_mut(((e.rec.ts - t0) / bucket) as usize) {
                *slot += 1.0;
            }
        }
    }
    series
}

/// Series scaled per interval of CPU time, and which intervals count.
fn per_cpu_time(series: &[Series], bucket: u64) -> (Vec<Series>, Vec<bool>) {
    let n = series.first().map_or(0, |s| s.values.len());
    let Some(tc) = series.iter().find(|s| s.name == "task-clock") else {
        return (series.to_vec(), vec![true; n]);
    };
    let active: Vec<bool> = tc.values.iter().map(|&v| v >= 0.2 * bucket as f64).collect();
    let scaled = series
        .iter()
        .map(|s| {
            let values = s.values.iter().zip(&tc.values).map(|(v, t)| if *t > 0.0 { v * bucket as f64 / t } else { 0.0 }).collect();
            Series { name: s.name.clone(), values }
        })
        .collect();
    (scaled, active)
}

fn matrix(series: &[Series], keep: &dyn Fn(usize) -> bool) -> Vec<Vec<f64>> {
    let cols: Vec<Vec<f64>> =
        series.iter().map(|s| s.values.iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, v)| *v).collect()).collect();
    cols.iter().map(|a| cols.iter().map(|b| pearson(a, b)).collect()).collect()
}

fn peak_position(s: &Series, iters: &[Iteration], t0: u64, bucket: u64) -> Option<f64> {
    let mut pos = Vec::new();
    for it in iters {
        let (b0, b1) = (((it.begin - t0) / bucket) as usize, ((it.end - t0) / bucket) as usize);
        let window = s.values.get(b0..=b1.min(s.values.len().saturating_sub(1)))?;
        let (k, v) = window.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?;
        if *v > 0.0 {
            let mid = t0 + (b0 + k) as u64 * bucket + bucket / 2;
            pos.push(((mid.max(it.begin) - it.begin) as f64 / (it.end - it.begin).max(1) as f64).min(1.0));
        }
    }
    median(pos)
}

/// Re-buckets series on the program's CPU time (cumulative task-clock):
/// each wall interval's value is spread over the CPU time it covered.
/// Returns the series and a map from wall time to CPU time.
fn on_cpu_time(series: &[Series], t0: u64, bucket: u64) -> Option<(Vec<Series>, impl Fn(u64) -> u64)> {
    let tc = series.iter().find(|s| s.name == "task-clock")?;
    let mut cum = vec![0u64];
    for v in &tc.values {
        cum.push(cum.last().unwrap() + *v as u64);
    }
    let total = *cum.last().unwrap();
    let n = (total / bucket + 1) as usize;
    let out = series
        .iter()
        .map(|s| {
            let mut values = vec![0.0; n];
            for (i, v) in s.values.iter().enumerate() {
                if cum[i + 1] > cum[i] {
                    spread(&mut values, 0, bucket, cum[i], cum[i + 1], *v);
                }
            }
            Series { name: s.name.clone(), values }
        })
        .collect();
    let map = move |t: u64| {
        let i = ((t.max(t0) - t0) / bucket) as usize;
        if i + 1 >= cum.len() {
            return total;
        }
        let frac = ((t.max(t0) - t0) % bucket) as f64 / bucket as f64;
        cum[i] + ((cum[i + 1] - cum[i]) as f64 * frac) as u64
    };
    Some((out, map))
}

/// Builds the report of a trace with `bucket_ns`-wide intervals; `counters`
/// names the values of `HW::Counters::Interval` records, in order.
pub fn report(t: &Trace, counters: &[String], bucket_ns: u64) -> Report {
    let bucket = bucket_ns.max(1);
    let t0 = t.entries.first().map_or(0, |e| e.rec.ts);
    let t1 = t.entries.last().map_or(0, |e| e.rec.ts);
    let n = ((t1 - t0) / bucket + 1) as usize;
    let mut series = build_series(t, counters, t0, bucket, n);
    series.retain(|s| s.values.iter().any(|v| *v != 0.0));
    let iters = iterations(t);
    let (scaled, active) = per_cpu_time(&series, bucket);
    let correlation = matrix(&scaled, &|b| active[b]);
    let mut phases: Vec<u64> = iters.iter().map(|i| i.phase).collect();
    phases.sort();
    phases.dedup();
    let per_phase = phases
        .iter()
        .map(|&p| {
            let inside = |b: usize| {
                let mid = t0 + b as u64 * bucket + bucket / 2;
                active[b] && iters.iter().any(|i| i.phase == p && i.begin <= mid && mid < i.end)
            };
            (p, matrix(&scaled, &inside))
        })
        .collect();
    let lens: Vec<u64>;
    let periods = match on_cpu_time(&series, t0, bucket) {
        Some((cpu, map)) => {
            lens = iters.iter().map(|i| map(i.end) - map(i.begin)).collect();
            cpu.iter().map(|s| period(&s.values).map(|k| k as u64 * bucket)).collect()
        }
        None => {
            lens = iters.iter().map(|i| i.end - i.begin).collect();
            series.iter().map(|s| period(&s.values).map(|k| k as u64 * bucket)).collect()
        }
    };
    let median_iteration = median_u64(&lens);
    let peak_position = series.iter().map(|s| peak_position(s, &iters, t0, bucket)).collect();
    let active = active.iter().filter(|a| **a).count();
    Report { t0, bucket_ns: bucket, series, iterations: iters, correlation, active, per_phase, periods, median_iteration, peak_position }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pearson on hand-checked inputs: identical, reversed, constant.
    #[test]
    fn pearson_known() {
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]) - 1.0).abs() < 1e-12);
        assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        assert!(pearson(&[1.0, 1.0], &[1.0, 2.0]).is_nan());
    }

    // A square wave of period 10 has period 10; a ramp has none.
    #[test]
    fn period_of_square_wave() {
        let v: Vec<f64> = (0..100).map(|i| if i % 10 < 3 { 5.0 } else { 0.0 }).collect();
        assert_eq!(period(&v), Some(10));
        let ramp: Vec<f64> = (0..100).map(|i| i as f64).collect();
        assert_eq!(period(&ramp), None);
    }

    // Scaling by task-clock: an interval where the program ran half the time counts double; idle intervals drop out.
    #[test]
    fn per_cpu_time_scaling() {
        let tc = Series { name: "task-clock".into(), values: vec![10.0, 5.0, 1.0] };
        let pf = Series { name: "page-faults".into(), values: vec![4.0, 4.0, 4.0] };
        let (scaled, active) = per_cpu_time(&[pf, tc], 10);
        assert_eq!(scaled[0].values, vec![4.0, 8.0, 40.0]);
        assert_eq!(active, vec![true, true, false]);
    }

    // On CPU time, a wall interval where the program did not run vanishes: a pulse every 2 busy
    // intervals, with idle intervals between, has period 2 in CPU time.
    #[test]
    fn cpu_time_rebucketing() {
        let tc = Series { name: "task-clock".into(), values: vec![10.0, 0.0, 10.0, 10.0, 0.0, 0.0, 10.0, 10.0, 0.0, 10.0] };
        let pf = Series { name: "page-faults".into(), values: vec![5.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0] };
        let (cpu, map) = on_cpu_time(&[pf, tc], 0, 10).unwrap();
        assert_eq!(cpu[0].values, vec![5.0, 0.0, 5.0, 0.0, 5.0, 0.0, 0.0]);
        assert_eq!(map(25), 15);
        assert_eq!(map(100), 60);
    }

    // An amount over [5, 25) with buckets of 10 from 0 lands 5/20, 10/20, 5/20.
    #[test]
    fn spread_over_buckets() {
        let mut v = vec![0.0; 4];
        spread(&mut v, 0, 10, 5, 25, 20.0);
        assert_eq!(v, vec![5.0, 10.0, 5.0, 0.0]);
    }
}
