//! Frequencies from samples (DCPI §6.1.3-6.1.5): each equivalence class's
//! frequency F (samples per cycle of one execution) from its issue points,
//! local propagation over the flow constraints, and a confidence label.

use crate::cfg::Cfg;
use crate::equiv::Classes;
use crate::loops::Cycle;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// How an estimate was made.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// Mean of a cluster of the smallest issue-point ratios.
    IssuePoints { points: usize, of: usize, spread: f64 },
    /// ΣS/ΣM over the class (few samples or no usable cluster).
    SampleSum,
    /// From the flow constraints of neighbouring estimates.
    Propagated,
    /// ΣS/ΣM over a loop of `blocks` blocks ([`crate::loops`]); `regular`
    /// when every load address in it steps by a loop-invariant amount;
    /// `plausible` when it also goes round, is rarely entered and has
    /// enough samples (what once earned medium confidence).
    Loop { blocks: usize, regular: bool, plausible: bool },
    /// An innermost loop whose body branches ([`crate::loops::branching_loops`]):
    /// the blocks keep the ratios of their local estimates to the header's,
    /// scaled so that the loop's samples equal its estimated cycles; `regular`
    /// and `plausible` as for [`How::Loop`].
    LoopShape { blocks: usize, regular: bool, plausible: bool },
    /// Counted by breakpoints and an entry uprobe (`loupe_probe::count`),
    /// or following from counted classes by the flow constraints alone;
    /// `half_width` is the 95% interval's half-width, in the units of `f`.
    Counted { half_width: f64 },
}

impl How {
    /// Whether the frequency was counted rather than estimated.
    pub fn counted(&self) -> bool {
        matches!(self, How::Counted { .. })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Freq {
    /// Executions per sampling period (executions = f x period in cycles).
    pub f: f64,
    pub confidence: Confidence,
    pub how: How,
}

#[derive(Clone, Debug)]
pub struct Estimate {
    pub block: Vec<Option<Freq>>,
    /// Per flow edge of [`Classes::edges`].
    pub edge: Vec<Option<Freq>>,
}

/// Below this many cycles an instruction is not an issue point: it retires
/// with its predecessor.
pub const MIN_ISSUE: f64 = 0.25;
/// A class with fewer samples is estimated as ΣS/ΣM (DCPI's second challenge).
pub const FEW_SAMPLES: f64 = 40.0;
/// A cluster's largest ratio is at most this times its smallest.
pub const CLUSTER: f64 = 1.5;
/// No instruction waits longer than this per execution (a few DRAM misses);
/// a cluster implying more is discarded.
pub const MAX_CPI: f64 = 5000.0;
/// A loop estimate is trusted when the loop is entered at most this
/// fraction of its iterations.
pub const MAX_ENTRIES: f64 = 0.2;
/// A cluster of fewer samples measures nothing: its count is off by ±1/√n
/// or more (calcwork's branchy: the testb fused with its jne caught 1 sample
/// beside the jne's 1,223, and that single sample set the block at 1.8 M
/// executions, 0.21 G true). The class is then left to its neighbours' flow.
pub const MIN_CLUSTER_SAMPLES: f64 = 10.0;
/// A cluster needs at least this fraction of the class's issue points.
pub const MIN_FRACTION: f64 = 0.25;

/// The latest earlier instruction of the same block that writes a register
/// instruction `i` reads.
pub fn producer(g: &Cfg, i: usize) -> Option<usize> {
    let first = g.blocks[g.block_of(i)].first;
    let reads = g.insns[i].reads | g.insns[i].addr_regs;
    (first..i).rev().find(|&j| g.insns[j].writes & reads != 0)
}

/// DCPI's ratio for issue point `i`: S_i/M_i, or over the window j+1..=i
/// after the instruction j it depends on, whose latency dynamic stalls
/// in between cannot shorten.
fn issue_ratio(g: &Cfg, s: &[f64], m: &[f64], i: usize) -> (f64, f64) {
    let from = producer(g, i).map_or(i, |j| j + 1);
    let (ws, wm) = (from..=i).fold((0.0, 0.0), |(a, b), k| (a + s[k], b + m[k]));
    (ws, wm)
}

/// How the classes' estimates are combined over the flow constraints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Combine {
    /// DCPI's local propagation (§6.1.4).
    #[default]
    Local,
    /// Local propagation, then the global weighted least-squares fit of [`crate::solve`].
    Global,
}

/// Estimation choices beyond DCPI's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    pub combine: Combine,
    /// Re-level innermost loops whose body branches (`branching_loop_estimate`).
    pub branching_loops: bool,
    /// Instructions of a block taken as one issue point (1: each issue
    /// point alone, with DCPI's dependence window; see [`issue_points`]).
    pub retire_window: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { combine: Combine::Local, branching_loops: false, retire_window: 1 }
    }
}

/// Estimates every block and edge frequency of `g`.
pub fn estimate(g: &Cfg, c: &Classes, s: &[f64], m: &[f64], loops: &[Cycle]) -> Estimate {
    estimate_with(g, c, s, m, loops, &[], Options::default())
}

/// [`estimate`] with `branching` innermost loops, as `opt` says.
pub fn estimate_with(g: &Cfg, c: &Classes, s: &[f64], m: &[f64], loops: &[Cycle], branching: &[Cycle], opt: Options) -> Estimate {
    estimate_counted(g, c, s, m, loops, branching, opt, &vec![None; c.count])
}

/// [`estimate_with`], where `counted` holds, per class, its counted
/// frequency and 95% half-width (executions per period): those come first,
/// with what follows from them by flow alone, and estimates fill the rest.
#[allow(clippy::too_many_arguments)]
pub fn estimate_counted(
    g: &Cfg,
    c: &Classes,
    s: &[f64],
    m: &[f64],
    loops: &[Cycle],
    branching: &[Cycle],
    opt: Options,
    counted: &[Option<(f64, f64)>],
) -> Estimate {
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); c.count];
    for (b, cl) in c.block.iter().enumerate() {
        if let Some(cl) = cl {
            members[*cl].push(b);
        }
    }
    let mut direct: Vec<Option<Freq>> = members.iter().map(|bs| estimate_class(g, bs, s, m, opt.retire_window)).collect();
    let per_class = direct.clone();
    let x = LoopInputs { g, c, members: &members, s, m, per_class: &per_class };
    for l in loops {
        loop_estimate(&x, l, &mut direct);
    }
    for (k, f) in propagate_counted(g, c, counted).into_iter().enumerate() {
        if let Some((f, h)) = f {
            direct[k] = Some(Freq { f, confidence: Confidence::High, how: How::Counted { half_width: h } });
        }
    }
    let mut class_f = combine_locally(g, c, &direct);
    if opt.branching_loops && !branching.is_empty() {
        let local = class_f.clone();
        for l in branching {
            branching_loop_estimate(&x, l, &local, &mut direct);
        }
        class_f = combine_locally(g, c, &direct);
    }
    if opt.combine == Combine::Global {
        let samples: Vec<f64> =
            members.iter().map(|bs| bs.iter().flat_map(|&b| g.blocks[b].first..g.blocks[b].end).map(|i| s[i]).sum()).collect();
        let known = unsampled_as_zero(&members, &samples, &direct);
        class_f = crate::solve::solve(&known, &samples, &flow_equations(g, c), &class_f);
    }
    Estimate {
        block: c.block.iter().map(|cl| cl.and_then(|k| class_f[k])).collect(),
        edge: c.edge.iter().map(|cl| cl.and_then(|k| class_f[k])).collect(),
    }
}

/// The counted classes and those the flow constraints fix from counted
/// ones alone (a class equal to counted ones, or a counted sum less counted
/// parts; the half-widths add). A difference below 0 is counting noise
/// around a class that ran (almost) never: 0. A difference whose half-width
/// exceeds [`MAX_DERIVED_HW`] of it (a small class left between two large
/// counts) is no count: it keeps its estimate.
fn propagate_counted(g: &Cfg, c: &Classes, counted: &[Option<(f64, f64)>]) -> Vec<Option<(f64, f64)>> {
    let mut f = counted.to_vec();
    let eqs = flow_equations(g, c);
    let mut changed = true;
    while changed {
        changed = false;
        for (lhs, rhs) in &eqs {
            let unknown: Vec<usize> = rhs.iter().copied().filter(|&k| f[k].is_none()).collect();
            let (known, half) = rhs.iter().filter_map(|&k| f[k]).fold((0.0, 0.0), |(a, b), (x, h)| (a + x, b + h));
            match (f[*lhs], unknown.as_slice()) {
                (None, []) => f[*lhs] = Some((known, half)),
                (Some((l, lh)), [u, rest @ ..]) if rest.iter().all(|r| r == u) && *u != *lhs => {
                    let d = ((l - known) / unknown.len() as f64).max(0.0);
                    if lh + half > MAX_DERIVED_HW * d {
                        continue;
                    }
                    f[*u] = Some((d, lh + half));
                }
                _ => continue,
            }
            changed = true;
        }
    }
    f
}

/// A class derived from counted ones as a difference counts only when its
/// 95% half-width is at most this share of it (the windows' own gate,
/// `loupe_probe::count::MAX_RELATIVE_HW`).
pub const MAX_DERIVED_HW: f64 = 0.05;

/// The classes' own estimates for the global fit, where a class that has
/// instructions but not one sample is an estimate of 0, not a free
/// variable: its blocks go unscheduled (no M), so it had no estimate, and a
/// free class in `loop = entry + back edge` took the whole loop's count
/// (issue 30: a prologue and `ret` run a handful of times fitted at
/// 3.7e8-6.1e8). Its weight is that of one sample at the solver's floor.
fn unsampled_as_zero(members: &[Vec<usize>], samples: &[f64], direct: &[Option<Freq>]) -> Vec<Option<Freq>> {
    let zero = Freq { f: 0.0, confidence: Confidence::Low, how: How::SampleSum };
    (0..direct.len()).map(|k| direct[k].or((!members[k].is_empty() && samples[k] == 0.0).then_some(zero))).collect()
}

/// Local propagation from the classes' own estimates: sure estimates
/// first, ΣS/ΣM ones only where propagation finds nothing better.
fn combine_locally(g: &Cfg, c: &Classes, direct: &[Option<Freq>]) -> Vec<Option<Freq>> {
    let mut class_f: Vec<Option<Freq>> = direct.iter().map(|d| d.filter(|f| f.how != How::SampleSum)).collect();
    propagate(g, c, &mut class_f);
    for (k, d) in direct.iter().enumerate() {
        if class_f[k].is_none() {
            class_f[k] = *d;
        }
    }
    propagate(g, c, &mut class_f);
    class_f
}

/// What the loop estimates read: the graph, its classes and each class's
/// blocks, samples S and best-case cycles M per instruction, and the
/// per-class estimates made before any loop was looked at.
#[derive(Clone, Copy)]
struct LoopInputs<'a> {
    g: &'a Cfg,
    c: &'a Classes,
    members: &'a [Vec<usize>],
    s: &'a [f64],
    m: &'a [f64],
    per_class: &'a [Option<Freq>],
}

impl LoopInputs<'_> {
    /// A block's (ΣS, ΣM).
    fn block_sm(&self, b: usize) -> (f64, f64) {
        (self.g.blocks[b].first..self.g.blocks[b].end).fold((0.0, 0.0), |(x, y), i| (x + self.s[i], y + self.m[i]))
    }
}

/// An innermost loop whose body branches: the local estimates `local`
/// give the path shape (block b runs r_b = est_b / est_header times per
/// iteration), and the loop's samples fix the level, the header's
/// H = ΣS over the loop / Σ_b M_b r_b (M_b the block's best-case cycles):
/// the loop's samples equal its estimated cycles, as for a simple loop,
/// wherever skid moved them between its blocks. Every class wholly inside
/// the loop gets H r_b. Same plausibility rules and label as
/// [`loop_estimate`].
fn branching_loop_estimate(x: &LoopInputs, l: &Cycle, local: &[Option<Freq>], direct: &mut [Option<Freq>]) {
    let LoopInputs { g, c, members, per_class, .. } = *x;
    let est = |b: usize| c.block[b].and_then(|k| local[k]).map(|x| x.f);
    let Some(head) = est(l.blocks[0]).filter(|&h| h > 0.0) else { return };
    // A block no estimate reaches (no samples, no flow constraint) counts as not run.
    let r: Vec<f64> = l.blocks.iter().map(|&b| est(b).map_or(0.0, |e| e / head)).collect();
    let (samples, weighted) = l.blocks.iter().zip(&r).fold((0.0, 0.0), |(a, w), (&b, &rb)| {
        let (bs, bm) = x.block_sm(b);
        (a + bs, w + bm * rb)
    });
    if samples < FEW_SAMPLES || weighted <= 0.0 {
        return;
    }
    let h = samples / weighted;
    let entries = entries_of(g, c, l, per_class);
    let regular = regular_loads(g, l);
    let plausible = regular && entries <= MAX_ENTRIES * h && samples >= 100.0;
    let how = How::LoopShape { blocks: l.blocks.len(), regular, plausible };
    for (&b, &rb) in l.blocks.iter().zip(&r) {
        let Some(cl) = c.block[b].filter(|&k| local[k].is_some() && !direct[k].is_some_and(|d| d.how.counted())) else { continue };
        if members[cl].iter().all(|x| l.blocks.contains(x)) {
            direct[cl] = Some(Freq { f: h * rb, confidence: Confidence::Low, how });
        }
    }
}

/// Executions per period of the edges into loop `l` from outside it, by
/// the per-class estimates of the blocks they leave.
fn entries_of(g: &Cfg, c: &Classes, l: &Cycle, per_class: &[Option<Freq>]) -> f64 {
    l.blocks
        .iter()
        .flat_map(|&b| g.blocks[b].preds.iter().map(|&e| g.edges[e].from))
        .filter(|p| !l.blocks.contains(p))
        .filter_map(|p| c.block[p].and_then(|k| per_class[k]))
        .map(|x| x.f)
        .sum()
}

/// A loop's frequency, ΣS/ΣM over all its blocks, given to every class
/// that lies wholly inside it. On an out-of-order core the samples of a
/// short loop pile on one instruction per retire group, often in another
/// block than the one the model charges the cycles to; the loop's samples
/// as a whole still measure its cycles. Blocks of a loop differ in
/// frequency by the loop's entries and exits: the estimate is only trusted
/// when the entries (the per-class estimates of the blocks outside that
/// branch into it, `per_class`) are few beside the iterations.
fn loop_estimate(x: &LoopInputs, l: &Cycle, direct: &mut [Option<Freq>]) {
    let LoopInputs { g, c, members, s, m, per_class } = *x;
    let insns = || l.blocks.iter().flat_map(|&b| g.blocks[b].first..g.blocks[b].end);
    let (samples, cycles): (f64, f64) = insns().fold((0.0, 0.0), |(a, b), i| (a + s[i], b + m[i]));
    if samples < FEW_SAMPLES || cycles <= 0.0 {
        return;
    }
    let f = samples / cycles;
    let entries = entries_of(g, c, l, per_class);
    // Every block of the body runs every iteration: one the model gives
    // half a cycle or more (or none, when unsampled blocks go unscheduled)
    // but with almost no samples says the loop rarely
    // goes round, and its samples are a stall before the exit (SQLite's
    // varint loop: 9,822 samples on the first block's exit, none on the
    // back edge's block, +12,000%). Skid moves samples between blocks by a
    // factor of 2-4 (isort), not 10.
    let goes_round = l.blocks.iter().map(|&b| x.block_sm(b)).all(|(bs, bm)| bs > 0.0 && (bm < 0.5 || bs >= 0.1 * f * bm));
    let regular = regular_loads(g, l);
    let plausible = regular && goes_round && entries <= MAX_ENTRIES * f && samples >= 100.0;
    // Low even when plausible: on the quiet machine (2026-11-22 23:40) insertion sort's plausible loop
    // estimate was off by -15% and +25% (0% of its samples within 15%), where on the loaded machine hours
    // before it had been 90% within 5%. A loop's ΣS/ΣM rests on the cycles-per-ns clock measured at
    // analysis time and on skid, which these checks cannot see; medium waits for the clock to be
    // measured while recording.
    let f = Freq { f, confidence: Confidence::Low, how: How::Loop { blocks: l.blocks.len(), regular, plausible } };
    for &b in &l.blocks {
        let Some(cl) = c.block[b] else { continue };
        if members[cl].iter().all(|x| l.blocks.contains(x)) {
            direct[cl] = Some(f);
        }
    }
}

/// Whether every load of the loop has an address that steps by a
/// loop-invariant amount each iteration (its address registers are changed
/// in the loop only by add, sub, inc, dec or lea of themselves and
/// invariants). Such loads stream or stay in cache; a load whose address
/// comes from another load (a pointer chase) or a hash may miss on every
/// iteration, and then ΣS counts stall cycles ΣM does not: the estimate is high.
pub fn regular_loads(g: &Cfg, l: &Cycle) -> bool {
    let insns: Vec<usize> = l.blocks.iter().flat_map(|&b| g.blocks[b].first..g.blocks[b].end).collect();
    insns.iter().filter(|&&i| g.insns[i].loads).all(|&i| steps_regularly(g, &insns, i))
}

/// Whether load `i`'s address steps by a loop-invariant amount each time
/// round the loop made of instructions `insns`: its address registers are
/// changed there only by add, sub, inc, dec or lea of themselves and of
/// registers the loop does not write.
pub fn steps_regularly(g: &Cfg, insns: &[usize], i: usize) -> bool {
    let written = insns.iter().fold(0u64, |w, &k| w | g.insns[k].writes);
    let stepping = |k: usize, r: u64| {
        use iced_x86::Mnemonic::*;
        let x = &g.insns[k];
        matches!(x.mnemonic, Add | Sub | Inc | Dec | Lea) && !x.loads && (x.reads | x.addr_regs) & written & !r == 0
    };
    let regs = g.insns[i].addr_regs;
    (0..64)
        .map(|k| 1u64 << k)
        .filter(|r| regs & r != 0)
        .all(|r| insns.iter().filter(|&&j| g.insns[j].writes & r != 0).all(|&j| stepping(j, r)))
}

/// The issue points of a class as (ΣS, ΣM) pairs. With `window` 1, each
/// instruction with M_i >= [`MIN_ISSUE`] over DCPI's dependence window;
/// with a larger window, each run of up to `window` consecutive
/// instructions of a block (from its head) counts as one point: on an
/// out-of-order core the instructions retired in one group with a stalled
/// one get few samples, and alone they look like stall-free issue points.
pub fn issue_points(g: &Cfg, blocks: &[usize], s: &[f64], m: &[f64], window: usize) -> Vec<(f64, f64)> {
    if window <= 1 {
        let insns = blocks.iter().flat_map(|&b| g.blocks[b].first..g.blocks[b].end);
        return insns.filter(|&i| m[i] >= MIN_ISSUE).map(|i| issue_ratio(g, s, m, i)).filter(|(_, wm)| *wm > 0.0).collect();
    }
    let runs = blocks
        .iter()
        .flat_map(|&b| (g.blocks[b].first..g.blocks[b].end).step_by(window).map(move |k| k..(k + window).min(g.blocks[b].end)));
    runs.map(|r| r.fold((0.0, 0.0), |(a, w), k| (a + s[k], w + m[k]))).filter(|(_, wm)| *wm >= MIN_ISSUE).collect()
}

fn estimate_class(g: &Cfg, blocks: &[usize], s: &[f64], m: &[f64], window: usize) -> Option<Freq> {
    let insns: Vec<usize> = blocks.iter().flat_map(|&b| g.blocks[b].first..g.blocks[b].end).collect();
    if insns.is_empty() {
        return None;
    }
    let total_s: f64 = insns.iter().map(|&i| s[i]).sum();
    let total_m: f64 = insns.iter().map(|&i| m[i]).sum();
    let sum = (total_m > 0.0).then(|| Freq { f: total_s / total_m, confidence: Confidence::Low, how: How::SampleSum });
    if total_s < FEW_SAMPLES {
        return sum;
    }
    let mut ratios: Vec<(f64, f64, f64)> = issue_points(g, blocks, s, m, window).into_iter().map(|(ws, wm)| (ws / wm, ws, wm)).collect();
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = ratios.len();
    let need = ((n as f64 * MIN_FRACTION).ceil() as usize).max(2).min(n);
    for k in 0..n {
        let hi = ratios[k].0 * CLUSTER;
        let cluster: Vec<&(f64, f64, f64)> = ratios[k..].iter().take_while(|r| r.0 <= hi).collect();
        if cluster.len() < need {
            continue;
        }
        let (cs, cm) = cluster.iter().fold((0.0, 0.0), |(a, b), r| (a + r.1, b + r.2));
        // DCPI discards a cluster whose F would give another instruction of
        // the class an unreasonable stall (a cluster of unsampled points gives F = 0);
        // one of a few samples measures nothing (see MIN_CLUSTER_SAMPLES).
        let worst = insns.iter().map(|&i| s[i]).fold(0.0, f64::max);
        if cs < MIN_CLUSTER_SAMPLES || worst * cm / cs > MAX_CPI {
            continue;
        }
        let spread = if ratios[k].0 > 0.0 { cluster.last().unwrap().0 / ratios[k].0 } else { f64::INFINITY };
        let how = How::IssuePoints { points: cluster.len(), of: n, spread };
        return Some(Freq { f: cs / cm, confidence: direct_confidence(cluster.len(), n, spread, cs), how });
    }
    sum
}

/// DCPI §6.1.5: more issue points, tighter ratios and more samples make a
/// surer estimate. On an out-of-order core an issue point with few samples
/// has often retired in the shadow of a stalled neighbour rather than run
/// stall-free, so a small cluster says little (measured: clusters of two or
/// three points with spread 1.1-1.3 labelled medium and high were off by
/// 20-90% in zstd, SQLite and Lua): medium needs most of the class's issue
/// points to agree, and nothing reaches high.
fn direct_confidence(points: usize, of: usize, spread: f64, samples: f64) -> Confidence {
    if points >= 3 && 2 * points >= of && spread <= 1.3 && samples >= 200.0 {
        Confidence::Medium
    } else {
        Confidence::Low
    }
}

/// Local propagation (§6.1.4): a block's frequency is the sum of its
/// incoming and of its outgoing edges; each new value goes to the whole
/// class at once; no value is negative. With missing edges only the
/// outgoing sums of blocks with known successors hold.
fn propagate(g: &Cfg, c: &Classes, class_f: &mut [Option<Freq>]) {
    let eqs = flow_equations(g, c);
    let mut changed = true;
    while changed {
        changed = false;
        for (lhs, rhs) in &eqs {
            changed |= apply(*lhs, rhs, class_f);
        }
    }
}

/// The flow constraints over classes: a block's class equals the sum of
/// its incoming edges' classes and of its outgoing ones. With missing
/// edges only the outgoing sums of blocks with known successors hold.
pub fn flow_equations(g: &Cfg, c: &Classes) -> Vec<crate::solve::Equation> {
    let mut eqs: Vec<(usize, Vec<usize>)> = Vec::new(); // (block class, edge classes)
    let mut ins_of: Vec<Vec<usize>> = vec![Vec::new(); g.blocks.len()];
    let mut outs_of: Vec<Vec<usize>> = vec![Vec::new(); g.blocks.len()];
    for (e, fe) in c.edges.iter().enumerate() {
        let Some(k) = c.edge[e] else { continue };
        if let Some(t) = fe.to {
            ins_of[t].push(k);
        }
        if let Some(f) = fe.from {
            outs_of[f].push(k);
        }
    }
    for (b, blk) in g.blocks.iter().enumerate() {
        let Some(bc) = c.block[b] else { continue };
        let (ins, outs) = (std::mem::take(&mut ins_of[b]), std::mem::take(&mut outs_of[b]));
        if !g.missing_edges && !ins.is_empty() {
            eqs.push((bc, ins));
        }
        if !blk.unresolved && !outs.is_empty() {
            eqs.push((bc, outs));
        }
    }
    eqs
}

/// One flow equation `lhs = Σ rhs` (over classes; a class may appear in
/// rhs several times). Returns whether it set a value.
fn apply(lhs: usize, rhs: &[usize], f: &mut [Option<Freq>]) -> bool {
    let unknown: Vec<usize> = rhs.iter().copied().filter(|&k| f[k].is_none()).collect();
    let known: f64 = rhs.iter().filter_map(|&k| f[k]).map(|x| x.f).sum();
    let worst = rhs.iter().filter_map(|&k| f[k]).map(|x| x.confidence).chain(f[lhs].map(|x| x.confidence)).min();
    match (f[lhs], unknown.as_slice()) {
        (None, []) => {
            f[lhs] = Some(derived(known, worst.unwrap_or(Confidence::Low), known));
            true
        }
        (Some(l), [u, rest @ ..]) if rest.iter().all(|r| r == u) && unknown.first() != Some(&lhs) => {
            // A negative difference says the estimates disagree, not that
            // the item never ran: it stays unknown, for its own samples to decide.
            let value = (l.f - known) / unknown.len() as f64;
            if value <= 0.0 {
                return false;
            }
            f[*u] = Some(derived(value, worst.unwrap_or(Confidence::Low), l.f));
            true
        }
        _ => false,
    }
}

/// A propagated value is one level less sure than its inputs, and low
/// when it is a small difference of large numbers.
fn derived(value: f64, inputs: Confidence, scale: f64) -> Freq {
    let c = if value < 0.2 * scale {
        Confidence::Low
    } else {
        match inputs {
            Confidence::High => Confidence::Medium,
            _ => Confidence::Low,
        }
    };
    Freq { f: value, confidence: c, how: How::Propagated }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfg::{build, NoMemory};
    use crate::decode::decode;
    use crate::equiv::classes;

    /// 0: test; je 8 | 4: mov eax,1; jmp 0xd | 0xb: mov eax,2 | 0x10: ret
    fn diamond() -> Cfg {
        let bytes = [0x85, 0xff, 0x74, 0x07, 0xb8, 0x01, 0, 0, 0, 0xeb, 0x05, 0xb8, 0x02, 0, 0, 0, 0xc3];
        build(decode(0, &bytes), &NoMemory)
    }

    #[test]
    fn smallest_cluster_ignores_a_stalled_issue_point() {
        // Checks §6.1.3 on a hand-made class: ratios 100, 104, 98, 500 (a stall) -> F ≈ 100.67 from three points.
        // One block of four instructions with no register dependences between them.
        // mov $1,%eax; mov $2,%ecx; mov $3,%edx; mov $4,%esi; ret
        let bytes = [0xb8, 1, 0, 0, 0, 0xb9, 2, 0, 0, 0, 0xba, 3, 0, 0, 0, 0xbe, 4, 0, 0, 0, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = classes(&g);
        let s = [100.0, 104.0, 98.0, 500.0, 0.0];
        let m = [1.0, 1.0, 1.0, 1.0, 0.0];
        let e = estimate(&g, &c, &s, &m, &[]);
        let f = e.block[0].unwrap();
        assert!((f.f - 302.0 / 3.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.how, How::IssuePoints { points: 3, of: 4, spread: 104.0 / 98.0 });
        assert_eq!(f.confidence, Confidence::Medium, "three of four issue points agree: medium, never high on an out-of-order core");
    }

    #[test]
    fn cluster_of_unsampled_or_barely_sampled_issue_points_is_discarded() {
        // Checks DCPI's rule: `testb (load); jne` with 0 samples on the only issue point and 1135 on jne
        // gives ΣS/ΣM, not F = 0.
        // testb $1,(%rdi); jne 0; ret
        let bytes = [0xf6, 0x07, 0x01, 0x75, 0xfb, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = classes(&g);
        let e = estimate(&g, &c, &[0.0, 1135.0, 0.0], &[0.5, 0.0, 0.5], &[]);
        let f = e.block[0].unwrap();
        assert_eq!((f.f, f.how), (1135.0 / 0.5, How::SampleSum));
        // One sample there (calcwork's branchy on 2026-11-26) measures nothing either: not F = 2.
        let e = estimate(&g, &c, &[1.0, 1135.0, 0.0], &[0.5, 0.0, 0.5], &[]);
        let f = e.block[0].unwrap();
        assert_eq!((f.f, f.how), (1136.0 / 0.5, How::SampleSum));
    }

    #[test]
    fn propagation_fills_the_arm_without_samples() {
        // Checks §6.1.4: head/join class F=10, then-arm F=7 (direct) -> else-arm F=3 by the flow constraint.
        let g = diamond();
        let c = classes(&g);
        // insns: 0 test, 1 je, 2 mov, 3 jmp, 4 mov, 5 ret
        let s = [250.0, 0.0, 175.0, 175.0, 0.0, 250.0];
        let m = [25.0, 0.0, 25.0, 25.0, 0.0, 25.0];
        let e = estimate(&g, &c, &s, &m, &[]);
        let near = |x: Option<Freq>, want: f64| (x.unwrap().f - want).abs() < 1e-9;
        assert!(near(e.block[0], 10.0) && near(e.block[3], 10.0));
        assert!(near(e.block[1], 7.0));
        let els = e.block[2].unwrap();
        assert!((els.f - 3.0).abs() < 1e-9 && els.how == How::Propagated, "{els:?}");
    }

    #[test]
    fn propagation_never_goes_negative() {
        // Checks the no-negative rule: an arm estimated above its head leaves the other arm to its own samples (0 here).
        let g = diamond();
        let c = classes(&g);
        let s = [250.0, 0.0, 350.0, 350.0, 0.0, 250.0];
        let m = [25.0, 0.0, 25.0, 25.0, 25.0, 25.0];
        let e = estimate(&g, &c, &s, &m, &[]);
        let els = e.block[2].unwrap();
        assert_eq!((els.f, els.how, els.confidence), (0.0, How::SampleSum, Confidence::Low));
    }

    #[test]
    fn retire_window_takes_a_retire_group_as_one_issue_point() {
        // Checks window 2 on four independent movs retired in pairs, samples on each pair's first:
        // alone the starved points give F = 5; as two points of (105, 2 cycles) F = 210/4 = 52.5.
        // mov $1,%eax; mov $2,%ecx; mov $3,%edx; mov $4,%esi; ret
        let bytes = [0xb8, 1, 0, 0, 0, 0xb9, 2, 0, 0, 0, 0xba, 3, 0, 0, 0, 0xbe, 4, 0, 0, 0, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = classes(&g);
        let (s, m) = ([100.0, 5.0, 100.0, 5.0, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0]);
        assert_eq!(issue_points(&g, &[0], &s, &m, 2), vec![(105.0, 2.0), (105.0, 2.0)], "the ret alone has no cycles");
        let one = estimate(&g, &c, &s, &m, &[]).block[0].unwrap();
        assert!((one.f - 5.0).abs() < 1e-9, "{one:?}");
        let opt = Options { retire_window: 2, ..Options::default() };
        let two = estimate_with(&g, &c, &s, &m, &[], &[], opt).block[0].unwrap();
        assert!((two.f - 52.5).abs() < 1e-9, "{two:?}");
    }

    #[test]
    fn branching_loop_keeps_the_local_shape_and_takes_the_level_from_all_its_samples() {
        // Checks idea 1 on an if inside a loop: locally header 10 and arm 4 (r = 0.4); the loop's 66 samples over
        // Σ M_b r_b = 2 + 0.4 + 2 = 4.4 cycles give header 15 and arm 6; the skipping edge is then 15 - 6 = 9.
        // 0: test %edi,%edi ; je 6 | 4: inc %eax | 6: dec %edi ; jne 0 | a: ret
        let bytes = [0x85, 0xff, 0x74, 0x02, 0xff, 0xc0, 0xff, 0xcf, 0x75, 0xf6, 0xc3];
        let g = build(decode(0, &bytes), &NoMemory);
        let c = classes(&g);
        // insns: 0 test, 1 je, 2 inc, 3 dec, 4 jne (a stalled issue point), 5 ret
        let s = [10.0, 10.0, 4.0, 10.0, 32.0, 0.0];
        let m = [1.0; 6];
        let loops = crate::loops::branching_loops(&g);
        let local = estimate_with(&g, &c, &s, &m, &[], &loops, Options::default());
        let near = |x: Option<Freq>, want: f64| x.is_some_and(|x| (x.f - want).abs() < 1e-9);
        assert!(near(local.block[0], 10.0) && near(local.block[1], 4.0), "{:?}", local.block);
        let opt = Options { branching_loops: true, ..Options::default() };
        let e = estimate_with(&g, &c, &s, &m, &[], &loops, opt);
        assert!(near(e.block[0], 15.0) && near(e.block[2], 15.0) && near(e.block[1], 6.0), "{:?}", e.block);
        let skip = g.edges.iter().position(|x| (g.start(x.from), g.start(x.to)) == (0, 6)).unwrap();
        assert!(near(e.edge[skip], 9.0), "{:?}", e.edge[skip]);
        let f = e.block[1].unwrap();
        assert_eq!((f.confidence, f.how), (Confidence::Low, How::LoopShape { blocks: 3, regular: true, plausible: false }));
    }
}
