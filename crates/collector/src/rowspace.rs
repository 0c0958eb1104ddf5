//! Room in the kernel's unwind-row array. Each image's table takes one
//! contiguous run of rows (its shard); a shard whose image no described
//! process maps any more is given back, and new shards go first fit into
//! the holes, so a long-running daemon that sees many short-lived programs
//! does not run out of rows.

/// Free runs of rows, sorted by start and never adjacent (merged on free).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSpace {
    capacity: u32,
    free: Vec<(u32, u32)>,
}

impl RowSpace {
    /// All of `capacity` rows free.
    pub fn new(capacity: u32) -> RowSpace {
        let free = if capacity > 0 { vec![(0, capacity)] } else { Vec::new() };
        RowSpace { capacity, free }
    }

    /// The first row of `n` free contiguous rows (first fit), or None.
    pub fn alloc(&mut self, n: u32) -> Option<u32> {
        if n == 0 {
            return None;
        }
        let i = self.free.iter().position(|&(_, len)| len >= n)?;
        let (start, len) = self.free[i];
        if len == n {
            self.free.remove(i);
        } else {
            self.free[i] = (start + n, len - n);
        }
        Some(start)
    }

    /// Gives rows [start, start + n) back, merging with free neighbours.
    pub fn free(&mut self, start: u32, n: u32) {
        if n == 0 {
            return;
        }
        let i = self.free.partition_point(|&(s, _)| s < start);
        self.free.insert(i, (start, n));
        // Merge with the next run, then with the previous one.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }

    /// Rows in use.
    pub fn used(&self) -> u32 {
        self.capacity - self.free.iter().map(|&(_, len)| len).sum::<u32>()
    }
}

/// The images among `with_shards` that no process's image list in
/// `mapped` names (their shards may be evicted), sorted.
pub fn unused_images<'a>(with_shards: impl Iterator<Item = u32>, mapped: impl Iterator<Item = &'a Vec<u32>>) -> Vec<u32> {
    let in_use: std::collections::HashSet<u32> = mapped.flatten().copied().collect();
    let mut out: Vec<u32> = with_shards.filter(|i| !in_use.contains(i)).collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Only images that no described process maps are eviction candidates.
    #[test]
    fn unused_images_are_those_no_process_maps() {
        let procs = [vec![1, 2], vec![2, 5]];
        assert_eq!(unused_images([5, 4, 3, 2, 1].into_iter(), procs.iter()), vec![3, 4]);
        assert_eq!(unused_images([7].into_iter(), [].iter()), vec![7]);
    }

    // Shards are placed one after another while there is room, and a request past the room fails.
    #[test]
    fn allocates_in_order_until_full() {
        let mut s = RowSpace::new(10);
        assert_eq!(s.alloc(4), Some(0));
        assert_eq!(s.alloc(4), Some(4));
        assert_eq!(s.alloc(3), None);
        assert_eq!(s.alloc(2), Some(8));
        assert_eq!(s.used(), 10);
        assert_eq!(s.alloc(1), None);
    }

    // A freed shard's hole is reused first fit, and freed neighbours merge into one run.
    #[test]
    fn freed_holes_are_reused_and_merged() {
        let mut s = RowSpace::new(12);
        let (a, b, c) = (s.alloc(4).unwrap(), s.alloc(4).unwrap(), s.alloc(4).unwrap());
        assert_eq!((a, b, c), (0, 4, 8));
        s.free(b, 4);
        assert_eq!(s.alloc(5), None, "4 free rows cannot hold 5");
        s.free(a, 4);
        assert_eq!(s.free, vec![(0, 8)]);
        assert_eq!(s.alloc(6), Some(0));
        assert_eq!(s.alloc(2), Some(6));
        s.free(c, 4);
        s.free(0, 6);
        s.free(6, 2);
        assert_eq!(s.free, vec![(0, 12)]);
        assert_eq!(s.used(), 0);
    }

    // An array with no room holds nothing.
    #[test]
    fn empty_space_holds_nothing() {
        let mut s = RowSpace::new(0);
        assert_eq!(s.alloc(1), None);
        assert_eq!(s.used(), 0);
    }
}
