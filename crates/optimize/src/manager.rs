//! Morph's Manager as a loop (`loupe optimize manage`, `loupe daemon
//! --optimize`). Each pass, for every configured program: read the
//! program's samples, let the policy decide (share of machine time, profile
//! maturity, an installed version not yet measured, drift), and act:
//! optimize + check + measure + install, guard (measure the installed
//! version, roll it back when it is not faster), re-optimize after drift (a
//! new candidate from the installed version's samples mapped back to the
//! original through BOLT's table, replacing it while it keeps running), or,
//! when they cannot be mapped, re-profile (put the original back). It works
//! within a CPU budget and logs every decision.
//!
//! How later runs pick the new version up: it is renamed over the path the
//! user runs ([`crate::manage::install`]), so every exec after the rename
//! opens the optimized file; running processes keep the old inode. The
//! original stays beside it as PATH.loupe-orig, and both builds are kept in
//! the database's image cache so samples of either can still be symbolized.
//!
//! Every side effect goes through a trait of [`Env`]: the profile database
//! ([`Profiles`], [`Store`]), the files ([`Files`]), the user's commands
//! ([`Runner`]), the clock ([`Clock`]) and llvm-bolt ([`Tool`]); the
//! decisions are this module's.

use crate::blocks::ColdPolicy;
use crate::combine::{combine, Combined, SampleSet};
use crate::config::{reason_kind, Config, InstalledState, Program, ProgramState, State};
use crate::drift::{function_shares, translated_shares, Functions};
use crate::error::{Error, Result};
use crate::lbr::LbrFdata;
use crate::manage::{self, Decision, Measurement, Runner};
use crate::policy::{self, Action, CpuBudget, Observation};
use crate::profile::ImageProfile;
use crate::tool::{self, Tool};
use crate::{fdata, lineage};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the manager reads of the profile database and the code it names.
pub trait Profiles {
    /// The database's epochs, oldest first.
    fn epochs(&mut self) -> Result<Vec<u32>>;
    /// Sample sets of each of `epochs` for the program at `path`, each aged
    /// by the time since its epoch ended; sets of builds `wanted` rejects
    /// carry no samples (they are only counted).
    fn sample_sets(&mut self, epochs: &[u32], path: &Path, wanted: &dyn Fn(&str) -> bool) -> Result<Vec<SampleSet>>;
    /// The share of all samples of `epochs` (aged with `half_life`) that the program at `image` took.
    fn share(&mut self, epochs: &[u32], image: &Path, half_life: f64) -> Result<f64>;
    /// The function symbols of build `bid`, whose file is (or was) at `path`.
    fn functions(&mut self, path: &Path, bid: &str) -> Result<Functions>;
    /// The block profile of build `bid` at `path` from `combined`, with the
    /// blocks `optimize probe` counted.
    fn block_profile(&mut self, path: &Path, bid: &str, combined: Combined, policy: ColdPolicy) -> Result<ImageProfile>;
    /// BOLT's branch fdata from the branch records of the build at
    /// `original` and of the builds Loupe made from it, when there are any.
    fn lbr_fdata(&mut self, original: &Path, epochs: &[u32], half_life: f64) -> Result<Option<LbrFdata>>;
    /// Candidate builds the decision log records as made from `orig_bid`.
    fn made_from(&mut self, orig_bid: &str) -> BTreeSet<String>;
    /// Whether exact block counts (`optimize probe`) of build `bid` are kept.
    fn has_probe_counts(&mut self, bid: &str) -> bool;
    /// Forgets the code read so far: files may have changed since (called
    /// before each program's decision).
    fn refresh(&mut self) {}
}

/// What the manager writes to the database, and the work it asks of it.
pub trait Store {
    /// Appends a decision to the log.
    fn log(&mut self, d: &Decision) -> Result<()>;
    /// Starts a new epoch (through the daemon when one runs, so its
    /// in-memory profiles go to the old one); its id.
    fn new_epoch(&mut self) -> Result<u32>;
    /// Keeps `file` in the image cache under its build-id `bid`.
    fn cache_image(&mut self, file: &Path, bid: &str);
    /// Merges what the daemon holds in memory, so a pass sees recent runs.
    fn flush(&mut self);
    /// Saves the manager's state.
    fn save_state(&mut self, state: &State) -> Result<()>;
    /// Counts the blocks of the `functions` hottest functions of the
    /// program's running processes for `seconds`; a summary.
    fn probe(&mut self, image: &Path, seconds: f64, functions: usize, half_life: f64) -> Result<String>;
    /// A line of progress for the user.
    fn say(&mut self, line: &str);
}

/// The files the manager reads and replaces.
pub trait Files {
    /// The build-id (hex) of the ELF file at `path`, empty when it has none;
    /// an error when there is no file.
    fn build_id(&self, path: &Path) -> Result<String>;
    /// Renames `candidate` over `image`, keeping the original (see [`manage::install`]).
    fn install(&self, image: &Path, candidate: &Path) -> Result<()> {
        manage::install(image, candidate)
    }
    /// Puts the saved original back (see [`manage::rollback`]).
    fn rollback(&self, image: &Path) -> Result<()> {
        manage::rollback(image)
    }
}

/// Time: the wall clock for the decision log, seconds since the manager
/// started for its budget and passes, and waiting.
pub trait Clock {
    fn now_unix(&self) -> u64;
    fn wall(&self) -> f64;
    fn sleep(&self, secs: f64);
}

/// Everything the manager does besides deciding.
pub struct Env {
    pub profiles: Box<dyn Profiles>,
    pub store: Box<dyn Store>,
    pub files: Box<dyn Files>,
    pub runner: Box<dyn Runner>,
    pub clock: Box<dyn Clock>,
    /// llvm-bolt (found when first needed: a missing one is an error of that pass).
    pub bolt: Box<dyn Fn() -> Result<Box<dyn Tool>>>,
}

/// One decision to log.
struct Entry<'a> {
    image: &'a str,
    bid: &'a str,
    action: &'a str,
    reason: String,
    cand: Option<String>,
    replaces: Option<String>,
    m: Option<Measurement>,
}

impl<'a> Entry<'a> {
    fn new(image: &'a str, bid: &'a str, action: &'a str, reason: String) -> Entry<'a> {
        Entry { image, bid, action, reason, cand: None, replaces: None, m: None }
    }
    fn cand(self, cand: Option<String>) -> Self {
        Entry { cand, ..self }
    }
    fn replaces(self, replaces: Option<String>) -> Self {
        Entry { replaces, ..self }
    }
    fn measured(self, m: Option<Measurement>) -> Self {
        Entry { m, ..self }
    }
}

/// When the loop stops.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stop<'a> {
    /// After one pass.
    pub once: bool,
    /// After this many seconds.
    pub duration: Option<f64>,
    /// When set (a signal).
    pub flag: Option<&'a AtomicBool>,
}

impl Stop<'_> {
    fn now(&self) -> bool {
        self.flag.is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

/// The manager: its configuration, CPU budget, remembered state, and
/// where it leaves profiles for BOLT.
pub struct Manager {
    pub cfg: Config,
    pub state: State,
    budget: CpuBudget,
    work: PathBuf,
    env: Env,
}

impl Manager {
    /// A manager with a full CPU budget of `fraction` of one CPU, up to
    /// `burst` seconds; profiles for BOLT go to `work`.
    pub fn new(cfg: Config, state: State, fraction: f64, burst: f64, work: PathBuf, env: Env) -> Manager {
        let budget = CpuBudget::new(fraction, burst, env.clock.wall());
        Manager { cfg, state, budget, work, env }
    }

    /// Passes over every program until `stop` says so, every `interval`
    /// seconds; the state is saved after each pass.
    pub fn run(&mut self, stop: Stop) -> Result<()> {
        loop {
            self.env.store.flush();
            for prog in self.cfg.programs.clone() {
                if stop.now() {
                    break;
                }
                if let Err(e) = self.pass(&prog) {
                    self.log(Entry::new(&prog.path, "", "error", e.to_string()));
                }
            }
            self.env.store.save_state(&self.state)?;
            let end = stop.duration.is_some_and(|d| self.env.clock.wall() >= d);
            if stop.once || end || stop.now() {
                return Ok(());
            }
            let until = self.env.clock.wall() + self.cfg.interval;
            while self.env.clock.wall() < until && !stop.now() {
                self.env.clock.sleep(0.1);
            }
            if stop.now() {
                return Ok(());
            }
        }
    }

    fn log(&mut self, e: Entry) {
        self.env.store.say(&format!("manage {}: {}: {}", e.image, e.action, e.reason));
        let d = Decision {
            unix_time: self.env.clock.now_unix(),
            image: e.image.to_string(),
            build_id: e.bid.to_string(),
            candidate_build_id: e.cand,
            replaces: e.replaces,
            action: e.action.into(),
            reason: e.reason,
            measurement: e.m,
        };
        if let Err(e) = self.env.store.log(&d) {
            self.env.store.say(&format!("cannot log a decision: {e}"));
        }
    }

    /// One pass over one program: what is at its path (the original, or an
    /// optimized version with the original saved beside it), then the
    /// policy's decision and its action.
    pub fn pass(&mut self, prog: &Program) -> Result<()> {
        let image = PathBuf::from(&prog.path);
        let cur = self.env.files.build_id(&image)?;
        let saved = manage::saved_original(&image);
        let (orig, installed) = if saved.exists() { (self.env.files.build_id(&saved)?, Some(cur.clone())) } else { (cur.clone(), None) };
        let mut st = self.state.get(&prog.path).cloned().unwrap_or_default();
        if st.original_build != orig {
            if !st.original_build.is_empty() {
                let why = format!("build {} replaced {}: its profile starts afresh", orig, st.original_build);
                self.log(Entry::new(&prog.path, &orig, "new-build", why));
            }
            st = ProgramState { original_build: orig.clone(), ..Default::default() };
        }
        match &installed {
            None => st.installed = None,
            Some(b) if st.installed.as_ref().is_none_or(|i| &i.build != b) => {
                // Installed by someone else (or by an earlier manager whose state was lost): not measured yet.
                st.installed = Some(InstalledState {
                    build: b.clone(),
                    verified_unix: None,
                    fingerprint: BTreeMap::new(),
                    since_epoch: st.from_epoch,
                    built_from_samples: None,
                });
            }
            Some(_) => {}
        }
        self.env.store.cache_image(if installed.is_some() { &saved } else { &image }, &orig);
        let r = self.decide_and_act(prog, &image, &mut st);
        self.state.insert(prog.path.clone(), st);
        r
    }

    /// The epochs of the program's current profile.
    fn epochs(&mut self, st: &ProgramState) -> Result<Vec<u32>> {
        Ok(self.env.profiles.epochs()?.into_iter().filter(|&e| e >= st.from_epoch).collect())
    }

    fn decide_and_act(&mut self, prog: &Program, image: &Path, st: &mut ProgramState) -> Result<()> {
        self.env.profiles.refresh();
        let epochs = self.epochs(st)?;
        let path = image.display().to_string();
        let orig = st.original_build.clone();
        // The original build's samples; an installed build's are read by `observe_installed`.
        let sets = self.env.profiles.sample_sets(&epochs, image, &|b| b == orig)?;
        let combined = combine(&orig, &sets, self.cfg.half_life);
        let mut obs = Observation {
            now_unix: self.env.clock.now_unix(),
            share: self.env.profiles.share(&epochs, image, self.cfg.half_life)?,
            profile_samples: combined.total(),
            last_discard_samples: st.last_discard_samples,
            ..Default::default()
        };
        let mut mapped = None;
        if let Some(inst) = &st.installed {
            let (installed, m) = self.observe_installed(image, &orig, inst, &epochs, &mut obs)?;
            obs.installed = Some(installed);
            mapped = m;
        }
        let v = policy::next(&self.cfg.policy(), &obs);
        if v.action == Action::Wait {
            let kind = reason_kind(&v.reason);
            if kind != st.last_wait {
                self.log(Entry::new(&path, &orig, "wait", v.reason));
                st.last_wait = kind;
            }
            return Ok(());
        }
        st.last_wait.clear();
        if let Err(secs) = self.budget.allows(self.env.clock.wall()) {
            let why = format!("{} deferred: over the CPU budget for {secs:.0} s more", v.reason);
            self.log(Entry::new(&path, &orig, "wait", why));
            return Ok(());
        }
        let cpu0 = self.env.runner.children_cpu();
        let r = match v.action {
            Action::Optimize => self.optimize(prog, image, st, combined, &v.reason),
            Action::Guard => self.guard(prog, image, st, &v.reason),
            Action::Reprofile => self.reprofile(image, st, &v.reason),
            Action::Reoptimize => match mapped {
                Some(profile) => self.reoptimize(prog, image, st, profile, &v),
                None => Ok(()),
            },
            Action::Wait => Ok(()),
        };
        let cpu = self.env.runner.children_cpu() - cpu0;
        self.budget.charge(self.env.clock.wall(), cpu);
        r
    }

    /// What the policy needs about the installed version: its samples
    /// since it was installed, by function, for drift. When they can be
    /// mapped back to the original through BOLT's table they are compared
    /// on the original's functions, and also returned, with the original
    /// build's own samples of that time, as the profile a re-optimization
    /// would use; otherwise by the installed build's own function names,
    /// with why they cannot be mapped.
    fn observe_installed(
        &mut self,
        image: &Path,
        orig: &str,
        inst: &InstalledState,
        epochs: &[u32],
        obs: &mut Observation,
    ) -> Result<(policy::Installed, Option<Combined>)> {
        let since_epochs: Vec<u32> = epochs.iter().copied().filter(|&e| e >= inst.since_epoch).collect();
        let since = self.env.profiles.sample_sets(&since_epochs, image, &|b| b == inst.build || b == orig)?;
        let (inst_sets, orig_sets): (Vec<SampleSet>, Vec<SampleSet>) = since.into_iter().partition(|s| s.build_id == inst.build);
        let recent = combine(&inst.build, &inst_sets, self.cfg.half_life);
        let mut out = policy::Installed {
            verified_unix: inst.verified_unix,
            fingerprint: inst.fingerprint.clone(),
            no_mapping: None,
            built_from_samples: inst.built_from_samples,
        };
        if recent.total() <= 0.0 {
            return Ok((out, None));
        }
        let optimized = self.env.profiles.functions(image, &inst.build)?;
        let saved = manage::saved_original(image);
        let made = self.env.profiles.made_from(orig);
        match lineage::mapping(&made, image, &saved, orig, &inst.build) {
            Ok(t) => {
                let original = self.env.profiles.functions(&saved, orig)?;
                (obs.recent, _) = translated_shares(&original, &optimized, &|va| t.sample_to_original(va), &recent.samples);
                let mut sets = lineage::translate_sets(&t, inst_sets, orig).sets;
                sets.extend(orig_sets.into_iter().filter(|s| s.build_id == orig));
                let profile = combine(orig, &sets, self.cfg.half_life);
                obs.mapped_samples = profile.total();
                Ok((out, Some(profile)))
            }
            Err(why) => {
                obs.recent = function_shares(&optimized, &recent.samples);
                out.no_mapping = Some(why.to_string());
                Ok((out, None))
            }
        }
    }

    fn optimize(&mut self, prog: &Program, image: &Path, st: &mut ProgramState, combined: Combined, why: &str) -> Result<()> {
        let path = image.display().to_string();
        self.log(Entry::new(&path, &st.original_build, "optimize", why.to_string()));
        self.attempt(prog, image, image, st, combined, None, false)
    }

    /// Usage drifted from the installed version (or its mapped profile grew
    /// `regrow_factor` times denser than the one it was built from) and its
    /// samples map back to the original: a new candidate is built from the
    /// original (at PATH.loupe-orig) with that profile, validated against the
    /// original (after a regrow: against the installed version, which it
    /// must beat), and renamed over the installed version, which runs until then.
    fn reoptimize(&mut self, prog: &Program, image: &Path, st: &mut ProgramState, profile: Combined, v: &policy::Verdict) -> Result<()> {
        let path = image.display().to_string();
        let old = st.installed.as_ref().map(|i| i.build.clone());
        let (kind, why) = match v.regrow_from {
            Some(n0) => ("regrow", format!("from {n0:.0} to {:.0} samples: {}", profile.total(), v.reason)),
            None => ("reoptimize", v.reason.clone()),
        };
        self.log(Entry::new(&path, &st.original_build, kind, why).replaces(old.clone()));
        self.attempt(prog, image, &manage::saved_original(image), st, profile, old, v.regrow_from.is_some())
    }

    /// Exact block counts first, while the original runs at its path (an
    /// installed build's blocks are not the original's).
    fn probe_first(&mut self, image: &Path, st: &ProgramState) {
        if self.cfg.probe_seconds <= 0.0 || self.env.profiles.has_probe_counts(&st.original_build) {
            return;
        }
        let (kind, why) = match self.env.store.probe(image, self.cfg.probe_seconds, self.cfg.probe_functions, self.cfg.half_life) {
            Ok(summary) => ("probe", summary),
            Err(e) => ("wait", format!("probe skipped: {e}")),
        };
        self.log(Entry::new(&image.display().to_string(), &st.original_build, kind, why));
    }

    /// The profile for BOLT of `original` and how it was made: real branch
    /// records (LBR) of the build and of its optimized versions, when the
    /// database holds some, beat edges synthesized from IP samples.
    fn fdata(&mut self, original: &Path, st: &ProgramState, ip: &ImageProfile) -> Result<(String, String)> {
        let epochs = self.epochs(st)?;
        Ok(match self.env.profiles.lbr_fdata(original, &epochs, self.cfg.half_life)? {
            Some(f) => {
                let form = format!("branch records (LBR): {} branches taken {} times", f.lines - f.fallthrough_lines, f.taken);
                (f.text, form)
            }
            None => (fdata::write_edges(&ip.functions), "edges synthesized from IP samples (no branch records)".to_string()),
        })
    }

    /// BOLT on `original` (the original build's file: the image itself, or
    /// its saved copy when an optimized version is installed) with
    /// `combined` (a profile at its addresses); the candidate must pass the
    /// check and be faster than `original` (with `against_installed`: than
    /// the installed version at the image), and is then renamed over the
    /// image. `replaces` is the installed build it would replace.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &mut self,
        prog: &Program,
        image: &Path,
        original: &Path,
        st: &mut ProgramState,
        combined: Combined,
        replaces: Option<String>,
        against_installed: bool,
    ) -> Result<()> {
        let path = image.display().to_string();
        if original == image {
            self.probe_first(image, st);
        }
        let samples = combined.total();
        // The build the candidate is timed against: what runs now.
        let baseline = if against_installed { image } else { original };
        let policy = ColdPolicy { cold_fraction: self.cfg.cold_fraction, infer: self.cfg.infer, ..ColdPolicy::default() };
        let ip = self.env.profiles.block_profile(original, &st.original_build, combined, policy)?;
        let fingerprint = function_shares(&self.env.profiles.functions(original, &st.original_build)?, &ip.combined.samples);
        loupe_files::create_dir_all(&self.work)?;
        let fdata_path = self.work.join(format!("{}.fdata", &st.original_build));
        let (text, form) = self.fdata(original, st, &ip)?;
        self.env.store.say(&format!("manage {path}: profile for BOLT: {form}"));
        loupe_files::write(&fdata_path, text)?;
        let cand = PathBuf::from(format!("{path}.loupe-bolt"));
        let bolt = (self.env.bolt)()?;
        let opts = prog.bolt_opts.clone().unwrap_or_else(tool::default_opts);
        let mut cand_bid = None;
        let verdict = match tool::run_bolt_with(bolt.as_ref(), original, &fdata_path, &cand, &opts) {
            Ok(report) => {
                cand_bid = self.env.files.build_id(&cand).ok().filter(|b| !b.is_empty());
                for s in &report.skipped {
                    self.env.store.say(&format!("manage {path}: skipped {s}"));
                }
                validate(self.env.runner.as_ref(), prog, original, baseline, &cand, prog.min_gain)
            }
            Err(e) => Err(Rejected(e, None)),
        };
        match verdict {
            Ok(m) => {
                let tried = Tried { samples, form: &form, against_installed, replaces, fingerprint, cand_bid };
                self.keep(image, original, &cand, st, m, tried)
            }
            Err(Rejected(why, m)) => {
                let _ = std::fs::remove_file(&cand);
                st.last_discard_samples = Some(samples);
                let why = match &replaces {
                    Some(old) if against_installed => {
                        format!("{why} (measured against the installed version); installed build {old} stays")
                    }
                    Some(old) => format!("{why}; installed build {old} stays"),
                    None => why.to_string(),
                } + &format!(" (profile given to BOLT as {form})");
                self.log(Entry::new(&path, &st.original_build, "discarded", why).cand(cand_bid).replaces(replaces).measured(m.map(|m| *m)));
                Ok(())
            }
        }
    }

    /// The candidate passed: kept in the image cache with the original,
    /// renamed over the image, and the installed version's samples counted
    /// from a new epoch on.
    fn keep(&mut self, image: &Path, original: &Path, cand: &Path, st: &mut ProgramState, m: Measurement, t: Tried) -> Result<()> {
        let path = image.display().to_string();
        let bid = t.cand_bid.clone().unwrap_or_default();
        self.env.store.cache_image(original, &st.original_build);
        self.env.store.cache_image(cand, &bid);
        self.env.files.install(image, cand)?;
        let _ = std::fs::remove_file(cand);
        let since = self.env.store.new_epoch()?;
        let replacing = match &t.replaces {
            Some(old) => format!(", replacing optimized build {old} (which ran until now)"),
            None => String::new(),
        };
        let baseline_name = if t.against_installed { "the installed version" } else { "the original" };
        let reason = format!(
            "{:.1}% faster than {baseline_name} (median of {} alternating rounds, {} faster, p = {:.4}; profile of {:.0} samples, given to BOLT as {}); renamed over {path}{replacing}, original at {}",
            (1.0 - m.ratio_median) * 100.0,
            m.rounds,
            m.wins,
            m.p_value,
            t.samples,
            t.form,
            manage::saved_original(image).display()
        );
        let entry = Entry::new(&path, &st.original_build, "installed", reason).cand(t.cand_bid).replaces(t.replaces.clone());
        self.log(entry.measured(Some(m)));
        // A re-optimized version's profile began when the version it replaces was installed.
        if t.replaces.is_some() {
            if let Some(prev) = &st.installed {
                st.from_epoch = prev.since_epoch;
            }
        }
        st.installed = Some(InstalledState {
            build: bid,
            verified_unix: Some(self.env.clock.now_unix()),
            fingerprint: t.fingerprint,
            since_epoch: since,
            built_from_samples: Some(t.samples),
        });
        st.last_discard_samples = None;
        Ok(())
    }

    /// Measures the installed version against the saved original; rolls it
    /// back unless it passes the same check and is faster.
    fn guard(&mut self, prog: &Program, image: &Path, st: &mut ProgramState, why: &str) -> Result<()> {
        let path = image.display().to_string();
        let saved = manage::saved_original(image);
        let inst = st.installed.clone().unwrap_or_default();
        let verdict = validate(self.env.runner.as_ref(), prog, &saved, &saved, image, 0.0);
        match verdict {
            Ok(m) => {
                let reason = format!(
                    "{why}: still {:.1}% faster than the original ({} of {} rounds)",
                    (1.0 - m.ratio_median) * 100.0,
                    m.wins,
                    m.rounds
                );
                self.log(Entry::new(&path, &st.original_build, "verified", reason).cand(Some(inst.build.clone())).measured(Some(m)));
                if let Some(i) = st.installed.as_mut() {
                    i.verified_unix = Some(self.env.clock.now_unix());
                }
            }
            Err(Rejected(e, m)) => {
                self.env.files.rollback(image)?;
                let reason = format!("{why}: {e}; original restored");
                self.log(Entry::new(&path, &st.original_build, "rolled-back", reason).cand(Some(inst.build)).measured(m.map(|m| *m)));
                st.installed = None;
            }
        }
        Ok(())
    }

    /// Usage drifted: the original goes back and a fresh profile starts with a new epoch.
    fn reprofile(&mut self, image: &Path, st: &mut ProgramState, why: &str) -> Result<()> {
        let path = image.display().to_string();
        self.env.files.rollback(image)?;
        st.from_epoch = self.env.store.new_epoch()?;
        let old = st.installed.take().map(|i| i.build);
        st.last_discard_samples = None;
        let reason = format!("{why}; original restored, profiling afresh from epoch {}", st.from_epoch);
        self.log(Entry::new(&path, &st.original_build, "reprofile", reason).cand(old));
        Ok(())
    }
}

/// What `loupe optimize run` asks of one candidate.
pub struct Trial<'a> {
    pub image: &'a Path,
    pub check: &'a str,
    pub bench: &'a str,
    pub rounds: usize,
    pub min_gain: f64,
    /// Install the candidate when it passes.
    pub install: bool,
    /// The profile the candidate is made from, and where it is written.
    pub profile: &'a Path,
    pub out: &'a Path,
}

/// How the candidate is made.
pub enum Optimizer<'a> {
    Bolt(&'a dyn Tool),
    /// A rebuild command with `{profile}` and `{out}` (sampled-profile PGO).
    Rebuild(&'a str),
}

/// `loupe optimize run`'s one decision: the candidate made from the
/// profile into `out`, checked and measured against the image, and installed when
/// asked; `d` gets the candidate's build-id, the measurement, the action
/// and the reason. The error is the reason for a refusal.
pub fn evaluate(t: &Trial, opt: Optimizer, run: &dyn Runner, files: &dyn Files, d: &mut Decision, say: &mut dyn FnMut(&str)) -> Result<()> {
    let (prof, out) = (t.profile, t.out);
    match opt {
        Optimizer::Bolt(bolt) => {
            let report = tool::run_bolt(bolt, t.image, prof, out)?;
            for s in &report.skipped {
                say(&format!("skipped {s}"));
                d.reason = format!("skipped {s}; ");
            }
            if let Some(f) = &report.profiled_functions {
                say(f);
            }
        }
        Optimizer::Rebuild(cmd) => manage::rebuild(run, cmd, prof, out)?,
    }
    d.candidate_build_id = files.build_id(out).ok().filter(|b| !b.is_empty());
    manage::check(run, t.check, t.image, out)?;
    let m = manage::measure(run, t.bench, t.image, out, t.rounds)?;
    say(&format!(
        "candidate/original time: median {:.3} (min {:.3}, max {:.3}), faster in {} of {} rounds, p = {:.4}",
        m.ratio_median, m.ratio_min, m.ratio_max, m.wins, m.rounds, m.p_value
    ));
    d.measurement = Some(m.clone());
    manage::decide(&m, t.min_gain, 0.05)?;
    d.reason += &format!("{:.1}% faster (median of {} alternating rounds)", (1.0 - m.ratio_median) * 100.0, m.rounds);
    if t.install {
        // From a saved original (PATH.loupe-orig), the candidate replaces the version installed at PATH.
        let at = lineage::installed_path(t.image).unwrap_or(t.image.to_path_buf());
        files.install(&at, out)?;
        d.action = "installed".into();
        d.reason += &format!("; renamed over {}", at.display());
    } else {
        d.action = "accepted".into();
        d.reason += &format!("; candidate left at {} (use --install to install)", out.display());
    }
    Ok(())
}

/// Why a version was refused, with its measurement when it got that far.
struct Rejected(Error, Option<Box<Measurement>>);

/// The user's check on `checked` and `cand` (same exit status and output),
/// then the benchmark on `baseline` and `cand` in alternation: `cand` must
/// be significantly faster by at least `min_gain`.
fn validate(
    run: &dyn Runner,
    prog: &Program,
    checked: &Path,
    baseline: &Path,
    cand: &Path,
    min_gain: f64,
) -> Result<Measurement, Rejected> {
    manage::check(run, &prog.check, checked, cand).map_err(|e| Rejected(e, None))?;
    let m = manage::measure(run, &prog.bench, baseline, cand, prog.rounds).map_err(|e| Rejected(e, None))?;
    manage::decide(&m, min_gain, 0.05).map_err(|e| Rejected(e, Some(Box::new(m.clone()))))?;
    Ok(m)
}

/// What a candidate that passed was made from.
struct Tried<'a> {
    samples: f64,
    form: &'a str,
    against_installed: bool,
    replaces: Option<String>,
    fingerprint: BTreeMap<String, f64>,
    cand_bid: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::manage::Output;
    use crate::profile::block_profiles;
    use crate::tool::ToolOutput;
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;
    use std::rc::Rc;

    /// What the fakes hold and record: the database's samples, the decisions
    /// logged, the user's commands' outputs and times, llvm-bolt's behaviour.
    #[derive(Default)]
    struct World {
        /// Sample sets per path, whatever the epochs.
        sets: Vec<(PathBuf, SampleSet)>,
        share: f64,
        decisions: Vec<Decision>,
        epoch: u32,
        cached: Vec<(PathBuf, String)>,
        states: usize,
        said: Vec<String>,
        /// Per build: the check's exit code and output, and the benchmark's CPU seconds.
        check: HashMap<String, (i32, String)>,
        bench: HashMap<String, f64>,
        cpu: f64,
        /// What llvm-bolt writes as the candidate (its build-id), or (Err) its error line.
        bolt: Option<Result<String, String>>,
    }

    #[derive(Clone, Default)]
    struct Fake(Rc<RefCell<World>>, Rc<Cell<f64>>);

    /// The build-id of a test's file: its text.
    fn bid_of(path: &Path) -> Result<String> {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", path.display())))
    }

    /// The functions of every build: `a` at 0x1000, `b` at 0x1010, `c` at 0x1020.
    fn functions() -> Functions {
        Functions::new(vec![(0x1000, 16, "a".into()), (0x1010, 16, "b".into()), (0x1020, 16, "c".into())])
    }

    impl Profiles for Fake {
        fn epochs(&mut self) -> Result<Vec<u32>> {
            Ok((0..=self.0.borrow().epoch).collect())
        }
        fn sample_sets(&mut self, _: &[u32], path: &Path, wanted: &dyn Fn(&str) -> bool) -> Result<Vec<SampleSet>> {
            let w = self.0.borrow();
            let at = w.sets.iter().filter(|(p, _)| p == path).map(|(_, s)| s.clone());
            Ok(at.map(|s| if wanted(&s.build_id) { s } else { SampleSet { samples: HashMap::new(), ..s } }).collect())
        }
        fn share(&mut self, _: &[u32], _: &Path, _: f64) -> Result<f64> {
            Ok(self.0.borrow().share)
        }
        fn functions(&mut self, _: &Path, _: &str) -> Result<Functions> {
            Ok(functions())
        }
        fn block_profile(&mut self, path: &Path, bid: &str, combined: Combined, policy: ColdPolicy) -> Result<ImageProfile> {
            let code = crate::profile::tests::three_functions();
            let functions = block_profiles(&code, &combined, policy, &HashMap::new(), None);
            Ok(ImageProfile {
                image: loupe_model::ImageId::elf(&path.display().to_string(), None),
                build_id: bid.into(),
                combined,
                functions,
            })
        }
        fn lbr_fdata(&mut self, _: &Path, _: &[u32], _: f64) -> Result<Option<LbrFdata>> {
            Ok(None)
        }
        fn made_from(&mut self, _: &str) -> BTreeSet<String> {
            BTreeSet::new()
        }
        fn has_probe_counts(&mut self, _: &str) -> bool {
            true
        }
    }

    impl Store for Fake {
        fn log(&mut self, d: &Decision) -> Result<()> {
            self.0.borrow_mut().decisions.push(d.clone());
            Ok(())
        }
        fn new_epoch(&mut self) -> Result<u32> {
            let mut w = self.0.borrow_mut();
            w.epoch += 1;
            Ok(w.epoch)
        }
        fn cache_image(&mut self, file: &Path, bid: &str) {
            self.0.borrow_mut().cached.push((file.to_path_buf(), bid.into()));
        }
        fn flush(&mut self) {}
        fn save_state(&mut self, _: &State) -> Result<()> {
            self.0.borrow_mut().states += 1;
            Ok(())
        }
        fn probe(&mut self, _: &Path, _: f64, _: usize, _: f64) -> Result<String> {
            unreachable!("probe_seconds is 0 in these tests")
        }
        fn say(&mut self, line: &str) {
            self.0.borrow_mut().said.push(line.into());
        }
    }

    impl Files for Fake {
        fn build_id(&self, path: &Path) -> Result<String> {
            bid_of(path)
        }
    }

    /// `check 'FILE'` and `bench 'FILE'`: the outcome configured for the file's build.
    impl Runner for Fake {
        fn sh(&self, cmd: &str) -> Result<Output> {
            let file = cmd.split('\'').nth(1).unwrap();
            let bid = bid_of(Path::new(file))?;
            let mut w = self.0.borrow_mut();
            let (code, stdout) = match cmd.split_once(' ').unwrap().0 {
                "check" => w.check.get(&bid).cloned().unwrap_or((0, "ok\n".into())),
                _ => {
                    w.cpu += w.bench[&bid];
                    (0, String::new())
                }
            };
            Ok(Output { status: format!("exit status: {code}"), code: Some(code), stdout: stdout.into_bytes(), stderr: vec![] })
        }
        fn children_cpu(&self) -> f64 {
            self.0.borrow().cpu
        }
    }

    impl Clock for Fake {
        fn now_unix(&self) -> u64 {
            1_000_000
        }
        fn wall(&self) -> f64 {
            self.1.get()
        }
        fn sleep(&self, secs: f64) {
            self.1.set(self.1.get() + secs);
        }
    }

    /// llvm-bolt writing the configured candidate at its `-o` argument, or failing with the configured line.
    impl Tool for Fake {
        fn describe(&self) -> String {
            "fake-bolt".into()
        }
        fn run(&self, args: &[String]) -> Result<crate::tool::ToolOutput> {
            match self.0.borrow().bolt.as_ref().unwrap() {
                Ok(bid) => {
                    let out = &args[args.iter().position(|a| a == "-o").unwrap() + 1];
                    std::fs::write(out, bid).unwrap();
                    Ok(ToolOutput { success: true, stdout: "BOLT-INFO: enabling relocation mode\n".into(), stderr: String::new() })
                }
                Err(line) => Ok(ToolOutput { success: false, stdout: String::new(), stderr: format!("{line}\n") }),
            }
        }
    }

    /// A program `prog` (build aa11) in a temporary directory, 100 samples of it in functions `a` and `b`, all
    /// the machine's samples; its check prints "ok", its benchmark takes 1 s; BOLT makes build bb22.
    struct Setup {
        dir: tempfile::TempDir,
        image: PathBuf,
        fake: Fake,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("prog");
        std::fs::write(&image, "aa11").unwrap();
        let fake = Fake::default();
        {
            let mut w = fake.0.borrow_mut();
            let samples = HashMap::from([(0x1004, 60), (0x1012, 40)]);
            w.sets.push((image.clone(), SampleSet { build_id: "aa11".into(), age_secs: 0.0, samples }));
            w.share = 1.0;
            w.bench = HashMap::from([("aa11".into(), 1.0), ("bb22".into(), 0.8)]);
            w.bolt = Some(Ok("bb22".into()));
        }
        Setup { dir, image, fake }
    }

    impl Setup {
        fn manager(&self, budget: f64) -> Manager {
            let path = self.image.display();
            let cfg = Config::parse(&format!(
                r#"{{"min_samples": 50, "programs": [{{"path": "{path}", "check": "check {{}}", "bench": "bench {{}}", "rounds": 10}}]}}"#
            ))
            .unwrap();
            let f = &self.fake;
            let bolt = f.clone();
            let env = Env {
                profiles: Box::new(f.clone()),
                store: Box::new(f.clone()),
                files: Box::new(f.clone()),
                runner: Box::new(f.clone()),
                clock: Box::new(f.clone()),
                bolt: Box::new(move || Ok(Box::new(bolt.clone()) as Box<dyn Tool>)),
            };
            Manager::new(cfg, State::new(), budget, budget, self.dir.path().join("work"), env)
        }

        fn actions(&self) -> Vec<(String, String)> {
            self.fake.0.borrow().decisions.iter().map(|d| (d.action.clone(), d.reason.clone())).collect()
        }

        fn with(&self, f: impl FnOnce(&mut World)) {
            f(&mut self.fake.0.borrow_mut());
        }

        /// An optimized build (bb22) installed at the image by someone else, the original saved beside it, and
        /// 30 samples of it since.
        fn installed_elsewhere(&self) {
            std::fs::write(manage::saved_original(&self.image), "aa11").unwrap();
            std::fs::write(&self.image, "bb22").unwrap();
            let samples = HashMap::from([(0x1004, 30)]);
            self.with(|w| w.sets.push((self.image.clone(), SampleSet { build_id: "bb22".into(), age_secs: 0.0, samples })));
        }
    }

    // A mature profile is optimized; a candidate that passes the check and is 20% faster in every round is
    // installed over the path (original kept beside it, both builds cached), counted from a new epoch, and logged
    // with its measurement; the candidate's temporary file is gone and the profile for BOLT is in the work directory.
    #[test]
    fn a_faster_candidate_is_installed() {
        let s = setup();
        let mut m = s.manager(1e9);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        let acts = s.actions();
        assert_eq!(acts.iter().map(|a| a.0.as_str()).collect::<Vec<_>>(), vec!["optimize", "installed"]);
        assert!(acts[1].1.starts_with("20.0% faster than the original (median of 10 alternating rounds, 10 faster"), "{}", acts[1].1);
        assert!(acts[1].1.contains("profile of 100 samples, given to BOLT as edges synthesized from IP samples (no branch records)"));
        assert_eq!(bid_of(&s.image).unwrap(), "bb22");
        assert_eq!(bid_of(&manage::saved_original(&s.image)).unwrap(), "aa11");
        assert!(!Path::new(&format!("{}.loupe-bolt", s.image.display())).exists());
        let fdata = std::fs::read_to_string(s.dir.path().join("work/aa11.fdata")).unwrap();
        assert!(fdata.contains("1 a 0 1 a 4 0 "), "{fdata}");
        let st = &m.state[&s.image.display().to_string()];
        let inst = st.installed.as_ref().unwrap();
        assert_eq!(
            (inst.build.as_str(), inst.since_epoch, inst.built_from_samples, inst.verified_unix),
            ("bb22", 1, Some(100.0), Some(1_000_000))
        );
        assert_eq!(inst.fingerprint, BTreeMap::from([("a".to_string(), 60.0), ("b".to_string(), 40.0)]));
        let w = s.fake.0.borrow();
        assert_eq!(w.decisions[1].candidate_build_id.as_deref(), Some("bb22"));
        assert_eq!(w.decisions[1].measurement.as_ref().unwrap().wins, 10);
        let cached: Vec<&str> = w.cached.iter().map(|c| c.1.as_str()).collect();
        assert_eq!(cached, vec!["aa11", "aa11", "bb22"]);
        assert_eq!(w.states, 1);
    }

    // A candidate whose output differs under the check is discarded before any benchmark: the original stays,
    // the candidate is removed, and the profile's size is remembered so the next try waits for more samples.
    #[test]
    fn a_candidate_failing_the_check_is_discarded() {
        let s = setup();
        s.with(|w| {
            w.check.insert("bb22".into(), (0, "wrong\n".into()));
        });
        let mut m = s.manager(1e9);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        let acts = s.actions();
        assert_eq!(acts[1].0, "discarded");
        assert_eq!(
            acts[1].1,
            "check: candidate's output differs from the original's (profile given to BOLT as edges synthesized from IP samples (no branch records))"
        );
        assert_eq!(bid_of(&s.image).unwrap(), "aa11");
        assert!(!manage::saved_original(&s.image).exists());
        assert!(!Path::new(&format!("{}.loupe-bolt", s.image.display())).exists());
        assert_eq!(s.fake.0.borrow().cpu, 0.0, "no benchmark ran");
        let st = &m.state[&s.image.display().to_string()];
        assert_eq!((st.last_discard_samples, st.installed.is_none()), (Some(100.0), true));
        // The next pass waits for retry_factor times the samples instead of trying again.
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        assert_eq!(s.actions()[2].1, "last candidate (from 100 samples) was discarded; waiting for 200 samples");
    }

    // A candidate no faster than the original is discarded with its measurement; the original stays in place.
    #[test]
    fn a_candidate_that_is_not_faster_is_discarded() {
        let s = setup();
        s.with(|w| {
            w.bench.insert("bb22".into(), 1.0);
        });
        let mut m = s.manager(1e9);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        let w = s.fake.0.borrow();
        let d = &w.decisions[1];
        assert_eq!(d.action, "discarded");
        assert!(d.reason.starts_with("not significantly faster: 0 of 10 rounds faster"), "{}", d.reason);
        assert_eq!(d.measurement.as_ref().unwrap().ratio_median, 1.0);
        assert_eq!(d.candidate_build_id.as_deref(), Some("bb22"));
        assert_eq!(bid_of(&s.image).unwrap(), "aa11");
    }

    // When llvm-bolt fails its last line is the reason the attempt is discarded (no check runs); when it cannot
    // be found at all, the pass fails and the loop logs that as an error and carries on.
    #[test]
    fn tool_failures_are_logged() {
        let s = setup();
        s.with(|w| w.bolt = Some(Err("BOLT-ERROR: cannot process".into())));
        let mut m = s.manager(1e9);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        let acts = s.actions();
        assert_eq!(acts[1], ("discarded".into(), "fake-bolt failed: BOLT-ERROR: cannot process (profile given to BOLT as edges synthesized from IP samples (no branch records))".into()));
        assert_eq!(bid_of(&s.image).unwrap(), "aa11");

        let s = setup();
        let mut m = s.manager(1e9);
        m.env.bolt = Box::new(|| Err(Error::new(ErrorKind::Tool, "llvm-bolt not found")));
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        assert_eq!(s.actions()[1], ("error".into(), "llvm-bolt not found".into()));
        assert_eq!(s.fake.0.borrow().decisions[1].build_id, "");
    }

    // An optimized version installed by someone else is measured against the saved original before anything
    // else; slower, it is rolled back (the original renamed back over the path) and the reason says why.
    #[test]
    fn an_unmeasured_slower_installed_version_is_rolled_back() {
        let s = setup();
        s.installed_elsewhere();
        s.with(|w| {
            w.bench.insert("bb22".into(), 1.2);
        });
        let mut m = s.manager(1e9);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        let acts = s.actions();
        assert_eq!(acts.len(), 1);
        assert_eq!(acts[0].0, "rolled-back");
        assert!(
            acts[0].1.starts_with("installed version not yet measured by the manager: not significantly faster: 0 of 10"),
            "{}",
            acts[0].1
        );
        assert!(acts[0].1.ends_with("; original restored"));
        assert_eq!(bid_of(&s.image).unwrap(), "aa11");
        assert!(!manage::saved_original(&s.image).exists());
        assert!(m.state[&s.image.display().to_string()].installed.is_none());
    }

    // The same installed version, faster than the original, is kept and marked verified; one that has not run
    // since is not measured (nothing to compare usage with) and the wait is logged once, not every pass.
    #[test]
    fn a_faster_installed_version_is_verified_and_waits_are_logged_once() {
        let s = setup();
        s.installed_elsewhere();
        let mut m = s.manager(1e9);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        assert_eq!(s.actions()[0].0, "verified");
        assert!(s.actions()[0].1.ends_with("still 20.0% faster than the original (10 of 10 rounds)"));
        assert_eq!(bid_of(&s.image).unwrap(), "bb22");
        let inst = m.state[&s.image.display().to_string()].installed.clone().unwrap();
        assert_eq!(inst.verified_unix, Some(1_000_000));

        let s = setup();
        s.installed_elsewhere();
        s.with(|w| w.sets.retain(|(_, set)| set.build_id != "bb22"));
        let mut m = s.manager(1e9);
        for _ in 0..3 {
            m.run(Stop { once: true, ..Default::default() }).unwrap();
        }
        assert_eq!(s.actions(), vec![("wait".into(), "installed version not yet measured by the manager, but it has not run yet".into())]);
    }

    // Work is deferred while the CPU budget is spent: the first attempt's 18 CPU seconds of benchmarks exceed a
    // 1-second bucket, so the next program's work waits, and the wait says for how long.
    #[test]
    fn work_over_the_cpu_budget_is_deferred() {
        let s = setup();
        s.with(|w| {
            w.check.insert("bb22".into(), (0, "ok\n".into()));
            w.bench.insert("bb22".into(), 1.0);
        });
        let mut m = s.manager(1.0);
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        assert_eq!(s.actions()[1].0, "discarded");
        s.with(|w| w.sets[0].1.samples = HashMap::from([(0x1004, 400)]));
        m.run(Stop { once: true, ..Default::default() }).unwrap();
        let last = s.actions().pop().unwrap();
        assert_eq!(last.0, "wait");
        assert!(last.1.ends_with("deferred: over the CPU budget for 19 s more"), "{}", last.1);
    }

    // `optimize run`: a faster candidate is accepted and left in place, or with --install renamed over the
    // program; given the saved original, over the version installed at its path; a failing check refuses it.
    #[test]
    fn a_single_run_accepts_installs_or_refuses() {
        let s = setup();
        let f = s.fake.clone();
        let (prof, out) = (s.dir.path().join("p.fdata"), s.dir.path().join("prog.loupe-bolt"));
        let mut said = vec![];
        let mut trial = Trial {
            image: &s.image,
            check: "check {}",
            bench: "bench {}",
            rounds: 10,
            min_gain: 0.01,
            install: false,
            profile: &prof,
            out: &out,
        };
        let mut d = Decision {
            unix_time: 0,
            image: String::new(),
            build_id: String::new(),
            candidate_build_id: None,
            replaces: None,
            action: "discarded".into(),
            reason: String::new(),
            measurement: None,
        };
        evaluate(&trial, Optimizer::Bolt(&f), &f, &f, &mut d.clone(), &mut |l| said.push(l.to_string())).unwrap();
        assert!(said[0].starts_with("candidate/original time: median 0.800"), "{said:?}");
        trial.install = true;
        evaluate(&trial, Optimizer::Bolt(&f), &f, &f, &mut d, &mut |_| {}).unwrap();
        assert_eq!((d.action.as_str(), d.candidate_build_id.as_deref()), ("installed", Some("bb22")));
        assert_eq!(d.reason, format!("20.0% faster (median of 10 alternating rounds); renamed over {}", s.image.display()));
        assert_eq!(bid_of(&s.image).unwrap(), "bb22");
        // From the saved original, a new candidate (cc33) replaces the installed version at the path.
        s.with(|w| {
            w.bolt = Some(Ok("cc33".into()));
            w.bench.insert("cc33".into(), 0.5);
        });
        let saved = manage::saved_original(&s.image);
        trial.image = &saved;
        let mut d2 = Decision { reason: String::new(), ..d.clone() };
        evaluate(&trial, Optimizer::Bolt(&f), &f, &f, &mut d2, &mut |_| {}).unwrap();
        assert_eq!((bid_of(&s.image).unwrap().as_str(), bid_of(&saved).unwrap().as_str()), ("cc33", "aa11"));
        s.with(|w| {
            w.check.insert("cc33".into(), (1, String::new()));
        });
        let e = evaluate(&trial, Optimizer::Bolt(&f), &f, &f, &mut d2, &mut |_| {}).unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            (ErrorKind::Check, "check: candidate exited with exit status: 1 where the original gave exit status: 0")
        );
    }

    // The loop passes every `interval` seconds until its duration is over, sleeping between passes, and saves
    // the state after each pass; a program whose file is gone fails its pass, logged as an error.
    #[test]
    fn the_loop_runs_for_its_duration_and_logs_failed_passes() {
        let s = setup();
        std::fs::remove_file(&s.image).unwrap();
        let mut m = s.manager(1e9);
        m.run(Stop { duration: Some(150.0), ..Default::default() }).unwrap();
        let w = s.fake.0.borrow();
        // The duration is checked after each pass: passes at 0, 60, 120 and 180 s.
        assert_eq!(w.states, 4);
        assert!((180.0..180.5).contains(&s.fake.1.get()), "{}", s.fake.1.get());
        assert_eq!(w.decisions.len(), 4);
        assert_eq!(w.decisions[0].action, "error");
        assert!(w.decisions[0].reason.starts_with(&format!("{}:", s.image.display())), "{}", w.decisions[0].reason);
    }
}
