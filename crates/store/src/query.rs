//! The query layer: what a reader of profiles asks for (which epochs,
//! which processes and images, which events) and what it gets back, apart
//! from where the samples are kept. The CLI asks through it; a `loupe
//! serve` HTTP API or a fleet store (ClickHouse) would answer the same
//! questions by implementing [`ProfileSource`] (its few primitives) and
//! inherit the selection logic, or override it to aggregate server-side.
//!
//! The local epoch database is the first source. A per-image view needs
//! only its index (samples per process); finer views read the profile
//! files of the images the filter keeps, and the images left out still
//! count towards the totals percentages are taken of.
//!
//! ```
//! use loupe_model::*;
//! use loupe_store::query::{Detail, Epochs, Filter, ProfileSource};
//! let dir = tempfile::tempdir().unwrap();
//! let db = loupe_store::Database::create(&dir.path().join("db")).unwrap();
//! let mut p = Profile::new(ImageId::elf("/bin/app", None), EventName::new("cpu-clock"));
//! p.add(ProcessKey::new(7, "app"), ImageOffset(0x40), 3, 3_000);
//! db.merge(db.current_epoch().unwrap(), &[p]).unwrap();
//! let epochs = db.select(&Epochs::parse("all").unwrap()).unwrap();
//! let flat = db.flat(&epochs, Detail::Offsets, &Filter::default()).unwrap();
//! assert_eq!((flat.profiles.len(), flat.totals.len()), (1, 0));
//! ```

use crate::{Database, EpochId, EpochInfo, Error, ErrorKind, FileProblem};
use loupe_model::branches::BranchProfile;
use loupe_model::stacks::StackProfile;
use loupe_model::{EventName, ImageId, ImageTotals, ProcessKey, Profile};
use std::collections::{BTreeMap, BTreeSet};

/// Which epochs a query reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Epochs {
    /// The one being recorded into.
    Current,
    All,
    One(EpochId),
    /// Each must exist.
    List(Vec<EpochId>),
    /// Every epoch numbered at least this (a manager's epochs since it started on a program).
    From(EpochId),
    /// Every epoch that overlaps the time range (unix seconds, inclusive); an
    /// epoch runs from its start to the next one's start.
    Between {
        from_unix: u64,
        to_unix: u64,
    },
}

impl Epochs {
    /// A number, `current` or `all`.
    pub fn parse(word: &str) -> Result<Epochs, Error> {
        Ok(match word {
            "all" => Epochs::All,
            "current" => Epochs::Current,
            n => match n.parse::<u32>() {
                Ok(n) => Epochs::One(EpochId(n)),
                Err(_) => {
                    return Err(Error::query(ErrorKind::BadSelection, format!("--epoch takes a number, `current` or `all`, not {n:?}")))
                }
            },
        })
    }

    /// The last `since` seconds before `now`, up to `until` seconds before it.
    pub fn last_seconds(since: u64, until: Option<u64>, now: u64) -> Epochs {
        Epochs::Between { from_unix: now.saturating_sub(since), to_unix: now.saturating_sub(until.unwrap_or(0)) }
    }
}

/// Which samples count: processes by pid and by name (empty lists keep
/// all), images by a substring of their path, processes by cgroup
/// ([`cgroup_pids`]; None keeps all).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub image: Option<String>,
    pub cgroup_pids: Option<BTreeSet<u32>>,
}

impl Filter {
    pub fn keep_process(&self, p: &ProcessKey) -> bool {
        (self.pids.is_empty() || self.pids.contains(&p.pid))
            && (self.comms.is_empty() || self.comms.contains(&p.comm))
            && self.cgroup_pids.as_ref().is_none_or(|s| s.contains(&p.pid))
    }

    /// Whether an image (by its path as shown) passes the image filter.
    pub fn keep_image(&self, path: &str) -> bool {
        self.image.as_deref().is_none_or(|f| path.contains(f))
    }
}

/// The processes (of `cgroups`, pid to path) in cgroup directory `dir`
/// or below it, and showing every `key=value` of `labels`
/// ([`loupe_model::cgroup::labels`]).
pub fn cgroup_pids(cgroups: &BTreeMap<u32, String>, dir: Option<&str>, labels: &[(String, String)]) -> BTreeSet<u32> {
    let shows = |path: &str| {
        let l = loupe_model::cgroup::labels(path);
        labels.iter().all(|(k, v)| l.get(k.as_str()) == Some(v))
    };
    cgroups.iter().filter(|(_, c)| dir.is_none_or(|d| loupe_model::cgroup::under(c, d)) && shows(c)).map(|(&p, _)| p).collect()
}

/// A whole selection as a reader states it: epochs, filter, events (by
/// name; empty: every event present).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub epochs: Epochs,
    pub filter: Filter,
    pub events: Vec<String>,
}

/// How fine a flat view is: per-image totals come from the index alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    Images,
    /// Procedures, lines, instructions: the offsets of the images the filter keeps.
    Offsets,
}

/// The flat samples of a selection: whole profiles where offsets were
/// needed, per-process totals for the rest (which still count towards
/// the totals), and the files that could not be read.
#[derive(Clone, Debug, Default)]
pub struct Flat {
    pub profiles: Vec<Profile>,
    pub totals: Vec<ImageTotals>,
    pub problems: Vec<FileProblem>,
}

impl Flat {
    /// Every event with samples (profiles or totals), sorted, once each.
    pub fn events(&self) -> Vec<EventName> {
        let mut present: Vec<EventName> =
            self.profiles.iter().map(|p| p.event.clone()).chain(self.totals.iter().map(|t| t.event.clone())).collect();
        present.sort();
        present.dedup();
        present
    }

    /// Adds another read (another epoch range or database) to this one.
    pub fn extend(&mut self, other: Flat) {
        self.profiles.extend(other.profiles);
        self.totals.extend(other.totals);
        self.problems.extend(other.problems);
    }
}

/// The events to show: those `wanted`, each of which must be `present`
/// (unless nothing is), or else all present with `cpu-clock`, the
/// default event, first.
pub fn choose_events(present: &[EventName], wanted: &[String]) -> Result<Vec<EventName>, Error> {
    let mut present = present.to_vec();
    present.sort();
    present.dedup();
    if wanted.is_empty() {
        present.sort_by_key(|e| e.as_str() != "cpu-clock");
        return Ok(present);
    }
    wanted
        .iter()
        .map(|w| {
            let e = EventName::new(w);
            if present.contains(&e) || present.is_empty() {
                Ok(e)
            } else {
                Err(Error::query(
                    ErrorKind::NoSuchEvent,
                    format!("no samples of event {w} in the selection (events present: {})", names(&present)),
                ))
            }
        })
        .collect()
}

/// The events of stack tables to show: `wanted` (which must be present),
/// else every one (`all`) or the first, `cpu-clock` before the rest.
pub fn choose_stack_events(tables: &[StackProfile], wanted: Option<&str>, all: bool) -> Result<Vec<EventName>, Error> {
    let mut present: Vec<EventName> = tables.iter().map(|p| p.event.clone()).collect();
    present.sort_by_key(|e| (e.as_str() != "cpu-clock", e.clone()));
    match wanted {
        Some(w) if present.iter().any(|e| e.as_str() == w) => Ok(vec![EventName::new(w)]),
        Some(w) => Err(Error::query(
            ErrorKind::NoSuchEvent,
            format!("no stacks of event {w} in the selection (events present: {})", names(&present)),
        )),
        None if all => Ok(present),
        None => Ok(present.into_iter().take(1).collect()),
    }
}

fn names(events: &[EventName]) -> String {
    events.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", ")
}

/// Call-stack tables of a selection, one per event (epochs summed), and
/// the files that could not be read.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    pub tables: Vec<StackProfile>,
    pub problems: Vec<FileProblem>,
}

/// Where profiles come from. Implementors answer the primitives; the
/// selection logic is provided on top of them.
pub trait ProfileSource {
    /// Names the source in messages (the database directory).
    fn name(&self) -> String;
    /// Every epoch, in order, with its metadata.
    fn list_epochs(&self) -> Result<Vec<EpochInfo>, Error>;
    /// The epoch being recorded into.
    fn current(&self) -> Result<EpochId, Error>;
    /// Per (image, event) of the epoch, samples per process.
    fn totals(&self, epoch: EpochId) -> Result<(Vec<ImageTotals>, Vec<FileProblem>), Error>;
    /// The epoch's flat profiles of the images `select` accepts.
    fn profiles(&self, epoch: EpochId, select: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<Profile>, Vec<FileProblem>), Error>;
    /// The epoch's call-stack tables, one per event.
    fn stack_tables(&self, epoch: EpochId) -> Result<(Vec<StackProfile>, Vec<FileProblem>), Error>;
    /// The epoch's branch records (LBR) of the images `select` accepts.
    fn branch_records(&self, epoch: EpochId, select: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<BranchProfile>, Vec<FileProblem>), Error>;

    /// The epochs `which` names, in order; a number that is not an epoch is
    /// an error that lists those there are.
    fn select(&self, which: &Epochs) -> Result<Vec<EpochId>, Error> {
        let all = self.list_epochs()?;
        let ids: Vec<EpochId> = all.iter().map(|e| e.id).collect();
        let exists = |e: EpochId| -> Result<EpochId, Error> {
            if ids.contains(&e) {
                return Ok(e);
            }
            let list = ids.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ");
            Err(Error::query(ErrorKind::NoSuchEpoch, format!("no epoch {e} in {} (epochs: {list})", self.name())))
        };
        Ok(match which {
            Epochs::All => ids,
            Epochs::Current => vec![self.current()?],
            Epochs::One(e) => vec![exists(*e)?],
            Epochs::List(v) => v.iter().map(|&e| exists(e)).collect::<Result<_, _>>()?,
            Epochs::From(first) => ids.into_iter().filter(|e| e >= first).collect(),
            Epochs::Between { from_unix, to_unix } => {
                let ends = all.iter().skip(1).map(|e| e.started_unix).chain([u64::MAX]);
                all.iter().zip(ends).filter(|(e, end)| e.started_unix <= *to_unix && *end >= *from_unix).map(|(e, _)| e.id).collect()
            }
        })
    }

    /// The flat samples of `epochs`: with [`Detail::Offsets`], the
    /// profiles of the images `filter` keeps, and totals for the others;
    /// with [`Detail::Images`], totals only.
    fn flat(&self, epochs: &[EpochId], detail: Detail, filter: &Filter) -> Result<Flat, Error> {
        let mut out = Flat::default();
        let wanted = |i: &ImageId| detail == Detail::Offsets && filter.keep_image(&i.path);
        for &e in epochs {
            let (totals, bad) = self.totals(e)?;
            out.problems.extend(bad);
            let some_wanted = totals.iter().any(|t| wanted(&t.image));
            out.totals.extend(totals.into_iter().filter(|t| !wanted(&t.image)));
            if some_wanted {
                let (ps, bad) = self.profiles(e, &wanted)?;
                out.profiles.extend(ps);
                out.problems.extend(bad);
            }
        }
        Ok(out)
    }

    /// The call-stack tables of `epochs`, summed per event.
    fn stacks(&self, epochs: &[EpochId]) -> Result<Stacks, Error> {
        let mut out = Stacks::default();
        for &e in epochs {
            let (tables, bad) = self.stack_tables(e)?;
            out.problems.extend(bad);
            for t in tables {
                match out.tables.iter_mut().find(|m| m.event == t.event) {
                    Some(m) => m.merge(&t).map_err(|why| Error::query(ErrorKind::Corrupt, why))?,
                    None => out.tables.push(t),
                }
            }
        }
        Ok(out)
    }

    /// Every image with samples in `epochs`, each once, in the order found.
    fn images(&self, epochs: &[EpochId]) -> Result<Vec<ImageId>, Error> {
        let mut found: Vec<ImageId> = Vec::new();
        for &e in epochs {
            for t in self.totals(e)?.0 {
                if !found.contains(&t.image) {
                    found.push(t.image);
                }
            }
        }
        Ok(found)
    }

    /// The one image with samples in `epochs` whose path matches `want`:
    /// exactly, by file name, or as a substring, in that order of preference.
    fn find_image(&self, epochs: &[EpochId], want: &str) -> Result<ImageId, Error> {
        let found: Vec<ImageId> = self.images(epochs)?.into_iter().filter(|i| i.path.contains(want)).collect();
        pick_image(found, want)
    }

    /// Each of `epochs` with the seconds since it ended at `now` (when the
    /// next one started; the newest has not ended: 0).
    fn ages(&self, epochs: &[EpochId], now: u64) -> Result<Vec<(EpochId, u64)>, Error> {
        let all = self.list_epochs()?;
        Ok(epochs
            .iter()
            .map(|&e| {
                let end = all.iter().find(|x| x.id.0 > e.0).map_or(now, |x| x.started_unix);
                (e, now.saturating_sub(end))
            })
            .collect())
    }
}

/// The preferred one of the images whose paths contain `want`.
fn pick_image(found: Vec<ImageId>, want: &str) -> Result<ImageId, Error> {
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let exact: Vec<&ImageId> = found.iter().filter(|i| i.path == want).collect();
    let named: Vec<&ImageId> = found.iter().filter(|i| base(&i.path) == want).collect();
    let pick = [exact, named, found.iter().collect()].into_iter().find(|v| !v.is_empty()).unwrap_or_default();
    let mut paths: Vec<&str> = pick.iter().map(|i| i.path.as_str()).collect();
    paths.dedup();
    let fail = |why: String| Err(Error::query(ErrorKind::NoSuchImage, why));
    match (pick.len(), paths.len()) {
        (0, _) => fail(format!("no image matching {want:?} has samples in the selected epochs")),
        (1, _) => Ok(pick[0].clone()),
        (_, 1) => fail(format!("{} has samples under {} build-ids in these epochs; choose one with --epoch", paths[0], pick.len())),
        _ => fail(format!("--image {want:?} matches several images: {}", paths.join(", "))),
    }
}

impl ProfileSource for Database {
    fn name(&self) -> String {
        self.root().display().to_string()
    }

    fn list_epochs(&self) -> Result<Vec<EpochInfo>, Error> {
        self.epochs()
    }

    fn current(&self) -> Result<EpochId, Error> {
        self.current_epoch()
    }

    fn totals(&self, epoch: EpochId) -> Result<(Vec<ImageTotals>, Vec<FileProblem>), Error> {
        let (index, problems) = self.index(epoch)?;
        Ok((index.entries.iter().map(|x| x.totals()).collect(), problems))
    }

    fn profiles(&self, epoch: EpochId, select: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<Profile>, Vec<FileProblem>), Error> {
        self.load(epoch, &|x| select(&x.image))
    }

    fn stack_tables(&self, epoch: EpochId) -> Result<(Vec<StackProfile>, Vec<FileProblem>), Error> {
        self.load_stacks(epoch)
    }

    fn branch_records(&self, epoch: EpochId, select: &dyn Fn(&ImageId) -> bool) -> Result<(Vec<BranchProfile>, Vec<FileProblem>), Error> {
        self.load_branches(epoch, select)
    }

    /// As the provided `flat`, reading runs of closed epochs from their
    /// merged forms ([`crate::merged`]): the same profiles and totals, summed.
    fn flat(&self, epochs: &[EpochId], detail: Detail, filter: &Filter) -> Result<Flat, Error> {
        let wanted = |i: &ImageId| detail == Detail::Offsets && filter.keep_image(&i.path);
        let mut out = Flat::default();
        for u in self.cover(epochs)? {
            self.unit_flat(&u, &wanted, &mut out)?;
        }
        Ok(out)
    }

    /// As the provided `stacks`, reading runs of closed epochs from their merged forms.
    fn stacks(&self, epochs: &[EpochId]) -> Result<Stacks, Error> {
        let mut out = Stacks::default();
        for u in self.cover(epochs)? {
            self.unit_stack_sum(&u, &mut out)?;
        }
        Ok(out)
    }

    /// As the provided `images`, reading the merged forms' indexes.
    fn images(&self, epochs: &[EpochId]) -> Result<Vec<ImageId>, Error> {
        let mut read = Flat::default();
        for u in self.cover(epochs)? {
            self.unit_flat(&u, &|_| false, &mut read)?;
        }
        let mut found: Vec<ImageId> = Vec::new();
        for t in read.totals {
            if !found.contains(&t.image) {
                found.push(t.image);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EpochMeta;
    use loupe_model::{BuildId, ImageOffset};
    use std::fs;

    fn prof(path: &str, build: u8, event: &str, pid: u32, n: u64) -> Profile {
        let mut p = Profile::new(ImageId::elf(path, Some(BuildId(vec![build]))), EventName::new(event));
        p.add(ProcessKey::new(pid, &format!("p{pid}")), ImageOffset(0x10 * u64::from(pid)), n, n * 10);
        p
    }

    /// A database of three epochs: 1 and 3 with samples, 2 empty.
    fn db3() -> (tempfile::TempDir, Database) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(&dir.path().join("db")).unwrap();
        db.merge(db.current_epoch().unwrap(), &[prof("/bin/app", 1, "cpu-clock", 1, 5), prof("/lib/libc.so", 2, "cpu-clock", 2, 3)])
            .unwrap();
        db.new_epoch().unwrap();
        let e3 = db.new_epoch().unwrap();
        db.merge(e3, &[prof("/bin/app", 1, "cpu-clock", 1, 7), prof("/bin/app", 1, "page-faults", 3, 2)]).unwrap();
        (dir, db)
    }

    fn ids(v: &[u32]) -> Vec<EpochId> {
        v.iter().map(|&n| EpochId(n)).collect()
    }

    #[test]
    fn epoch_words_select_and_bad_ones_say_why() {
        // Checks each kind of epoch selection, and that a bad word or a missing number is an error naming the choices.
        let (_d, db) = db3();
        assert_eq!(db.select(&Epochs::parse("all").unwrap()).unwrap(), ids(&[1, 2, 3]));
        assert_eq!(db.select(&Epochs::parse("current").unwrap()).unwrap(), ids(&[3]));
        assert_eq!(db.select(&Epochs::parse("2").unwrap()).unwrap(), ids(&[2]));
        assert_eq!(db.select(&Epochs::From(EpochId(2))).unwrap(), ids(&[2, 3]));
        assert_eq!(db.select(&Epochs::List(ids(&[3, 1]))).unwrap(), ids(&[3, 1]));
        let bad = Epochs::parse("last").unwrap_err();
        assert_eq!(
            (bad.kind(), bad.to_string().as_str()),
            (&ErrorKind::BadSelection, "--epoch takes a number, `current` or `all`, not \"last\"")
        );
        let missing = db.select(&Epochs::List(ids(&[1, 9]))).unwrap_err();
        assert_eq!(missing.kind(), &ErrorKind::NoSuchEpoch);
        assert_eq!(missing.to_string(), format!("no epoch 9 in {} (epochs: 1, 2, 3)", db.root().display()));
    }

    #[test]
    fn time_range_selects_the_epochs_it_overlaps() {
        // Checks that an epoch counts from its start to the next one's start, so a range inside epoch 2 selects it alone.
        let (_d, db) = db3();
        for (e, start) in [(1, 1000), (2, 2000), (3, 3000)] {
            fs::write(db.epoch_dir(EpochId(e)).join("epoch.json"), format!("{{\"started_unix\": {start}, \"meta\": {{}}}}")).unwrap();
        }
        let between = |from_unix, to_unix| db.select(&Epochs::Between { from_unix, to_unix }).unwrap();
        assert_eq!(between(2100, 2900), ids(&[2]));
        assert_eq!(between(1500, 2000), ids(&[1, 2]));
        assert_eq!(between(5000, 6000), ids(&[3]));
        assert_eq!(between(0, 999), ids(&[]));
        assert_eq!(Epochs::last_seconds(600, Some(60), 10_000), Epochs::Between { from_unix: 9400, to_unix: 9940 });
    }

    #[test]
    fn filters_keep_processes_and_images() {
        // Checks that empty lists keep everything and pid, comm and image substring each narrow it.
        let all = Filter::default();
        assert!(all.keep_process(&ProcessKey::new(4, "x")) && all.keep_image("/bin/x"));
        let f = Filter { pids: vec![4, 5], comms: vec!["x".into()], image: Some("lib".into()), cgroup_pids: None };
        assert!(f.keep_process(&ProcessKey::new(4, "x")));
        assert!(!f.keep_process(&ProcessKey::new(6, "x")) && !f.keep_process(&ProcessKey::new(4, "y")));
        assert!(f.keep_image("/lib/libc.so") && !f.keep_image("/bin/app"));
    }

    #[test]
    fn image_view_reads_only_the_index_and_finer_views_the_kept_files() {
        // Checks that per-image totals need no profile file, and that finer views read the kept images' files and total the rest.
        let (_d, db) = db3();
        let epochs = ids(&[1, 3]);
        let libc =
            db.epoch_dir(EpochId(1)).join(Database::file_name(&prof("/lib/libc.so", 2, "x", 1, 1).image, &EventName::new("cpu-clock")));
        fs::write(&libc, b"LOUPEPRF garbage").unwrap();
        let images = db.flat(&epochs, Detail::Images, &Filter::default()).unwrap();
        assert!(images.profiles.is_empty() && images.problems.is_empty());
        let samples: u64 = images.totals.iter().map(|t| t.samples(|_| true)).sum();
        assert_eq!((images.totals.len(), samples), (4, 17));
        let app = Filter { image: Some("app".into()), ..Filter::default() };
        let fine = db.flat(&epochs, Detail::Offsets, &app).unwrap();
        assert_eq!(fine.profiles.iter().map(|p| p.total_samples()).sum::<u64>(), 14);
        assert!(fine.profiles.iter().all(|p| p.image.path == "/bin/app"));
        assert_eq!(fine.totals.iter().map(|t| (t.image.path.as_str(), t.samples(|_| true))).collect::<Vec<_>>(), [("/lib/libc.so", 3)]);
        assert!(fine.problems.is_empty());
        let everything = db.flat(&epochs, Detail::Offsets, &Filter::default()).unwrap();
        assert_eq!((everything.profiles.len(), everything.totals.len(), everything.problems.len()), (3, 0, 1));
        assert!(everything.problems[0].to_string().contains("libc"), "{}", everything.problems[0]);
        assert_eq!(everything.events(), [EventName::new("cpu-clock"), EventName::new("page-faults")]);
    }

    #[test]
    fn events_default_to_cpu_clock_first_and_missing_ones_are_named() {
        // Checks the default event order, that asked-for events come back as asked, and the error for one not present.
        let present = [EventName::new("page-faults"), EventName::new("cpu-clock"), EventName::new("branches")];
        let got = choose_events(&present, &[]).unwrap();
        assert_eq!(got.iter().map(|e| e.as_str()).collect::<Vec<_>>(), ["cpu-clock", "branches", "page-faults"]);
        assert_eq!(choose_events(&present, &["page-faults".into()]).unwrap(), [EventName::new("page-faults")]);
        assert_eq!(choose_events(&[], &["cycles".into()]).unwrap(), [EventName::new("cycles")]);
        let err = choose_events(&present, &["cycles".into()]).unwrap_err();
        assert_eq!(err.to_string(), "no samples of event cycles in the selection (events present: branches, cpu-clock, page-faults)");
    }

    #[test]
    fn find_image_prefers_exact_then_file_name_then_substring() {
        // Checks the order of preference and the errors for no match, several paths, and several builds of one path.
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(&dir.path().join("db")).unwrap();
        let e = db.current_epoch().unwrap();
        db.merge(
            e,
            &[
                prof("/bin/app", 1, "cpu-clock", 1, 1),
                prof("/opt/app2", 2, "cpu-clock", 1, 1),
                prof("/usr/bin/apply", 3, "cpu-clock", 1, 1),
            ],
        )
        .unwrap();
        let find = |w: &str| db.find_image(&[e], w).map(|i| i.path).map_err(|err| err.to_string());
        assert_eq!(find("/bin/app").unwrap(), "/bin/app");
        assert_eq!(find("app2").unwrap(), "/opt/app2");
        assert_eq!(find("ply").unwrap(), "/usr/bin/apply");
        assert_eq!(find("zzz").unwrap_err(), "no image matching \"zzz\" has samples in the selected epochs");
        assert!(find("pp").unwrap_err().starts_with("--image \"pp\" matches several images: "));
        let e2 = db.new_epoch().unwrap();
        db.merge(e2, &[prof("/bin/app", 9, "cpu-clock", 1, 1)]).unwrap();
        let err = db.find_image(&[e, e2], "/bin/app").unwrap_err();
        assert_eq!(err.to_string(), "/bin/app has samples under 2 build-ids in these epochs; choose one with --epoch");
    }

    #[test]
    fn old_format_metadata_loads_typed_and_survives_an_update() {
        // Checks that an epoch.json written before typed metadata reads into typed fields, and a typed update keeps the rest.
        let (_d, db) = db3();
        let path = db.epoch_dir(EpochId(1)).join("epoch.json");
        let old = r#"{
  "started_unix": 1700000000,
  "meta": {
    "cpu_ghz": "3.6000",
    "cpu_ghz_readings": "3.5000 3.6000 3.7000",
    "host": "build-7",
    "kernel": "6.1.0",
    "lost_samples": "12"
  }
}"#;
        fs::write(&path, old).unwrap();
        let info = db.epochs().unwrap().remove(0);
        assert_eq!((info.started_unix, info.meta.clock.ghz, info.meta.host.as_deref()), (1700000000, Some(3.6), Some("build-7")));
        assert_eq!(info.meta.other.get("lost_samples").map(String::as_str), Some("12"));
        db.update_epoch_meta(EpochId(1), |m| m.clock.add_reading(3.9)).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""cpu_ghz": "3.6500""#) && text.contains(r#""cpu_ghz_readings": "3.5000 3.6000 3.7000 3.9000""#), "{text}");
        assert!(text.contains(r#""lost_samples": "12""#) && text.contains(r#""started_unix": 1700000000"#), "{text}");
        assert_eq!(db.epoch_meta(EpochId(1)).clock.readings.len(), 4);
        assert_eq!(db.epoch_meta(EpochId(2)), EpochMeta::default());
    }

    #[test]
    fn ages_count_from_the_next_epochs_start() {
        // Checks that an epoch's age is the time since the next one started, and the newest's is 0.
        let (_d, db) = db3();
        for (e, start) in [(1, 1000), (2, 2000), (3, 3000)] {
            fs::write(db.epoch_dir(EpochId(e)).join("epoch.json"), format!("{{\"started_unix\": {start}, \"meta\": {{}}}}")).unwrap();
        }
        assert_eq!(db.ages(&ids(&[1, 3]), 5000).unwrap(), [(EpochId(1), 3000), (EpochId(3), 0)]);
    }

    #[test]
    fn cgroup_filters_select_by_directory_and_labels() {
        // Checks --cgroup (a directory and what is below it) and label filters, alone and together, against known paths.
        let cg: BTreeMap<u32, String> =
            [(1, "/system.slice/a.service"), (2, "/system.slice/b.service"), (3, "/user.slice/s.scope"), (4, "/system.slice2/c.service")]
                .into_iter()
                .map(|(p, c)| (p, c.to_string()))
                .collect();
        let unit = |u: &str| vec![("unit".to_string(), u.to_string())];
        assert_eq!(cgroup_pids(&cg, Some("/system.slice"), &[]), BTreeSet::from([1, 2]));
        assert_eq!(cgroup_pids(&cg, None, &unit("s.scope")), BTreeSet::from([3]));
        assert_eq!(cgroup_pids(&cg, Some("/system.slice"), &unit("s.scope")), BTreeSet::new());
        let f = Filter { cgroup_pids: Some(BTreeSet::from([1])), ..Filter::default() };
        assert!(f.keep_process(&ProcessKey::new(1, "a")) && !f.keep_process(&ProcessKey::new(2, "a")));
    }

    #[test]
    fn stacks_sum_per_event_across_epochs() {
        // Checks that stack tables of one event in two epochs come back as one table with both epochs' samples.
        let (_d, db) = db3();
        let mut s = StackProfile::new(EventName::new("cpu-clock"));
        s.add(&ProcessKey::new(1, "app"), &[(ImageId::elf("/bin/app", None), ImageOffset(0x10))], 2);
        db.merge_stacks(EpochId(1), &[s.clone()]).unwrap();
        db.merge_stacks(EpochId(3), &[s]).unwrap();
        let got = db.stacks(&ids(&[1, 2, 3])).unwrap();
        assert!(got.problems.is_empty());
        assert_eq!((got.tables.len(), got.tables[0].total_samples()), (1, 4));
        assert_eq!(choose_stack_events(&got.tables, Some("cycles"), false).unwrap_err().kind(), &ErrorKind::NoSuchEvent);
    }
}
