//! `loupe optimize manage` (and `loupe daemon --optimize`): Morph's Manager
//! as a loop. Each pass, for every configured program: flush the daemon,
//! read the program's samples from the database, let the policy decide
//! (share of machine time, profile maturity, an installed version not yet
//! measured, drift), and act: optimize + check + measure + install, guard
//! (measure the installed version, roll it back when it is not faster),
//! re-optimize after drift (a new candidate from the installed version's
//! samples mapped back to the original through BOLT's table, replacing it
//! while it keeps running), or, when they cannot be mapped, re-profile
//! (put the original back). It runs niced, within a CPU budget, and logs
//! every decision to DB/optimize/decisions.jsonl.
//!
//! How later runs pick the new version up: it is renamed over the path the
//! user runs (`manage::install`), so every exec after the rename opens the
//! optimized file; running processes keep the old inode. The original stays
//! beside it as PATH.loupe-orig, and both builds are linked into the
//! database's image cache so samples of either can still be symbolized.

use crate::flags::optimize::ManageArgs;
use crate::optimize::{build_id_of, db_image, epoch_ages, log_decision, now_unix, profile_from, sample_sets};
use crate::procedure::symbolizer;
use anyhow::{anyhow, Context, Result};
use loupe_optimize::blocks::ColdPolicy;
use loupe_optimize::combine::{age_weight, combine, Combined, SampleSet};
use loupe_optimize::config::{reason_kind, Config, InstalledState, Program, ProgramState, State};
use loupe_optimize::drift::{function_shares, translated_shares, Functions};
use loupe_optimize::manage::{self, children_cpu, Decision};
use loupe_optimize::policy::{self, Action, CpuBudget, Observation};
use loupe_optimize::{fdata, tool};
use loupe_store::{Database, EpochId};
use loupe_symbolize::{Code, Symbolizer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Manager {
    db: PathBuf,
    cfg: Config,
    bolt: Option<PathBuf>,
    budget: CpuBudget,
    started: Instant,
    state: State,
}

pub fn run(a: ManageArgs) -> Result<u8> {
    let text = std::fs::read_to_string(&a.config).with_context(|| format!("cannot read {}", a.config.display()))?;
    let cfg = Config::parse(&text).map_err(|e| anyhow!("{}: {e}", a.config.display()))?;
    let nice = a.nice.unwrap_or(cfg.nice);
    // SAFETY: setpriority on our own process; children inherit the niceness.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        eprintln!("loupe: cannot set niceness {nice}: {}", std::io::Error::last_os_error());
    }
    Database::create(&a.db.db).with_context(|| format!("cannot use database {}", a.db.db.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let state_path = a.db.db.join("optimize/state.json");
    let state = std::fs::read(&state_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let started = Instant::now();
    let mut m =
        Manager { db: a.db.db.clone(), bolt: a.bolt.clone(), budget: CpuBudget::new(a.cpu_budget, a.cpu_burst, 0.0), started, state, cfg };
    eprintln!(
        "loupe: optimize manager {} watching {} program(s), pass every {} s",
        std::process::id(),
        m.cfg.programs.len(),
        m.cfg.interval
    );
    loop {
        // Merge what the daemon holds in memory, so the pass sees recent runs.
        let _ = loupe_collector::daemon::send_command(&m.db, "flush");
        for prog in m.cfg.programs.clone() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Err(e) = m.pass(&prog) {
                m.log(&prog.path, "", "error", format!("{e:#}"), None, None);
            }
        }
        std::fs::create_dir_all(state_path.parent().unwrap())?;
        loupe_store::write_atomic(&state_path, &serde_json::to_vec_pretty(&m.state)?)?;
        let end = a.duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d);
        if a.once || end || stop.load(Ordering::Relaxed) {
            return Ok(0);
        }
        let until = Instant::now() + Duration::from_secs_f64(m.cfg.interval);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(0);
        }
    }
}

/// The function symbols of an image's code.
fn functions(code: &Code) -> Functions {
    Functions::new(code.find("").into_iter().map(|f| (f.start, f.size, f.name)).collect())
}

/// Links (or copies) `file` into the database's image cache under its build-id.
fn cache_image(db: &Path, file: &Path, bid: &str) {
    if bid.is_empty() {
        return;
    }
    let dir = db.join("images");
    let dst = dir.join(bid);
    if dst.exists() {
        return;
    }
    let _ = std::fs::create_dir_all(&dir);
    if std::fs::hard_link(file, &dst).is_err() {
        let _ = std::fs::copy(file, &dst);
    }
}

impl Manager {
    fn log(&self, image: &str, bid: &str, action: &str, reason: String, cand: Option<String>, m: Option<manage::Measurement>) {
        self.log_replacing(image, bid, action, reason, cand, None, m);
    }

    /// `log`, naming the optimized build a re-optimization replaces.
    #[allow(clippy::too_many_arguments)]
    fn log_replacing(
        &self,
        image: &str,
        bid: &str,
        action: &str,
        reason: String,
        cand: Option<String>,
        replaces: Option<String>,
        m: Option<manage::Measurement>,
    ) {
        eprintln!("loupe: manage {image}: {action}: {reason}");
        let d = Decision {
            unix_time: now_unix(),
            image: image.to_string(),
            build_id: bid.to_string(),
            candidate_build_id: cand,
            replaces,
            action: action.into(),
            reason,
            measurement: m,
        };
        if let Err(e) = log_decision(&self.db, &d) {
            eprintln!("loupe: cannot log a decision: {e:#}");
        }
    }

    fn wall(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// A new epoch (through the daemon when one runs, so its in-memory
    /// profiles go to the old one).
    fn new_epoch(&self) -> Result<u32> {
        if let Ok(answer) = loupe_collector::daemon::send_command(&self.db, "epoch") {
            if let Some(n) = answer.strip_prefix("ok epoch ").and_then(|n| n.trim().parse().ok()) {
                return Ok(n);
            }
        }
        Ok(Database::open(&self.db)?.new_epoch()?.0)
    }

    fn pass(&mut self, prog: &Program) -> Result<()> {
        let image = PathBuf::from(&prog.path);
        let cur = build_id_of(&image)?;
        let saved = manage::saved_original(&image);
        let (orig, installed) = if saved.exists() { (build_id_of(&saved)?, Some(cur.clone())) } else { (cur.clone(), None) };
        let mut st = self.state.get(&prog.path).cloned().unwrap_or_default();
        if st.original_build != orig {
            if !st.original_build.is_empty() {
                self.log(
                    &prog.path,
                    &orig,
                    "new-build",
                    format!("build {} replaced {}: its profile starts afresh", orig, st.original_build),
                    None,
                    None,
                );
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
        cache_image(&self.db, if installed.is_some() { &saved } else { &image }, &orig);
        let r = self.decide_and_act(prog, &image, &mut st);
        self.state.insert(prog.path.clone(), st);
        r
    }

    fn decide_and_act(&mut self, prog: &Program, image: &Path, st: &mut ProgramState) -> Result<()> {
        let db = Database::open(&self.db)?;
        let epochs: Vec<EpochId> = db.epochs()?.into_iter().map(|e| e.id).filter(|e| e.0 >= st.from_epoch).collect();
        let mut syms = symbolizer(&self.db);
        let path = image.display().to_string();
        let orig = st.original_build.clone();
        // The original build's samples; an installed build's are read by `observe_installed`.
        let sets = sample_sets(&db, &epochs, &path, &|b| b == orig, &mut syms)?;
        let combined = combine(&orig, &sets, self.cfg.half_life);
        let mut obs = Observation {
            now_unix: now_unix(),
            share: self.share(&db, &epochs, image)?,
            profile_samples: combined.total(),
            last_discard_samples: st.last_discard_samples,
            ..Default::default()
        };
        let mut mapped = None;
        if let Some(inst) = &st.installed {
            let (installed, m) = self.observe_installed(image, &orig, inst, &epochs, &mut obs, &mut syms)?;
            obs.installed = Some(installed);
            mapped = m;
        }
        let v = policy::next(&self.cfg.policy(), &obs);
        if v.action == Action::Wait {
            let kind = reason_kind(&v.reason);
            if kind != st.last_wait {
                self.log(&path, &orig, "wait", v.reason, None, None);
                st.last_wait = kind;
            }
            return Ok(());
        }
        st.last_wait.clear();
        if let Err(secs) = self.budget.allows(self.wall()) {
            self.log(&path, &orig, "wait", format!("{} deferred: over the CPU budget for {secs:.0} s more", v.reason), None, None);
            return Ok(());
        }
        let cpu0 = children_cpu();
        let r = match v.action {
            Action::Optimize => self.optimize(prog, image, st, combined, &v.reason, &mut syms),
            Action::Guard => self.guard(prog, image, st, &v.reason),
            Action::Reprofile => self.reprofile(image, st, &v.reason),
            Action::Reoptimize => match mapped {
                Some(profile) => self.reoptimize(prog, image, st, profile, &v, &mut syms),
                None => Ok(()),
            },
            Action::Wait => Ok(()),
        };
        self.budget.charge(self.wall(), children_cpu() - cpu0);
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
        &self,
        image: &Path,
        orig: &str,
        inst: &InstalledState,
        epochs: &[EpochId],
        obs: &mut Observation,
        syms: &mut Symbolizer,
    ) -> Result<(policy::Installed, Option<Combined>)> {
        let db = Database::open(&self.db)?;
        let path = image.display().to_string();
        let since_epochs: Vec<EpochId> = epochs.iter().copied().filter(|e| e.0 >= inst.since_epoch).collect();
        let since = sample_sets(&db, &since_epochs, &path, &|b| b == inst.build || b == orig, syms)?;
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
        let optimized = functions(&syms.code(&db_image(image, &inst.build)).map_err(|r| anyhow!("cannot read {path}: {r}"))?);
        let saved = manage::saved_original(image);
        match crate::optimize_bat::mapping(&self.db, image, &saved, orig, &inst.build) {
            Ok(t) => {
                let original = functions(&syms.code(&db_image(&saved, orig)).map_err(|r| anyhow!("cannot read {}: {r}", saved.display()))?);
                (obs.recent, _) = translated_shares(&original, &optimized, &|va| t.sample_to_original(va), &recent.samples);
                let (mut sets, _, _) = crate::optimize_bat::translate_sets(&t, inst_sets, orig);
                sets.extend(orig_sets.into_iter().filter(|s| s.build_id == orig));
                let profile = combine(orig, &sets, self.cfg.half_life);
                obs.mapped_samples = profile.total();
                Ok((out, Some(profile)))
            }
            Err(why) => {
                obs.recent = function_shares(&optimized, &recent.samples);
                out.no_mapping = Some(why);
                Ok((out, None))
            }
        }
    }

    /// Share of all samples (aged per epoch) that the program's path took.
    fn share(&self, db: &Database, epochs: &[EpochId], image: &Path) -> Result<f64> {
        let want = std::fs::canonicalize(image).map_or(image.display().to_string(), |p| p.display().to_string());
        let (mut mine, mut total) = (0.0, 0.0);
        for (e, age) in epoch_ages(db, epochs)? {
            let w = age_weight(age, self.cfg.half_life);
            let (idx, _) = db.index(e)?;
            for x in &idx.entries {
                total += w * x.total_samples as f64;
                if x.image.path == want {
                    mine += w * x.total_samples as f64;
                }
            }
        }
        Ok(if total > 0.0 { mine / total } else { 0.0 })
    }

    fn optimize(
        &mut self,
        prog: &Program,
        image: &Path,
        st: &mut ProgramState,
        combined: Combined,
        why: &str,
        syms: &mut Symbolizer,
    ) -> Result<()> {
        let path = image.display().to_string();
        self.log(&path, &st.original_build, "optimize", why.to_string(), None, None);
        self.attempt(prog, image, image, st, combined, None, false, syms)
    }

    /// Usage drifted from the installed version (or its mapped profile grew
    /// `regrow_factor` times denser than the one it was built from) and its
    /// samples map back to the original: a new candidate is built from the
    /// original (at PATH.loupe-orig) with that profile, validated against the
    /// original (after a regrow: against the installed version, which it
    /// must beat), and renamed over the installed version, which runs until then.
    fn reoptimize(
        &mut self,
        prog: &Program,
        image: &Path,
        st: &mut ProgramState,
        profile: Combined,
        v: &policy::Verdict,
        syms: &mut Symbolizer,
    ) -> Result<()> {
        let path = image.display().to_string();
        let old = st.installed.as_ref().map(|i| i.build.clone());
        let (kind, why) = match v.regrow_from {
            Some(n0) => ("regrow", format!("from {n0:.0} to {:.0} samples: {}", profile.total(), v.reason)),
            None => ("reoptimize", v.reason.clone()),
        };
        self.log_replacing(&path, &st.original_build, kind, why, None, old.clone(), None);
        self.attempt(prog, image, &manage::saved_original(image), st, profile, old, v.regrow_from.is_some(), syms)
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
        syms: &mut Symbolizer,
    ) -> Result<()> {
        let path = image.display().to_string();
        // Exact block counts first, while the original runs at its path (an installed build's blocks are not
        // the original's).
        if self.cfg.probe_seconds > 0.0 && original == image && crate::optimize_probe::tally_of(&self.db, &st.original_build).is_none() {
            let (kind, why) = match crate::optimize_probe::probe_running(
                &self.db,
                image,
                self.cfg.probe_seconds,
                self.cfg.probe_functions,
                self.cfg.half_life,
            ) {
                Ok(summary) => ("probe", summary),
                Err(e) => ("wait", format!("probe skipped: {e:#}")),
            };
            self.log(&path, &st.original_build, kind, why, None, None);
        }
        let samples = combined.total();
        // The build the candidate is timed against: what runs now.
        let (baseline, baseline_name) = if against_installed { (image, "the installed version") } else { (original, "the original") };
        let ip = profile_from(
            original,
            original,
            &st.original_build,
            combined,
            ColdPolicy { cold_fraction: self.cfg.cold_fraction, infer: self.cfg.infer, ..ColdPolicy::default() },
            Some(&self.db),
            syms,
        )?;
        let code = syms.code(&ip.image).map_err(|r| anyhow!("cannot read {}: {r}", original.display()))?;
        let fingerprint = function_shares(&functions(&code), &ip.combined.samples);
        let work = self.db.join("optimize/work");
        std::fs::create_dir_all(&work)?;
        let fdata_path = work.join(format!("{}.fdata", &st.original_build));
        // Real branch records (LBR) of the build and of its optimized versions, when the database holds some,
        // beat edges synthesized from IP samples.
        let epochs: Vec<EpochId> = Database::open(&self.db)?.epochs()?.into_iter().map(|e| e.id).filter(|e| e.0 >= st.from_epoch).collect();
        let (text, form) = match crate::optimize_lbr::lbr_fdata_of(&self.db, original, original, &epochs, self.cfg.half_life, syms)? {
            Some(f) => {
                let form = format!("branch records (LBR): {} branches taken {} times", f.lines - f.fallthrough_lines, f.taken);
                (f.text, form)
            }
            None => (fdata::write_edges(&ip.functions), "edges synthesized from IP samples (no branch records)".to_string()),
        };
        eprintln!("loupe: manage {path}: profile for BOLT: {form}");
        std::fs::write(&fdata_path, text)?;
        let cand = PathBuf::from(format!("{path}.loupe-bolt"));
        let bolt = tool::find_bolt(self.bolt.as_deref()).map_err(|e| anyhow!(e))?;
        let opts = prog.bolt_opts.clone().unwrap_or_else(tool::default_opts);
        let mut cand_bid = None;
        let verdict = (|| -> Result<manage::Measurement, (String, Option<manage::Measurement>)> {
            let report = tool::run_bolt_with(&bolt, original, &fdata_path, &cand, &opts).map_err(|e| (e, None))?;
            cand_bid = Symbolizer::read_build_id(&cand).map(|b| b.to_hex());
            for s in &report.skipped {
                eprintln!("loupe: manage {path}: skipped {s}");
            }
            manage::check(&prog.check, original, &cand).map_err(|e| (e, None))?;
            let m = manage::measure(&prog.bench, baseline, &cand, prog.rounds).map_err(|e| (e, None))?;
            manage::decide(&m, prog.min_gain, 0.05).map_err(|e| (e, Some(m.clone())))?;
            Ok(m)
        })();
        match verdict {
            Ok(m) => {
                let bid = cand_bid.clone().unwrap_or_default();
                cache_image(&self.db, original, &st.original_build);
                cache_image(&self.db, &cand, &bid);
                manage::install(image, &cand).map_err(|e| anyhow!(e))?;
                let _ = std::fs::remove_file(&cand);
                let since = self.new_epoch()?;
                let replacing = match &replaces {
                    Some(old) => format!(", replacing optimized build {old} (which ran until now)"),
                    None => String::new(),
                };
                let reason = format!(
                    "{:.1}% faster than {baseline_name} (median of {} alternating rounds, {} faster, p = {:.4}; profile of {samples:.0} samples, given to BOLT as {form}); renamed over {path}{replacing}, original at {}",
                    (1.0 - m.ratio_median) * 100.0,
                    m.rounds,
                    m.wins,
                    m.p_value,
                    manage::saved_original(image).display()
                );
                self.log_replacing(&path, &st.original_build, "installed", reason, cand_bid, replaces.clone(), Some(m));
                // A re-optimized version's profile began when the version it replaces was installed.
                if replaces.is_some() {
                    if let Some(prev) = &st.installed {
                        st.from_epoch = prev.since_epoch;
                    }
                }
                st.installed = Some(InstalledState {
                    build: bid,
                    verified_unix: Some(now_unix()),
                    fingerprint,
                    since_epoch: since,
                    built_from_samples: Some(samples),
                });
                st.last_discard_samples = None;
            }
            Err((why, m)) => {
                let _ = std::fs::remove_file(&cand);
                st.last_discard_samples = Some(samples);
                let why = match &replaces {
                    Some(old) if against_installed => {
                        format!("{why} (measured against the installed version); installed build {old} stays")
                    }
                    Some(old) => format!("{why}; installed build {old} stays"),
                    None => why,
                } + &format!(" (profile given to BOLT as {form})");
                self.log_replacing(&path, &st.original_build, "discarded", why, cand_bid, replaces, m);
            }
        }
        Ok(())
    }

    /// Measures the installed version against the saved original; rolls it
    /// back unless it passes the same check and is faster.
    fn guard(&mut self, prog: &Program, image: &Path, st: &mut ProgramState, why: &str) -> Result<()> {
        let path = image.display().to_string();
        let saved = manage::saved_original(image);
        let inst = st.installed.clone().unwrap_or_default();
        let verdict = manage::check(&prog.check, &saved, image).map_err(|e| (e, None)).and_then(|_| {
            let m = manage::measure(&prog.bench, &saved, image, prog.rounds).map_err(|e| (e, None))?;
            manage::decide(&m, 0.0, 0.05).map(|_| m.clone()).map_err(|e| (e, Some(m)))
        });
        match verdict {
            Ok(m) => {
                let reason = format!(
                    "{why}: still {:.1}% faster than the original ({} of {} rounds)",
                    (1.0 - m.ratio_median) * 100.0,
                    m.wins,
                    m.rounds
                );
                self.log(&path, &st.original_build, "verified", reason, Some(inst.build.clone()), Some(m));
                if let Some(i) = st.installed.as_mut() {
                    i.verified_unix = Some(now_unix());
                }
            }
            Err((e, m)) => {
                manage::rollback(image).map_err(|e| anyhow!(e))?;
                self.log(&path, &st.original_build, "rolled-back", format!("{why}: {e}; original restored"), Some(inst.build), m);
                st.installed = None;
            }
        }
        Ok(())
    }

    /// Usage drifted: the original goes back and a fresh profile starts with a new epoch.
    fn reprofile(&mut self, image: &Path, st: &mut ProgramState, why: &str) -> Result<()> {
        let path = image.display().to_string();
        manage::rollback(image).map_err(|e| anyhow!(e))?;
        st.from_epoch = self.new_epoch()?;
        let old = st.installed.take().map(|i| i.build);
        st.last_discard_samples = None;
        self.log(
            &path,
            &st.original_build,
            "reprofile",
            format!("{why}; original restored, profiling afresh from epoch {}", st.from_epoch),
            old,
            None,
        );
        Ok(())
    }
}

/// Starts the manager as a child process of the daemon (`loupe daemon
/// --optimize`): its own process, so its CPU (and that of BOLT and the
/// benchmarks it runs) never counts against the daemon's sampling budget.
pub fn spawn(db: &Path, config: &Path) -> Result<std::process::Child> {
    let exe = std::env::current_exe().context("cannot find the loupe executable")?;
    let child = std::process::Command::new(exe)
        .args(["optimize", "manage", "--db"])
        .arg(db)
        .arg("--config")
        .arg(config)
        .spawn()
        .context("cannot start the optimize manager")?;
    eprintln!("loupe: optimize manager started (pid {}) with {}", child.id(), config.display());
    Ok(child)
}

/// Asks the manager to stop (SIGTERM) and waits for it.
pub fn stop(mut child: std::process::Child) {
    // SAFETY: kill on the pid of our own child, which we have not waited for yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}
