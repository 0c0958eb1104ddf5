//! Loupe's profile database (DCPI §4.3.3): a directory, one subdirectory
//! per epoch, one compact checksummed file per (image, event).
//!
//! ```text
//! DB/LOUPE_DB                      marker: format version, creation time
//! DB/CURRENT                       number of the current epoch
//! DB/lock                          flock held while merging or switching epochs
//! DB/daemon.sock                   the running daemon's control socket
//! DB/images/<build-id hex>         copies of binaries (vDSO, replaced files)
//! DB/epochs/000001/epoch.json      {"started_unix", "meta": {..}}
//! DB/epochs/000001/index.json      per file: image, event, totals, per-process totals
//! DB/epochs/000001/<key>.<event>.prof   see [`format`]
//! DB/epochs/000001/<key>.<event>.branches   branch records (LBR), see [`branches`]
//! DB/epochs/000001/stacks.<event>.stacks     call-stack tables, see [`stacks`]
//! DB/probes/<build-id hex>.json    the optimizer's probe counts, see [`layout`]
//! DB/optimize/                     the optimizer's decisions, state and work files
//! ```
//! Readers go through [`query`] (which epochs, filters, index or profile
//! files); nothing outside this crate knows these names.
//! Every file is replaced atomically (temporary file, fsync, rename, fsync
//! of the directory), so a crash or `kill -9` leaves the old or the new
//! version, never a torn one. Readers name and skip corrupt files.
//!
//! ```
//! use loupe_model::*;
//! let dir = tempfile::tempdir().unwrap();
//! let db = loupe_store::Database::create(&dir.path().join("db")).unwrap();
//! let mut p = Profile::new(ImageId::kernel(None), EventName::new("cpu-clock"));
//! p.add(ProcessKey::new(1, "init"), ImageOffset(0x100), 4, 4_000_000);
//! let e = db.current_epoch().unwrap();
//! db.merge(e, &[p.clone()]).unwrap();
//! db.merge(e, &[p]).unwrap();
//! let (index, problems) = db.index(e).unwrap();
//! assert!(problems.is_empty());
//! assert_eq!(index.entries[0].total_samples, 8);
//! ```

pub mod branches;
pub mod format;
pub mod layout;
pub mod merged;
pub mod meta;
pub mod query;
pub mod stacks;

pub use meta::{Clock, EpochMeta};

use loupe_model::branches::BranchProfile;
use loupe_model::stacks::StackProfile;
use loupe_model::{EventName, ImageId, ImageTotals, ProcessKey, Profile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub const DB_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Nothing at the path.
    NoDatabase,
    /// A database the caller may not read.
    Permission,
    NotADatabase,
    Io,
    Corrupt,
    NoSuchEpoch,
    /// A selection that does not parse (an epoch word that is no epoch).
    BadSelection,
    /// Events asked for that the selection has no samples of.
    NoSuchEvent,
    /// No image, or more than one, matches what was asked for.
    NoSuchImage,
}

/// A database error: what failed, on which path, and why, on one line.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    path: PathBuf,
    reason: String,
}

impl Error {
    fn new(kind: ErrorKind, path: &Path, reason: impl fmt::Display) -> Error {
        Error { kind, path: path.to_path_buf(), reason: reason.to_string() }
    }
    /// An error of a selection rather than of a file: no path to name.
    fn query(kind: ErrorKind, reason: impl fmt::Display) -> Error {
        Error::new(kind, Path::new(""), reason)
    }
    fn io(path: &Path, e: std::io::Error) -> Error {
        Error::new(ErrorKind::Io, path, e)
    }
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.as_os_str().is_empty() {
            return write!(f, "{}", self.reason);
        }
        if self.kind == ErrorKind::NoDatabase {
            return write!(f, "no database at {} ({})", self.path.display(), self.reason);
        }
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for Error {}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EpochId(pub u32);

impl fmt::Display for EpochId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Clone, Debug)]
pub struct EpochInfo {
    pub id: EpochId,
    pub started_unix: u64,
    /// The same to the nanosecond; `None` in older databases.
    pub started_unix_ns: Option<u64>,
    /// When the epoch's samples were last stored, or when the next epoch
    /// started, whichever came last (nanoseconds); `None` in databases
    /// written before end times were kept.
    pub ended_unix_ns: Option<u64>,
    pub meta: EpochMeta,
}

impl EpochInfo {
    /// The start in nanoseconds, to the second where only that was kept.
    pub fn start_ns(&self) -> u64 {
        self.started_unix_ns.unwrap_or(self.started_unix * 1_000_000_000)
    }

    /// Samples (and records) lost in the epoch, all causes together.
    pub fn lost_samples(&self) -> u64 {
        self.meta.losses.samples()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub file: String,
    pub image: ImageId,
    pub event: EventName,
    pub total_samples: u64,
    pub period_sum: u64,
    pub processes: Vec<(ProcessKey, u64)>,
    /// Distinct (process, offset) entries in the file.
    #[serde(default)]
    pub entries: u64,
}

impl IndexEntry {
    fn of(file: &str, p: &Profile) -> IndexEntry {
        let t = ImageTotals::of(p);
        IndexEntry {
            file: file.to_string(),
            image: t.image,
            event: t.event,
            total_samples: t.processes.iter().map(|(_, n)| n).sum(),
            period_sum: t.period_sum,
            processes: t.processes,
            entries: p.entries.len() as u64,
        }
    }

    /// The file's samples per process, without the file.
    pub fn totals(&self) -> ImageTotals {
        ImageTotals { image: self.image.clone(), event: self.event.clone(), processes: self.processes.clone(), period_sum: self.period_sum }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochIndex {
    pub entries: Vec<IndexEntry>,
}

#[derive(Serialize, Deserialize)]
struct IndexFile {
    version: u32,
    entries: Vec<IndexEntry>,
}

#[derive(Serialize, Deserialize, Default)]
struct EpochFile {
    started_unix: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_unix_ns: Option<u64>,
    /// Absent in older databases (and so left out when absent, as they wrote it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended_unix_ns: Option<u64>,
    meta: BTreeMap<String, String>,
}

/// A file that could not be read, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProblem {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

#[derive(Clone, Debug, Default)]
pub struct MergeReport {
    pub files_written: usize,
    pub bytes_written: u64,
    pub samples_added: u64,
    pub problems: Vec<FileProblem>,
}

impl MergeReport {
    /// Replaces `path` with `bytes` atomically and counts the write.
    fn write(&mut self, path: &Path, bytes: &[u8]) -> Result<(), Error> {
        write_atomic(path, bytes)?;
        self.files_written += 1;
        self.bytes_written += bytes.len() as u64;
        Ok(())
    }
}

pub struct Database {
    root: PathBuf,
}

const MARKER: &str = "LOUPE_DB";

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Replaces `path` atomically with `bytes`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = loupe_files::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// A database the caller may not read: whose it is and its mode, when the
/// caller can see them, and how its owner shares it.
fn denied(root: &Path) -> Error {
    use std::os::unix::fs::MetadataExt;
    let whose = match fs::metadata(root) {
        Ok(m) => format!("owned by uid {} gid {}, mode {:04o}; ", m.uid(), m.gid(), m.mode() & 0o7777),
        Err(_) => String::new(),
    };
    Error::new(
        ErrorKind::Permission,
        root,
        format!("permission denied ({whose}its owner can share it with a group: `loupe record --group NAME`)"),
    )
}

/// An exclusive flock, released on drop.
struct Lock(File);

impl Lock {
    fn take(path: &Path) -> Result<Lock, Error> {
        let f = loupe_files::open_rw(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(Error::io(path, std::io::Error::last_os_error()));
        }
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: unlocking the descriptor we locked.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Database {
    /// Opens the database at `root`, creating it if needed: private (0700
    /// directories, 0600 files) unless it is inside a directory shared with a
    /// group ([`loupe_files::share`]).
    pub fn create(root: &Path) -> Result<Database, Error> {
        match Database::open(root) {
            Err(e) if matches!(e.kind, ErrorKind::NoDatabase | ErrorKind::NotADatabase) => {}
            r => return r,
        }
        loupe_files::create_dir_all(&root.join("epochs"))
            .map_err(|e| Error::new(ErrorKind::Io, root, format!("cannot create database directory: {e}")))?;
        let marker = format!("{{\"version\": {DB_VERSION}, \"created_unix\": {}}}\n", now_unix());
        write_atomic(&root.join(MARKER), marker.as_bytes())
            .map_err(|e| Error::new(ErrorKind::Io, root, format!("cannot write to database directory: {}", e.reason)))?;
        Database::open(root)
    }

    /// Opens an existing database. Its absence, a directory the caller may
    /// not read, and a directory that is no database are told apart.
    pub fn open(root: &Path) -> Result<Database, Error> {
        let marker = root.join(MARKER);
        match fs::metadata(&marker) {
            Ok(m) if m.is_file() => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Err(denied(root)),
            _ if !root.exists() => return Err(Error::new(ErrorKind::NoDatabase, root, "record one with `loupe record --db DIR`")),
            _ => return Err(Error::new(ErrorKind::NotADatabase, root, "not a Loupe database (no LOUPE_DB marker)")),
        }
        if fs::read_dir(root).is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied) {
            return Err(denied(root));
        }
        Ok(Database { root: root.to_path_buf() })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn images_dir(&self) -> PathBuf {
        layout::images_dir(&self.root)
    }

    fn epoch_dir(&self, e: EpochId) -> PathBuf {
        self.root.join("epochs").join(format!("{:06}", e.0))
    }

    fn lock(&self) -> Result<Lock, Error> {
        Lock::take(&self.root.join("lock"))
    }

    /// The lock merges hold, and the epoch's directory, created if new.
    fn lock_for_merge(&self, epoch: EpochId) -> Result<(Lock, PathBuf), Error> {
        let lock = self.lock()?;
        let dir = self.epoch_dir(epoch);
        if !dir.is_dir() {
            self.start_epoch(epoch)?;
        }
        // What is merged now was collected by now: the epoch lasted at least until here.
        self.mark_ended(epoch)?;
        Ok((lock, dir))
    }

    /// The current epoch; creates epoch 1 in a new database.
    pub fn current_epoch(&self) -> Result<EpochId, Error> {
        let path = self.root.join("CURRENT");
        if let Ok(text) = fs::read_to_string(&path) {
            if let Ok(n) = text.trim().parse() {
                return Ok(EpochId(n));
            }
        }
        let _lock = self.lock()?;
        // Whatever epochs exist (CURRENT lost or never written): continue the last.
        let last = self.epoch_ids()?.last().copied();
        let e = last.unwrap_or(EpochId(1));
        self.start_epoch(e)?;
        Ok(e)
    }

    fn start_epoch(&self, e: EpochId) -> Result<(), Error> {
        let dir = self.epoch_dir(e);
        loupe_files::create_dir_all(&dir).map_err(|err| Error::io(&dir, err))?;
        if !dir.join("epoch.json").exists() {
            let now = now_ns();
            let ef =
                EpochFile { started_unix: now / 1_000_000_000, started_unix_ns: Some(now), ended_unix_ns: None, meta: BTreeMap::new() };
            write_atomic(&dir.join("epoch.json"), &serde_json::to_vec_pretty(&ef).expect("serializable"))?;
        }
        write_atomic(&self.root.join("CURRENT"), format!("{}\n", e.0).as_bytes())
    }

    /// Starts the next epoch and makes it current.
    pub fn new_epoch(&self) -> Result<EpochId, Error> {
        let cur = self.current_epoch()?;
        let _lock = self.lock()?;
        let next = EpochId(self.epoch_ids()?.last().copied().unwrap_or(cur).0.max(cur.0) + 1);
        if self.epoch_dir(cur).is_dir() {
            self.mark_ended(cur)?;
        }
        self.start_epoch(next)?;
        Ok(next)
    }

    /// Moves the epoch's end to now (never back); the caller holds the lock.
    fn mark_ended(&self, epoch: EpochId) -> Result<(), Error> {
        let mut ef = self.read_epoch_file(epoch);
        let now = now_ns();
        ef.ended_unix_ns = Some(ef.ended_unix_ns.map_or(now, |e| e.max(now)));
        write_atomic(&self.epoch_dir(epoch).join("epoch.json"), &serde_json::to_vec_pretty(&ef).expect("serializable"))
    }

    fn epoch_ids(&self) -> Result<Vec<EpochId>, Error> {
        let dir = self.root.join("epochs");
        let mut ids: Vec<EpochId> = fs::read_dir(&dir)
            .map_err(|e| Error::io(&dir, e))?
            .flatten()
            .filter_map(|d| d.file_name().to_str()?.parse().ok().map(EpochId))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Sets one metadata value by its stored key (one the typed
    /// [`EpochMeta`] does not know lands in its `other`).
    pub fn set_epoch_meta(&self, epoch: EpochId, key: &str, value: &str) -> Result<(), Error> {
        self.edit_epoch_file(epoch, |ef| {
            ef.meta.insert(key.to_string(), value.to_string());
        })
    }

    /// Changes the epoch's metadata in one locked, atomic rewrite.
    pub fn update_epoch_meta(&self, epoch: EpochId, change: impl FnOnce(&mut EpochMeta)) -> Result<(), Error> {
        self.edit_epoch_file(epoch, |ef| {
            let mut meta = EpochMeta::from_map(std::mem::take(&mut ef.meta));
            change(&mut meta);
            ef.meta = meta.to_map();
        })
    }

    /// The epoch's metadata; empty when it has none (or no such epoch).
    pub fn epoch_meta(&self, epoch: EpochId) -> EpochMeta {
        EpochMeta::from_map(self.read_epoch_file(epoch).meta)
    }

    /// Per-thread on-CPU and off-CPU times (`record --off-cpu`), summed over `epochs`.
    pub fn thread_times(&self, epochs: &[EpochId]) -> meta::ThreadTimes {
        let mut out = meta::ThreadTimes::new();
        for &e in epochs {
            for (k, t) in self.epoch_meta(e).threads {
                out.entry(k).or_default().add(&t);
            }
        }
        out
    }

    /// Each process's cgroup path in `epochs` (a later epoch's for a pid in several).
    pub fn process_cgroups(&self, epochs: &[EpochId]) -> BTreeMap<u32, String> {
        epochs.iter().flat_map(|&e| self.epoch_meta(e).cgroups).collect()
    }

    fn read_epoch_file(&self, epoch: EpochId) -> EpochFile {
        let path = self.epoch_dir(epoch).join("epoch.json");
        fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn edit_epoch_file(&self, epoch: EpochId, change: impl FnOnce(&mut EpochFile)) -> Result<(), Error> {
        let _lock = self.lock()?;
        let mut ef = self.read_epoch_file(epoch);
        change(&mut ef);
        write_atomic(&self.epoch_dir(epoch).join("epoch.json"), &serde_json::to_vec_pretty(&ef).expect("serializable"))
    }

    /// Every epoch, in order, with its start and metadata.
    pub fn epochs(&self) -> Result<Vec<EpochInfo>, Error> {
        Ok(self
            .epoch_ids()?
            .into_iter()
            .map(|id| {
                let ef = self.read_epoch_file(id);
                EpochInfo {
                    id,
                    started_unix: ef.started_unix,
                    started_unix_ns: ef.started_unix_ns,
                    ended_unix_ns: ef.ended_unix_ns,
                    meta: EpochMeta::from_map(ef.meta),
                }
            })
            .collect())
    }

    /// File name of an (image, event) profile.
    pub fn file_name(image: &ImageId, event: &EventName) -> String {
        format!("{}.{}.prof", image.file_key(), format::event_key(event))
    }

    /// Adds `profiles` into the epoch: each (image, event) file is read,
    /// summed and replaced atomically, then the index is rewritten.
    pub fn merge(&self, epoch: EpochId, profiles: &[Profile]) -> Result<MergeReport, Error> {
        let (_lock, dir) = self.lock_for_merge(epoch)?;
        let mut grouped: BTreeMap<String, Profile> = BTreeMap::new();
        let mut refused = Vec::new();
        for p in profiles {
            let name = Database::file_name(&p.image, &p.event);
            match grouped.get_mut(&name) {
                // Distinct identities share a file name only if their keys
                // collide; say so rather than fail the whole merge.
                Some(acc) => {
                    if let Err(e) = acc.merge(p) {
                        refused
                            .push(FileProblem { path: dir.join(&name), reason: format!("{e}; {} samples not stored", p.total_samples()) });
                    }
                }
                None => {
                    grouped.insert(name, p.clone());
                }
            }
        }
        let mut report = MergeReport::default();
        let (index, problems) = self.index_locked(epoch)?;
        report.problems = problems;
        report.problems.extend(refused);
        let mut entries: BTreeMap<String, IndexEntry> = index.entries.into_iter().map(|e| (e.file.clone(), e)).collect();
        for (name, mut p) in grouped {
            let path = dir.join(&name);
            report.samples_added += p.total_samples();
            match fs::read(&path) {
                Ok(bytes) => match format::decode(&bytes).map_err(|e| e.to_string()).and_then(|old| {
                    let mut old = old;
                    old.merge(&p).map_err(|e| e.to_string())?;
                    Ok(old)
                }) {
                    Ok(merged) => p = merged,
                    Err(reason) => move_aside(&path, reason, &mut report.problems),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
            report.write(&path, &format::encode(&p))?;
            entries.insert(name.clone(), IndexEntry::of(&name, &p));
        }
        self.write_index(epoch, entries.into_values().collect())?;
        Ok(report)
    }

    fn write_index(&self, epoch: EpochId, entries: Vec<IndexEntry>) -> Result<(), Error> {
        let f = IndexFile { version: 1, entries };
        write_atomic(&self.epoch_dir(epoch).join("index.json"), &serde_json::to_vec(&f).expect("serializable"))
    }

    /// The epoch's index; rebuilt from the profile files when it is missing
    /// or unreadable (corrupt files are skipped and reported).
    pub fn index(&self, epoch: EpochId) -> Result<(EpochIndex, Vec<FileProblem>), Error> {
        self.existing_epoch_dir(epoch)?;
        if let Some(idx) = self.read_index(epoch) {
            return Ok((idx, Vec::new()));
        }
        let _lock = self.lock()?;
        self.index_locked(epoch)
    }

    fn read_index(&self, epoch: EpochId) -> Option<EpochIndex> {
        let bytes = fs::read(self.epoch_dir(epoch).join("index.json")).ok()?;
        let f: IndexFile = serde_json::from_slice(&bytes).ok()?;
        Some(EpochIndex { entries: f.entries })
    }

    fn index_locked(&self, epoch: EpochId) -> Result<(EpochIndex, Vec<FileProblem>), Error> {
        if let Some(idx) = self.read_index(epoch) {
            return Ok((idx, Vec::new()));
        }
        let dir = self.epoch_dir(epoch);
        let mut entries = Vec::new();
        let mut problems = Vec::new();
        let Ok(listing) = fs::read_dir(&dir) else { return Ok((EpochIndex::default(), problems)) };
        let mut names: Vec<String> =
            listing.flatten().filter_map(|d| d.file_name().into_string().ok()).filter(|n| n.ends_with(".prof")).collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            match Database::read_profile_file(&path) {
                Ok(p) => entries.push(IndexEntry::of(&name, &p)),
                Err(e) => problems.push(FileProblem { path, reason: e.reason }),
            }
        }
        if dir.join("epoch.json").exists() {
            self.write_index(epoch, entries.clone())?;
        }
        Ok((EpochIndex { entries }, problems))
    }

    /// Reads the profiles the index lists and `select` accepts; corrupt
    /// files are named in the problems and skipped.
    pub fn load(&self, epoch: EpochId, select: &dyn Fn(&IndexEntry) -> bool) -> Result<(Vec<Profile>, Vec<FileProblem>), Error> {
        let (index, mut problems) = self.index(epoch)?;
        let (out, more) = self.load_listed(&self.epoch_dir(epoch), &index.entries, select);
        problems.extend(more);
        Ok((out, problems))
    }

    /// Reads the profiles of `dir` that `entries` list and `select` accepts.
    fn load_listed(&self, dir: &Path, entries: &[IndexEntry], select: &dyn Fn(&IndexEntry) -> bool) -> (Vec<Profile>, Vec<FileProblem>) {
        let (mut out, mut problems) = (Vec::new(), Vec::new());
        for e in entries.iter().filter(|e| select(e)) {
            let path = dir.join(&e.file);
            // The index is read from disk: a name with a directory in it (`/dev/zero`, `../..`) is no file of this epoch.
            if Path::new(&e.file).file_name() != Some(e.file.as_ref()) {
                problems.push(FileProblem { path, reason: "the index names a file outside the epoch".into() });
                continue;
            }
            match Database::read_profile_file(&path) {
                Ok(p) => out.push(p),
                Err(err) => problems.push(FileProblem { path, reason: err.reason }),
            }
        }
        (out, problems)
    }

    /// Adds stack tables into the epoch: per event, a new part file
    /// ([`stacks`]) written atomically; the epoch's earlier parts are not
    /// read, until an event has [`stacks::MAX_PARTS`]: then this flush
    /// writes their sum with its own as one compaction and deletes them
    /// (a corrupt one is moved aside).
    pub fn merge_stacks(&self, epoch: EpochId, profiles: &[StackProfile]) -> Result<MergeReport, Error> {
        let (_lock, dir) = self.lock_for_merge(epoch)?;
        let names = file_names(&dir)?;
        let live = stacks::live_files(&names);
        let mut report = MergeReport::default();
        for p in profiles.iter().filter(|p| !p.counts.is_empty()) {
            let part = stacks::next_part(&p.event, names.iter().map(String::as_str));
            report.samples_added += p.total_samples();
            let key = format::event_key(&p.event);
            let mine: Vec<&String> = live.iter().filter(|n| stacks::parse_name(n).is_some_and(|f| f.0 == key.as_str())).collect();
            if mine.len() < stacks::MAX_PARTS {
                report.write(&dir.join(stacks::part_name(&p.event, part)), &stacks::encode(p))?;
                continue;
            }
            let mut sum = StackProfile::new(p.event.clone());
            for name in &mine {
                let path = dir.join(name);
                let part = read_for_merge(&path, stacks::decode, || StackProfile::new(p.event.clone()), &mut report.problems)?;
                sum.merge(&part).map_err(|e| Error::new(ErrorKind::Io, &path, e))?;
            }
            sum.merge(p).map_err(|e| Error::new(ErrorKind::Io, &dir, e))?;
            report.write(&dir.join(stacks::compacted_name(&p.event, part)), &stacks::encode(&sum))?;
            // Superseded now: readers leave them out whether or not they are gone yet.
            for name in names.iter().filter(|n| stacks::parse_name(n).is_some_and(|f| f.0 == key.as_str() && f.1 < part)) {
                let _ = fs::remove_file(dir.join(name));
            }
        }
        Ok(report)
    }

    /// The epoch's stack tables, one per event (its parts summed in flush
    /// order); corrupt files are named and skipped.
    pub fn load_stacks(&self, epoch: EpochId) -> Result<(Vec<StackProfile>, Vec<FileProblem>), Error> {
        let dir = self.existing_epoch_dir(epoch)?;
        self.load_stack_files(&dir)
    }

    /// The stack tables of any folder laid out as an epoch's (parts summed).
    /// A compaction landing while it reads deletes parts it listed: it reads
    /// the folder again then, so the table is never counted short.
    pub(crate) fn load_stack_files(&self, dir: &Path) -> Result<(Vec<StackProfile>, Vec<FileProblem>), Error> {
        for attempt in 0.. {
            let (mut parts, mut problems, mut vanished) = (Vec::new(), Vec::new(), false);
            for name in stacks::live_files(&file_names(dir)?) {
                let path = dir.join(&name);
                match fs::read(&path) {
                    Ok(b) => match stacks::decode(&b) {
                        Ok(p) => parts.push(p),
                        Err(e) => problems.push(FileProblem { path, reason: e.to_string() }),
                    },
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 3 => vanished = true,
                    Err(e) => problems.push(FileProblem { path, reason: e.to_string() }),
                }
            }
            if !vanished {
                let merged = stacks::merge_parts(parts).map_err(|e| Error::new(ErrorKind::Corrupt, dir, e))?;
                return Ok((merged, problems));
            }
        }
        unreachable!("the loop returns by its fourth attempt")
    }

    /// Adds branch records into the epoch: one file per (image, event),
    /// read, summed and replaced atomically; a corrupt one is moved aside
    /// (named in the report) and started anew.
    pub fn merge_branches(&self, epoch: EpochId, profiles: &[BranchProfile]) -> Result<MergeReport, Error> {
        let (_lock, dir) = self.lock_for_merge(epoch)?;
        let mut report = MergeReport::default();
        for p in profiles.iter().filter(|p| !p.records.is_empty()) {
            let path = dir.join(branches::file_name(&p.image, &p.event));
            let fresh = || BranchProfile::new(p.image.clone(), p.event.clone());
            let mut merged = read_for_merge(&path, branches::decode, fresh, &mut report.problems)?;
            if let Err(e) = merged.merge(p) {
                // Two identities whose file keys collide: say so, keep the rest.
                report.problems.push(FileProblem { path, reason: format!("{e}; {} branch records not stored", p.total_taken()) });
                continue;
            }
            report.samples_added += p.total_taken();
            report.write(&path, &branches::encode(&merged))?;
        }
        Ok(report)
    }

    /// The epoch's branch records of the images `select` accepts; corrupt
    /// files are named in the problems and skipped.
    pub fn load_branches(
        &self,
        epoch: EpochId,
        select: &dyn Fn(&ImageId) -> bool,
    ) -> Result<(Vec<BranchProfile>, Vec<FileProblem>), Error> {
        let (mut out, problems) = self.load_files(epoch, |n| n.ends_with(".branches"), branches::decode)?;
        out.retain(|p| select(&p.image));
        Ok((out, problems))
    }

    /// Decodes every file of the epoch whose name `keep` accepts, in name
    /// order; unreadable and corrupt ones are named in the problems and skipped.
    fn load_files<T>(
        &self,
        epoch: EpochId,
        keep: fn(&str) -> bool,
        decode: fn(&[u8]) -> Result<T, format::FormatError>,
    ) -> Result<(Vec<T>, Vec<FileProblem>), Error> {
        let dir = self.existing_epoch_dir(epoch)?;
        let mut names: Vec<String> = file_names(&dir)?.into_iter().filter(|n| keep(n)).collect();
        names.sort();
        let (mut out, mut problems) = (Vec::new(), Vec::new());
        for name in names {
            let path = dir.join(&name);
            match fs::read(&path).map_err(|e| e.to_string()).and_then(|b| decode(&b).map_err(|e| e.to_string())) {
                Ok(p) => out.push(p),
                Err(reason) => problems.push(FileProblem { path, reason }),
            }
        }
        Ok((out, problems))
    }

    /// The folder of `epoch`; an error when there is no such epoch.
    fn existing_epoch_dir(&self, epoch: EpochId) -> Result<PathBuf, Error> {
        let dir = self.epoch_dir(epoch);
        if !dir.is_dir() {
            return Err(Error::new(ErrorKind::NoSuchEpoch, &dir, format!("no epoch {epoch}")));
        }
        Ok(dir)
    }

    pub fn read_profile_file(path: &Path) -> Result<Profile, Error> {
        let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
        format::decode(&bytes).map_err(|e| Error::new(ErrorKind::Corrupt, path, e))
    }
}

/// Moves a corrupt file aside (`<name>.corrupt`) so a merge can start it
/// anew without losing the evidence, and names it in `problems`.
fn move_aside(path: &Path, reason: impl fmt::Display, problems: &mut Vec<FileProblem>) {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".corrupt");
    let aside = PathBuf::from(aside);
    let _ = fs::rename(path, &aside);
    problems.push(FileProblem { path: path.to_path_buf(), reason: format!("{reason}; moved aside to {}", aside.display()) });
}

/// The names of the files in `dir`.
fn file_names(dir: &Path) -> Result<Vec<String>, Error> {
    Ok(fs::read_dir(dir).map_err(|e| Error::io(dir, e))?.flatten().filter_map(|d| d.file_name().into_string().ok()).collect())
}

/// The current contents of a file about to be merged into: `fresh()` when
/// it does not exist yet or is corrupt (then moved aside and named).
fn read_for_merge<T>(
    path: &Path,
    decode: fn(&[u8]) -> Result<T, format::FormatError>,
    fresh: impl FnOnce() -> T,
    problems: &mut Vec<FileProblem>,
) -> Result<T, Error> {
    match fs::read(path) {
        Ok(bytes) => Ok(decode(&bytes).unwrap_or_else(|reason| {
            move_aside(path, reason, problems);
            fresh()
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(fresh()),
        Err(e) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_losses_read_back_and_sum() {
        // Checks the loss keys stored with an epoch: missing reads as 0, ring and map losses sum, throttles apart.
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path()).unwrap();
        let e = db.current_epoch().unwrap();
        let info = |db: &Database| db.epochs().unwrap().into_iter().find(|x| x.id == e).unwrap();
        assert_eq!(info(&db).lost_samples(), 0);
        db.update_epoch_meta(e, |m| {
            m.losses = meta::EpochLosses { ring_overrun: 1200, map_full: 3, throttled: 2, unwind_stopped: [4, 0, 1, 0] }
        })
        .unwrap();
        assert_eq!((info(&db).lost_samples(), info(&db).meta.losses.throttled), (1203, 2));
        assert_eq!(info(&db).meta.losses.unwind_stopped, [4, 0, 1, 0], "unwind stops are stored apart from losses");
    }
    use loupe_model::{BuildId, ImageOffset};

    fn prof(n: u64, build: u8) -> Profile {
        let mut p = Profile::new(ImageId::elf("/bin/app", Some(BuildId(vec![build]))), EventName::new("cpu-clock"));
        p.add(ProcessKey::new(1, "app"), ImageOffset(0x10), n, n * 1000);
        p
    }

    fn db() -> (tempfile::TempDir, Database) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(&dir.path().join("db")).unwrap();
        (dir, db)
    }

    #[test]
    fn merges_sum_and_epochs_stay_apart() {
        // Checks repeated merges add up within an epoch and a new epoch starts empty.
        let (_d, db) = db();
        let e1 = db.current_epoch().unwrap();
        assert_eq!(e1, EpochId(1));
        db.merge(e1, &[prof(2, 1), prof(3, 1)]).unwrap();
        db.merge(e1, &[prof(5, 1), prof(1, 2)]).unwrap();
        let (idx, _) = db.index(e1).unwrap();
        let totals: Vec<u64> = idx.entries.iter().map(|e| e.total_samples).collect();
        assert_eq!(totals.iter().sum::<u64>(), 11);
        assert!(totals.contains(&10));
        let e2 = db.new_epoch().unwrap();
        assert_eq!((e2, db.current_epoch().unwrap()), (EpochId(2), EpochId(2)));
        assert!(db.index(e2).unwrap().0.entries.is_empty());
        db.merge(e2, &[prof(4, 1)]).unwrap();
        assert_eq!(db.load(e2, &|_| true).unwrap().0[0].total_samples(), 4);
        assert_eq!(db.epochs().unwrap().len(), 2);
    }

    #[test]
    fn an_epoch_ends_at_its_last_merge_or_when_the_next_begins() {
        // Checks the kept end time: none before samples, the wall clock at each merge, the next epoch's start at the latest; old files read as none.
        let (_d, db) = db();
        let ns = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let info = |id: EpochId| db.epochs().unwrap().into_iter().find(|x| x.id == id).unwrap();
        let e1 = db.current_epoch().unwrap();
        assert_eq!(info(e1).ended_unix_ns, None);
        let start = info(e1).start_ns();
        let before = ns();
        db.merge(e1, &[prof(2, 1)]).unwrap();
        let merged = info(e1).ended_unix_ns.unwrap();
        assert!(start <= before && before <= merged && merged <= ns(), "{start} {before} {merged}");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let e2 = db.new_epoch().unwrap();
        let closed = info(e1).ended_unix_ns.unwrap();
        assert!(merged < closed && closed <= info(e2).start_ns(), "{merged} {closed} {}", info(e2).start_ns());
        // An epoch.json of an older loupe: seconds only, no end.
        fs::write(db.epoch_dir(e2).join("epoch.json"), "{\"started_unix\": 1700000000, \"meta\": {}}").unwrap();
        let old = info(e2);
        assert_eq!((old.start_ns(), old.ended_unix_ns), (1_700_000_000_000_000_000, None));
    }

    #[test]
    fn corrupt_file_is_named_and_the_rest_loads() {
        // Checks that a flipped byte makes load skip that file, name it, and return the others.
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        db.merge(e, &[prof(2, 1), prof(3, 2)]).unwrap();
        let victim = db.epoch_dir(e).join(Database::file_name(&prof(1, 1).image, &EventName::new("cpu-clock")));
        let mut b = fs::read(&victim).unwrap();
        b[20] ^= 0xff;
        fs::write(&victim, b).unwrap();
        let (ps, problems) = db.load(e, &|_| true).unwrap();
        assert_eq!(ps.len(), 1);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().contains(victim.file_name().unwrap().to_str().unwrap()));
        // A merge replaces the corrupt file and keeps going.
        let r = db.merge(e, &[prof(7, 1)]).unwrap();
        assert_eq!(r.problems.len(), 1);
        assert_eq!(db.load(e, &|_| true).unwrap().1.len(), 0);
    }

    #[test]
    fn stacks_merge_across_flushes_and_leave_flat_files_alone() {
        // Checks that two stack flushes sum, the index ignores stack files, and a corrupt stack part is named and
        // skipped while the parts after it are read.
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        let mut s = StackProfile::new(EventName::new("cpu-clock"));
        s.add(&ProcessKey::new(1, "app"), &[(ImageId::elf("/bin/app", None), ImageOffset(0x10))], 2);
        db.merge(e, &[prof(2, 1)]).unwrap();
        db.merge_stacks(e, &[s.clone()]).unwrap();
        db.merge_stacks(e, &[s.clone()]).unwrap();
        let (got, problems) = db.load_stacks(e).unwrap();
        assert!(problems.is_empty());
        assert_eq!((got.len(), got[0].total_samples(), got[0].stacks.len()), (1, 4, 1));
        fs::remove_file(db.epoch_dir(e).join("index.json")).unwrap();
        let (index, problems) = db.index(e).unwrap();
        assert!(problems.is_empty() && index.entries.len() == 1);
        fs::write(db.epoch_dir(e).join("stacks.cpu-clock.stacks"), b"LOUPEPRF garbage garbage").unwrap();
        assert_eq!(db.load_stacks(e).unwrap().1.len(), 1);
        let r = db.merge_stacks(e, &[s.clone()]).unwrap();
        assert_eq!((r.problems.len(), r.samples_added), (0, 2));
        let (got, problems) = db.load_stacks(e).unwrap();
        assert_eq!((got.len(), got[0].total_samples(), problems.len()), (1, 2 + 2, 1), "the part of the second flush and the third");
        db.merge_stacks(e, &[s]).unwrap();
        assert_eq!(db.load_stacks(e).unwrap().0[0].total_samples(), 6);
    }

    #[test]
    fn many_flushes_are_compacted_into_one_file_that_reads_the_same() {
        // Checks that past MAX_PARTS parts a flush writes one compaction holding every earlier part and its own,
        // deletes the parts (a corrupt one moved aside and named), and the table reads as the sum of all flushes.
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        let mut want = StackProfile::new(EventName::new("cpu-clock"));
        let flushes = stacks::MAX_PARTS as u64 + 6;
        for i in 0..flushes {
            let mut s = StackProfile::new(EventName::new("cpu-clock"));
            s.add(&ProcessKey::new(1 + i as u32 % 5, "app"), &[(ImageId::elf("/bin/app", None), ImageOffset(0x10 * (i % 7)))], i + 1);
            if i == 3 {
                // A part that will not decode: named at every read, its samples lost.
                let r = db.merge_stacks(e, &[s]).unwrap();
                let name = stacks::part_name(&EventName::new("cpu-clock"), 3);
                assert_eq!(r.samples_added, 4);
                fs::write(db.epoch_dir(e).join(name), b"LOUPEPRF garbage garbage").unwrap();
                continue;
            }
            db.merge_stacks(e, &[s.clone()]).unwrap();
            want.merge(&s).unwrap();
            let files = file_names(&db.epoch_dir(e)).unwrap().into_iter().filter(|n| stacks::parse_name(n).is_some()).count();
            assert!(files <= stacks::MAX_PARTS, "{files} stack files after flush {i}");
        }
        let names = file_names(&db.epoch_dir(e)).unwrap();
        assert!(names.iter().any(|n| n.ends_with(".corrupt")), "{names:?}");
        assert_eq!(names.iter().filter(|n| stacks::parse_name(n).is_some_and(|f| f.2)).count(), 1, "{names:?}");
        let (got, problems) = db.load_stacks(e).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].total_samples(), got[0].counts.len()), (want.total_samples(), want.counts.len()));
    }

    #[test]
    fn stack_parts_past_nine_are_summed_in_flush_order() {
        // Checks that twelve flushes of distinct stacks read back as the table merging them one by one gives
        // (ids in flush order: part 10 after part 9, not after part 1).
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        let mut want = StackProfile::new(EventName::new("cpu-clock"));
        for i in 0..12u64 {
            let mut s = StackProfile::new(EventName::new("cpu-clock"));
            s.add(&ProcessKey::new(1 + i as u32 % 3, "app"), &[(ImageId::elf("/bin/app", None), ImageOffset(0x10 * i))], i + 1);
            s.period_sum = i;
            db.merge_stacks(e, &[s.clone()]).unwrap();
            want.merge(&s).unwrap();
        }
        let (got, problems) = db.load_stacks(e).unwrap();
        assert!(problems.is_empty());
        assert_eq!(got, vec![want]);
    }

    #[test]
    fn branches_merge_per_image_and_corrupt_files_are_named() {
        // Checks that branch files sum across flushes per image, leave the flat index alone, and a corrupt one is
        // named and skipped on load and set aside on the next merge.
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        let br = |build: u8, taken: u64| {
            let mut b = BranchProfile::new(prof(1, build).image, EventName::new("cycles"));
            b.add(ImageOffset(0x1005), ImageOffset(0x1040), taken, 1);
            b.stacks = 1;
            b
        };
        db.merge(e, &[prof(2, 1)]).unwrap();
        db.merge_branches(e, &[br(1, 10), br(2, 5)]).unwrap();
        db.merge_branches(e, &[br(1, 30)]).unwrap();
        let (got, problems) = db.load_branches(e, &|i| i.build_id == Some(BuildId(vec![1]))).unwrap();
        assert!(problems.is_empty());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].records[&(ImageOffset(0x1005), ImageOffset(0x1040))].taken, 40);
        assert_eq!((got[0].records[&(ImageOffset(0x1005), ImageOffset(0x1040))].mispredicted, got[0].stacks), (2, 2));
        fs::remove_file(db.epoch_dir(e).join("index.json")).unwrap();
        let (index, problems) = db.index(e).unwrap();
        assert!(problems.is_empty() && index.entries.len() == 1);
        let victim = db.epoch_dir(e).join(branches::file_name(&prof(1, 2).image, &EventName::new("cycles")));
        let mut b = fs::read(&victim).unwrap();
        b[30] ^= 0x40;
        fs::write(&victim, b).unwrap();
        let (got, problems) = db.load_branches(e, &|_| true).unwrap();
        assert_eq!((got.len(), problems.len()), (1, 1));
        assert!(problems[0].to_string().contains(victim.file_name().unwrap().to_str().unwrap()), "{}", problems[0]);
        let r = db.merge_branches(e, &[br(2, 3)]).unwrap();
        assert_eq!(r.problems.len(), 1);
        let (got, problems) = db.load_branches(e, &|i| i.build_id == Some(BuildId(vec![2]))).unwrap();
        assert!(problems.is_empty());
        assert_eq!(got[0].total_taken(), 3);
    }

    #[test]
    fn lost_index_is_rebuilt_from_files() {
        // Checks that deleting or garbling index.json loses nothing.
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        db.merge(e, &[prof(2, 1), prof(3, 2)]).unwrap();
        let before = db.index(e).unwrap().0;
        fs::write(db.epoch_dir(e).join("index.json"), b"{garbage").unwrap();
        assert_eq!(db.index(e).unwrap().0, before);
        fs::remove_file(db.epoch_dir(e).join("index.json")).unwrap();
        assert_eq!(db.index(e).unwrap().0, before);
    }

    #[test]
    fn index_naming_a_file_outside_the_epoch_is_refused() {
        // Checks that an index.json entry with a path (absolute here; `/dev/zero` would never finish reading) is
        // named as a problem and not read, while the epoch's own files load (review of the store_index fuzz target).
        let (dir, db) = db();
        let e = db.current_epoch().unwrap();
        db.merge(e, &[prof(1, 1)]).unwrap();
        let outside = dir.path().join("elsewhere.prof");
        std::fs::write(&outside, format::encode(&prof(5, 2))).unwrap();
        let index = db.epoch_dir(e).join("index.json");
        let mut f: serde_json::Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
        let mut stray = f["entries"][0].clone();
        stray["file"] = outside.to_str().unwrap().into();
        f["entries"].as_array_mut().unwrap().push(stray);
        std::fs::write(&index, serde_json::to_vec(&f).unwrap()).unwrap();
        let (profiles, problems) = db.load(e, &|_| true).unwrap();
        assert_eq!(profiles, vec![prof(1, 1)]);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, outside);
    }

    #[test]
    fn unwritable_or_missing_databases_fail_clearly() {
        // Checks one-line errors that name the path, and that a missing database is told from a directory that is none.
        let err = Database::create(Path::new("/proc/loupe-db")).err().unwrap().to_string();
        assert!(err.starts_with("/proc/loupe-db: cannot") && !err.contains('\n'), "{err}");
        let err = Database::open(Path::new("/nonexistent/x")).err().unwrap();
        assert_eq!(err.kind(), &ErrorKind::NoDatabase);
        assert!(err.to_string().starts_with("no database at /nonexistent/x"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let err = Database::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains("not a Loupe database"), "{err}");
    }

    #[test]
    fn no_temporary_files_are_left_behind() {
        // Checks that atomic writes clean up after themselves.
        let (_d, db) = db();
        let e = db.current_epoch().unwrap();
        db.merge(e, &[prof(2, 1)]).unwrap();
        let names: Vec<String> = fs::read_dir(db.epoch_dir(e)).unwrap().map(|d| d.unwrap().file_name().into_string().unwrap()).collect();
        assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    }
}
