//! Flame graphs: the collapsed stacks drawn by inferno (a Rust port of
//! flamegraph.pl) as an interactive SVG (click to zoom, Ctrl-F to search),
//! optionally wrapped in an HTML page.

use crate::callgraph::CallData;
use crate::export::collapsed;
use crate::image_display;
use loupe_model::ImageId;
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// The node as `flame --format json` writes it: `name`, `self`, `total`,
/// `image` and `inlined` (left out for the root) and `children`, keys in
/// alphabetical order as a JSON object value prints them. Written straight
/// to the output: a whole machine's tree as JSON values cost more than
/// building it.
impl Serialize for FlameNode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let named = !self.image.is_empty();
        let mut m = s.serialize_map(Some(if named { 6 } else { 4 }))?;
        m.serialize_entry("children", &self.children)?;
        if named {
            m.serialize_entry("image", &self.image)?;
            m.serialize_entry("inlined", &self.inlined)?;
        }
        m.serialize_entry("name", &self.procedure)?;
        m.serialize_entry("self", &self.self_)?;
        m.serialize_entry("total", &self.total)?;
        m.end()
    }
}

/// The merged call tree the SVG draws, root first under a synthetic `all`
/// node; `inverted` puts the leaves at the top (callers below them).
///
/// Built over interned frames: each location's frames are named once, a
/// stack walks the arena by (parent, frame) ids, and strings are copied
/// only into the finished tree (a whole machine has ~100k nodes from ~70k
/// stacks; per-frame strings and maps made that take seconds).
pub fn tree(data: &CallData, event: usize, inverted: bool) -> FlameNode {
    FlameTree::new(data, event, inverted).node(0)
}

/// [`tree`] before its names are copied out: what `flame --format json`
/// serializes (as [`FlameNode`] does), without a string per node.
pub struct FlameTree<'a> {
    frames: Frames<'a>,
    nodes: Vec<Slot>,
    /// Children of node i, in order: `kids[start[i]..start[i + 1]]`.
    kids: Vec<u32>,
    start: Vec<usize>,
}

impl<'a> FlameTree<'a> {
    pub fn new(data: &'a CallData, event: usize, inverted: bool) -> FlameTree<'a> {
        let frames = Frames::of(data);
        let mut arena = Arena::default();
        let mut path = Vec::new();
        for s in data.stacks.iter().filter(|s| s.counts[event] > 0) {
            path.clear();
            for &l in s.locations.iter().rev() {
                path.extend_from_slice(frames.at(l));
            }
            if inverted {
                path.reverse();
            }
            arena.add(&path, s.counts[event]);
        }
        arena.finish(frames)
    }

    /// (procedure, image, inlined) of node `i`; the root is `all`.
    fn name(&self, i: u32) -> (&str, &str, bool) {
        match self.frames.names.get(self.nodes[i as usize].frame as usize) {
            Some(&(p, img, inl)) => (p, &self.frames.images[img as usize], inl),
            None => ("all", "", false),
        }
    }

    fn children(&self, i: u32) -> &[u32] {
        &self.kids[self.start[i as usize]..self.start[i as usize + 1]]
    }

    /// Node `i` and everything below it, named.
    fn node(&self, i: u32) -> FlameNode {
        let (procedure, image, inlined) = self.name(i);
        let s = &self.nodes[i as usize];
        FlameNode {
            procedure: procedure.to_string(),
            image: image.to_string(),
            inlined,
            self_: s.self_,
            total: s.total,
            children: self.children(i).iter().map(|&k| self.node(k)).collect(),
        }
    }
}

impl Serialize for FlameTree<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        At(self, 0).serialize(s)
    }
}

/// Node `.1` of a tree, serialized as its [`FlameNode`] would be.
struct At<'t, 'a>(&'t FlameTree<'a>, u32);

/// The children of a node, in order.
struct Kids<'t, 'a>(&'t FlameTree<'a>, u32);

impl Serialize for At<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (t, i) = (self.0, self.1);
        let ((procedure, image, inlined), n) = (t.name(i), &t.nodes[i as usize]);
        let named = !image.is_empty();
        let mut m = s.serialize_map(Some(if named { 6 } else { 4 }))?;
        m.serialize_entry("children", &Kids(t, i))?;
        if named {
            m.serialize_entry("image", image)?;
            m.serialize_entry("inlined", &inlined)?;
        }
        m.serialize_entry("name", procedure)?;
        m.serialize_entry("self", &n.self_)?;
        m.serialize_entry("total", &n.total)?;
        m.end()
    }
}

impl Serialize for Kids<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.children(self.1).iter().map(|&k| At(self.0, k)))
    }
}

/// A frame as the tree names it: procedure, image id, inlined.
type FrameKey<'a> = (&'a str, u32, bool);

/// The distinct frames of a profile, by id, and each location's frames
/// root first (the outer procedure, then what is inlined into it).
struct Frames<'a> {
    images: Vec<String>,
    names: Vec<FrameKey<'a>>,
    /// `of_location[l]..of_location[l + 1]` indexes `ids`.
    of_location: Vec<usize>,
    ids: Vec<u32>,
}

impl<'a> Frames<'a> {
    fn of(data: &'a CallData) -> Frames<'a> {
        // Images by id, then by the name shown: ids that show alike are one frame.
        let (mut image_ix, mut name_ix): (HashMap<&ImageId, u32>, HashMap<String, u32>) = Default::default();
        let mut frame_ix: HashMap<FrameKey<'a>, u32> = HashMap::new();
        let mut f = Frames { images: Vec::new(), names: Vec::new(), of_location: vec![0], ids: Vec::new() };
        for loc in &data.locations {
            let image = *image_ix.entry(&loc.image).or_insert_with(|| {
                let name = image_display(&loc.image);
                *name_ix.entry(name.clone()).or_insert_with(|| {
                    f.images.push(name);
                    f.images.len() as u32 - 1
                })
            });
            let inlined = loc.inlined.iter().rev().map(|p| (p.as_str(), image, true));
            for key in std::iter::once((loc.procedure.as_str(), image, false)).chain(inlined) {
                let id = *frame_ix.entry(key).or_insert_with(|| {
                    f.names.push(key);
                    f.names.len() as u32 - 1
                });
                f.ids.push(id);
            }
            f.of_location.push(f.ids.len());
        }
        f
    }

    fn at(&self, location: u32) -> &[u32] {
        let l = location as usize;
        &self.ids[self.of_location[l]..self.of_location[l + 1]]
    }

    /// Each frame's place in name order (procedure, image, inlined), the
    /// tie-break between children of equal totals.
    fn ranks(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.names.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            let ((pa, ia, xa), (pb, ib, xb)) = (self.names[a as usize], self.names[b as usize]);
            pa.cmp(pb).then_with(|| self.images[ia as usize].cmp(&self.images[ib as usize])).then(xa.cmp(&xb))
        });
        let mut rank = vec![0; order.len()];
        for (r, &f) in order.iter().enumerate() {
            rank[f as usize] = r as u32;
        }
        rank
    }
}

/// A node while stacks are merged: its frame, parent and counts.
struct Slot {
    frame: u32,
    parent: u32,
    self_: u64,
    total: u64,
}

/// The tree being built, node 0 the root; children found by (parent, frame).
struct Arena {
    nodes: Vec<Slot>,
    child: HashMap<(u32, u32), u32, BuildHasherDefault<IdHasher>>,
}

impl Default for Arena {
    fn default() -> Arena {
        Arena { nodes: vec![Slot { frame: u32::MAX, parent: u32::MAX, self_: 0, total: 0 }], child: HashMap::default() }
    }
}

impl Arena {
    fn add(&mut self, path: &[u32], n: u64) {
        let mut node = 0u32;
        self.nodes[0].total += n;
        for &frame in path {
            let next = self.nodes.len() as u32;
            let parent = node;
            node = *self.child.entry((parent, frame)).or_insert(next);
            if node == next {
                self.nodes.push(Slot { frame, parent, self_: 0, total: 0 });
            }
            self.nodes[node as usize].total += n;
        }
        self.nodes[node as usize].self_ += n;
    }

    /// The finished tree: children sorted by total, descending, then by
    /// name (procedure, image, inlined), so the order is stable.
    fn finish(self, frames: Frames) -> FlameTree {
        let rank = frames.ranks();
        let mut start = vec![0usize; self.nodes.len() + 1];
        for s in &self.nodes[1..] {
            start[s.parent as usize + 1] += 1;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut kids = vec![0u32; self.nodes.len() - 1];
        for (i, s) in self.nodes.iter().enumerate().skip(1) {
            kids[fill[s.parent as usize]] = i as u32;
            fill[s.parent as usize] += 1;
        }
        for i in 0..self.nodes.len() {
            kids[start[i]..start[i + 1]].sort_unstable_by(|&a, &b| {
                let (a, b) = (&self.nodes[a as usize], &self.nodes[b as usize]);
                b.total.cmp(&a.total).then_with(|| rank[a.frame as usize].cmp(&rank[b.frame as usize]))
            });
        }
        FlameTree { frames, nodes: self.nodes, kids, start }
    }
}

/// FxHash (rustc's) for (parent, frame) ids: one lookup per frame of
/// every stack, where SipHash's strength buys nothing.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(b.into());
        }
    }

    fn write_u32(&mut self, x: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(x)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
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

    /// Literal stacks: main -> a -> {c (with i1, i2 inlined), b in /app, b
    /// in /lib (two builds of one path)}, a's self time, a stack counted
    /// only for the second event, and siblings x and inlined x under main.
    fn literal() -> CallData {
        use crate::callgraph::{Location, Stack};
        use loupe_model::{BuildId, ImageOffset, ProcessKey};
        let img = |path: &str, b: u8| ImageId::elf(path, Some(BuildId(vec![b])));
        let loc = |image: ImageId, procedure: &str, inlined: &[&str]| Location {
            image,
            offset: ImageOffset(0),
            procedure: procedure.into(),
            file: None,
            line: None,
            inlined: inlined.iter().map(|s| s.to_string()).collect(),
        };
        let locations = vec![
            loc(img("/app", 1), "main", &[]),
            loc(img("/app", 1), "a", &[]),
            loc(img("/app", 1), "c", &["i2", "i1"]),
            loc(img("/app", 1), "b", &[]),
            loc(img("/lib", 2), "b", &[]),
            loc(img("/lib", 3), "b", &[]),
            loc(img("/app", 1), "x", &[]),
            loc(img("/app", 1), "main", &["x"]),
        ];
        let stack = |pid: u32, locations: &[u32], counts: [u64; 2]| Stack {
            process: ProcessKey::new(pid, "p"),
            locations: locations.to_vec(),
            counts: counts.to_vec(),
        };
        let stacks = vec![
            stack(1, &[2, 1, 0], [4, 0]),
            stack(1, &[3, 1, 0], [3, 0]),
            stack(1, &[4, 1, 0], [2, 0]),
            stack(1, &[5, 1, 0], [1, 0]),
            stack(1, &[1, 0], [2, 0]),
            stack(1, &[0], [0, 7]),
            stack(2, &[2, 1, 0], [1, 0]),
            stack(1, &[6, 0], [1, 0]),
            stack(1, &[7], [1, 0]),
        ];
        CallData { locations, stacks, ..Default::default() }
    }

    /// (procedure, image, inlined, self, total) of each child.
    fn kids(n: &FlameNode) -> Vec<(&str, &str, bool, u64, u64)> {
        n.children.iter().map(|c| (c.procedure.as_str(), c.image.as_str(), c.inlined, c.self_, c.total)).collect()
    }

    #[test]
    fn literal_stacks_merge_by_path_with_totals_self_and_name_order() {
        // Checks the tree of literal stacks: sums per path, self at the leaf, inlined frames after their procedure, one node for two builds of /lib, ties by procedure, image, inlined.
        let t = tree(&literal(), 0, false);
        assert_eq!((t.procedure.as_str(), t.image.as_str(), t.self_, t.total), ("all", "", 0, 15));
        assert_eq!(kids(&t), [("main", "/app", false, 0, 15)]);
        let main = &t.children[0];
        assert_eq!(kids(main), [("a", "/app", false, 2, 13), ("x", "/app", false, 1, 1), ("x", "/app", true, 1, 1)]);
        let a = &main.children[0];
        assert_eq!(kids(a), [("c", "/app", false, 0, 5), ("b", "/app", false, 3, 3), ("b", "/lib", false, 3, 3)]);
        let i1 = &a.children[0].children[0];
        assert_eq!((i1.procedure.as_str(), i1.inlined, i1.self_, i1.total), ("i1", true, 0, 5));
        assert_eq!(kids(i1), [("i2", "/app", true, 5, 5)]);
        assert!(i1.children[0].children.is_empty());
        // The second event sees only main's own 7.
        let t = tree(&literal(), 1, false);
        assert_eq!((t.total, kids(&t)), (7, vec![("main", "/app", false, 7, 7)]));
    }

    #[test]
    fn inverted_literal_stacks_start_at_their_leaves() {
        // Checks the inverted tree of the literal stacks: leaves on top, callers below, self at the outermost caller.
        let t = tree(&literal(), 0, true);
        assert_eq!(t.total, 15);
        assert_eq!(
            kids(&t),
            [
                ("i2", "/app", true, 0, 5),
                ("b", "/app", false, 0, 3),
                ("b", "/lib", false, 0, 3),
                ("a", "/app", false, 0, 2),
                ("x", "/app", false, 0, 1),
                ("x", "/app", true, 0, 1),
            ]
        );
        let mut n = &t.children[0];
        for want in ["i1", "c", "a", "main"] {
            assert_eq!(n.children.len(), 1);
            n = &n.children[0];
            assert_eq!(n.procedure, want);
        }
        assert_eq!((n.self_, n.total), (5, 5));
        assert_eq!(kids(&t.children[5]), [("main", "/app", false, 1, 1)]);
    }

    #[test]
    fn the_json_node_has_the_documented_keys_in_order() {
        // Checks FlameNode's JSON: the root without image/inlined, keys alphabetical, children nested; FlameTree writes the same.
        let t = tree(&literal(), 1, false);
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#"{"children":[{"children":[],"image":"/app","inlined":false,"name":"main","self":7,"total":7}],"name":"all","self":0,"total":7}"#
        );
        // The unnamed tree writes what its named copy does.
        for inverted in [false, true] {
            let d = literal();
            let (t, n) = (FlameTree::new(&d, 0, inverted), tree(&d, 0, inverted));
            assert_eq!(serde_json::to_string_pretty(&t).unwrap(), serde_json::to_string_pretty(&n).unwrap());
        }
    }
}
