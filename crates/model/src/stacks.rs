//! Call stacks: a per-(epoch, event) table of distinct stacks, each a list
//! of (image, offset) frames, with per-(process, stack) sample counts.
//!
//! Frames are deduplicated into a frame table and stacks into a stack
//! table, so a stack that recurs a million times costs one count. Frame 0
//! of a stack is the leaf (where the sample hit); caller frames hold the
//! offset of the call instruction's last byte (return address - 1), so
//! symbolizing them names the call site, as `perf report` does.
//!
//! An unwind that stopped before reaching the thread's root ends with a
//! frame in the [`truncated_image`] image, so the loss is visible in every
//! view rather than silently cut.
//!
//! ```
//! use loupe_model::*;
//! use loupe_model::stacks::*;
//! let app = ImageId::elf("/bin/app", None);
//! let mut s = StackProfile::new(EventName::new("cpu-clock"));
//! let p = ProcessKey::new(1, "app");
//! s.add(&p, &[(app.clone(), ImageOffset(0x10)), (app.clone(), ImageOffset(0x40))], 3);
//! s.add(&p, &[(app.clone(), ImageOffset(0x10)), (app, ImageOffset(0x40))], 2);
//! assert_eq!((s.stacks.len(), s.total_samples()), (1, 5));
//! ```

use crate::{EventName, ImageId, ImageKind, ImageOffset, ProcessKey};
use foldhash::HashMap;
use std::collections::BTreeMap;

/// One frame: an offset in an image of the profile's image table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame {
    pub image: u32,
    pub offset: ImageOffset,
}

/// The pseudo-image of the frame that ends a truncated or failed unwind.
pub fn truncated_image() -> ImageId {
    ImageId { kind: ImageKind::Unknown, path: "[unwind stopped]".into(), build_id: None, content_hash: None }
}

/// Stacks of one event: tables plus counts. Indices are dense and valid
/// (the decoder checks them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackProfile {
    pub event: EventName,
    pub period_sum: u64,
    pub images: Vec<ImageId>,
    pub frames: Vec<Frame>,
    /// Leaf first; indices into `frames`.
    pub stacks: Vec<Vec<u32>>,
    pub processes: Vec<ProcessKey>,
    /// (process index, stack index) -> samples.
    pub counts: BTreeMap<(u32, u32), u64>,
    index: Interner,
}

/// Lookup tables for adding; rebuilt on demand, not part of equality.
#[derive(Clone, Debug, Default)]
struct Interner {
    images: HashMap<ImageId, u32>,
    frames: HashMap<Frame, u32>,
    /// Stack ids by the hash of their frame ids: the frames are kept once,
    /// in [`StackProfile::stacks`] (a map keyed by them kept a second copy
    /// of every stack: a third of a large profile's memory while building it).
    stacks: SliceIndex,
    processes: HashMap<ProcessKey, u32>,
    built: bool,
}

impl PartialEq for Interner {
    fn eq(&self, _: &Interner) -> bool {
        true
    }
}
impl Eq for Interner {}

/// Ids of the rows of a table of slices (stacks), found by the slices'
/// hash: each row is kept once, in the table, where a map keyed by the
/// slices would keep a second copy of every one.
#[derive(Clone, Debug, Default)]
pub struct SliceIndex {
    ids: hashbrown::HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl SliceIndex {
    /// The id of `key` in `table`, if indexed, and the hash to add it with.
    pub fn find<T: std::hash::Hash + Eq, R: AsRef<[T]>>(&self, table: &[R], key: &[T]) -> (Option<u32>, u64) {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(key);
        (self.ids.find(hash, |&i| table[i as usize].as_ref() == key).copied(), hash)
    }

    /// Indexes row `id` of `table`, whose slice hashes to `hash` (from [`SliceIndex::find`]).
    pub fn insert<T: std::hash::Hash, R: AsRef<[T]>>(&mut self, table: &[R], hash: u64, id: u32) {
        use std::hash::BuildHasher;
        let hasher = &self.hasher;
        self.ids.insert_unique(hash, id, |&j| hasher.hash_one(table[j as usize].as_ref()));
    }

    /// Points `key`'s entry at row `id` (added when new): a table listing a
    /// slice twice answers to its last row.
    pub fn set<T: std::hash::Hash + Eq, R: AsRef<[T]>>(&mut self, table: &[R], key: &[T], id: u32) {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(key);
        match self.ids.find_mut(hash, |&j| table[j as usize].as_ref() == key) {
            Some(j) => *j = id,
            None => self.insert(table, hash, id),
        }
    }
}

/// The id of the stack of frame ids `ids` in `stacks`, added when new.
fn intern_stack(ix: &mut Interner, stacks: &mut Vec<Vec<u32>>, ids: &[u32]) -> u32 {
    match ix.stacks.find(stacks, ids) {
        (Some(i), _) => i,
        (None, hash) => {
            stacks.push(ids.to_vec());
            let i = (stacks.len() - 1) as u32;
            ix.stacks.insert(stacks, hash, i);
            i
        }
    }
}

fn intern<K: std::hash::Hash + Eq + Clone>(map: &mut HashMap<K, u32>, table: &mut Vec<K>, k: &K) -> u32 {
    if let Some(&i) = map.get(k) {
        return i;
    }
    table.push(k.clone());
    let i = (table.len() - 1) as u32;
    map.insert(k.clone(), i);
    i
}

impl StackProfile {
    pub fn new(event: EventName) -> StackProfile {
        StackProfile {
            event,
            period_sum: 0,
            images: Vec::new(),
            frames: Vec::new(),
            stacks: Vec::new(),
            processes: Vec::new(),
            counts: BTreeMap::new(),
            index: Interner::default(),
        }
    }

    fn ensure_index(&mut self) {
        if self.index.built {
            return;
        }
        let ix = &mut self.index;
        ix.images = self.images.iter().enumerate().map(|(i, x)| (x.clone(), i as u32)).collect();
        ix.frames = self.frames.iter().enumerate().map(|(i, x)| (*x, i as u32)).collect();
        ix.stacks = SliceIndex::default();
        for (i, x) in self.stacks.iter().enumerate() {
            // A stack listed twice answers to its last row, as a map built from the rows did.
            ix.stacks.set(&self.stacks, x, i as u32);
        }
        ix.processes = self.processes.iter().enumerate().map(|(i, x)| (x.clone(), i as u32)).collect();
        ix.built = true;
    }

    pub fn intern_image(&mut self, image: &ImageId) -> u32 {
        self.ensure_index();
        intern(&mut self.index.images, &mut self.images, image)
    }

    /// Counts `n` samples of one stack given by interned frames (leaf first).
    pub fn add_frames(&mut self, process: &ProcessKey, frames: &[Frame], n: u64) {
        self.ensure_index();
        let ids: Vec<u32> = frames.iter().map(|f| intern(&mut self.index.frames, &mut self.frames, f)).collect();
        let s = intern_stack(&mut self.index, &mut self.stacks, &ids);
        let p = intern(&mut self.index.processes, &mut self.processes, process);
        *self.counts.entry((p, s)).or_insert(0) += n;
    }

    /// Counts `n` samples of a stack of (image, offset) frames, leaf first.
    pub fn add(&mut self, process: &ProcessKey, frames: &[(ImageId, ImageOffset)], n: u64) {
        let fs: Vec<Frame> = frames.iter().map(|(img, off)| Frame { image: self.intern_image(img), offset: *off }).collect();
        self.add_frames(process, &fs, n);
    }

    /// Adds another profile of the same event into this one.
    pub fn merge(&mut self, other: &StackProfile) -> Result<(), crate::MergeError> {
        if other.event != self.event {
            return Err(crate::MergeError::DifferentEvent(self.event.0.clone(), other.event.0.clone()));
        }
        self.ensure_index();
        let images: Vec<u32> = other.images.iter().map(|i| self.intern_image(i)).collect();
        // Each of other's frames, stacks and processes is looked up here once, when
        // first met in count order (so ids come out as adding every count would
        // give them), not once per count: a day of minute epochs merges 1440 tables.
        const NEW: u32 = u32::MAX;
        let (mut frames, mut stacks, mut processes) =
            (vec![NEW; other.frames.len()], vec![NEW; other.stacks.len()], vec![NEW; other.processes.len()]);
        let mut ids = Vec::new();
        for (&(p, s), &n) in &other.counts {
            if stacks[s as usize] == NEW {
                ids.clear();
                for &f in &other.stacks[s as usize] {
                    if frames[f as usize] == NEW {
                        let o = other.frames[f as usize];
                        frames[f as usize] =
                            intern(&mut self.index.frames, &mut self.frames, &Frame { image: images[o.image as usize], offset: o.offset });
                    }
                    ids.push(frames[f as usize]);
                }
                stacks[s as usize] = intern_stack(&mut self.index, &mut self.stacks, &ids);
            }
            if processes[p as usize] == NEW {
                processes[p as usize] = intern(&mut self.index.processes, &mut self.processes, &other.processes[p as usize]);
            }
            *self.counts.entry((processes[p as usize], stacks[s as usize])).or_insert(0) += n;
        }
        self.period_sum += other.period_sum;
        Ok(())
    }

    pub fn total_samples(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Frames of stack `s` as (image, offset), leaf first.
    pub fn stack(&self, s: u32) -> impl Iterator<Item = (&ImageId, ImageOffset)> + '_ {
        self.stacks[s as usize].iter().map(|&f| {
            let f = self.frames[f as usize];
            (&self.images[f.image as usize], f.offset)
        })
    }

    /// Whether stack `s` ends in the truncation marker.
    pub fn is_truncated(&self, s: u32) -> bool {
        self.stack(s).last().is_some_and(|(img, _)| img.kind == ImageKind::Unknown && img.path == truncated_image().path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(p: &str) -> ImageId {
        ImageId::elf(p, None)
    }

    #[test]
    fn stacks_and_frames_are_deduplicated_across_processes() {
        // Checks that equal stacks share one table row and counts stay per process.
        let mut s = StackProfile::new(EventName::new("e"));
        let st = [(img("/a"), ImageOffset(1)), (img("/b"), ImageOffset(2))];
        s.add(&ProcessKey::new(1, "x"), &st, 2);
        s.add(&ProcessKey::new(2, "y"), &st, 3);
        s.add(&ProcessKey::new(2, "y"), &st[1..], 4);
        assert_eq!((s.images.len(), s.frames.len(), s.stacks.len(), s.processes.len()), (2, 2, 2, 2));
        assert_eq!(s.counts.values().copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(s.total_samples(), 9);
    }

    #[test]
    fn merge_remaps_tables_and_sums() {
        // Checks that merging profiles with different table orders sums the same stacks.
        let p = ProcessKey::new(1, "x");
        let (s1, s2) = ([(img("/a"), ImageOffset(1))], [(img("/b"), ImageOffset(9)), (img("/a"), ImageOffset(1))]);
        let mut a = StackProfile::new(EventName::new("e"));
        a.add(&p, &s1, 1);
        a.period_sum = 10;
        let mut b = StackProfile::new(EventName::new("e"));
        b.add(&p, &s2, 5);
        b.add(&p, &s1, 2);
        b.period_sum = 70;
        a.merge(&b).unwrap();
        assert_eq!((a.stacks.len(), a.total_samples(), a.period_sum), (2, 8, 80));
        let got: Vec<Vec<&str>> = (0..2).map(|s| a.stack(s).map(|(i, _)| i.path.as_str()).collect()).collect();
        assert_eq!(got, vec![vec!["/a"], vec!["/b", "/a"]]);
        assert!(a.merge(&StackProfile::new(EventName::new("other"))).is_err());
    }

    #[test]
    fn merge_numbers_tables_as_adding_each_count_does() {
        // Checks merge against adding other's counts one by one (the definition): equal tables, ids in the same order, across shared and new frames, stacks and processes.
        let f = |i: &str, o: u64| (img(i), ImageOffset(o));
        let (p, q) = (ProcessKey::new(1, "x"), ProcessKey::new(2, "y"));
        let mut base = StackProfile::new(EventName::new("e"));
        base.add(&p, &[f("/a", 1), f("/b", 2)], 3);
        let mut other = StackProfile::new(EventName::new("e"));
        other.add(&q, &[f("/c", 7), f("/a", 1)], 1);
        other.add(&p, &[f("/b", 2)], 4);
        other.add(&p, &[f("/a", 1), f("/b", 2)], 2);
        other.add(&q, &[f("/b", 2)], 5);
        other.add(&q, &[f("/c", 8), f("/c", 7), f("/a", 1)], 6);
        let mut want = base.clone();
        for (&(pi, si), &n) in &other.counts {
            let frames: Vec<(ImageId, ImageOffset)> = other.stack(si).map(|(i, o)| (i.clone(), o)).collect();
            want.add(&other.processes[pi as usize], &frames, n);
        }
        let mut got = base;
        got.merge(&other).unwrap();
        assert_eq!((&got.images, &got.frames, &got.stacks, &got.processes), (&want.images, &want.frames, &want.stacks, &want.processes));
        assert_eq!((got.counts.clone(), got.total_samples()), (want.counts.clone(), 21));
        // Merging again doubles every count and adds no entry.
        got.merge(&other).unwrap();
        assert_eq!((got.stacks.len(), got.total_samples()), (want.stacks.len(), 39));
    }

    #[test]
    fn truncation_marker_is_recognized() {
        // Checks is_truncated on a stack ending in the marker and one that does not.
        let mut s = StackProfile::new(EventName::new("e"));
        let p = ProcessKey::new(1, "x");
        s.add(&p, &[(img("/a"), ImageOffset(1)), (truncated_image(), ImageOffset(0))], 1);
        s.add(&p, &[(img("/a"), ImageOffset(1))], 1);
        assert!(s.is_truncated(0) && !s.is_truncated(1));
    }
}
