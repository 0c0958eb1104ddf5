//! `loupe top`: samples per image, procedure or source line, sorted
//! descending, one column per event (DCPI's dcpiprof, Figure 1).

use crate::{image_display, unnamed_labels, SymbolSource, Unnamed};
use loupe_model::{EventName, ImageKind, ImageOffset, ImageTotals, ProcessKey, Profile};
use std::collections::{BTreeMap, HashMap};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    Image,
    Procedure,
    Line,
    /// One row per sampled offset; `TopRow::line` holds the address (`0x...`, the image offset).
    Instruction,
}

/// One row of the table; `counts[i]` belongs to `TopReport::events[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopRow {
    pub image: String,
    pub procedure: Option<String>,
    pub line: Option<String>,
    pub counts: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopReport {
    pub events: Vec<EventName>,
    /// Samples per event in the selection, attributed or not.
    pub totals: Vec<u64>,
    /// Samples per event that no image could take.
    pub unknown: Vec<u64>,
    /// Sorted by the first event's count, descending.
    pub rows: Vec<TopRow>,
    /// Samples per event that got no procedure name, by why. Views finer
    /// than images only; samples outside any image are always here.
    pub unnamed: BTreeMap<Unnamed, Vec<u64>>,
}

impl TopReport {
    pub fn percent(&self, row: &TopRow, event: usize) -> f64 {
        pct(row.counts[event], self.totals[event])
    }
}

pub fn pct(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * n as f64 / total as f64
    }
}

/// Builds the table. `keep` selects processes (pid/comm filters);
/// `keep_image` selects images by display name. `totals` are images known
/// only by their samples per process (a database's index): they count
/// towards the totals and make image rows, having no offsets to group.
pub fn top(
    profiles: &[Profile],
    totals: &[ImageTotals],
    events: &[EventName],
    by: GroupBy,
    keep: &dyn Fn(&ProcessKey) -> bool,
    keep_image: &dyn Fn(&str) -> bool,
    syms: &mut dyn SymbolSource,
) -> TopReport {
    let mut sums = vec![0; events.len()];
    let mut unknown = vec![0; events.len()];
    let mut rows: HashMap<(String, Option<String>, Option<String>), Vec<u64>> = HashMap::new();
    let mut unnamed: BTreeMap<Unnamed, Vec<u64>> = BTreeMap::new();
    for t in totals {
        let Some(ev) = events.iter().position(|e| *e == t.event) else { continue };
        let n = t.samples(keep);
        sums[ev] += n;
        if t.image.kind == ImageKind::Unknown {
            unknown[ev] += n;
        }
        let image = image_display(&t.image);
        if n > 0 && keep_image(&image) {
            rows.entry((image, None, None)).or_insert_with(|| vec![0; events.len()])[ev] += n;
            // As from whole profiles: samples outside any image are unnamed whatever the view.
            if t.image.kind == ImageKind::Unknown {
                unnamed.entry(Unnamed::NoImage).or_insert_with(|| vec![0; events.len()])[ev] += n;
            }
        }
    }
    for p in profiles {
        let Some(ev) = events.iter().position(|e| *e == p.event) else { continue };
        let counts = p.by_offset(keep);
        let n: u64 = counts.values().sum();
        sums[ev] += n;
        if p.image.kind == ImageKind::Unknown {
            unknown[ev] += n;
        }
        let image = image_display(&p.image);
        if n == 0 || !keep_image(&image) {
            continue;
        }
        let mut why = BTreeMap::new();
        if p.image.kind == ImageKind::Unknown {
            why.insert(Unnamed::NoImage, n);
        }
        for ((proc_, line), c) in group(p, &counts, by, syms, &mut why) {
            rows.entry((image.clone(), proc_, line)).or_insert_with(|| vec![0; events.len()])[ev] += c;
        }
        for (reason, c) in why {
            unnamed.entry(reason).or_insert_with(|| vec![0; events.len()])[ev] += c;
        }
    }
    let mut rows: Vec<TopRow> =
        rows.into_iter().map(|((image, procedure, line), counts)| TopRow { image, procedure, line, counts }).collect();
    rows.sort_by(|a, b| {
        b.counts
            .cmp(&a.counts)
            .then_with(|| a.image.cmp(&b.image))
            .then_with(|| a.procedure.cmp(&b.procedure))
            .then_with(|| a.line.cmp(&b.line))
    });
    TopReport { events: events.to_vec(), totals: sums, unknown, rows, unnamed }
}

type GroupKey = (Option<String>, Option<String>);

/// Sums one profile's offsets into (procedure, line) groups.
/// Samples that get no name are also added to `unnamed` by reason.
fn group(
    p: &Profile,
    counts: &BTreeMap<ImageOffset, u64>,
    by: GroupBy,
    syms: &mut dyn SymbolSource,
    unnamed: &mut BTreeMap<Unnamed, u64>,
) -> Vec<(GroupKey, u64)> {
    if by == GroupBy::Image {
        return vec![((None, None), counts.values().sum())];
    }
    if p.image.kind == ImageKind::Unknown {
        let key = (Some(p.image.path.clone()), matches!(by, GroupBy::Line | GroupBy::Instruction).then(|| p.image.path.clone()));
        return vec![(key, counts.values().sum())];
    }
    let offsets: Vec<ImageOffset> = counts.keys().copied().collect();
    let names = syms.symbolize(&p.image, &offsets, by == GroupBy::Line);
    let labels = unnamed_labels(&p.image, &offsets, &names, syms);
    let mut out: HashMap<GroupKey, u64> = HashMap::new();
    for (((off, n), sym), label) in counts.iter().zip(names).zip(labels) {
        if let Err(why) = sym {
            *unnamed.entry(why).or_insert(0) += n;
        }
        let procedure = sym.as_ref().map_or_else(|_| label.unwrap_or_default(), |s| s.procedure.clone());
        let line = match by {
            GroupBy::Line => Some(match &sym {
                Ok(s) if s.file.is_some() => format!("{}:{}", s.file.as_deref().unwrap_or("??"), s.line.unwrap_or(0)),
                _ => procedure.clone(),
            }),
            GroupBy::Instruction => Some(format!("0x{:x}", off.0)),
            _ => None,
        };
        *out.entry((Some(procedure), line)).or_insert(0) += n;
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SymInfo;
    use loupe_model::{BuildId, ImageId};

    /// Symbols by table: offsets below 0x100 are `f`, below 0x200 `g`, else none.
    struct Table;
    impl SymbolSource for Table {
        fn symbolize(&mut self, _: &ImageId, offs: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>> {
            offs.iter()
                .map(|o| match o.0 {
                    0..=0xff => Ok(SymInfo { procedure: "f".into(), file: lines.then(|| "a.c".into()), line: Some((o.0 / 0x10) as u32) }),
                    0x100..=0x1ff => Ok(SymInfo { procedure: "g".into(), file: None, line: None }),
                    _ => Err(Unnamed::NoSymbols),
                })
                .collect()
        }
    }

    fn profiles() -> Vec<Profile> {
        let ev = EventName::new("cpu-clock");
        let mut a = Profile::new(ImageId::elf("/bin/app", Some(BuildId(vec![1]))), ev.clone());
        a.add(ProcessKey::new(1, "app"), ImageOffset(0x10), 5, 0);
        a.add(ProcessKey::new(1, "app"), ImageOffset(0x18), 1, 0);
        a.add(ProcessKey::new(1, "app"), ImageOffset(0x150), 3, 0);
        a.add(ProcessKey::new(2, "other"), ImageOffset(0x400), 2, 0);
        let mut k = Profile::new(ImageId::kernel(None), ev.clone());
        k.add(ProcessKey::new(1, "app"), ImageOffset(0x10), 4, 0);
        let mut u = Profile::new(ImageId::unknown(), ev);
        u.add(ProcessKey::new(1, "app"), ImageOffset(0xdead), 1, 0);
        u.add(ProcessKey::new(1, "app"), ImageOffset(0xbeef), 1, 0);
        vec![a, k, u]
    }

    fn run(by: GroupBy, keep: &dyn Fn(&ProcessKey) -> bool) -> TopReport {
        top(&profiles(), &[], &[EventName::new("cpu-clock")], by, keep, &|_| true, &mut Table)
    }

    #[test]
    fn by_procedure_groups_offsets_and_sorts_descending() {
        // Checks grouping by symbol, the name+offset fallback, and descending order.
        let r = run(GroupBy::Procedure, &|_| true);
        let got: Vec<(&str, u64)> = r.rows.iter().map(|x| (x.procedure.as_deref().unwrap(), x.counts[0])).collect();
        assert_eq!(got[0], ("f", 6));
        assert!(got.contains(&("g", 3)));
        assert!(got.contains(&("app+0x400", 2)));
        assert!(got.contains(&("[unknown]", 2)));
        assert_eq!(r.totals[0], 17);
        assert_eq!(r.unknown[0], 2);
        assert!(r.rows.windows(2).all(|w| w[0].counts[0] >= w[1].counts[0]));
    }

    /// [`Table`], and unnamed code in functions of 0x100 bytes from 0x400.
    struct Functions;
    impl SymbolSource for Functions {
        fn symbolize(&mut self, i: &ImageId, offs: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>> {
            Table.symbolize(i, offs, lines)
        }
        fn function_starts(&mut self, _: &ImageId, offs: &[ImageOffset]) -> Vec<Option<ImageOffset>> {
            offs.iter().map(|o| (o.0 >= 0x400).then_some(ImageOffset(o.0 & !0xff))).collect()
        }
    }

    #[test]
    fn unnamed_offsets_of_one_function_share_a_row() {
        // Checks that stripped offsets group by their function's start, still count as unnamed, and that an
        // offset whose function is unknown keeps its own row.
        let ev = EventName::new("cpu-clock");
        let mut a = Profile::new(ImageId::elf("/lib/liblzma.so.5", None), ev.clone());
        for (off, n) in [(0x410, 4), (0x4f0, 3), (0x520, 2), (0x300, 1)] {
            a.add(ProcessKey::new(1, "xz"), ImageOffset(off), n, 0);
        }
        let r = top(&[a], &[], &[ev], GroupBy::Procedure, &|_| true, &|_| true, &mut Functions);
        let got: Vec<(&str, u64)> = r.rows.iter().map(|x| (x.procedure.as_deref().unwrap(), x.counts[0])).collect();
        assert_eq!(got, [("liblzma.so.5+0x400", 7), ("liblzma.so.5+0x500", 2), ("liblzma.so.5+0x300", 1)]);
        assert_eq!(r.unnamed[&Unnamed::NoSymbols], vec![10]);
    }

    #[test]
    fn process_filter_changes_totals() {
        // Checks that a pid filter removes other processes from rows and totals.
        let r = run(GroupBy::Image, &|p| p.pid == 2);
        assert_eq!(r.totals[0], 2);
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0].image, "/bin/app");
        assert_eq!(r.percent(&r.rows[0], 0), 100.0);
    }

    #[test]
    fn totals_make_the_same_image_rows_as_their_profiles() {
        // Checks that index-only totals give the per-image table the whole profiles give, filters included.
        let ev = [EventName::new("cpu-clock")];
        let totals: Vec<ImageTotals> = profiles().iter().map(ImageTotals::of).collect();
        let keeps: [&dyn Fn(&ProcessKey) -> bool; 2] = [&|_| true, &|p| p.pid == 1];
        for keep in keeps {
            let whole = top(&profiles(), &[], &ev, GroupBy::Image, keep, &|i| i != "/bin/app", &mut Table);
            let from_totals = top(&[], &totals, &ev, GroupBy::Image, keep, &|i| i != "/bin/app", &mut Table);
            assert_eq!(whole, from_totals);
        }
        let r = top(&[], &totals, &ev, GroupBy::Image, &|_| true, &|_| true, &mut Table);
        assert_eq!((r.totals[0], r.unknown[0], r.rows[0].image.as_str(), r.rows[0].counts[0]), (17, 2, "/bin/app", 11));
    }

    #[test]
    fn by_line_uses_file_and_line() {
        // Checks file:line keys and that lines without DWARF fall back to the procedure.
        let r = run(GroupBy::Line, &|p| p.pid == 1);
        let lines: Vec<&str> = r.rows.iter().filter_map(|x| x.line.as_deref()).collect();
        assert!(lines.contains(&"a.c:1"));
        assert!(lines.contains(&"g"));
    }

    #[test]
    fn by_instruction_keeps_each_offset() {
        // Checks one row per sampled offset of pid 1, keyed by its hex address, with its procedure.
        let r = run(GroupBy::Instruction, &|p| p.pid == 1);
        let app: Vec<(&str, &str, u64)> = r
            .rows
            .iter()
            .filter(|x| x.image == "/bin/app")
            .map(|x| (x.procedure.as_deref().unwrap(), x.line.as_deref().unwrap(), x.counts[0]))
            .collect();
        assert_eq!(app, [("f", "0x10", 5), ("g", "0x150", 3), ("f", "0x18", 1)]);
    }

    #[test]
    fn rows_with_equal_counts_print_in_one_order() {
        // Regression: ties between lines of one procedure were printed in hash order, so two runs differed.
        let ev = EventName::new("cpu-clock");
        let mut a = Profile::new(ImageId::elf("/bin/app", None), ev.clone());
        for off in [0x18u64, 0x10, 0x150] {
            a.add(ProcessKey::new(1, "app"), ImageOffset(off), 1, 0);
        }
        for _ in 0..5 {
            let r = top(std::slice::from_ref(&a), &[], std::slice::from_ref(&ev), GroupBy::Instruction, &|_| true, &|_| true, &mut Table);
            let lines: Vec<&str> = r.rows.iter().map(|x| x.line.as_deref().unwrap()).collect();
            assert_eq!(lines, ["0x10", "0x18", "0x150"]);
        }
    }
}
