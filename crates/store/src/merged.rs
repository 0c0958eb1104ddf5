//! Merged forms of closed epochs (DCPI: an epoch is immutable once closed,
//! so the sum of closed epochs can be computed once and kept).
//!
//! ```text
//! DB/merged/L<level>-<first>/      the sum of epochs first .. first + 2^level - 1
//!   sources.json                    the epochs summed, each with its folder's mtime (ns)
//!   index.json, *.prof, stacks.*.stacks    as in an epoch folder
//! ```
//! Blocks are aligned on powers of two of epoch numbers, so any run of
//! epochs is covered by at most two blocks per level: a day of 1440 minute
//! epochs is 4 to 11 reads instead of 1440. A block is made by the first
//! reader whose selection holds all its epochs (the query layer's
//! [`ProfileSource::flat`](crate::query::ProfileSource::flat), `stacks`,
//! `images`), from the blocks and epochs that already cover it, and only
//! when every epoch of its range is closed (numbered below the current one:
//! no new epoch can land in the range).
//!
//! A block is used only while `sources.json` names exactly the epochs now
//! in its range with the mtimes their folders have now: every write to an
//! epoch replaces a file by rename, which moves its folder's mtime, and an
//! epoch removed or added changes the list (a file rewritten in place by
//! something other than Loupe is not seen: the block keeps what the epoch
//! held when it was made). A block is never made from an
//! epoch with a file that cannot be read (that epoch is read on its own and
//! its problem reported as before). Blocks are written whole into a
//! temporary folder and renamed into place, so a reader sees an old block,
//! a new one or none; a block whose files fail their checksums is named in
//! the problems, set aside (`.corrupt`), and its epochs are read instead
//! (it is made again by the next reader).
//!
//! `LOUPE_MERGED=off` reads every epoch on its own (the tests compare both).

use crate::query::{Flat, Stacks};
use crate::{format, stacks, Database, EpochId, Error, ErrorKind, FileProblem, IndexEntry, IndexFile};
use loupe_model::stacks::StackProfile;
use loupe_model::{ImageId, ImageTotals, Profile};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const SOURCES_VERSION: u32 = 1;

/// Epochs `first ..= first + 2^level - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Block {
    level: u32,
    first: u64,
}

impl Block {
    fn containing(e: EpochId, level: u32) -> Block {
        Block { level, first: ((u64::from(e.0) - 1) >> level << level) + 1 }
    }
    fn last(&self) -> u64 {
        self.first + (1u64 << self.level) - 1
    }
    fn name(&self) -> String {
        format!("L{:02}-{:06}", self.level, self.first)
    }
    fn holds(&self, e: EpochId) -> bool {
        (self.first..=self.last()).contains(&u64::from(e.0))
    }
}

/// What one read covers: an epoch folder or a merged block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Epoch(EpochId),
    Block(Block),
}

#[derive(Serialize, Deserialize, PartialEq, Eq)]
struct Sources {
    version: u32,
    /// (epoch, its folder's mtime in ns) for every epoch summed, in order.
    epochs: Vec<(u32, i128)>,
}

/// One query's view of the epochs: which exist, which are closed, their
/// folders' mtimes, and what could not be merged.
pub(crate) struct Planner<'a> {
    db: &'a Database,
    existing: Vec<EpochId>,
    current: EpochId,
    stamps: HashMap<EpochId, i128>,
    /// Epochs with an unreadable file: no block holding them is made.
    bad: HashSet<EpochId>,
    can_build: bool,
}

/// Whether merged forms are used (`LOUPE_MERGED=off` reads epochs one by one).
fn enabled() -> bool {
    std::env::var_os("LOUPE_MERGED").is_none_or(|v| v != "off")
}

fn mtime_ns(path: &Path) -> Option<i128> {
    let m = fs::metadata(path).ok()?;
    Some(i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()))
}

impl Database {
    fn merged_dir(&self) -> PathBuf {
        self.root.join("merged")
    }

    fn block_dir(&self, b: Block) -> PathBuf {
        self.merged_dir().join(b.name())
    }

    /// Creates the folder merged forms are kept in, so that the first one
    /// made does not change the database's root (whose mtime a server
    /// watches). Errors are ignored: a reader that may not write reads
    /// the epochs one by one.
    pub fn prepare_merged(&self) {
        if !self.merged_dir().is_dir() {
            let _ = loupe_files::create_dir_all(&self.merged_dir());
        }
    }

    /// The reads that cover `epochs`: blocks (made now where missing or
    /// stale) for runs of whole closed blocks, single epochs for the rest.
    /// A selection that is not in ascending order is read epoch by epoch.
    pub(crate) fn cover(&self, epochs: &[EpochId]) -> Result<Vec<Unit>, Error> {
        if !enabled() || epochs.len() < 2 || !epochs.windows(2).all(|w| w[0] < w[1]) {
            return Ok(epochs.iter().map(|&e| Unit::Epoch(e)).collect());
        }
        let mut p = Planner {
            db: self,
            existing: self.epoch_ids()?,
            current: self.current_epoch()?,
            stamps: HashMap::new(),
            bad: HashSet::new(),
            can_build: true,
        };
        for &e in epochs {
            if let Some(t) = mtime_ns(&self.epoch_dir(e)) {
                p.stamps.insert(e, t);
            }
        }
        Ok(p.cover(epochs, true))
    }

    /// Makes the merged forms that cover every closed epoch (those a
    /// reader of `--epoch all` would make), from what is already merged.
    /// Returns how many closed epochs are still read on their own: the
    /// last of an odd run, and any with a file that does not read.
    pub fn merge_closed(&self) -> Result<usize, Error> {
        let current = self.current_epoch()?;
        let closed: Vec<EpochId> = self.epoch_ids()?.into_iter().filter(|&e| e < current).collect();
        Ok(self.cover(&closed)?.iter().filter(|u| matches!(u, Unit::Epoch(_))).count())
    }

    /// Sets a block aside (`.corrupt`) and names it in `problems`.
    fn set_aside(&self, b: Block, why: &str, problems: &mut Vec<FileProblem>) {
        let dir = self.block_dir(b);
        let aside = self.merged_dir().join(format!("{}.corrupt", b.name()));
        let _ = fs::remove_dir_all(&aside);
        let _ = fs::rename(&dir, &aside);
        problems.push(FileProblem {
            path: dir,
            reason: format!("{why}; merged form set aside to {}, its epochs read instead", aside.display()),
        });
    }

    /// The block's index (its first-seen order of files).
    fn block_index(&self, b: Block) -> Result<Vec<IndexEntry>, String> {
        let path = self.block_dir(b).join("index.json");
        let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let f: IndexFile = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(f.entries)
    }

    /// Per (image, event) totals of one read.
    pub(crate) fn unit_totals(&self, u: &Unit) -> Result<(Vec<ImageTotals>, Vec<FileProblem>), Error> {
        match u {
            Unit::Epoch(e) => crate::query::ProfileSource::totals(self, *e),
            Unit::Block(b) => match self.block_index(*b) {
                Ok(entries) => Ok((entries.iter().map(|x| x.totals()).collect(), Vec::new())),
                Err(why) => Ok((Vec::new(), vec![FileProblem { path: self.block_dir(*b), reason: why }])),
            },
        }
    }

    /// The flat profiles of one read whose images `select` accepts.
    fn unit_profiles(&self, u: &Unit, select: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<Profile>, Vec<FileProblem>), Error> {
        match u {
            Unit::Epoch(e) => self.load(*e, &|x| select(&x.image)),
            Unit::Block(b) => match self.block_index(*b) {
                Ok(entries) => Ok(self.load_listed(&self.block_dir(*b), &entries, &|x| select(&x.image))),
                Err(why) => Ok((Vec::new(), vec![FileProblem { path: self.block_dir(*b), reason: why }])),
            },
        }
    }

    /// Everything one read holds, or None when a file of it does not read.
    fn read_whole(&self, u: &Unit) -> Result<Option<Whole>, Error> {
        let (dir, entries, mut bad) = match u {
            Unit::Epoch(e) => {
                let (index, bad) = self.index(*e)?;
                (self.epoch_dir(*e), index.entries, bad)
            }
            Unit::Block(b) => match self.block_index(*b) {
                Ok(entries) => (self.block_dir(*b), entries, Vec::new()),
                Err(_) => return Ok(None),
            },
        };
        let (profiles, more) = self.load_listed(&dir, &entries, &|_| true);
        bad.extend(more);
        let (tables, more) = self.unit_stacks(u)?;
        bad.extend(more);
        Ok((bad.is_empty() && entries.len() == profiles.len()).then_some(Whole { entries, profiles, tables }))
    }

    /// The stack tables of one read.
    pub(crate) fn unit_stacks(&self, u: &Unit) -> Result<(Vec<StackProfile>, Vec<FileProblem>), Error> {
        match u {
            Unit::Epoch(e) => self.load_stacks(*e),
            Unit::Block(b) => self.load_stack_files(&self.block_dir(*b)),
        }
    }

    /// The flat samples of one read (as [`crate::query::ProfileSource::flat`] reads an epoch).
    pub(crate) fn unit_flat(&self, u: &Unit, keep: &dyn Fn(&ImageId) -> bool, out: &mut Flat) -> Result<(), Error> {
        let mut part = Flat::default();
        let (totals, bad) = self.unit_totals(u)?;
        part.problems.extend(bad);
        let some_wanted = totals.iter().any(|t| keep(&t.image));
        part.totals.extend(totals.into_iter().filter(|t| !keep(&t.image)));
        if some_wanted {
            let (ps, bad) = self.unit_profiles(u, keep)?;
            part.profiles.extend(ps);
            part.problems.extend(bad);
        }
        match self.instead(u, &part.problems, &mut out.problems)? {
            Some(epochs) => epochs.iter().try_for_each(|e| self.unit_flat(e, keep, out)),
            None => {
                out.extend(part);
                Ok(())
            }
        }
    }

    /// Adds one read's stack tables to `out`, summed per event.
    pub(crate) fn unit_stack_sum(&self, u: &Unit, out: &mut Stacks) -> Result<(), Error> {
        let (tables, bad) = self.unit_stacks(u)?;
        if let Some(epochs) = self.instead(u, &bad, &mut out.problems)? {
            return epochs.iter().try_for_each(|e| self.unit_stack_sum(e, out));
        }
        out.problems.extend(bad);
        for t in tables {
            match out.tables.iter_mut().find(|m| m.event == t.event) {
                Some(m) => m.merge(&t).map_err(|why| Error::query(ErrorKind::Corrupt, why))?,
                None => out.tables.push(t),
            }
        }
        Ok(())
    }

    /// None when `u` read whole or is an epoch (whose problems are its
    /// own to report); for a block that did not, sets it aside, names it
    /// in `problems`, and gives its epochs to read instead.
    fn instead(&self, u: &Unit, bad: &[FileProblem], problems: &mut Vec<FileProblem>) -> Result<Option<Vec<Unit>>, Error> {
        let (Unit::Block(b), Some(first)) = (u, bad.first()) else { return Ok(None) };
        // Gone while being read (replaced or pruned by another reader's newer block) is no problem.
        if self.block_dir(*b).exists() {
            self.set_aside(*b, &first.to_string(), problems);
        }
        Ok(Some(self.epoch_ids()?.into_iter().filter(|e| b.holds(*e)).map(Unit::Epoch).collect()))
    }
}

impl Planner<'_> {
    /// The existing epochs in `b`'s range.
    fn existing_in(&self, b: Block) -> &[EpochId] {
        let lo = self.existing.partition_point(|e| u64::from(e.0) < b.first);
        let hi = self.existing.partition_point(|e| u64::from(e.0) <= b.last());
        &self.existing[lo..hi]
    }

    /// The sources a block must name to be current.
    fn expected(&self, b: Block) -> Option<Sources> {
        let epochs = self.existing_in(b).iter().map(|e| Some((e.0, *self.stamps.get(e)?))).collect::<Option<Vec<_>>>()?;
        Some(Sources { version: SOURCES_VERSION, epochs })
    }

    fn is_current(&self, b: Block) -> bool {
        let Some(want) = self.expected(b) else { return false };
        let path = self.db.block_dir(b).join("sources.json");
        fs::read(path).ok().and_then(|bytes| serde_json::from_slice::<Sources>(&bytes).ok()).is_some_and(|have| have == want)
    }

    /// Reads for `epochs` (ascending): at each epoch the largest block
    /// that starts there, holds only selected closed epochs (two at
    /// least), and is current or (with `build`) can be made now.
    fn cover(&mut self, epochs: &[EpochId], build: bool) -> Vec<Unit> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < epochs.len() {
            let e = epochs[i];
            let mut taken = None;
            for level in (1..=32).rev() {
                let b = Block::containing(e, level);
                let inside = self.existing_in(b);
                let fits = b.last() < u64::from(self.current.0)
                    && inside.len() >= 2
                    && inside.first() == Some(&e)
                    && epochs[i..].starts_with(inside)
                    && !inside.iter().any(|x| self.bad.contains(x));
                let n = inside.len();
                if fits && (self.is_current(b) || (build && self.build(b))) {
                    taken = Some((b, n));
                    break;
                }
            }
            match taken {
                Some((b, n)) => {
                    out.push(Unit::Block(b));
                    i += n;
                }
                None => {
                    out.push(Unit::Epoch(e));
                    i += 1;
                }
            }
        }
        out
    }

    /// Makes block `b` from the blocks and epochs that now cover its range;
    /// false (nothing written) when one of them has an unreadable file or
    /// the block cannot be written.
    fn build(&mut self, b: Block) -> bool {
        if !self.can_build {
            return false;
        }
        let Some(sources) = self.expected(b) else { return false };
        // One block made at a time in a process: a second thread that wants the same one (a server's request
        // beside its start-up merge) waits and then finds it made, rather than reading the same epochs again.
        static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = MAKING.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_current(b) {
            return true;
        }
        let tmp = self.db.merged_dir().join(scratch_name("tmp", b));
        let _ = fs::remove_dir_all(&tmp);
        if loupe_files::create_dir_all(&tmp).is_err() {
            self.can_build = false;
            return false;
        }
        self.sweep();
        let inside = self.existing_in(b).to_vec();
        let parts = self.cover(&inside, false);
        let written = match self.sum(&parts) {
            Some(sum) => sum.write(&tmp, &sources).and_then(|()| self.install(b, &tmp)).is_ok(),
            None => false,
        };
        if written {
            self.prune(b);
        } else {
            let _ = fs::remove_dir_all(&tmp);
        }
        written
    }

    /// Removes the blocks inside `b` (it replaces them for every selection
    /// that holds it), so that each epoch's samples are kept in about one block.
    fn prune(&self, b: Block) {
        let Ok(listing) = fs::read_dir(self.db.merged_dir()) else { return };
        for d in listing.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            let Some((level, first)) = name.strip_prefix('L').and_then(|n| n.split_once('-')) else { continue };
            let (Ok(level), Ok(first)) = (level.parse::<u32>(), first.parse::<u64>()) else { continue };
            let inner = Block { level, first };
            if level < b.level && inner.name() == name && b.holds(EpochId(first as u32)) {
                let _ = fs::remove_dir_all(d.path());
            }
        }
    }

    /// The sum of `parts`, or None at the first with an unreadable file
    /// (whose epochs are then marked bad) or whose tables do not add up.
    fn sum(&mut self, parts: &[Unit]) -> Option<Sum> {
        let mut sum = Sum::default();
        for u in parts {
            let Ok(Some(whole)) = self.db.read_whole(u) else {
                match u {
                    Unit::Epoch(e) => {
                        self.bad.insert(*e);
                    }
                    Unit::Block(b) => {
                        // A block that does not read whole is made again from its epochs next time.
                        let _ = fs::remove_dir_all(self.db.block_dir(*b));
                    }
                }
                return None;
            };
            sum.add(whole)?;
        }
        Some(sum)
    }

    /// Renames a finished block into place, over a stale one.
    fn install(&self, b: Block, tmp: &Path) -> std::io::Result<()> {
        let dir = self.db.block_dir(b);
        if fs::rename(tmp, &dir).is_ok() {
            return sync_dir(&self.db.merged_dir());
        }
        if self.is_current(b) {
            // Another reader made the same block meanwhile: keep theirs (it may be being read).
            let _ = fs::remove_dir_all(tmp);
            return Ok(());
        }
        let trash = self.db.merged_dir().join(scratch_name("trash", b));
        let _ = fs::remove_dir_all(&trash);
        fs::rename(&dir, &trash)?;
        fs::rename(tmp, &dir)?;
        let _ = fs::remove_dir_all(&trash);
        sync_dir(&self.db.merged_dir())
    }

    /// Removes the temporary folders of writers that are gone (a `kill -9` mid-merge).
    fn sweep(&self) {
        let Ok(listing) = fs::read_dir(self.db.merged_dir()) else { return };
        for d in listing.flatten() {
            let name = d.file_name().to_string_lossy().into_owned();
            let pid = name.split('.').nth(1).and_then(|p| p.parse::<u32>().ok());
            let temporary = name.starts_with("tmp.") || name.starts_with("trash.");
            if let (true, Some(pid)) = (temporary, pid) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = fs::remove_dir_all(d.path());
                }
            }
        }
    }
}

/// A temporary folder's name, unique to this process and call: `KIND.PID.N.BLOCK`
/// (threads of one server may make the same block at once).
fn scratch_name(kind: &str, b: Block) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{kind}.{}.{n}.{}", std::process::id(), b.name())
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// One read's index entries, their profiles (in that order) and its stack tables.
struct Whole {
    entries: Vec<IndexEntry>,
    profiles: Vec<Profile>,
    tables: Vec<StackProfile>,
}

/// A block being summed: flat profiles by file name in the order first
/// seen (so reading the block lists images as reading its epochs in order
/// would), and stack tables per event.
#[derive(Default)]
struct Sum {
    names: Vec<String>,
    profiles: HashMap<String, Profile>,
    tables: Vec<StackProfile>,
}

impl Sum {
    fn add(&mut self, whole: Whole) -> Option<()> {
        let Whole { entries, profiles, tables } = whole;
        for (entry, p) in entries.into_iter().zip(profiles) {
            match self.profiles.get_mut(&entry.file) {
                Some(acc) => acc.merge(&p).ok()?,
                None => {
                    self.names.push(entry.file.clone());
                    self.profiles.insert(entry.file, p);
                }
            }
        }
        for t in tables {
            match self.tables.iter_mut().find(|m| m.event == t.event) {
                Some(m) => m.merge(&t).ok()?,
                None => self.tables.push(t),
            }
        }
        Some(())
    }

    /// Writes the block's files into `dir`, `sources.json` last. Each file
    /// is synced before the folder is renamed into place.
    fn write(&self, dir: &Path, sources: &Sources) -> std::io::Result<()> {
        let mut entries = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let p = &self.profiles[name];
            put(&dir.join(name), &format::encode(p))?;
            entries.push(IndexEntry::of(name, p));
        }
        for t in &self.tables {
            put(&dir.join(stacks::file_name(&t.event)), &stacks::encode(t))?;
        }
        put(&dir.join("index.json"), &serde_json::to_vec(&IndexFile { version: 1, entries }).expect("serializable"))?;
        put(&dir.join("sources.json"), &serde_json::to_vec(sources).expect("serializable"))?;
        sync_dir(dir)
    }
}

fn put(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = loupe_files::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{Detail, Filter, ProfileSource};
    use crate::EpochInfo;
    use loupe_model::branches::BranchProfile;
    use loupe_model::{BuildId, EventName, ImageOffset, ProcessKey};
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    /// The database read epoch by epoch: the query layer's provided methods over the primitives.
    struct OneByOne<'a>(&'a Database);

    impl ProfileSource for OneByOne<'_> {
        fn name(&self) -> String {
            self.0.name()
        }
        fn list_epochs(&self) -> Result<Vec<EpochInfo>, Error> {
            self.0.list_epochs()
        }
        fn current(&self) -> Result<EpochId, Error> {
            self.0.current()
        }
        fn totals(&self, e: EpochId) -> Result<(Vec<ImageTotals>, Vec<FileProblem>), Error> {
            self.0.totals(e)
        }
        fn profiles(&self, e: EpochId, select: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<Profile>, Vec<FileProblem>), Error> {
            self.0.profiles(e, select)
        }
        fn stack_tables(&self, e: EpochId) -> Result<(Vec<StackProfile>, Vec<FileProblem>), Error> {
            self.0.stack_tables(e)
        }
        fn branch_records(&self, e: EpochId, s: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<BranchProfile>, Vec<FileProblem>), Error> {
            self.0.branch_records(e, s)
        }
    }

    type Samples = BTreeMap<(String, String, u32, String, u64), u64>;

    /// Flat samples summed per (image, event, pid, comm, offset), and per-image totals per process.
    fn flat_sums(f: &Flat) -> (Samples, BTreeMap<(String, String, u32), u64>) {
        let mut s = Samples::new();
        for p in &f.profiles {
            for (&(pi, off), &n) in &p.entries {
                let k = &p.processes[pi as usize];
                *s.entry((p.image.path.clone(), p.event.0.clone(), k.pid, k.comm.clone(), off.0)).or_default() += n;
            }
        }
        let mut t = BTreeMap::new();
        for x in &f.totals {
            for (k, n) in &x.processes {
                *t.entry((x.image.path.clone(), x.event.0.clone(), k.pid)).or_default() += n;
            }
        }
        (s, t)
    }

    /// Stack samples per (event, pid, frames).
    type StackSamples = BTreeMap<(String, u32, Vec<(String, u64)>), u64>;

    fn stack_sums(tables: &[StackProfile]) -> StackSamples {
        let mut out = BTreeMap::new();
        for t in tables {
            for (&(p, s), &n) in &t.counts {
                let frames = t.stack(s).map(|(i, o)| (i.path.clone(), o.0)).collect();
                *out.entry((t.event.0.clone(), t.processes[p as usize].pid, frames)).or_default() += n;
            }
        }
        out
    }

    /// Epoch `i`'s samples: images and processes that come and go, two events.
    fn fill(db: &Database, e: EpochId, i: u32) {
        let img = |path: &str, b: u8| ImageId::elf(path, Some(BuildId(vec![b])));
        let mut ps = Vec::new();
        for (path, b, pid) in [("/bin/app", 1, 10), ("/lib/libc.so", 2, 10 + i % 3), ("/bin/tool", 3, 20)] {
            if path == "/bin/tool" && i.is_multiple_of(2) {
                continue;
            }
            for event in ["cpu-clock", "page-faults"] {
                let mut p = Profile::new(img(path, b), EventName::new(event));
                p.add(ProcessKey::new(pid, &format!("p{pid}")), ImageOffset(0x10 * u64::from(i % 4)), u64::from(i), u64::from(i) * 7);
                p.add(ProcessKey::new(99, "other"), ImageOffset(0x400), 1, 1);
                ps.push(p);
            }
        }
        db.merge(e, &ps).unwrap();
        let mut s = StackProfile::new(EventName::new("cpu-clock"));
        s.add(
            &ProcessKey::new(10, "p10"),
            &[(img("/bin/app", 1), ImageOffset(u64::from(i % 3))), (img("/lib/libc.so", 2), ImageOffset(9))],
            2,
        );
        s.add(&ProcessKey::new(20 + i % 2, "p20"), &[(img("/bin/tool", 3), ImageOffset(u64::from(i)))], u64::from(i));
        db.merge_stacks(e, &[s]).unwrap();
    }

    /// A database of `n` closed epochs with samples, and an empty current one.
    fn day(n: u32) -> (tempfile::TempDir, Database) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(&dir.path().join("db")).unwrap();
        for i in 1..=n {
            fill(&db, EpochId(i), i);
            db.new_epoch().unwrap();
        }
        (dir, db)
    }

    /// Checks every view of `epochs` against reading them one by one.
    fn same_as_one_by_one(db: &Database, epochs: &[EpochId]) -> Vec<FileProblem> {
        let one = OneByOne(db);
        let filters = [
            Filter::default(),
            Filter { comms: vec!["p20".into()], ..Filter::default() },
            Filter { image: Some("libc".into()), ..Filter::default() },
        ];
        let mut problems = Vec::new();
        for f in &filters {
            for detail in [Detail::Images, Detail::Offsets] {
                let (merged, plain) = (db.flat(epochs, detail, f).unwrap(), one.flat(epochs, detail, f).unwrap());
                assert_eq!(flat_sums(&merged), flat_sums(&plain), "{detail:?} {f:?}");
                assert_eq!(merged.events(), plain.events());
                problems.extend(merged.problems);
            }
        }
        let (merged, plain) = (db.stacks(epochs).unwrap(), one.stacks(epochs).unwrap());
        assert_eq!(stack_sums(&merged.tables), stack_sums(&plain.tables));
        assert_eq!(
            merged.tables.iter().map(|t| t.period_sum).collect::<Vec<_>>(),
            plain.tables.iter().map(|t| t.period_sum).collect::<Vec<_>>()
        );
        assert_eq!(db.images(epochs).unwrap(), one.images(epochs).unwrap(), "images in the order first found");
        problems.extend(merged.problems);
        problems
    }

    fn blocks(db: &Database) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(db.merged_dir())
            .map_or(Vec::new(), |l| l.flatten().map(|d| d.file_name().to_string_lossy().into_owned()).collect());
        v.sort();
        v
    }

    #[test]
    fn blocks_sum_to_the_epochs_read_one_by_one() {
        // Checks that every view of 11 closed epochs plus the open one equals reading them one by one, that the run is
        // read as aligned blocks (8 + 2 + 1 epochs), and that the blocks' files are private.
        let (_d, db) = day(11);
        let all = db.select(&crate::query::Epochs::All).unwrap();
        assert!(same_as_one_by_one(&db, &all).is_empty());
        assert_eq!(blocks(&db), ["L01-000009", "L03-000001"]);
        let units = db.cover(&all).unwrap();
        assert_eq!(
            units,
            [
                Unit::Block(Block { level: 3, first: 1 }),
                Unit::Block(Block { level: 1, first: 9 }),
                Unit::Epoch(EpochId(11)),
                Unit::Epoch(EpochId(12))
            ]
        );
        for f in fs::read_dir(db.block_dir(Block { level: 3, first: 1 })).unwrap().flatten() {
            assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600, "{:?}", f.path());
        }
        // A range inside the run: the blocks that fit it, made now.
        let some: Vec<EpochId> = (3..=10).map(EpochId).collect();
        assert!(same_as_one_by_one(&db, &some).is_empty());
        assert_eq!(db.cover(&some).unwrap()[0], Unit::Block(Block { level: 1, first: 3 }));
        // Two more closed epochs: 9-12 becomes one block, which replaces 9-10 (3-4 and 5-8, made for the range
        // after 1-8 was, stay).
        for i in 12..=13 {
            fill(&db, EpochId(i), i);
            db.new_epoch().unwrap();
        }
        let all = db.select(&crate::query::Epochs::All).unwrap();
        assert!(same_as_one_by_one(&db, &all).is_empty());
        assert_eq!(blocks(&db), ["L01-000003", "L02-000005", "L02-000009", "L03-000001"]);
    }

    #[test]
    fn blocks_follow_changes_to_their_epochs() {
        // Checks that a block is made again, and the sums stay those of the epochs, after a merge into a closed
        // epoch, an epoch removed, and new epochs closed; and that an epoch with a corrupt file is never merged
        // into a block but read on its own with its problem named as before.
        let (_d, db) = day(9);
        let all = || db.select(&crate::query::Epochs::All).unwrap();
        same_as_one_by_one(&db, &all());
        let sources = db.block_dir(Block { level: 3, first: 1 }).join("sources.json");
        let before = fs::read(&sources).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        fill(&db, EpochId(4), 40);
        assert!(same_as_one_by_one(&db, &all()).is_empty());
        assert_ne!(fs::read(&sources).unwrap(), before, "a merge into epoch 4 makes the block again");
        fs::remove_dir_all(db.epoch_dir(EpochId(6))).unwrap();
        assert!(same_as_one_by_one(&db, &all()).is_empty());
        let listed: Sources = serde_json::from_slice(&fs::read(&sources).unwrap()).unwrap();
        assert_eq!(listed.epochs.iter().map(|e| e.0).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 7, 8]);
        for i in 10..=17 {
            fill(&db, EpochId(i), i);
            db.new_epoch().unwrap();
        }
        assert!(same_as_one_by_one(&db, &all()).is_empty());
        assert_eq!(db.cover(&all()).unwrap()[..2], [Unit::Block(Block { level: 4, first: 1 }), Unit::Epoch(EpochId(17))]);
        // A flipped byte in epoch 13: blocks holding it are not made; the problem is the one reading epochs names.
        let victim = db
            .epoch_dir(EpochId(13))
            .join(Database::file_name(&ImageId::elf("/bin/app", Some(BuildId(vec![1]))), &EventName::new("cpu-clock")));
        let mut b = fs::read(&victim).unwrap();
        b[20] ^= 0xff;
        // Replaced by rename, as every write to an epoch is (a file edited in place is not seen: see the module doc).
        fs::write(victim.with_extension("new"), b).unwrap();
        fs::rename(victim.with_extension("new"), &victim).unwrap();
        let probs = same_as_one_by_one(&db, &all());
        assert!(!probs.is_empty() && probs.iter().all(|p| p.path == victim), "{probs:?}");
        let units = db.cover(&all()).unwrap();
        assert!(units.contains(&Unit::Epoch(EpochId(13))) && units.contains(&Unit::Block(Block { level: 3, first: 1 })), "{units:?}");
    }

    #[test]
    fn a_corrupt_block_is_named_set_aside_and_made_again() {
        // Checks that a flipped byte in a block's profile or stack file, or a garbled index, is named, the
        // epochs are read instead (same sums), and the next read makes the block anew.
        let (_d, db) = day(5);
        let all = db.select(&crate::query::Epochs::All).unwrap();
        same_as_one_by_one(&db, &all);
        let block = db.block_dir(Block { level: 2, first: 1 });
        let files: Vec<PathBuf> = {
            let mut v: Vec<PathBuf> = fs::read_dir(&block).unwrap().flatten().map(|d| d.path()).collect();
            v.sort();
            v
        };
        let prof = files.iter().find(|p| p.extension().is_some_and(|x| x == "prof")).unwrap().clone();
        let stack = files.iter().find(|p| p.extension().is_some_and(|x| x == "stacks")).unwrap().clone();
        for (victim, garble) in [(prof, false), (stack, false), (block.join("index.json"), true)] {
            let mut b = fs::read(&victim).unwrap();
            if garble {
                b.truncate(b.len() / 2);
            } else {
                b[20] ^= 0xff;
            }
            fs::write(&victim, b).unwrap();
            let probs = same_as_one_by_one(&db, &all);
            assert!(!probs.is_empty(), "{victim:?} not named");
            assert!(
                probs[0].reason.contains("merged form set aside")
                    && probs[0].reason.contains(&victim.file_name().unwrap().to_string_lossy().to_string()),
                "{}",
                probs[0]
            );
            assert!(block.join("sources.json").exists(), "made again by the next read");
            assert!(same_as_one_by_one(&db, &all).is_empty());
        }
    }

    #[test]
    fn closed_epochs_merge_ahead_and_readers_at_once_agree() {
        // Checks merge_closed (what a server makes at start) and four threads making the same blocks at once:
        // each sums right, one block is left and no temporary folder.
        let (_d, db) = day(7);
        assert_eq!(db.merge_closed().unwrap(), 1, "epoch 7 of 1-7 is read on its own");
        assert_eq!(blocks(&db), ["L01-000005", "L02-000001"]);
        fs::remove_dir_all(db.merged_dir()).unwrap();
        let all = db.select(&crate::query::Epochs::All).unwrap();
        let want = stack_sums(&OneByOne(&db).stacks(&all).unwrap().tables);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| assert_eq!(stack_sums(&db.stacks(&all).unwrap().tables), want));
            }
        });
        assert_eq!(blocks(&db), ["L01-000005", "L02-000001"]);
    }

    #[test]
    fn an_interrupted_merge_leaves_nothing_that_is_read() {
        // Checks what `kill -9` during a merge leaves: a temporary folder of a dead writer is swept, a block
        // folder without its sources list (never renamed whole) is made again, and the sums are the epochs'.
        let (_d, db) = day(5);
        let all = db.select(&crate::query::Epochs::All).unwrap();
        same_as_one_by_one(&db, &all);
        let block = db.block_dir(Block { level: 2, first: 1 });
        fs::remove_file(block.join("sources.json")).unwrap();
        let dead = db.merged_dir().join("tmp.999999999.0.L02-000001");
        loupe_files::create_dir_all(&dead).unwrap();
        fs::write(dead.join("index.json"), b"{").unwrap();
        fs::remove_dir_all(db.block_dir(Block { level: 1, first: 1 })).ok();
        assert!(same_as_one_by_one(&db, &all).is_empty());
        assert!(block.join("sources.json").exists() && !dead.exists());
    }
}
