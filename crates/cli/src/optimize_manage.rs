//! `loupe optimize manage` (and `loupe daemon --optimize`): Morph's Manager
//! as a loop, `loupe_optimize::manager::Manager`, wired to the database,
//! the symbolizer, the files, llvm-bolt and the user's commands. It runs
//! niced, within a CPU budget, and logs every decision to
//! DB/optimize/decisions.jsonl.

use crate::flags::optimize::ManageArgs;
use crate::optimize::{build_id_of, db_image, epoch_ages, log_decision, now_unix, profile_from, sample_sets};
use crate::procedure::symbolizer;
use anyhow::{anyhow, Context, Result};
use loupe_optimize::blocks::ColdPolicy;
use loupe_optimize::combine::{age_weight, Combined, SampleSet};
use loupe_optimize::config::{Config, State};
use loupe_optimize::drift::Functions;
use loupe_optimize::lbr::LbrFdata;
use loupe_optimize::manage::{Decision, Shell};
use loupe_optimize::manager::{Clock, Env, Files, Manager, Profiles, Stop, Store};
use loupe_optimize::profile::ImageProfile;
use loupe_optimize::tool::{self, Tool};
use loupe_optimize::{Error, ErrorKind};
use loupe_store::query::{Epochs, ProfileSource};
use loupe_store::{Database, EpochId};
use loupe_symbolize::Symbolizer;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(a: ManageArgs) -> Result<u8> {
    let cfg = read_config(&a.config)?;
    let nice = a.nice.unwrap_or(cfg.nice);
    // SAFETY: setpriority on our own process; children inherit the niceness.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        eprintln!("loupe: cannot set niceness {nice}: {}", std::io::Error::last_os_error());
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let mut m = manager(&a.db.db, cfg, a.bolt.clone(), a.cpu_budget, a.cpu_burst)?;
    eprintln!(
        "loupe: optimize manager {} watching {} program(s), pass every {} s",
        std::process::id(),
        m.cfg.programs.len(),
        m.cfg.interval
    );
    m.run(Stop { once: a.once, duration: a.duration, flag: Some(&stop) })?;
    Ok(0)
}

pub fn read_config(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Config::parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// The manager wired to the database, the symbolizer, the files, llvm-bolt
/// and the user's commands (`loupe optimize manage`, and the `morph` agent).
pub fn manager(db: &Path, cfg: Config, bolt: Option<PathBuf>, cpu_budget: f64, cpu_burst: f64) -> Result<Manager> {
    Database::create(db).with_context(|| format!("cannot use database {}", db.display()))?;
    let db = db.to_path_buf();
    let state =
        std::fs::read(loupe_store::layout::optimize_state(&db)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let env = Env {
        profiles: Box::new(DbProfiles { db: db.clone(), syms: symbolizer(&db) }),
        store: Box::new(DbStore { db: db.clone() }),
        files: Box::new(Disk),
        runner: Box::new(Shell),
        clock: Box::new(Wall(Instant::now())),
        bolt: Box::new(move || Ok(Box::new(tool::find_bolt(bolt.as_deref())?) as Box<dyn Tool>)),
    };
    Ok(Manager::new(cfg, state, cpu_budget, cpu_burst, loupe_store::layout::optimize_work(&db), env))
}

/// An error of the CLI's side of the manager, in the words `{:#}` gives
/// (what the decision log has always said).
fn ext(e: anyhow::Error) -> Error {
    Error::new(ErrorKind::Source, format!("{e:#}"))
}

/// The database and the symbolizer, as the manager reads them.
struct DbProfiles {
    db: PathBuf,
    syms: Symbolizer,
}

impl DbProfiles {
    fn epoch_ids(epochs: &[u32]) -> Vec<EpochId> {
        epochs.iter().map(|&e| EpochId(e)).collect()
    }
}

impl Profiles for DbProfiles {
    fn epochs(&mut self) -> loupe_optimize::Result<Vec<u32>> {
        let db = Database::open(&self.db).map_err(|e| ext(e.into()))?;
        Ok(db.select(&Epochs::All).map_err(|e| ext(e.into()))?.into_iter().map(|e| e.0).collect())
    }

    fn sample_sets(&mut self, epochs: &[u32], path: &Path, wanted: &dyn Fn(&str) -> bool) -> loupe_optimize::Result<Vec<SampleSet>> {
        let db = Database::open(&self.db).map_err(|e| ext(e.into()))?;
        sample_sets(&db, &Self::epoch_ids(epochs), &path.display().to_string(), wanted, &mut self.syms).map_err(ext)
    }

    fn share(&mut self, epochs: &[u32], image: &Path, half_life: f64) -> loupe_optimize::Result<f64> {
        share(&self.db, &Self::epoch_ids(epochs), image, half_life).map_err(ext)
    }

    fn functions(&mut self, path: &Path, bid: &str) -> loupe_optimize::Result<Functions> {
        let code = self.syms.code(&db_image(path, bid)).map_err(|r| ext(anyhow!("cannot read {}: {r}", path.display())))?;
        Ok(Functions::new(code.find("").into_iter().map(|f| (f.start, f.size, f.name)).collect()))
    }

    fn block_profile(&mut self, path: &Path, bid: &str, combined: Combined, policy: ColdPolicy) -> loupe_optimize::Result<ImageProfile> {
        profile_from(path, path, bid, combined, policy, Some(&self.db), &mut self.syms).map_err(ext)
    }

    fn lbr_fdata(&mut self, original: &Path, epochs: &[u32], half_life: f64) -> loupe_optimize::Result<Option<LbrFdata>> {
        let epochs = Self::epoch_ids(epochs);
        crate::optimize_lbr::lbr_fdata_of(&self.db, original, original, &epochs, half_life, &mut self.syms).map_err(ext)
    }

    fn made_from(&mut self, orig_bid: &str) -> BTreeSet<String> {
        crate::optimize_bat::made_from(&self.db, orig_bid)
    }

    fn has_probe_counts(&mut self, bid: &str) -> bool {
        crate::optimize_probe::tally_of(&self.db, bid).is_some()
    }

    fn refresh(&mut self) {
        self.syms = symbolizer(&self.db);
    }
}

/// Share of all samples (aged per epoch) that the program's path took.
fn share(db: &Path, epochs: &[EpochId], image: &Path, half_life: f64) -> Result<f64> {
    let db = Database::open(db)?;
    let want = std::fs::canonicalize(image).map_or(image.display().to_string(), |p| p.display().to_string());
    let (mut mine, mut total) = (0.0, 0.0);
    for (e, age) in epoch_ages(&db, epochs)? {
        let w = age_weight(age, half_life);
        for x in db.totals(e)?.0 {
            total += w * x.samples(|_| true) as f64;
            if x.image.path == want {
                mine += w * x.samples(|_| true) as f64;
            }
        }
    }
    Ok(if total > 0.0 { mine / total } else { 0.0 })
}

/// What the manager writes to the database (and the daemon it asks).
struct DbStore {
    db: PathBuf,
}

impl Store for DbStore {
    fn log(&mut self, d: &Decision) -> loupe_optimize::Result<()> {
        log_decision(&self.db, d).map_err(ext)
    }

    fn new_epoch(&mut self) -> loupe_optimize::Result<u32> {
        if let Ok(answer) = loupe_collector::daemon::send_command(&self.db, "epoch") {
            if let Some(n) = answer.strip_prefix("ok epoch ").and_then(|n| n.trim().parse().ok()) {
                return Ok(n);
            }
        }
        let db = Database::open(&self.db).map_err(|e| ext(e.into()))?;
        Ok(db.new_epoch().map_err(|e| ext(e.into()))?.0)
    }

    fn cache_image(&mut self, file: &Path, bid: &str) {
        if bid.is_empty() {
            return;
        }
        let dir = loupe_store::layout::images_dir(&self.db);
        let dst = dir.join(bid);
        if dst.exists() {
            return;
        }
        let _ = loupe_files::create_dir_all(&dir);
        if std::fs::hard_link(file, &dst).is_err() {
            let _ = loupe_files::copy(file, &dst);
        }
    }

    fn flush(&mut self) {
        let _ = loupe_collector::daemon::send_command(&self.db, "flush");
    }

    fn save_state(&mut self, state: &State) -> loupe_optimize::Result<()> {
        let path = loupe_store::layout::optimize_state(&self.db);
        loupe_files::create_dir_all(path.parent().unwrap())?;
        let text = serde_json::to_vec_pretty(state)?;
        loupe_store::write_atomic(&path, &text).map_err(|e| ext(e.into()))
    }

    fn probe(&mut self, image: &Path, seconds: f64, functions: usize, half_life: f64) -> loupe_optimize::Result<String> {
        crate::optimize_probe::probe_running(&self.db, image, seconds, functions, half_life).map_err(ext)
    }

    fn say(&mut self, line: &str) {
        eprintln!("loupe: {line}");
    }
}

/// The files on disk, their build-ids read by the symbolizer.
pub(crate) struct Disk;

impl Files for Disk {
    fn build_id(&self, path: &Path) -> loupe_optimize::Result<String> {
        build_id_of(path).map_err(ext)
    }
}

/// The wall clock, and seconds since the manager started.
struct Wall(Instant);

impl Clock for Wall {
    fn now_unix(&self) -> u64 {
        now_unix()
    }
    fn wall(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
    fn sleep(&self, secs: f64) {
        std::thread::sleep(Duration::from_secs_f64(secs));
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
