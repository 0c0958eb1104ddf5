//! In-memory aggregation between flushes: DCPI's per-image hash tables.
//!
//! Keyed by small integers so the per-sample cost is one hash lookup; turned
//! into [`Profile`]s only when a slice of images is flushed.

use foldhash::{HashMap, HashMapExt};
use loupe_model::{EventName, ImageId, ImageOffset, ProcessKey, Profile};

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    pid: u32,
    comm: u32,
    event: u16,
    offset: u64,
}

/// Where samples land: image, event, process (pid and interned name), offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub image: u32,
    pub event: u16,
    pub pid: u32,
    pub comm: u32,
    pub offset: u64,
}

#[derive(Default)]
struct ImageCounts {
    counts: HashMap<Key, u64>,
    period_sums: HashMap<u16, u64>,
}

/// Sample counts of every image since its last flush.
#[derive(Default)]
pub struct Aggregator {
    images: HashMap<u32, ImageCounts>,
    /// Interned process names, for the daemon's life: processes hold ids into it
    /// (one entry per distinct name ever seen, a few bytes each).
    comms: Vec<String>,
    comm_index: HashMap<String, u32>,
    entries: usize,
}

impl Aggregator {
    pub fn intern_comm(&mut self, comm: &str) -> u32 {
        if let Some(&i) = self.comm_index.get(comm) {
            return i;
        }
        self.comms.push(comm.to_string());
        let i = (self.comms.len() - 1) as u32;
        self.comm_index.insert(comm.to_string(), i);
        i
    }

    pub fn comm(&self, i: u32) -> &str {
        self.comms.get(i as usize).map(String::as_str).unwrap_or("?")
    }

    /// Counts one or more samples.
    pub fn add(&mut self, at: Slot, count: u64, period: u64) {
        let Slot { image, event, pid, comm, offset } = at;
        let ic = self.images.entry(image).or_default();
        let slot = ic.counts.entry(Key { pid, comm, event, offset }).or_insert(0);
        if *slot == 0 {
            self.entries += 1;
        }
        *slot += count;
        *ic.period_sums.entry(event).or_insert(0) += period;
    }

    /// The processes with samples in `image`.
    pub fn pids_of(&self, image: u32) -> Vec<u32> {
        let Some(ic) = self.images.get(&image) else { return Vec::new() };
        let mut pids: Vec<u32> = ic.counts.keys().map(|k| k.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Moves the samples of image `from` whose process is in `to` to the
    /// image given there; each event's period sum follows its counts.
    pub fn move_counts(&mut self, from: u32, to: &std::collections::HashMap<u32, u32>) {
        let Some(mut src) = self.images.remove(&from) else { return };
        let mut totals: HashMap<u16, u64> = HashMap::new();
        for (k, n) in &src.counts {
            *totals.entry(k.event).or_insert(0) += n;
        }
        let moving: Vec<(Key, u64)> = src.counts.iter().filter(|(k, _)| to.contains_key(&k.pid)).map(|(k, n)| (*k, *n)).collect();
        for (k, n) in moving {
            src.counts.remove(&k);
            self.entries -= 1;
            let share = src.period_sums.get(&k.event).copied().unwrap_or(0) as u128 * n as u128 / totals[&k.event].max(1) as u128;
            self.add(Slot { image: to[&k.pid], event: k.event, pid: k.pid, comm: k.comm, offset: k.offset }, n, share as u64);
        }
        for (ev, sum) in src.period_sums.iter_mut() {
            let moved = totals[ev] - src.counts.iter().filter(|(k, _)| k.event == *ev).map(|(_, n)| n).sum::<u64>();
            *sum -= (*sum as u128 * moved as u128 / totals[ev].max(1) as u128) as u64;
        }
        if !src.counts.is_empty() {
            self.images.insert(from, src);
        }
    }

    /// Distinct (image, process, event, offset) entries held.
    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// Removes the images that `select` picks and returns their profiles,
    /// one per (image, event).
    pub fn take(
        &mut self,
        select: impl Fn(u32) -> bool,
        image_id: impl Fn(u32) -> ImageId,
        event_name: impl Fn(u16) -> EventName,
    ) -> Vec<Profile> {
        let chosen: Vec<u32> = self.images.keys().copied().filter(|&i| select(i)).collect();
        let mut out = Vec::new();
        for img in chosen {
            let ic = self.images.remove(&img).expect("key just listed");
            self.entries -= ic.counts.len();
            let mut per_event: HashMap<u16, Profile> = HashMap::new();
            for (k, n) in ic.counts {
                let p = per_event.entry(k.event).or_insert_with(|| Profile::new(image_id(img), event_name(k.event)));
                p.add(ProcessKey::new(k.pid, self.comm(k.comm)), ImageOffset(k.offset), n, 0);
            }
            for (ev, mut p) in per_event {
                p.period_sum = ic.period_sums.get(&ev).copied().unwrap_or(0);
                out.push(p);
            }
        }
        // The comm table is kept: live processes hold ids into it (emptying
        // it at a full flush renamed every process sampled after it "?").
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::BuildId;

    #[test]
    fn take_builds_one_profile_per_image_and_event() {
        // Checks that counts and periods survive the conversion to profiles exactly.
        let mut a = Aggregator::default();
        let c = a.intern_comm("prog");
        a.add(Slot { image: 0, event: 0, pid: 1, comm: c, offset: 0x10 }, 1, 100);
        a.add(Slot { image: 0, event: 0, pid: 1, comm: c, offset: 0x10 }, 1, 100);
        a.add(Slot { image: 0, event: 1, pid: 1, comm: c, offset: 0x10 }, 1, 7);
        a.add(Slot { image: 1, event: 0, pid: 2, comm: c, offset: 0x20 }, 3, 300);
        assert_eq!(a.entries(), 3);
        let img = |i: u32| ImageId::elf("/x", Some(BuildId(vec![i as u8])));
        let ev = |e: u16| EventName(format!("e{e}"));
        let mut ps = a.take(|i| i == 0, img, ev);
        ps.sort_by(|x, y| x.event.cmp(&y.event));
        assert_eq!(ps.len(), 2);
        assert_eq!((ps[0].total_samples(), ps[0].period_sum), (2, 200));
        assert_eq!((ps[1].total_samples(), ps[1].period_sum), (1, 7));
        assert_eq!(a.entries(), 1);
        let rest = a.take(|_| true, img, ev);
        assert_eq!(rest[0].processes[0], ProcessKey::new(2, "prog"));
        assert!(a.is_empty());
    }
}
