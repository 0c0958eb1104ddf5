//! The data flow view (DProf §3.4): the common paths objects take from
//! allocation to free, as sequences of functions that touched them, with
//! the points where an object moved to another CPU marked. Pure over the
//! histories and a function that names instruction addresses.

use crate::history::{History, Line};
use serde::Serialize;
use std::collections::BTreeMap;

/// One step of a path: consecutive accesses by one function on one CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// `alloc <function>` and `free <function>` for the end points.
    pub function: String,
    pub cpu: u32,
    /// The object moved here from another CPU (the previous step's).
    pub cpu_change: bool,
    /// Offsets accessed in this step, ascending.
    pub offsets: Vec<u64>,
    pub accesses: u64,
}

/// Objects that took the same path: the same functions in the same order
/// and the same CPU changes (DProf: "equivalent sequence of cpu values").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PathSummary {
    pub objects: u64,
    /// Steps of the first object seen on this path.
    pub steps: Vec<Step>,
    /// Mean time from allocation to free of the path's freed objects;
    /// `None` when none was freed while watched.
    pub mean_lifetime_ns: Option<f64>,
    /// Objects of the path freed while watched.
    pub freed: u64,
}

/// Steps that repeat back to back (`bump_a cpu0`, `bump_b cpu1`, again
/// and again): one period of them, accesses summed over every repeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Run {
    pub steps: Vec<Step>,
    pub repeats: u64,
}

/// Longest period of steps folded into runs (an alternation between two
/// functions or CPUs has period 2).
const MAX_PERIOD: usize = 3;

/// Folds a path's back-to-back repeats of the same functions on the same
/// CPUs into runs, so a 70,000-step ping-pong reads as one line.
pub fn fold(steps: &[Step]) -> Vec<Run> {
    let mut out = Vec::new();
    for (i, period, repeats) in periods(steps, |a, b| a.function == b.function && a.cpu == b.cpu) {
        let mut run: Vec<Step> = steps[i..i + period].to_vec();
        for r in 1..repeats {
            for (j, st) in run.iter_mut().enumerate() {
                let more = &steps[i + r * period + j];
                st.accesses += more.accesses;
                st.cpu_change |= more.cpu_change;
                for o in &more.offsets {
                    if !st.offsets.contains(o) {
                        st.offsets.push(*o);
                    }
                }
                st.offsets.sort_unstable();
            }
        }
        out.push(Run { steps: run, repeats: repeats as u64 });
    }
    out
}

/// Splits `items` into runs `(start, period, repeats)`: the longest
/// back-to-back repetition of up to three items found at each
/// point (`repeats` 1 where nothing repeats).
pub fn periods<T>(items: &[T], same: impl Fn(&T, &T) -> bool) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let (mut period, mut repeats) = (1, 1);
        for p in 1..=MAX_PERIOD {
            let mut k = 1;
            while i + (k + 1) * p <= items.len() && (0..p).all(|j| same(&items[i + j], &items[i + k * p + j])) {
                k += 1;
            }
            if k > 1 && k * p > period * repeats {
                (period, repeats) = (p, k);
            }
        }
        out.push((i, period, repeats));
        i += period * repeats;
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub count: u64,
    pub cpu_changes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Flow {
    pub objects: u64,
    pub paths: Vec<PathSummary>,
    pub edges: Vec<Edge>,
}

/// Names an address of process `pid`; `site` is true for a return address
/// or a breakpoint IP, both of which point just past the instruction meant.
pub type Namer<'a> = dyn FnMut(u32, u64) -> String + 'a;

/// The steps of one object's history.
pub fn steps(h: &History, name: &mut Namer<'_>) -> Vec<Step> {
    let Line::Object { pid, cpu, site, .. } = &h.object else { return Vec::new() };
    let mut out =
        vec![Step { function: format!("alloc {}", name(*pid, *site)), cpu: *cpu, cpu_change: false, offsets: Vec::new(), accesses: 0 }];
    for l in &h.hits {
        let Line::Hit { offset, ip, cpu, .. } = l else { continue };
        push(&mut out, name(*pid, *ip), *cpu, Some(*offset));
    }
    if let Some(Line::End { why, cpu, site, .. }) = &h.end {
        if why == "freed" {
            push(&mut out, format!("free {}", name(*pid, *site)), *cpu, None);
        }
    }
    out
}

fn push(out: &mut Vec<Step>, function: String, cpu: u32, offset: Option<u64>) {
    let last = out.last_mut().expect("a path starts with its allocation");
    if last.function == function && last.cpu == cpu {
        last.accesses += offset.is_some() as u64;
        if let Some(o) = offset.filter(|o| !last.offsets.contains(o)) {
            last.offsets.push(o);
            last.offsets.sort_unstable();
        }
        return;
    }
    let cpu_change = last.cpu != cpu;
    out.push(Step { function, cpu, cpu_change, offsets: offset.into_iter().collect(), accesses: offset.is_some() as u64 });
}

fn lifetime(h: &History) -> Option<u64> {
    match (&h.object, &h.end) {
        (Line::Object { alloc_ns, .. }, Some(Line::End { time_ns, why, .. })) if why == "freed" => Some(time_ns.saturating_sub(*alloc_ns)),
        _ => None,
    }
}

/// Paths (most common first) and the graph of step-to-step transitions.
pub fn flow(histories: &[History], name: &mut Namer<'_>) -> Flow {
    // Path key -> (objects, first object's steps, summed lifetime, freed objects).
    type Acc = (u64, Vec<Step>, u64, u64);
    let mut paths: BTreeMap<Vec<(String, bool)>, Acc> = BTreeMap::new();
    let mut edges: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for h in histories {
        let s = steps(h, name);
        for w in s.windows(2) {
            let e = edges.entry((w[0].function.clone(), w[1].function.clone())).or_default();
            e.0 += 1;
            e.1 += w[1].cpu_change as u64;
        }
        // Folded, so objects that ping-ponged a different number of times share a path.
        let key = fold(&s).iter().flat_map(|r| r.steps.iter().map(move |x| (x.function.clone(), x.cpu_change || r.repeats > 1))).collect();
        let p = paths.entry(key).or_insert_with(|| (0, s.clone(), 0, 0));
        p.0 += 1;
        if let Some(t) = lifetime(h) {
            p.2 += t;
            p.3 += 1;
        }
    }
    let mut paths: Vec<PathSummary> = paths
        .into_values()
        .map(|(objects, steps, total, n)| PathSummary {
            objects,
            steps,
            mean_lifetime_ns: (n > 0).then(|| total as f64 / n as f64),
            freed: n,
        })
        .collect();
    paths.sort_by(|a, b| b.objects.cmp(&a.objects).then_with(|| a.steps.len().cmp(&b.steps.len())));
    let mut edges: Vec<Edge> = edges.into_iter().map(|((from, to), (count, cpu_changes))| Edge { from, to, count, cpu_changes }).collect();
    edges.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.from.cmp(&b.from)));
    Flow { objects: histories.len() as u64, paths, edges }
}

/// Text: each path as one line of steps, `=>` where the object changed
/// CPU; steps repeated back to back folded (`a [cpu0] <-> b [cpu1], N alternations`).
pub fn render_text(f: &Flow, limit: usize) -> String {
    let mut s = format!("# Data flow of {} objects (object access histories from hardware breakpoints)\n", f.objects);
    s.push_str("# '=>' marks a move to another CPU; [cpuN +offsets xaccesses]; '<->' steps repeated back to back\n");
    for p in f.paths.iter().take(limit) {
        let pct = 100.0 * p.objects as f64 / f.objects.max(1) as f64;
        let life = match p.mean_lifetime_ns {
            Some(ns) => format!("{} freed, mean lifetime {:.1} us", p.freed, ns / 1000.0),
            None => "none freed while watched".to_string(),
        };
        s.push_str(&format!("\n{:>6} objects ({pct:5.1}%), {life}\n  ", p.objects));
        for (i, run) in fold(&p.steps).iter().enumerate() {
            if i > 0 {
                s.push_str(if run.steps[0].cpu_change { "\n  => " } else { "\n  -> " });
            }
            let parts: Vec<String> = run.steps.iter().map(step_text).collect();
            s.push_str(&parts.join(" <-> "));
            if run.repeats > 1 {
                let n = run.repeats * run.steps.len() as u64 - 1;
                s.push_str(&format!(", {} {}", thousands(n), if run.steps.len() > 1 { "alternations" } else { "repeats" }));
            }
        }
        s.push('\n');
    }
    s
}

fn step_text(st: &Step) -> String {
    let offs: Vec<String> = st.offsets.iter().map(|o| format!("+{o}")).collect();
    let detail = if st.accesses > 0 { format!(" {} x{}", offs.join(","), st.accesses) } else { String::new() };
    format!("{} [cpu{}{detail}]", st.function, st.cpu)
}

/// 35371 as `35,371`.
pub fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Graphviz DOT: functions as nodes, transitions as edges; edges on which
/// objects changed CPU are bold red and say how often.
pub fn render_dot(f: &Flow) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let mut s = String::from("digraph dataflow {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
    for e in &f.edges {
        let attrs = if e.cpu_changes > 0 {
            format!("label=\"{} (CPU change x{})\", color=red, penwidth=3", e.count, e.cpu_changes)
        } else {
            format!("label=\"{}\"", e.count)
        };
        s.push_str(&format!("  {} -> {} [{attrs}];\n", q(&e.from), q(&e.to)));
    }
    s.push_str("}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(id: u64) -> Line {
        Line::Object {
            id,
            pid: 1,
            tid: 1,
            cpu: 0,
            base: 0x1000,
            size: 64,
            site: 0x10,
            alloc_ns: 100,
            setup_ns: 0,
            offsets: vec![(0, 8), (16, 8)],
        }
    }
    fn hit(id: u64, offset: u64, ip: u64, cpu: u32, time_ns: u64) -> Line {
        Line::Hit { id, offset, ip, tid: cpu, cpu, time_ns }
    }
    fn freed(id: u64, cpu: u32) -> Option<Line> {
        Some(Line::End { id, why: "freed".into(), time_ns: 1100, tid: cpu, cpu, site: 0x50 })
    }
    fn names(_: u32, ip: u64) -> String {
        match ip >> 4 {
            1 => "make_msg",
            2 => "fill_msg",
            3 => "enqueue",
            4 => "dequeue",
            _ => "release_msg",
        }
        .to_string()
    }

    fn queue_history(id: u64) -> History {
        History {
            object: object(id),
            hits: vec![hit(id, 0, 0x20, 0, 200), hit(id, 16, 0x30, 0, 300), hit(id, 16, 0x40, 1, 400), hit(id, 0, 0x41, 1, 500)],
            end: freed(id, 1),
        }
    }

    #[test]
    fn collapses_accesses_into_steps_and_marks_the_cpu_change() {
        // Checks a queue-like history: alloc, fill (cpu0), enqueue (cpu0), dequeue x2 (cpu1, moved), free (cpu1).
        let s = steps(&queue_history(1), &mut names);
        let f: Vec<(&str, u32, bool, u64)> = s.iter().map(|x| (x.function.as_str(), x.cpu, x.cpu_change, x.accesses)).collect();
        assert_eq!(
            f,
            vec![
                ("alloc make_msg", 0, false, 0),
                ("fill_msg", 0, false, 1),
                ("enqueue", 0, false, 1),
                ("dequeue", 1, true, 2),
                ("free release_msg", 1, false, 0)
            ]
        );
        assert_eq!(s[3].offsets, vec![0, 16]);
    }

    #[test]
    fn groups_equal_paths_and_counts_cpu_changes_per_edge() {
        // Checks two identical histories and one that never leaves cpu0: 2 paths, and only enqueue->dequeue changes CPU (twice).
        let mut local = queue_history(3);
        local.hits = vec![hit(3, 0, 0x20, 0, 200)];
        local.end = freed(3, 0);
        let f = flow(&[queue_history(1), queue_history(2), local], &mut names);
        assert_eq!(f.objects, 3);
        assert_eq!(f.paths.iter().map(|p| p.objects).collect::<Vec<_>>(), vec![2, 1]);
        assert_eq!((f.paths[0].mean_lifetime_ns, f.paths[0].freed), (Some(1000.0), 2));
        let moved: Vec<(&str, &str, u64)> =
            f.edges.iter().filter(|e| e.cpu_changes > 0).map(|e| (e.from.as_str(), e.to.as_str(), e.cpu_changes)).collect();
        assert_eq!(moved, vec![("enqueue", "dequeue", 2)]);
        let dot = render_dot(&f);
        assert!(dot.contains("\"enqueue\" -> \"dequeue\" [label=\"2 (CPU change x2)\", color=red, penwidth=3]"), "{dot}");
        assert!(render_text(&f, 10).contains("\n  => dequeue [cpu1 +0,+16 x2]"));
    }

    #[test]
    fn ping_pong_folds_into_one_run_and_unfreed_objects_have_no_lifetime() {
        // Checks a never-freed object written alternately by two functions on two CPUs 1,000 times: one folded run of 999 alternations, no lifetime.
        let mut h = queue_history(7);
        h.hits = (0..1000).map(|i| if i % 2 == 0 { hit(7, 0, 0x20, 0, 200 + i) } else { hit(7, 8, 0x30, 1, 200 + i) }).collect();
        h.end = None;
        let f = flow(&[h], &mut names);
        assert_eq!((f.paths[0].mean_lifetime_ns, f.paths[0].freed), (None, 0));
        let runs = fold(&f.paths[0].steps);
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!((runs[1].repeats, runs[1].steps[0].accesses, runs[1].steps[1].accesses), (500, 500, 500));
        let text = render_text(&f, 10);
        assert!(text.contains("none freed while watched"), "{text}");
        assert!(text.contains("fill_msg [cpu0 +0 x500] <-> enqueue [cpu1 +8 x500], 999 alternations"), "{text}");
        assert!(text.lines().count() < 8, "{text}");
    }

    #[test]
    fn paths_differing_only_in_repeat_counts_are_one_path() {
        // Checks two objects that ping-pong 10 and 20 times group as one path of 2 objects.
        let ping = |id: u64, n: u64| {
            let mut h = queue_history(id);
            h.hits = (0..n).map(|i| hit(id, 0, if i % 2 == 0 { 0x20 } else { 0x30 }, (i % 2) as u32, 200 + i)).collect();
            h
        };
        let f = flow(&[ping(1, 10), ping(2, 20)], &mut names);
        assert_eq!(f.paths.iter().map(|p| p.objects).collect::<Vec<_>>(), vec![2]);
        assert_eq!(thousands(35371), "35,371");
    }
}
