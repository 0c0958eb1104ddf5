//! Flame graphs: the collapsed stacks drawn by inferno (a Rust port of
//! flamegraph.pl) as an interactive SVG (click to zoom, Ctrl-F to search),
//! optionally wrapped in an HTML page.

use crate::callgraph::{CallData, Selection};
use crate::export::collapsed;
use crate::image_display;
use loupe_model::stacks::truncated_image;
use loupe_model::ImageId;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

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

/// The name of the node that stands for the children of a parent folded
/// by [`FlameTree::prune`]: their samples are its self and total.
pub const OTHER: &str = "(other)";

impl FlameNode {
    /// An [`OTHER`] node of `n` samples (unnamed image, as the root).
    fn other(n: u64) -> FlameNode {
        FlameNode { procedure: OTHER.into(), self_: n, total: n, ..Default::default() }
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
    FlameTree::new(data, event, inverted).named()
}

/// [`tree`] before its names are copied out: what `flame --format json`
/// serializes (as [`FlameNode`] does), without a string per node.
pub struct FlameTree<'a> {
    data: &'a CallData,
    index: Cow<'a, FlameIndex>,
    nodes: Vec<Slot>,
    /// Children of node i, in order: `kids[start[i]..start[i + 1]]`.
    kids: Vec<u32>,
    start: Vec<usize>,
    /// Children with fewer samples are shown folded ([`FlameTree::prune`]).
    min_total: u64,
}

impl<'a> FlameTree<'a> {
    /// The tree of every stack of `data` counted for `event`.
    pub fn new(data: &'a CallData, event: usize, inverted: bool) -> FlameTree<'a> {
        FlameTree::build(data, Cow::Owned(FlameIndex::of(data)), 0..data.stacks.len() as u32, event, inverted)
    }

    /// The tree of some of `data`'s stacks (by index, as
    /// [`FlameIndex::select`] lists them), with an index made before: a
    /// server keeps both across requests, so that a new selection costs
    /// adding counts along the index's prefix tree of every stack.
    pub fn of_stacks(data: &'a CallData, index: &'a FlameIndex, stacks: &[u32], event: usize, inverted: bool) -> FlameTree<'a> {
        FlameTree::build(data, Cow::Borrowed(index), stacks.iter().copied(), event, inverted)
    }

    /// The selected stacks' counts at their leaves in the prefix tree of
    /// all stacks, summed up to the root; the nodes with samples are the tree.
    fn build(
        data: &'a CallData,
        index: Cow<'a, FlameIndex>,
        stacks: impl Iterator<Item = u32>,
        event: usize,
        inverted: bool,
    ) -> FlameTree<'a> {
        let trie = index.trie(data, inverted);
        let mut nodes: Vec<Slot> = trie.frame.iter().map(|&frame| Slot { frame, self_: 0, total: 0 }).collect();
        for s in stacks {
            let n = data.stacks[s as usize].counts[event];
            let leaf = &mut nodes[trie.leaf[s as usize] as usize];
            leaf.self_ += n;
            leaf.total += n;
        }
        // A child is made after its parent: one pass from the end sums totals up.
        for i in (1..nodes.len()).rev() {
            let t = nodes[i].total;
            nodes[trie.parent[i] as usize].total += t;
        }
        let (kids, start) = sorted_children(&nodes, &trie.parent, &index.rank);
        FlameTree { data, index, nodes, kids, start, min_total: 0 }
    }

    /// Shows, under every node, the children with less than `min_share`
    /// of the root's samples folded into one [`OTHER`] child, after the
    /// kept ones: the tree a screen can draw (a box under a pixel wide
    /// says nothing), with every kept node's self and total unchanged and
    /// each node's total still its self plus its children's totals.
    pub fn prune(mut self, min_share: f64) -> FlameTree<'a> {
        self.min_total = (min_share * self.nodes[0].total as f64).ceil() as u64;
        self
    }

    /// The tree with its names copied out.
    pub fn named(&self) -> FlameNode {
        self.node(0)
    }

    /// (procedure, image, inlined) of node `i`; the root is `all`.
    fn name(&self, i: u32) -> (&str, &str, bool) {
        match self.nodes[i as usize].frame {
            u32::MAX => ("all", "", false),
            f => self.index.name(self.data, f),
        }
    }

    fn children(&self, i: u32) -> &[u32] {
        &self.kids[self.start[i as usize]..self.start[i as usize + 1]]
    }

    /// The children of `i` shown, and the samples of those folded (0: none).
    /// Children are sorted by total, so the folded ones are the last.
    fn shown(&self, i: u32) -> (&[u32], u64) {
        let kids = self.children(i);
        if self.min_total == 0 {
            // Unpruned: every child has samples, none folds (and no child's counts need reading).
            return (kids, 0);
        }
        let kept = kids.partition_point(|&k| self.nodes[k as usize].total >= self.min_total);
        (&kids[..kept], kids[kept..].iter().map(|&k| self.nodes[k as usize].total).sum())
    }

    /// Node `i` and everything below it, named.
    fn node(&self, i: u32) -> FlameNode {
        let (procedure, image, inlined) = self.name(i);
        let s = &self.nodes[i as usize];
        let (kept, folded) = self.shown(i);
        let mut children: Vec<FlameNode> = kept.iter().map(|&k| self.node(k)).collect();
        if folded > 0 {
            children.push(FlameNode::other(folded));
        }
        FlameNode { procedure: procedure.to_string(), image: image.to_string(), inlined, self_: s.self_, total: s.total, children }
    }

    /// Appends the tree as compact JSON, byte for byte what
    /// `serde_json::to_writer` writes of it: each frame's fields are
    /// escaped once per index rather than once per node (escaping every
    /// name was a fifth of a whole machine's new flame request). Reserve
    /// [`FlameTree::json_len`] first, with what surrounds the tree: growing
    /// a 26 MB buffer by doubling copied it and faulted in twice its memory.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.write_node(0, self.index.fields(self.data), out);
    }

    /// The length of what [`FlameTree::write_json`] writes, counted by the
    /// same walk without writing.
    pub fn json_len(&self) -> usize {
        let mut n = Counted(0);
        self.write_node(0, self.index.fields(self.data), &mut n);
        n.0
    }

    fn write_node(&self, i: u32, fields: &[Box<[u8]>], out: &mut impl Sink) {
        out.put(b"{\"children\":[");
        let (kept, folded) = self.shown(i);
        for (n, &k) in kept.iter().enumerate() {
            if n > 0 {
                out.put(b",");
            }
            self.write_node(k, fields, out);
        }
        if folded > 0 {
            if !kept.is_empty() {
                out.put(b",");
            }
            out.put(b"{\"children\":[],\"name\":\"");
            out.put(OTHER.as_bytes());
            out.put(b"\"");
            write_counts(out, folded, folded);
        }
        out.put(b"],");
        let s = &self.nodes[i as usize];
        match fields.get(s.frame as usize) {
            Some(f) => out.put(f),
            None => out.put(b"\"name\":\"all\""),
        }
        write_counts(out, s.self_, s.total);
    }
}

/// Where [`FlameTree::write_node`] puts its text: the answer, or a count
/// of its bytes (one writer for both, so the count cannot drift from it).
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Bytes that would have been written.
struct Counted(usize);

impl Sink for Counted {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// `,"self":S,"total":T}`.
fn write_counts(out: &mut impl Sink, self_: u64, total: u64) {
    out.put(b",\"self\":");
    out.put(itoa::Buffer::new().format(self_).as_bytes());
    out.put(b",\"total\":");
    out.put(itoa::Buffer::new().format(total).as_bytes());
    out.put(b"}");
}

impl Serialize for FlameTree<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        At(self, 0).serialize(s)
    }
}

/// Node `.1` of a tree, serialized as its [`FlameNode`] would be.
struct At<'t, 'a>(&'t FlameTree<'a>, u32);

/// The children of a node, in order, then the folded ones' [`OTHER`] node.
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
        let (kept, folded) = self.0.shown(self.1);
        let mut seq = s.serialize_seq(Some(kept.len() + usize::from(folded > 0)))?;
        for &k in kept {
            seq.serialize_element(&At(self.0, k))?;
        }
        if folded > 0 {
            seq.serialize_element(&FlameNode::other(folded))?;
        }
        seq.end()
    }
}

/// A frame of the index: the location naming it, which of its names
/// (`u32::MAX`: the procedure, else an index into its inlined functions),
/// and its image.
#[derive(Clone, Copy, Debug)]
struct FrameRef {
    location: u32,
    inlined_at: u32,
    image: u32,
}

/// The distinct frames of a profile, by id, and each location's frames
/// root first (the outer procedure, then what is inlined into it): made
/// once per profile ([`CallData`]), it names nothing itself but points
/// into the profile's locations, so a server can keep it beside them.
#[derive(Clone, Debug, Default)]
pub struct FlameIndex {
    /// Image display names; images that show alike are one.
    images: Vec<String>,
    frames: Vec<FrameRef>,
    /// `of_location[l]..of_location[l + 1]` indexes `ids`.
    of_location: Vec<usize>,
    ids: Vec<u32>,
    /// Each frame's place in name order (procedure, image, inlined), the
    /// tie-break between children of equal totals.
    rank: Vec<u32>,
    /// Each frame's JSON fields (`"image":…,"inlined":…,"name":…`), made
    /// when a tree of the index is first written.
    fields: OnceLock<Vec<Box<[u8]>>>,
    /// The prefix tree of every stack, root first and (inverted) leaf
    /// first, made when a tree is first asked for.
    tries: [OnceLock<Trie>; 2],
}

/// The stacks a selection keeps (indices into the profile's), with the
/// samples of `event` they hold and how many of those stopped unwinding
/// before the root.
#[derive(Debug, Default)]
pub struct Selected {
    pub stacks: Vec<u32>,
    pub total: u64,
    pub truncated: u64,
}

/// The prefix tree of a profile's stacks, node 0 the root: each node's
/// frame and parent (made after it), and each stack's last node.
#[derive(Clone, Debug, Default)]
struct Trie {
    frame: Vec<u32>,
    parent: Vec<u32>,
    leaf: Vec<u32>,
}

impl FlameIndex {
    /// The index of `data`'s locations.
    pub fn of(data: &CallData) -> FlameIndex {
        // Images by id, then by the name shown: ids that show alike are one frame.
        let (mut image_ix, mut name_ix): (HashMap<&ImageId, u32>, HashMap<String, u32>) = Default::default();
        let mut frame_ix: HashMap<(&str, u32, bool), u32> = HashMap::new();
        let mut f = FlameIndex { of_location: vec![0], ..Default::default() };
        for (l, loc) in data.locations.iter().enumerate() {
            let image = *image_ix.entry(&loc.image).or_insert_with(|| {
                let name = image_display(&loc.image);
                *name_ix.entry(name.clone()).or_insert_with(|| {
                    f.images.push(name);
                    f.images.len() as u32 - 1
                })
            });
            let inlined = loc.inlined.iter().enumerate().rev().map(|(k, p)| (p.as_str(), k as u32));
            for (name, at) in std::iter::once((loc.procedure.as_str(), u32::MAX)).chain(inlined) {
                let id = *frame_ix.entry((name, image, at != u32::MAX)).or_insert_with(|| {
                    f.frames.push(FrameRef { location: l as u32, inlined_at: at, image });
                    f.frames.len() as u32 - 1
                });
                f.ids.push(id);
            }
            f.of_location.push(f.ids.len());
        }
        f.rank = f.ranks(data);
        f
    }

    fn at(&self, location: u32) -> &[u32] {
        let l = location as usize;
        &self.ids[self.of_location[l]..self.of_location[l + 1]]
    }

    /// (procedure, image, inlined) of frame `f` of `data`'s index.
    fn name<'s>(&'s self, data: &'s CallData, f: u32) -> (&'s str, &'s str, bool) {
        let r = self.frames[f as usize];
        let loc = &data.locations[r.location as usize];
        let image = &self.images[r.image as usize];
        match loc.inlined.get(r.inlined_at as usize) {
            Some(p) => (p, image, true),
            None => (&loc.procedure, image, false),
        }
    }

    fn ranks(&self, data: &CallData) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.frames.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            let ((pa, ia, xa), (pb, ib, xb)) = (self.name(data, a), self.name(data, b));
            pa.cmp(pb).then_with(|| ia.cmp(ib)).then(xa.cmp(&xb))
        });
        let mut rank = vec![0; order.len()];
        for (r, &f) in order.iter().enumerate() {
            rank[f as usize] = r as u32;
        }
        rank
    }

    /// Each frame's JSON fields, escaped as serde_json escapes strings.
    fn fields(&self, data: &CallData) -> &[Box<[u8]>] {
        self.fields.get_or_init(|| {
            (0..self.frames.len() as u32)
                .map(|f| {
                    let (procedure, image, inlined) = self.name(data, f);
                    let mut b = b"\"image\":".to_vec();
                    serde_json::to_writer(&mut b, image).expect("a string serializes");
                    b.extend_from_slice(if inlined { b",\"inlined\":true,\"name\":" } else { b",\"inlined\":false,\"name\":" });
                    serde_json::to_writer(&mut b, procedure).expect("a string serializes");
                    b.into_boxed_slice()
                })
                .collect()
        })
    }

    /// The stacks of `data` that `sel` keeps (a process it keeps, and a
    /// frame in an image it keeps), as [`crate::callgraph::resolve`] would
    /// have kept them, with their samples of `event`.
    pub fn select(&self, data: &CallData, event: usize, sel: &Selection) -> Selected {
        let image_kept: Vec<bool> = self.images.iter().map(|i| (sel.keep_image)(i)).collect();
        let location_kept = |l: u32| image_kept[self.frames[self.ids[self.of_location[l as usize]] as usize].image as usize];
        let stopped = truncated_image();
        let mut out = Selected::default();
        for (i, s) in data.stacks.iter().enumerate() {
            if !(sel.keep)(&s.process) || !s.locations.iter().any(|&l| location_kept(l)) {
                continue;
            }
            out.total += s.counts[event];
            if s.locations.last().is_some_and(|&l| data.locations[l as usize].image == stopped) {
                out.truncated += s.counts[event];
            }
            out.stacks.push(i as u32);
        }
        out
    }

    /// The prefix tree of `data`'s stacks, made once: a stack walks it by
    /// (parent, frame) ids, one hash lookup per frame.
    fn trie(&self, data: &CallData, inverted: bool) -> &Trie {
        self.tries[usize::from(inverted)].get_or_init(|| {
            let mut t = Trie { frame: vec![u32::MAX], parent: vec![u32::MAX], leaf: Vec::with_capacity(data.stacks.len()) };
            let mut child: HashMap<(u32, u32), u32, BuildHasherDefault<IdHasher>> = HashMap::default();
            let mut path = Vec::new();
            for s in &data.stacks {
                path.clear();
                for &l in s.locations.iter().rev() {
                    path.extend_from_slice(self.at(l));
                }
                if inverted {
                    path.reverse();
                }
                let mut node = 0u32;
                for &frame in &path {
                    let (parent, next) = (node, t.frame.len() as u32);
                    node = *child.entry((parent, frame)).or_insert(next);
                    if node == next {
                        t.frame.push(frame);
                        t.parent.push(parent);
                    }
                }
                t.leaf.push(node);
            }
            t
        })
    }
}

/// A node of a tree: its frame and counts.
struct Slot {
    frame: u32,
    self_: u64,
    total: u64,
}

/// The children of each node with samples (`kids[start[i]..start[i + 1]]`),
/// sorted by total, descending, then by name (procedure, image, inlined:
/// `rank`), so the order is stable.
fn sorted_children(nodes: &[Slot], parent: &[u32], rank: &[u32]) -> (Vec<u32>, Vec<usize>) {
    let shown = |i: usize| i > 0 && nodes[i].total > 0;
    let mut start = vec![0usize; nodes.len() + 1];
    for i in (1..nodes.len()).filter(|&i| shown(i)) {
        start[parent[i] as usize + 1] += 1;
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut fill = start.clone();
    let mut kids = vec![0u32; start[nodes.len()]];
    for i in (1..nodes.len()).filter(|&i| shown(i)) {
        kids[fill[parent[i] as usize]] = i as u32;
        fill[parent[i] as usize] += 1;
    }
    for i in 0..nodes.len() {
        kids[start[i]..start[i + 1]].sort_unstable_by(|&a, &b| {
            let (a, b) = (&nodes[a as usize], &nodes[b as usize]);
            b.total.cmp(&a.total).then_with(|| rank[a.frame as usize].cmp(&rank[b.frame as usize]))
        });
    }
    (kids, start)
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

    /// (procedure, self, total) of each child: what pruning must keep exact.
    fn counts(n: &FlameNode) -> Vec<(&str, u64, u64)> {
        n.children.iter().map(|c| (c.procedure.as_str(), c.self_, c.total)).collect()
    }

    /// Every node's total is its self plus its children's totals.
    fn adds_up(n: &FlameNode) -> bool {
        n.total == n.self_ + n.children.iter().map(|c| c.total).sum::<u64>() && n.children.iter().all(adds_up)
    }

    #[test]
    fn pruning_folds_small_children_into_other_and_keeps_every_figure() {
        // Checks pruning at 0.25 (4 of 15 samples) and 2/15 of the literal tree: small children go to a last (other) node holding their samples; kept nodes keep their figures.
        let d = literal();
        let t = FlameTree::new(&d, 0, false).prune(0.25).named();
        let main = &t.children[0];
        assert_eq!((t.total, main.total), (15, 15));
        // x (1) and inlined x (1) fold; a (13) stays with its own figures.
        assert_eq!(counts(main), [("a", 2, 13), (OTHER, 2, 2)]);
        let other = &main.children[1];
        assert_eq!((other.image.as_str(), other.inlined, other.children.len()), ("", false, 0));
        // Under a: c (5) stays, the two b (3 each) fold into one (other) of 6.
        assert_eq!(counts(&main.children[0]), [("c", 0, 5), (OTHER, 6, 6)]);
        assert!(adds_up(&t));
        // At 2/15 (ceil of 1.99 samples is 2) the b nodes stay and only the 1-sample x nodes fold.
        let t = FlameTree::new(&d, 0, false).prune(2.0 / 15.0).named();
        assert_eq!(counts(&t.children[0]), [("a", 2, 13), (OTHER, 2, 2)]);
        assert_eq!(counts(&t.children[0].children[0]), [("c", 0, 5), ("b", 3, 3), ("b", 3, 3)]);
        // Nothing to fold: the tree is whole.
        assert_eq!(FlameTree::new(&d, 0, false).prune(0.0).named(), tree(&d, 0, false));
        assert_eq!(FlameTree::new(&d, 0, false).prune(1.0 / 15.0).named(), tree(&d, 0, false));
    }

    #[test]
    fn pruning_an_inverted_tree_folds_its_small_leaves() {
        // Checks the inverted literal tree pruned at 3/15: leaves below 3 samples fold into one (other) at the top, totals conserved.
        let d = literal();
        let t = FlameTree::new(&d, 0, true).prune(0.2).named();
        assert_eq!(counts(&t), [("i2", 0, 5), ("b", 0, 3), ("b", 0, 3), (OTHER, 4, 4)]);
        assert_eq!(t.children.iter().map(|c| c.total).sum::<u64>(), t.total);
        assert!(adds_up(&t));
        // Everything folds under a share above any child: the root keeps its total in one (other).
        let t = FlameTree::new(&d, 0, true).prune(0.9).named();
        assert_eq!((t.total, counts(&t)), (15, vec![(OTHER, 15, 15)]));
    }

    #[test]
    fn the_compact_writer_writes_what_serde_json_does() {
        // Checks write_json against serde_json (and json_len against what it wrote) on the literal trees, whole and pruned, plain and inverted, and on names that need escaping.
        let mut d = literal();
        d.locations[3].procedure = "b<\"quoted\"\\\n\u{1}é>".into();
        for inverted in [false, true] {
            for share in [0.0, 0.2, 0.9] {
                let t = FlameTree::new(&d, 0, inverted).prune(share);
                let mut out = Vec::new();
                t.write_json(&mut out);
                assert_eq!(t.json_len(), out.len(), "the counted length is the written one");
                assert_eq!(String::from_utf8(out).unwrap(), serde_json::to_string(&t).unwrap(), "inverted {inverted}, share {share}");
                assert_eq!(serde_json::to_string(&t).unwrap(), serde_json::to_string(&t.named()).unwrap());
            }
        }
    }

    #[test]
    fn a_selection_of_kept_stacks_builds_the_tree_a_filtered_resolve_does() {
        // Checks FlameIndex::select against resolve's own filters on the hand-built profile: same tree, total and truncated count.
        use crate::callgraph::{
            resolve,
            tests::{stacks, Table},
        };
        use loupe_model::EventName;
        let all = data(&|_| true);
        let index = FlameIndex::of(&all);
        let ev = [EventName::new("cpu-clock")];
        type Keep<'f> = (&'f dyn Fn(&loupe_model::ProcessKey) -> bool, &'f dyn Fn(&str) -> bool);
        let cases: [Keep; 3] =
            [(&|p| p.pid == 1, &|_| true), (&|_| true, &|i| i.contains("unwind")), (&|p| p.pid == 2, &|i| i == "/bin/app")];
        for (keep, keep_image) in cases {
            let sel = Selection { keep, keep_image };
            let want = resolve(&[stacks()], &ev, &sel, &mut Table);
            let got = index.select(&all, 0, &sel);
            assert_eq!((got.total, got.truncated), (want.totals[0], want.truncated[0]));
            assert_eq!(FlameTree::of_stacks(&all, &index, &got.stacks, 0, false).named(), tree(&want, 0, false));
            assert_eq!(FlameTree::of_stacks(&all, &index, &got.stacks, 0, true).named(), tree(&want, 0, true));
        }
    }
}
