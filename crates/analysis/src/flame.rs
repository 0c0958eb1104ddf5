//! Flame graphs: the collapsed stacks drawn by inferno (a Rust port of
//! flamegraph.pl) as an interactive SVG (click to zoom, Ctrl-F to search),
//! optionally wrapped in an HTML page.

use crate::callgraph::{CallData, FrameName};
use crate::export::collapsed;
use std::collections::BTreeMap;

/// One box of the flame graph: a frame reached by one path from the root,
/// with the samples in it alone (`self_`) and in it and below (`total`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlameNode {
    /// The procedure, without the `(inlined)` mark the SVG adds.
    pub procedure: String,
    /// Image display name; empty for the root.
    pub image: String,
    pub inlined: bool,
    pub self_: u64,
    pub total: u64,
    /// Sorted by total, descending (then by name, so the order is stable).
    pub children: Vec<FlameNode>,
}

/// The merged call tree the SVG draws, root first under a synthetic `all`
/// node; `inverted` puts the leaves at the top (callers below them).
pub fn tree(data: &CallData, event: usize, inverted: bool) -> FlameNode {
    let mut root = Building::default();
    for s in data.stacks.iter().filter(|s| s.counts[event] > 0) {
        let mut frames = data.frames(s, true);
        if inverted {
            frames.reverse();
        }
        root.add(frames, s.counts[event]);
    }
    root.finish(FrameName { procedure: "all".into(), image: String::new(), inlined: false })
}

/// A node while stacks are merged into it, children by frame.
#[derive(Default)]
struct Building {
    self_: u64,
    total: u64,
    children: BTreeMap<FrameName, Building>,
}

impl Building {
    fn add(&mut self, frames: Vec<FrameName>, n: u64) {
        let mut node = self;
        node.total += n;
        for f in frames {
            node = node.children.entry(f).or_default();
            node.total += n;
        }
        node.self_ += n;
    }

    fn finish(self, f: FrameName) -> FlameNode {
        let mut children: Vec<FlameNode> = self.children.into_iter().map(|(f, b)| b.finish(f)).collect();
        children.sort_by(|a, b| {
            b.total
                .cmp(&a.total)
                .then_with(|| a.procedure.cmp(&b.procedure))
                .then_with(|| a.image.cmp(&b.image))
                .then_with(|| a.inlined.cmp(&b.inlined))
        });
        FlameNode { procedure: f.procedure, image: f.image, inlined: f.inlined, self_: self.self_, total: self.total, children }
    }
}

/// An interactive SVG of `event`'s stacks, inlined functions expanded.
pub fn svg(data: &CallData, event: usize, title: &str) -> Result<Vec<u8>, String> {
    let folded = collapsed(data, event, true);
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.to_string();
    opt.count_name = "samples".into();
    opt.subtitle = Some(subtitle(data, event));
    let mut out = Vec::new();
    if folded.is_empty() {
        return Err("no stacks in the selection".into());
    }
    inferno::flamegraph::from_lines(&mut opt, folded.lines(), &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// What the graph holds, and how many stacks stopped early.
fn subtitle(data: &CallData, event: usize) -> String {
    let (total, cut) = (data.totals[event], data.truncated[event]);
    let pct = if total > 0 { 100.0 * cut as f64 / total as f64 } else { 0.0 };
    format!(
        "{} samples of {}; {cut} ({pct:.1}%) unwinds stopped before the root, shown under [unwind stopped]",
        total, data.events[event].0
    )
}

/// The SVG embedded in a minimal HTML page (it stays interactive). Its
/// script removes the SVG's width to follow the window; inline in HTML an
/// SVG without one is drawn 300 pixels wide, so the page's style sets it.
pub fn html(data: &CallData, event: usize, title: &str) -> Result<Vec<u8>, String> {
    let svg = svg(data, event, title)?;
    let svg = String::from_utf8_lossy(&svg);
    let body = svg.find("<svg").map_or(&svg[..], |i| &svg[i..]);
    let esc = title.replace('&', "&amp;").replace('<', "&lt;");
    Ok(format!("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{esc}</title>\n<style>svg {{ display: block; width: 100%; }}</style></head>\n<body style=\"margin:0\">\n{body}\n</body></html>\n").into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callgraph::tests::data;

    #[test]
    fn svg_has_a_box_per_frame_and_the_truncation_count() {
        // Checks that inferno drew every procedure (and the inlined one) and the subtitle counts truncation.
        let d = data(&|p| p.pid == 1);
        let s = String::from_utf8(svg(&d, 0, "t").unwrap()).unwrap();
        for name in ["main", "a", "b", "c", "d", "inl (inlined)", "[unwind stopped]"] {
            assert!(s.contains(&format!(">{name}<")) || s.contains(&format!("<title>{name} (")), "{name} missing");
        }
        assert!(s.contains("1 (9.1%) unwinds stopped"));
        let page = String::from_utf8(html(&d, 0, "t").unwrap()).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        // The page, not the SVG's fixed width, sizes the graph: it fills the window.
        assert!(page.contains("svg { display: block; width: 100%; }"), "{page}");
    }

    #[test]
    fn tree_merges_stacks_by_path_and_sorts_children_by_total() {
        // Checks the JSON tree on the hand-built profile: main->a (10) splits into d (5), b (3) and a's self (2).
        let d = data(&|p| p.pid == 1);
        let t = tree(&d, 0, false);
        assert_eq!((t.procedure.as_str(), t.total, t.self_), ("all", 11, 0));
        let names = |n: &FlameNode| n.children.iter().map(|c| (c.procedure.clone(), c.total)).collect::<Vec<_>>();
        assert_eq!(names(&t), [("main".to_string(), 10), ("[unwind stopped]".to_string(), 1)]);
        let a = &t.children[0].children[0];
        assert_eq!((a.procedure.as_str(), a.self_), ("a", 2));
        assert_eq!(names(a), [("d".to_string(), 5), ("b".to_string(), 3)]);
        let inl = &a.children[0].children[0].children[0];
        assert_eq!((inl.procedure.as_str(), inl.inlined, inl.total), ("inl", true, 5));
    }

    #[test]
    fn inverted_tree_starts_at_the_leaves() {
        // Checks that the inverted tree has the leaf procedures at its top: c (9 samples) and a's self time (2).
        let d = data(&|p| p.pid == 1);
        let t = tree(&d, 0, true);
        let top: Vec<(String, u64)> = t.children.iter().map(|c| (c.procedure.clone(), c.total)).collect();
        assert!(top.contains(&("a".to_string(), 2)), "{top:?}");
        assert_eq!(top.iter().map(|x| x.1).sum::<u64>(), 11);
        assert_eq!(t.children.iter().map(|c| c.self_).sum::<u64>(), 0, "no leaf is its own root here");
    }
}
