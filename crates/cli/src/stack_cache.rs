//! Named stacks kept across requests by `loupe serve`: each new flame
//! question (a process, image or cgroup filter not asked before) used to
//! read the epochs' stack tables again, name every frame and hash every
//! stack (`callgraph::resolve`, two thirds of a whole machine's 0.4 s).
//! The server keeps, per database, epochs and event, every stack of every
//! process named once with its [`FlameIndex`]; a filter then keeps stacks
//! by a scan over them (docs/serve.md).
//!
//! Dropped when anything in the database changes ([`full_stamp`]: a new
//! epoch, a flush into one) and, least recently used first, past a byte
//! budget. One in use by a request is never freed under it (an `Arc`).

use crate::symbol_cache::full_stamp;
use anyhow::Result;
use loupe_analysis::callgraph::CallData;
use loupe_analysis::flame::FlameIndex;
use loupe_store::EpochId;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();

/// Every stack of a selection of epochs, named, and its flame index.
pub struct Kept {
    pub data: CallData,
    pub index: FlameIndex,
}

/// What a kept set of stacks answers: a database, its epochs, the `--event` asked for.
type Key = (PathBuf, Vec<EpochId>, Option<String>);

struct Cache {
    budget: usize,
    clock: u64,
    entries: Vec<Entry>,
}

struct Entry {
    key: Key,
    stamp: Vec<Option<SystemTime>>,
    kept: Arc<Kept>,
    bytes: usize,
    used: u64,
}

/// Keeps named stacks across calls from now on, within about `budget` bytes.
pub fn enable(budget: usize) {
    let _ = CACHE.set(Mutex::new(Cache { budget, clock: 0, entries: Vec::new() }));
}

/// Whether stacks are kept (a server with a cache budget).
pub fn enabled() -> bool {
    CACHE.get().is_some()
}

/// The kept stacks of `epochs` of `db` for `event`, made by `make` when
/// missing or stale. Errors are not kept. Two requests for a set not yet
/// kept both make it (the lock is not held while naming).
pub fn get(db: &Path, epochs: &[EpochId], event: Option<&str>, make: impl FnOnce() -> Result<CallData>) -> Result<Arc<Kept>> {
    let key: Key = (db.to_path_buf(), epochs.to_vec(), event.map(str::to_string));
    let Some(cache) = CACHE.get() else { return Ok(Arc::new(index(make()?))) };
    let stamp = full_stamp(db);
    if let Some(k) = cache.lock().unwrap_or_else(|p| p.into_inner()).find(&key, &stamp) {
        return Ok(k);
    }
    let kept = Arc::new(index(make()?));
    cache.lock().unwrap_or_else(|p| p.into_inner()).put(key, stamp, Arc::clone(&kept));
    Ok(kept)
}

fn index(data: CallData) -> Kept {
    let index = FlameIndex::of(&data);
    Kept { data, index }
}

impl Cache {
    fn find(&mut self, key: &Key, stamp: &[Option<SystemTime>]) -> Option<Arc<Kept>> {
        self.clock += 1;
        let i = self.entries.iter().position(|e| &e.key == key)?;
        if self.entries[i].stamp != stamp {
            self.entries.remove(i);
            return None;
        }
        self.entries[i].used = self.clock;
        Some(Arc::clone(&self.entries[i].kept))
    }

    /// Keeps `kept`, dropping the least recently used until the total fits
    /// (a set bigger than the whole budget is not kept).
    fn put(&mut self, key: Key, stamp: Vec<Option<SystemTime>>, kept: Arc<Kept>) {
        let bytes = size(&kept.data);
        self.entries.retain(|e| e.key != key);
        if bytes > self.budget {
            return;
        }
        let mut total: usize = self.entries.iter().map(|e| e.bytes).sum();
        while total + bytes > self.budget {
            let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) else { break };
            total -= self.entries.remove(i).bytes;
        }
        self.entries.push(Entry { key, stamp, kept, bytes, used: self.clock });
    }
}

/// About the heap a set of named stacks holds (its index is a fraction more).
fn size(d: &CallData) -> usize {
    let stacks: usize = d.stacks.iter().map(|s| 64 + s.process.comm.len() + 4 * s.locations.len() + 8 * s.counts.len()).sum();
    let names = |l: &loupe_analysis::callgraph::Location| {
        l.procedure.len()
            + l.image.path.len()
            + l.file.as_ref().map_or(0, String::len)
            + l.inlined.iter().map(|s| 24 + s.len()).sum::<usize>()
    };
    let locations: usize = d.locations.iter().map(|l| 160 + names(l)).sum();
    (stacks + locations) * 3 / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(stacks: usize) -> Arc<Kept> {
        use loupe_analysis::callgraph::Stack;
        use loupe_model::ProcessKey;
        let stack = Stack { process: ProcessKey::new(1, "p"), locations: vec![0; 10], counts: vec![1] };
        Arc::new(index(CallData { stacks: vec![stack; stacks], ..Default::default() }))
    }

    fn key(epoch: u32) -> Key {
        (PathBuf::from("/db"), vec![EpochId(epoch)], None)
    }

    #[test]
    fn sets_are_kept_within_the_budget_and_dropped_when_stale() {
        // Checks that a kept set is found at its stamp, dropped when the stamp moves, and the least recently used goes first past the budget.
        let one = size(&kept(100).data);
        let mut c = Cache { budget: 2 * one, clock: 0, entries: Vec::new() };
        let t = |s: u64| vec![Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s))];
        c.put(key(1), t(1), kept(100));
        c.put(key(2), t(1), kept(100));
        assert!(c.find(&key(1), &t(1)).is_some());
        // 1 was used last: 2 goes for 3.
        c.put(key(3), t(1), kept(100));
        assert!(c.find(&key(2), &t(1)).is_none() && c.find(&key(1), &t(1)).is_some());
        // A database that changed drops its set.
        assert!(c.find(&key(1), &t(2)).is_none());
        assert!(c.find(&key(1), &t(1)).is_none());
        // A set bigger than the budget is not kept.
        c.put(key(4), t(1), kept(1000));
        assert!(c.find(&key(4), &t(1)).is_none());
    }
}
