//! Call stacks, named: stack tables from the database become stacks of
//! symbolized locations, and from those the call-graph views: inclusive
//! ("children") and self cost per procedure, and the callers and callees
//! of one procedure.
//!
//! Procedure names are the ones `top` prints. Recursion counts a
//! procedure once per stack for its inclusive cost, as `perf report
//! --children` does.

use crate::{image_display, unnamed_labels, SymbolSource};
use loupe_model::stacks::StackProfile;
use loupe_model::{EventName, ImageId, ImageKind, ImageOffset, ProcessKey};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One function at a location: the outer procedure, or one inlined into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineInfo {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A distinct (image, offset) with its names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub image: ImageId,
    pub offset: ImageOffset,
    /// The procedure `top` shows for this location.
    pub procedure: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// Functions inlined here, innermost first.
    pub inlined: Vec<String>,
}

/// One distinct stack of one process, leaf first, with a count per event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    pub process: ProcessKey,
    pub locations: Vec<u32>,
    pub counts: Vec<u64>,
}

/// Every selected stack, named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallData {
    pub events: Vec<EventName>,
    pub locations: Vec<Location>,
    pub stacks: Vec<Stack>,
    /// Samples per event in the selection.
    pub totals: Vec<u64>,
    /// Samples per event whose unwind stopped before the root.
    pub truncated: Vec<u64>,
    /// Mean sampling period per event (nanoseconds for clock events).
    pub mean_period: Vec<u64>,
}

/// What to keep: processes, and stacks touching an image whose display
/// name passes `keep_image`.
pub struct Selection<'a> {
    pub keep: &'a dyn Fn(&ProcessKey) -> bool,
    pub keep_image: &'a dyn Fn(&str) -> bool,
}

/// Names every stack of the selected events.
pub fn resolve(profiles: &[StackProfile], events: &[EventName], sel: &Selection, syms: &mut dyn SymbolSource) -> CallData {
    let mut out = CallData {
        events: events.to_vec(),
        totals: vec![0; events.len()],
        truncated: vec![0; events.len()],
        mean_period: vec![0; events.len()],
        ..Default::default()
    };
    let mut loc_ix: HashMap<(ImageId, ImageOffset), u32> = HashMap::new();
    let mut process_ix: HashMap<&ProcessKey, u32> = HashMap::new();
    let mut stack_ix: HashMap<(u32, Vec<u32>), usize> = HashMap::new();
    let (mut period_sums, mut all_samples) = (vec![0u64; events.len()], vec![0u64; events.len()]);
    for p in profiles {
        let Some(ev) = events.iter().position(|e| *e == p.event) else { continue };
        period_sums[ev] += p.period_sum;
        all_samples[ev] += p.total_samples();
        // Per table entry, worked out once: whether an image is kept, a frame's location, a process's number.
        let image_kept: Vec<bool> = p.images.iter().map(|img| (sel.keep_image)(&image_display(img))).collect();
        let mut frame_loc: Vec<u32> = vec![u32::MAX; p.frames.len()];
        let mut process_kept: Vec<Option<Option<u32>>> = vec![None; p.processes.len()];
        let mut locs = Vec::new();
        for (&(pi, si), &n) in &p.counts {
            let process = &p.processes[pi as usize];
            let pid = *process_kept[pi as usize].get_or_insert_with(|| {
                let next = process_ix.len() as u32;
                (sel.keep)(process).then(|| *process_ix.entry(process).or_insert(next))
            });
            let frames = &p.stacks[si as usize];
            let Some(pid) = pid.filter(|_| frames.iter().any(|&f| image_kept[p.frames[f as usize].image as usize])) else { continue };
            out.totals[ev] += n;
            if p.is_truncated(si) {
                out.truncated[ev] += n;
            }
            locs.clear();
            for &f in frames {
                if frame_loc[f as usize] == u32::MAX {
                    let frame = p.frames[f as usize];
                    let next = loc_ix.len() as u32;
                    frame_loc[f as usize] = *loc_ix.entry((p.images[frame.image as usize].clone(), frame.offset)).or_insert(next);
                }
                locs.push(frame_loc[f as usize]);
            }
            let next = out.stacks.len();
            let i = *stack_ix.entry((pid, locs.clone())).or_insert(next);
            if i == next {
                out.stacks.push(Stack { process: process.clone(), locations: locs.clone(), counts: vec![0; events.len()] });
            }
            out.stacks[i].counts[ev] += n;
        }
    }
    for (ev, sum) in period_sums.into_iter().enumerate() {
        out.mean_period[ev] = sum.checked_div(all_samples[ev]).unwrap_or(0);
    }
    out.locations = name_locations(loc_ix, syms);
    out
}

/// Symbolizes the distinct locations, one batch per image.
fn name_locations(loc_ix: HashMap<(ImageId, ImageOffset), u32>, syms: &mut dyn SymbolSource) -> Vec<Location> {
    let mut by_image: BTreeMap<ImageId, Vec<(ImageOffset, u32)>> = BTreeMap::new();
    for ((img, off), i) in loc_ix {
        by_image.entry(img).or_default().push((off, i));
    }
    let mut out: Vec<Option<Location>> = vec![None; by_image.values().map(Vec::len).sum()];
    for (image, locs) in by_image {
        let offs: Vec<ImageOffset> = locs.iter().map(|(o, _)| *o).collect();
        let (names, inlined) = if matches!(image.kind, ImageKind::Unknown) {
            (vec![Err(crate::Unnamed::NoImage); offs.len()], vec![Vec::new(); offs.len()])
        } else {
            (syms.symbolize(&image, &offs, true), syms.inlined(&image, &offs))
        };
        let labels = unnamed_labels(&image, &offs, &names, syms);
        for ((((off, i), sym), inl), label) in locs.into_iter().zip(names).zip(inlined).zip(labels) {
            let procedure = match (&sym, image.kind) {
                (_, ImageKind::Unknown) => image.path.clone(),
                (Ok(s), _) => s.procedure.clone(),
                (Err(_), _) => label.unwrap_or_default(),
            };
            let (file, line) = sym.map_or((None, None), |s| (s.file, s.line));
            out[i as usize] = Some(Location { image: image.clone(), offset: off, procedure, file, line, inlined: inl });
        }
    }
    out.into_iter().map(|l| l.expect("every index assigned")).collect()
}

/// A frame of a named stack, as views show it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameName {
    pub procedure: String,
    pub image: String,
    pub inlined: bool,
}

impl CallData {
    /// Frame names of a stack, root first; with `inline`, functions
    /// inlined at a location follow their outer procedure.
    pub fn frames(&self, s: &Stack, inline: bool) -> Vec<FrameName> {
        let mut out = Vec::with_capacity(s.locations.len());
        for &l in s.locations.iter().rev() {
            let loc = &self.locations[l as usize];
            let image = image_display(&loc.image);
            out.push(FrameName { procedure: loc.procedure.clone(), image: image.clone(), inlined: false });
            if inline {
                for f in loc.inlined.iter().rev() {
                    out.push(FrameName { procedure: f.clone(), image: image.clone(), inlined: true });
                }
            }
        }
        out
    }
}

/// Inclusive and self cost of one procedure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostRow {
    pub image: String,
    pub procedure: String,
    pub self_: Vec<u64>,
    pub inclusive: Vec<u64>,
}

/// Inclusive ("children") and self samples per procedure, sorted by the
/// first event's inclusive count, then self.
pub fn costs(data: &CallData) -> Vec<CostRow> {
    let n = data.events.len();
    let mut rows: HashMap<(String, String), (Vec<u64>, Vec<u64>)> = HashMap::new();
    for s in &data.stacks {
        let frames = data.frames(s, false);
        let mut seen = HashSet::new();
        for (i, f) in frames.iter().enumerate() {
            let key = (f.image.clone(), f.procedure.clone());
            let row = rows.entry(key.clone()).or_insert_with(|| (vec![0; n], vec![0; n]));
            let leaf = i + 1 == frames.len();
            let first = seen.insert(key);
            for e in 0..n {
                if leaf {
                    row.0[e] += s.counts[e];
                }
                if first {
                    row.1[e] += s.counts[e];
                }
            }
        }
    }
    let mut out: Vec<CostRow> =
        rows.into_iter().map(|((image, procedure), (self_, inclusive))| CostRow { image, procedure, self_, inclusive }).collect();
    // A total order (image last): the CLI and the server must print ties alike.
    out.sort_by(|a, b| {
        b.inclusive
            .cmp(&a.inclusive)
            .then_with(|| b.self_.cmp(&a.self_))
            .then_with(|| a.procedure.cmp(&b.procedure))
            .then_with(|| a.image.cmp(&b.image))
    });
    out
}

/// Who calls a procedure and whom it calls, with counts per event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Neighbors {
    pub procedure: String,
    pub inclusive: Vec<u64>,
    pub self_: Vec<u64>,
    /// (caller, samples): `[root]` when the procedure is the root frame.
    pub callers: Vec<(String, Vec<u64>)>,
    /// (callee, samples): `[self]` for samples in the procedure itself.
    pub callees: Vec<(String, Vec<u64>)>,
}

/// Callers and callees of `procedure`, from its outermost occurrence in
/// each stack (so recursion is not counted twice). Sorted by the first event.
pub fn neighbors(data: &CallData, procedure: &str) -> Neighbors {
    let n = data.events.len();
    let mut callers: HashMap<String, Vec<u64>> = HashMap::new();
    let mut callees: HashMap<String, Vec<u64>> = HashMap::new();
    let mut nb = Neighbors { procedure: procedure.to_string(), inclusive: vec![0; n], self_: vec![0; n], ..Default::default() };
    for s in &data.stacks {
        let frames = data.frames(s, false);
        let Some(i) = frames.iter().position(|f| f.procedure == procedure) else { continue };
        let caller = if i == 0 { "[root]".to_string() } else { frames[i - 1].procedure.clone() };
        let callee = frames.get(i + 1).map_or_else(|| "[self]".to_string(), |f| f.procedure.clone());
        let leaf_is_it = frames.last().is_some_and(|f| f.procedure == procedure);
        for e in 0..n {
            nb.inclusive[e] += s.counts[e];
            if leaf_is_it {
                nb.self_[e] += s.counts[e];
            }
            callers.entry(caller.clone()).or_insert_with(|| vec![0; n])[e] += s.counts[e];
            callees.entry(callee.clone()).or_insert_with(|| vec![0; n])[e] += s.counts[e];
        }
    }
    let sorted = |m: HashMap<String, Vec<u64>>| {
        let mut v: Vec<(String, Vec<u64>)> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    };
    nb.callers = sorted(callers);
    nb.callees = sorted(callees);
    nb
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::SymInfo;
    use loupe_model::stacks::truncated_image;

    /// Offsets name procedures by their hundreds: 0x1xx = main, 0x2xx = a,
    /// 0x3xx = b, 0x4xx = c, 0x5xx = d; 0x45x has `inl` inlined into c.
    pub struct Table;
    impl SymbolSource for Table {
        fn symbolize(&mut self, _: &ImageId, offs: &[ImageOffset], _: bool) -> Vec<Result<SymInfo, crate::Unnamed>> {
            let names = ["?", "main", "a", "b", "c", "d"];
            offs.iter()
                .map(|o| {
                    let k = (o.0 / 0x100) as usize;
                    (k > 0 && k < names.len())
                        .then(|| SymInfo { procedure: names[k].into(), file: Some("w.c".into()), line: Some(o.0 as u32 % 0x100) })
                        .ok_or(crate::Unnamed::NoSymbols)
                })
                .collect()
        }
        fn inlined(&mut self, _: &ImageId, offs: &[ImageOffset]) -> Vec<Vec<String>> {
            offs.iter().map(|o| if o.0 / 0x10 == 0x45 { vec!["inl".to_string()] } else { Vec::new() }).collect()
        }
    }

    /// main->a->b->c x3, main->a->d->c x5 (c at 0x450: inl inlined),
    /// main->a x2 (self), a truncated stack c x1, and another process.
    pub fn stacks() -> StackProfile {
        let app = ImageId::elf("/bin/app", None);
        let f = |o: u64| (app.clone(), ImageOffset(o));
        let mut p = StackProfile::new(EventName::new("cpu-clock"));
        let me = ProcessKey::new(1, "app");
        p.add(&me, &[f(0x400), f(0x310), f(0x210), f(0x110)], 3);
        p.add(&me, &[f(0x450), f(0x510), f(0x220), f(0x110)], 5);
        p.add(&me, &[f(0x200), f(0x110)], 2);
        p.add(&me, &[f(0x400), (truncated_image(), ImageOffset(0))], 1);
        p.add(&ProcessKey::new(2, "other"), &[f(0x200)], 7);
        p.period_sum = 18 * 1_000_000;
        p
    }

    pub fn data(keep: &dyn Fn(&ProcessKey) -> bool) -> CallData {
        let sel = Selection { keep, keep_image: &|_| true };
        resolve(&[stacks()], &[EventName::new("cpu-clock")], &sel, &mut Table)
    }

    #[test]
    fn inclusive_and_self_follow_the_call_structure() {
        // Checks children/self sums on a hand-built a->b->c / a->d->c profile.
        let d = data(&|p| p.pid == 1);
        assert_eq!((d.totals[0], d.truncated[0]), (11, 1));
        let rows = costs(&d);
        let get = |n: &str| rows.iter().find(|r| r.procedure == n).map(|r| (r.inclusive[0], r.self_[0])).unwrap();
        assert_eq!(get("main"), (10, 0));
        assert_eq!(get("a"), (10, 2));
        assert_eq!(get("b"), (3, 0));
        assert_eq!(get("d"), (5, 0));
        assert_eq!(get("c"), (9, 9));
        assert_eq!(get("[unwind stopped]"), (1, 0));
        assert_eq!((rows[0].procedure.as_str(), rows[1].procedure.as_str()), ("a", "main"));
    }

    #[test]
    fn callers_and_callees_of_a_procedure() {
        // Checks the callers/callees split of c and a, including [self] and [root].
        let d = data(&|p| p.pid == 1);
        let c = neighbors(&d, "c");
        assert_eq!((c.inclusive[0], c.self_[0]), (9, 9));
        assert_eq!(c.callers, vec![("d".to_string(), vec![5]), ("b".to_string(), vec![3]), ("[unwind stopped]".to_string(), vec![1])]);
        assert_eq!(c.callees, vec![("[self]".to_string(), vec![9])]);
        let a = neighbors(&d, "a");
        assert_eq!(a.callees, vec![("d".to_string(), vec![5]), ("b".to_string(), vec![3]), ("[self]".to_string(), vec![2])]);
        assert_eq!(a.callers, vec![("main".to_string(), vec![10])]);
    }

    #[test]
    fn inline_frames_expand_after_their_outer_procedure() {
        // Checks that frames() appends inlined functions after the outer one when asked.
        let d = data(&|p| p.pid == 1);
        let s = d.stacks.iter().find(|s| s.counts[0] == 5).unwrap();
        let names: Vec<String> = d.frames(s, true).iter().map(|f| f.procedure.clone()).collect();
        assert_eq!(names, ["main", "a", "d", "c", "inl"]);
        assert_eq!(d.frames(s, false).len(), 4);
    }
}
