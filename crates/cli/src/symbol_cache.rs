//! Symbolizers kept across requests by `loupe serve`: naming a whole
//! machine's samples means reading and indexing every sampled library
//! (hundreds of MB for a Rust toolchain's), which each CLI run does once
//! but a server would otherwise redo for every request.
//!
//! One symbolizer per set of databases (a diff reads two), dropped when a
//! database changes (its root, `CURRENT`, `epochs/`, `images/` or `jit/`
//! changes mtime: a new epoch, a cached binary, a JIT map) and, least
//! recently used first, when the loaded images together pass the budget.
//! A symbolizer in use by a request is never dropped; so the memory held
//! is the budget plus what running requests load, and one database set
//! whose images alone pass the budget keeps them until another set is
//! asked for (dropping them would make each request read them again).

use loupe_symbolize::Symbolizer;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();

struct Cache {
    budget: usize,
    clock: u64,
    entries: Vec<Entry>,
}

struct Entry {
    dbs: Vec<PathBuf>,
    stamp: Vec<Option<SystemTime>>,
    symbolizer: Arc<Mutex<Symbolizer>>,
    used: u64,
    /// Loaded bytes when last measured (an entry in use cannot be measured).
    bytes: usize,
}

/// Keeps symbolizers across calls from now on, holding about `budget`
/// bytes of loaded images.
pub fn enable(budget: usize) {
    let _ = CACHE.set(Mutex::new(Cache { budget, clock: 0, entries: Vec::new() }));
}

/// The kept symbolizer for `dbs` (made by `make` when there is none or the
/// databases changed), or `None` when keeping is not enabled.
pub fn shared(dbs: &[&Path], make: impl FnOnce() -> Symbolizer) -> Option<Arc<Mutex<Symbolizer>>> {
    let mut cache = CACHE.get()?.lock().unwrap_or_else(|p| p.into_inner());
    let key: Vec<PathBuf> = dbs.iter().map(|d| d.to_path_buf()).collect();
    let stamp = stamp(&key);
    Some(cache.get(key, stamp, make))
}

impl Cache {
    /// The entry for `key` at `stamp`, made anew when missing or stale.
    fn get(&mut self, key: Vec<PathBuf>, stamp: Vec<Option<SystemTime>>, make: impl FnOnce() -> Symbolizer) -> Arc<Mutex<Symbolizer>> {
        self.clock += 1;
        let clock = self.clock;
        let found = self.entries.iter().position(|e| e.dbs == key);
        if let Some(i) = found.filter(|&i| self.entries[i].stamp == stamp) {
            self.entries[i].used = clock;
            let symbolizer = Arc::clone(&self.entries[i].symbolizer);
            // Trimmed while this request holds its symbolizer: one bigger than
            // the budget (a whole machine's libraries) stays while it is the one
            // asked for, instead of being dropped and read again every request.
            self.trim();
            return symbolizer;
        }
        if let Some(i) = found {
            self.entries.remove(i);
        }
        self.trim();
        let symbolizer = Arc::new(Mutex::new(make()));
        self.entries.push(Entry { dbs: key, stamp, symbolizer: Arc::clone(&symbolizer), used: clock, bytes: 0 });
        symbolizer
    }

    /// Measures the idle entries and drops the least recently used idle
    /// ones until the total fits the budget.
    fn trim(&mut self) {
        for e in &mut self.entries {
            if let Ok(s) = e.symbolizer.try_lock() {
                e.bytes = s.loaded_bytes();
            }
        }
        self.evict();
    }

    fn evict(&mut self) {
        let mut total: usize = self.entries.iter().map(|e| e.bytes).sum();
        while total > self.budget {
            let idle = self.entries.iter().enumerate().filter(|(_, e)| Arc::strong_count(&e.symbolizer) == 1);
            let Some((i, _)) = idle.min_by_key(|(_, e)| e.used) else { break };
            total -= self.entries.remove(i).bytes;
        }
    }
}

/// What says a database changed since its symbolizer was made.
fn stamp(dbs: &[PathBuf]) -> Vec<Option<SystemTime>> {
    dbs.iter()
        .flat_map(|db| {
            [db.clone(), db.join("CURRENT"), db.join("epochs"), loupe_store::layout::images_dir(db), loupe_store::layout::jit_dir(db)]
        })
        .map(mtime)
        .collect()
}

fn mtime(p: PathBuf) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// What says anything a command reads in `db` changed: [`stamp`]'s paths,
/// every epoch's folder (a flush or merge replaces files in it), kept lock
/// results and the optimizer's decisions log. A stat per epoch: about a
/// millisecond for a day of minute epochs.
pub fn full_stamp(db: &Path) -> Vec<Option<SystemTime>> {
    let mut v = stamp(&[db.to_path_buf()]);
    let mut epochs: Vec<PathBuf> = std::fs::read_dir(db.join("epochs")).into_iter().flatten().flatten().map(|e| e.path()).collect();
    epochs.sort();
    v.extend(epochs.into_iter().map(mtime));
    v.extend([db.join("locks"), loupe_store::layout::decisions_log(db)].into_iter().map(mtime));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_symbolize::SymbolizerOptions;

    fn cache(budget: usize) -> Cache {
        Cache { budget, clock: 0, entries: Vec::new() }
    }

    fn entry(name: &str, used: u64, bytes: usize) -> Entry {
        let symbolizer = Arc::new(Mutex::new(Symbolizer::new(SymbolizerOptions::default())));
        Entry { dbs: vec![PathBuf::from(name)], stamp: Vec::new(), symbolizer, used, bytes }
    }

    #[test]
    fn eviction_drops_the_least_recently_used_idle_entries_until_the_budget_holds() {
        // Checks the memory bound: an entry in use stays even when oldest; idle ones go oldest first.
        let names = |c: &Cache| c.entries.iter().map(|e| e.dbs[0].display().to_string()).collect::<Vec<_>>();
        for (budget, left) in [(1600, vec!["busy", "new"]), (1200, vec!["busy"]), (2100, vec!["busy", "old", "new"])] {
            let mut c = cache(budget);
            c.entries = vec![entry("busy", 1, 1000), entry("old", 2, 600), entry("new", 3, 500)];
            let held = Arc::clone(&c.entries[0].symbolizer);
            c.evict();
            assert_eq!(names(&c), left, "budget {budget}");
            drop(held);
        }
    }

    #[test]
    fn a_changed_database_gets_a_new_symbolizer_and_an_unchanged_one_the_same() {
        // Checks invalidation by the database's mtimes: same Arc while unchanged, a new one after a new epoch dir.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("epochs")).unwrap();
        let _ = CACHE.set(Mutex::new(cache(usize::MAX)));
        let make = || Symbolizer::new(SymbolizerOptions::default());
        let a = shared(&[dir.path()], make).unwrap();
        let b = shared(&[dir.path()], make).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        // Directory mtimes have coarse resolution on some filesystems: wait until the stamp really moves.
        let before = stamp(&[dir.path().to_path_buf()]);
        let mut n = 0;
        while stamp(&[dir.path().to_path_buf()]) == before {
            std::fs::create_dir(dir.path().join("epochs").join(format!("{n:06}"))).unwrap();
            n += 1;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let c = shared(&[dir.path()], make).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn a_symbolizer_over_the_budget_stays_while_it_is_the_one_asked_for() {
        // Checks that asking again for a set whose loaded images pass the budget gets the same symbolizer, and asking for another set drops it.
        let mut c = cache(1);
        let make = || Symbolizer::new(SymbolizerOptions::default());
        let a = c.get(vec![PathBuf::from("a")], Vec::new(), make);
        let exe = std::env::current_exe().unwrap();
        let image = loupe_model::ImageId::elf(exe.to_str().unwrap(), None);
        a.lock().unwrap().symbolize(&image, &[loupe_model::ImageOffset(0x1000)], false);
        let loaded = a.lock().unwrap().loaded_bytes();
        assert!(loaded > 1, "the test binary's symbols are loaded");
        // The request that used it has ended: the entry is idle and over the budget.
        drop(a);
        let again = c.get(vec![PathBuf::from("a")], Vec::new(), make);
        assert_eq!(again.lock().unwrap().loaded_bytes(), loaded, "kept (a new one would have nothing loaded)");
        drop(again);
        c.get(vec![PathBuf::from("b")], Vec::new(), make);
        let names: Vec<PathBuf> = c.entries.iter().flat_map(|e| e.dbs.clone()).collect();
        assert_eq!(names, [PathBuf::from("b")], "the idle one over the budget went");
    }
}
