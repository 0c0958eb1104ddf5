//! Hardware event samples bound each stall culprit (DCPI §6.3): "Even if a
//! candidate cannot be eliminated, sometimes we can estimate an upper bound
//! on how much it can contribute to the stall."
//!
//! Given the samples of a hardware event near a culprit and the event's
//! sampling period, the culprit's instruction caused about samples x period
//! events, and each costs at most a known penalty: the stall cycles it can
//! explain are at most events x penalty (DCPI assumed every I-cache miss
//! was a fill from memory). A culprit with no event samples where the
//! stall, had it caused all of it, would have left several is proven
//! innocent. Causes no event in the database counts stay "possible, not
//! bounded" exactly as without events.
//!
//! Where the samples land: without precise sampling (Intel PEBS, AMD IBS)
//! an event's interrupt arrives some instructions after the one that
//! caused it (skid). The samples of a culprit are therefore counted from
//! its instruction to the end of its basic block and at the first
//! instruction of each successor block: a wider window only loosens the
//! bound and makes ruling out harder, never the reverse.

use crate::culprit::Cause;
use crate::{Calc, InsnReport};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One hardware event's samples in the image, per ELF virtual address,
/// with the mean number of events per sample (period sum / samples).
#[derive(Clone, Debug, Default)]
pub struct EventSamples {
    pub samples: HashMap<u64, u64>,
    pub period: f64,
}

/// The hardware events of the same image and epochs, by perf's name.
pub type HwEvents = BTreeMap<String, EventSamples>;

/// The costliest a single event can be, by kind of event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Penalty {
    /// Pipeline refill after a mispredicted branch.
    Mispredict,
    /// A cache line filled all the way from memory (DCPI's assumption for IMISS).
    MemoryFill,
    /// A page walk whose every page-table read comes from memory.
    PageWalk,
}

/// Branch mispredict penalty: "in the range from 11 to 18 cycles, depending
/// on the type of mispredicted branch and whether or not the instructions
/// are being fed from the Op Cache" (AMD, Software Optimization Guide for the
/// Zen 4 Microarchitecture, pub. 57647; llvm-mca models this Zen 5 with Zen 4's
/// tables too). The upper end, since the result is an upper bound. It agrees
/// with what calc measures here on calcwork's random branch (13-18 cycles of
/// stall per mispredict, BENCHMARKS.md).
pub const MISPREDICT_CYCLES: f64 = 18.0;
/// Latency of a fetch from main memory: "fetch from main memory 100 nanosec"
/// (P. Norvig, "Teach Yourself Programming in Ten Years", table of timings;
/// the figure of "Latency numbers every programmer should know"). Charging
/// every L1 miss a memory fill overstates the many that hit L2 or L3 (14 and
/// ~50 cycles on Zen 4, pub. 57647): a loose but safe bound, as DCPI's was.
/// Machines with slower memory (remote NUMA nodes) pass their own figure.
pub const MEMORY_NS: f64 = 100.0;
/// Page-table levels read by a page walk with 48-bit virtual addresses
/// (x86-64 4-level paging: Intel SDM vol. 3A §4.5; AMD APM vol. 2 §5.3);
/// each read is charged a memory fill, the data's own fill counting as a
/// D-cache miss.
pub const PAGE_WALK_LEVELS: f64 = 4.0;
/// Event samples a culprit must have been expected to leave before zero
/// samples rule it out: for a Poisson count of mean 3, P(0) = e^-3 = 5%.
pub const RULE_OUT_SAMPLES: f64 = 3.0;

/// Penalties in core cycles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    pub mispredict: f64,
    pub memory_fill: f64,
    pub page_walk: f64,
}

impl Penalties {
    /// The published penalties at a core clock of `ghz`, with memory
    /// latency `memory_ns` (normally [`MEMORY_NS`]).
    pub fn at_clock(ghz: f64, memory_ns: f64) -> Penalties {
        let fill = memory_ns * ghz;
        Penalties { mispredict: MISPREDICT_CYCLES, memory_fill: fill, page_walk: PAGE_WALK_LEVELS * fill }
    }

    pub fn cycles(&self, p: Penalty) -> f64 {
        match p {
            Penalty::Mispredict => self.mispredict,
            Penalty::MemoryFill => self.memory_fill,
            Penalty::PageWalk => self.page_walk,
        }
    }
}

/// What a perf event counts about a cause. `penalty` is None where the
/// event counts only some occurrences of the cause: it is evidence, but
/// bounds nothing (an L1 miss that hits L2 stalls too, and last-level
/// misses do not count it; an iTLB miss is not an I-cache miss).
pub struct Meaning {
    pub event: &'static str,
    pub cause: Cause,
    pub penalty: Option<Penalty>,
}

/// perf's generic and cache event names (`perf list`), and what they bound.
pub const MEANINGS: &[Meaning] = &[
    Meaning { event: "branch-misses", cause: Cause::BranchMispredict, penalty: Some(Penalty::Mispredict) },
    Meaning { event: "L1-dcache-load-misses", cause: Cause::DCache, penalty: Some(Penalty::MemoryFill) },
    Meaning { event: "cache-misses", cause: Cause::DCache, penalty: None },
    Meaning { event: "LLC-load-misses", cause: Cause::DCache, penalty: None },
    Meaning { event: "dTLB-load-misses", cause: Cause::Dtlb, penalty: Some(Penalty::PageWalk) },
    Meaning { event: "L1-icache-load-misses", cause: Cause::ICache, penalty: Some(Penalty::MemoryFill) },
    Meaning { event: "iTLB-load-misses", cause: Cause::ICache, penalty: None },
];

/// The events present in `ev` that bound `cause`, with their penalties.
pub fn bounding_events(cause: Cause, ev: &HwEvents) -> Vec<(&'static str, Penalty)> {
    MEANINGS.iter().filter(|m| m.cause == cause && ev.contains_key(m.event)).filter_map(|m| Some((m.event, m.penalty?))).collect()
}

/// One event's samples near one culprit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evidence {
    pub event: String,
    /// Samples of the event in the culprit's window (see the module docs).
    pub samples: u64,
    /// Mean events per sample.
    pub period: f64,
    /// The most one event costs, in cycles; None: the event bounds nothing.
    pub penalty_cycles: Option<f64>,
    /// Samples the culprit would have left had it caused the whole stall
    /// alone, each event at its full penalty (the fewest events that could).
    pub expected_samples: Option<f64>,
}

/// What the hardware events say about one culprit of one stall.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Bound {
    /// The most stall cycles (over the whole profile) the culprit can
    /// explain; None: possible, not bounded.
    pub bound_cycles: Option<f64>,
    /// No event samples where several were expected: proven innocent.
    pub ruled_out: bool,
    pub evidence: Vec<Evidence>,
}

/// Bounds a culprit of `cause` whose window holds the addresses `window`,
/// for a stall of `stall_cycles` over the whole profile.
pub fn bound_culprit(cause: Cause, window: &[u64], stall_cycles: f64, ev: &HwEvents, pen: &Penalties) -> Bound {
    let mut b = Bound::default();
    for m in MEANINGS.iter().filter(|m| m.cause == cause) {
        let Some(e) = ev.get(m.event) else { continue };
        let n: u64 = window.iter().map(|a| e.samples.get(a).copied().unwrap_or(0)).sum();
        // Without a period (a profile that recorded none) the count of events is unknown.
        let penalty = m.penalty.filter(|_| e.period > 0.0).map(|p| pen.cycles(p));
        let expected = penalty.map(|p| stall_cycles / (e.period * p));
        if let (Some(p), Some(x)) = (penalty, expected) {
            if n == 0 && x >= RULE_OUT_SAMPLES {
                b.ruled_out = true;
            }
            // Zero samples where few were expected tell nothing either way.
            if n > 0 {
                let cap = n as f64 * e.period * p;
                b.bound_cycles = Some(b.bound_cycles.map_or(cap, |c: f64| c.min(cap)));
            }
        }
        b.evidence.push(Evidence {
            event: m.event.into(),
            samples: n,
            period: e.period,
            penalty_cycles: penalty,
            expected_samples: expected,
        });
    }
    if b.ruled_out {
        b.bound_cycles = Some(0.0);
    }
    b
}

/// Where each culprit's event samples are counted, indexed once per
/// listing (a procedure of 30k instructions has thousands of culprits).
pub struct Windows<'a> {
    c: &'a Calc,
    row_of: HashMap<u64, usize>,
    /// Successor block heads by the address of a block's last instruction.
    succs: HashMap<u64, Vec<u64>>,
}

impl<'a> Windows<'a> {
    pub fn new(c: &'a Calc) -> Windows<'a> {
        let row_of = c.instructions.iter().enumerate().map(|(k, r)| (r.address, k)).collect();
        let mut succs: HashMap<u64, Vec<u64>> = HashMap::new();
        for e in &c.edges {
            let v = succs.entry(e.from).or_default();
            if !v.contains(&e.to) {
                v.push(e.to);
            }
        }
        Windows { c, row_of, succs }
    }

    /// Addresses whose event samples belong to a culprit at row `start`:
    /// the rest of its block and the first instruction of each successor block.
    pub fn window(&self, start: usize) -> Vec<u64> {
        let rows = &self.c.instructions;
        let block = rows[start].block;
        let end = (start..rows.len()).take_while(|&k| rows[k].block == block).last().unwrap_or(start);
        let mut w: Vec<u64> = rows[start..=end].iter().map(|r| r.address).collect();
        for &to in self.succs.get(&rows[end].address).into_iter().flatten() {
            if !w.contains(&to) {
                w.push(to);
            }
        }
        w
    }

    /// The row where the window of a culprit of the stall at row `i` starts:
    /// its instruction, or for an I-cache miss (no instruction to blame) the
    /// stalled row, or the block's head when the stalled row is the one
    /// after it (skid).
    pub fn start(&self, i: usize, at: Option<u64>) -> usize {
        let rows = &self.c.instructions;
        if let Some(&k) = at.and_then(|a| self.row_of.get(&a)) {
            return k;
        }
        let head = |k: usize| k == 0 || rows[k - 1].block != rows[k].block;
        if i > 0 && rows[i - 1].block == rows[i].block && head(i - 1) {
            i - 1
        } else {
            i
        }
    }
}

/// Bounds every culprit of `calc` with the events `ev`, puts the ruled-out
/// ones last, and recomputes the summary. With no events, nothing changes.
pub fn apply(calc: &mut Calc, ev: &HwEvents, pen: &Penalties) {
    if ev.is_empty() {
        return;
    }
    let all: Vec<Vec<Bound>> = {
        let w = Windows::new(calc);
        let per_row = |(i, r): (usize, &InsnReport)| {
            let stall = r.suspect * r.executions.unwrap_or(0.0);
            r.culprits.iter().map(|k| bound_culprit(k.cause, &w.window(w.start(i, k.at)), stall, ev, pen)).collect()
        };
        calc.instructions.iter().enumerate().map(per_row).collect()
    };
    for (r, bounds) in calc.instructions.iter_mut().zip(all) {
        let mut pairs: Vec<_> = r.culprits.drain(..).zip(bounds).collect();
        pairs.sort_by_key(|(_, b)| b.ruled_out);
        (r.culprits, r.bounds) = pairs.into_iter().unzip();
    }
    calc.summary = crate::summarize(&calc.instructions, calc.period_cycles);
}

/// The most of a row's stall (cycles over the profile) each of its
/// culprits can explain, ruled-out ones excluded.
pub(crate) fn caps(r: &InsnReport, stall: f64) -> Vec<(Cause, f64)> {
    let bound = |k: usize| r.bounds.get(k).cloned().unwrap_or_default();
    (0..r.culprits.len())
        .map(|k| (r.culprits[k].cause, bound(k)))
        .filter(|(_, b)| !b.ruled_out)
        .map(|(c, b)| (c, b.bound_cycles.map_or(stall, |x| x.min(stall))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cfg::NoMemory;
    use crate::mca::MachineModel;

    /// (event, [(address, samples)], period)
    type Literal<'a> = (&'a str, &'a [(u64, u64)], f64);

    fn events(list: &[Literal]) -> HwEvents {
        list.iter().map(|(n, s, p)| (n.to_string(), EventSamples { samples: s.iter().copied().collect(), period: *p })).collect()
    }

    const PEN: Penalties = Penalties { mispredict: 18.0, memory_fill: 300.0, page_walk: 1200.0 };

    #[test]
    fn samples_times_period_times_penalty_bound_the_culprit() {
        // Checks the bound on literal counts: 7 + 3 samples of branch-misses in the window, period 1000,
        // 18 cycles each -> at most 10 x 1000 x 18 = 180,000 cycles; samples outside the window do not count.
        let ev = events(&[("branch-misses", &[(0x10, 7), (0x14, 3), (0x99, 50)], 1000.0)]);
        let b = bound_culprit(Cause::BranchMispredict, &[0x10, 0x14], 500_000.0, &ev, &PEN);
        assert_eq!(b.bound_cycles, Some(180_000.0));
        assert!(!b.ruled_out);
        // Expected had the mispredict caused the whole 500,000-cycle stall: 500,000 / (1000 x 18) = 27.8 samples.
        assert!((b.evidence[0].expected_samples.unwrap() - 27.78).abs() < 0.01, "{b:?}");
        assert_eq!(b.evidence[0].samples, 10);
    }

    #[test]
    fn zero_samples_rule_out_only_when_several_were_expected() {
        // Checks "proven innocent": a 300,000-cycle D-cache stall needs >= 300,000 / (2000 x 300) = 0.5 samples
        // of L1 misses (too few to tell), a 1,800,000-cycle one needs 3 (ruled out with none).
        let ev = events(&[("L1-dcache-load-misses", &[(0x99, 4)], 2000.0)]);
        let small = bound_culprit(Cause::DCache, &[0x10], 300_000.0, &ev, &PEN);
        assert!(!small.ruled_out);
        assert_eq!(small.bound_cycles, None);
        let large = bound_culprit(Cause::DCache, &[0x10], 1_800_000.0, &ev, &PEN);
        assert!(large.ruled_out);
        assert_eq!(large.bound_cycles, Some(0.0));
    }

    #[test]
    fn absent_and_partial_events_bound_nothing() {
        // Checks a cause no event counts stays possible and unbounded, and last-level misses are evidence only.
        let ev = events(&[("cache-misses", &[], 1000.0), ("branch-misses", &[(0x10, 1)], 1000.0)]);
        let d = bound_culprit(Cause::DCache, &[0x10], 9e9, &ev, &PEN);
        assert_eq!((d.bound_cycles, d.ruled_out, d.evidence.len()), (None, false, 1));
        assert_eq!(d.evidence[0].penalty_cycles, None);
        let w = bound_culprit(Cause::StoreBuffer, &[0x10], 9e9, &ev, &PEN);
        assert_eq!(w, Bound::default());
        assert_eq!(bounding_events(Cause::DCache, &ev), vec![]);
        assert_eq!(bounding_events(Cause::BranchMispredict, &ev), vec![("branch-misses", Penalty::Mispredict)]);
        // A profile without periods says nothing either way.
        let ev = events(&[("branch-misses", &[], 0.0)]);
        let p = bound_culprit(Cause::BranchMispredict, &[0x10], 9e9, &ev, &PEN);
        assert_eq!((p.bound_cycles, p.ruled_out, p.evidence[0].expected_samples), (None, false, None));
    }

    #[test]
    fn penalties_at_a_clock() {
        // Checks the conversion: 100 ns at 3.5 GHz is a 350-cycle fill, a 4-level walk 1400; mispredict stays 18.
        let p = Penalties::at_clock(3.5, MEMORY_NS);
        assert_eq!((p.mispredict, p.memory_fill, p.page_walk), (18.0, 350.0, 1400.0));
    }

    struct OneCycle;
    impl MachineModel for OneCycle {
        fn schedule(&mut self, b: &[Vec<String>]) -> crate::Result<Vec<Vec<f64>>> {
            Ok(b.iter().map(|v| vec![1.0; v.len()]).collect())
        }
        fn describe(&self) -> String {
            "one cycle each".into()
        }
    }

    /// A pointer chase: 0x1000: nop | 0x1001: mov (%rax),%rax; 0x1004: test %rax,%rax; 0x1007: jne 0x1001 | 0x1009: ret,
    /// its samples on the test (after the load), 1000 cycles per sample.
    fn chase() -> Calc {
        let code = [0x90, 0x48, 0x8b, 0x00, 0x48, 0x85, 0xc0, 0x75, 0xf8, 0xc3];
        let samples = [(0x1000, 1), (0x1001, 10), (0x1004, 2000), (0x1007, 10), (0x1009, 1)].into_iter().collect();
        crate::analyze(0x1000, &code, &samples, 1000.0, &mut OneCycle, &NoMemory).unwrap()
    }

    #[test]
    fn window_is_the_rest_of_the_block_and_the_successor_heads() {
        // Checks the skid window on the chase loop: from the load to the jne, then the loop head and the ret.
        let c = chase();
        let w = Windows::new(&c);
        let at = |a: u64| c.instructions.iter().position(|r| r.address == a).unwrap();
        assert_eq!(w.window(at(0x1001)), vec![0x1001, 0x1004, 0x1007, 0x1009]);
        assert_eq!(w.window(at(0x1007)), vec![0x1007, 0x1001, 0x1009]);
        assert_eq!(w.window(at(0x1009)), vec![0x1009]);
        // An I-cache miss of the stall at 0x1004 (the head's next instruction) counts from the head 0x1001.
        assert_eq!(w.start(at(0x1004), None), at(0x1001));
        assert_eq!(w.start(at(0x1007), None), at(0x1007));
        assert_eq!(w.start(at(0x1007), Some(0x1001)), at(0x1001));
    }

    #[test]
    fn events_bound_and_rule_out_the_chase_culprits() {
        // Checks apply() on the chase: 5 L1-miss samples (period 100, 300 cycles each) bound the D-cache culprit
        // at 5 x 100 x 300 = 150,000 cycles; no dTLB sample with a big stall rules the DTLB out and moves it last;
        // with no events nothing changes.
        let before = chase();
        let i = before.instructions.iter().position(|r| r.address == 0x1004).unwrap();
        let r = &before.instructions[i];
        let stall = r.suspect * r.executions.unwrap();
        // 2000 samples x 1000 cycles: a stall far above 3 dTLB samples' worth (3 x 100 x 1200 = 360,000).
        assert!(stall > 360_000.0, "{stall}");
        let mut c = before.clone();
        apply(&mut c, &HwEvents::new(), &PEN);
        assert_eq!(format!("{:?}", c.instructions), format!("{:?}", before.instructions));
        let ev = events(&[("L1-dcache-load-misses", &[(0x1004, 5), (0x2000, 9)], 100.0), ("dTLB-load-misses", &[(0x2000, 1)], 100.0)]);
        apply(&mut c, &ev, &PEN);
        let r = &c.instructions[i];
        let of = |cause: Cause| r.culprits.iter().position(|k| k.cause == cause).map(|k| &r.bounds[k]).unwrap();
        assert_eq!(of(Cause::DCache).bound_cycles, Some(150_000.0));
        assert!(of(Cause::Dtlb).ruled_out);
        assert_eq!(r.culprits.last().unwrap().cause, Cause::Dtlb);
        assert_eq!(r.culprits[0].cause, Cause::DCache);
        // The summary: D-cache explains at most its bound; what no live culprit can explain is unexplained.
        let d = c.summary.causes[Cause::DCache.name()];
        assert!(d.1 <= 150_000.0 + 1e-6, "{d:?}");
        assert!(c.summary.causes[Cause::Dtlb.name()].1 == 0.0);
    }

    #[test]
    fn summary_caps_each_cause_by_its_bound() {
        // Checks Figure 4 with bounds on two literal rows of 100 stall cycles each (1 cycle x 100 executions):
        // row 1, p bounded at 30 and d unbounded: p 0..30, d 70..100, nothing unexplained;
        // row 2, p bounded at 30 and D ruled out: p 30..30, D 0, 70 unexplained.
        use crate::culprit::Culprit;
        let row = |culprits: Vec<(Cause, Bound)>| InsnReport {
            address: 0,
            instruction: String::new(),
            samples: 2,
            min_cycles: 1.0,
            executions: Some(100.0),
            interval: None,
            counted: false,
            cpi: Some(2.0),
            confidence: None,
            stall: 1.0,
            gain: 0.0,
            culprits: culprits.iter().map(|c| Culprit { cause: c.0, at: None }).collect(),
            bounds: culprits.into_iter().map(|c| c.1).collect(),
            suspect: 1.0,
            block: 0,
        };
        let bounded = |x: f64| Bound { bound_cycles: Some(x), ..Bound::default() };
        let out = Bound { bound_cycles: Some(0.0), ruled_out: true, evidence: vec![] };
        let rows = [
            row(vec![(Cause::BranchMispredict, bounded(30.0)), (Cause::DCache, Bound::default())]),
            row(vec![(Cause::BranchMispredict, bounded(30.0)), (Cause::Dtlb, out)]),
        ];
        let s = crate::summarize(&rows, 1.0);
        assert_eq!(s.causes[Cause::BranchMispredict.name()], (30.0, 60.0));
        assert_eq!(s.causes[Cause::DCache.name()], (70.0, 100.0));
        assert_eq!(s.causes[Cause::Dtlb.name()], (0.0, 0.0));
        assert_eq!(s.unexplained_stall, 70.0);
        assert_eq!(s.dynamic_stall, 200.0);
    }
}
