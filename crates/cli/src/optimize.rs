//! `loupe optimize` (Morph's Manager): a program's profile from the
//! database as BOLT fdata or an LLVM sample profile, and llvm-bolt run on
//! it with validation, installation and rollback.

use crate::flags::optimize::{BoltProfile, ExportArgs, ExportFormat, OptimizeArgs, OptimizeCommand, ProfileArgs, RunArgs, StatusArgs};
use crate::procedure::symbolizer;
use anyhow::{anyhow, bail, Context, Result};
use loupe_model::{ImageId, ImageKind};
use loupe_optimize::blocks::ColdPolicy;
use loupe_optimize::combine::{check_build_id, combine, Combined, SampleSet};
use loupe_optimize::llvm_sample::{self, FunctionLines};
use loupe_optimize::manage::{self, Decision};
use loupe_optimize::manager::{self, Optimizer, Trial};
use loupe_optimize::profile::{block_profiles, CodeView, ImageProfile, Symbol};
use loupe_optimize::{fdata, tool};
use loupe_store::query::{Epochs, ProfileSource};
use loupe_store::{layout, Database};
use loupe_symbolize::{Code, Symbolizer};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

impl ProfileArgs {
    /// The ELF file of the build profiled.
    pub(crate) fn file(&self) -> &Path {
        self.file.as_deref().unwrap_or(&self.image)
    }
}

pub fn run(a: OptimizeArgs, out: &mut dyn Write) -> Result<u8> {
    match a.command {
        OptimizeCommand::Export(e) => export(e),
        OptimizeCommand::Run(r) => optimize(r),
        OptimizeCommand::Status(s) => status(s, out),
        OptimizeCommand::Rollback(s) => rollback(s, out),
        OptimizeCommand::Manage(m) => crate::optimize_manage::run(m),
        OptimizeCommand::Probe(p) => crate::optimize_probe::probe(p),
    }
}

pub(crate) fn build_id_of(path: &Path) -> Result<String> {
    if !path.is_file() {
        bail!("{} is not a file", path.display());
    }
    Ok(Symbolizer::read_build_id(path).map(|b| b.to_hex()).unwrap_or_default())
}

/// Sample sets of every epoch for images at `path`, aged by the time since
/// the epoch ended. Sets of builds other than `file_bid` carry no samples:
/// they are only counted, to be refused.
pub(crate) fn sample_sets(
    db: &Database,
    epochs: &[loupe_store::EpochId],
    path: &str,
    wanted: &dyn Fn(&str) -> bool,
    syms: &mut Symbolizer,
) -> Result<Vec<SampleSet>> {
    let want = std::fs::canonicalize(path).map(|p| p.display().to_string()).unwrap_or(path.to_string());
    let mut sets = Vec::new();
    let mut code_images: HashMap<ImageId, ImageId> = HashMap::new();
    for (e, age) in epoch_ages(db, epochs)? {
        let (profiles, bad) = db.profiles(e, &|i| i.kind == ImageKind::Elf && (i.path == want || i.path == path))?;
        for p in &bad {
            eprintln!("loupe: skipping corrupt profile {p}");
        }
        for p in profiles {
            let bid = p.image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default();
            let mut samples: HashMap<u64, u64> = HashMap::new();
            if wanted(&bid) {
                let image = code_images.entry(p.image.clone()).or_insert_with(|| code_image(&p.image, Path::new(path), &bid));
                let code = syms.code(image).map_err(|r| anyhow!("cannot read {}: {r}", p.image.path))?;
                for (off, n) in p.by_offset(|_| true) {
                    if let Some(va) = code.vaddr(off) {
                        *samples.entry(va).or_insert(0) += n;
                    }
                }
            }
            sets.push(SampleSet { build_id: bid, age_secs: age, samples });
        }
    }
    Ok(sets)
}

pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Each of `epochs` with the age its samples are weighted by: seconds since
/// it ended (the next epoch's start; the newest has not ended: 0).
pub(crate) fn epoch_ages(db: &Database, epochs: &[loupe_store::EpochId]) -> Result<Vec<(loupe_store::EpochId, f64)>> {
    Ok(db.ages(epochs, now_unix())?.into_iter().map(|(e, age)| (e, age as f64)).collect())
}

/// Where the code of build `bid`, sampled at `path`, is read: the file at
/// the path while it is that build; else the saved original beside it
/// (PATH.loupe-orig) when that is the build, as after an installation;
/// else whatever the symbolizer finds (the database's image cache).
pub(crate) fn code_image(image: &ImageId, path: &Path, bid: &str) -> ImageId {
    let here = Symbolizer::read_build_id(Path::new(&image.path)).map(|b| b.to_hex());
    let saved = manage::saved_original(path);
    if here.as_deref() != Some(bid) && build_id_of(&saved).is_ok_and(|b| b == bid) {
        return db_image(&saved, bid);
    }
    image.clone()
}

/// An image's code as the symbolizer reads it, for `loupe-optimize`.
pub(crate) struct View<'a>(pub &'a Code<'a>);

impl CodeView for View<'_> {
    fn symbols(&self) -> Vec<Symbol> {
        // Every sized symbol: an empty name matches all.
        self.0.find("").into_iter().map(|f| Symbol { start: f.start, size: f.size, name: f.name }).collect()
    }

    fn bytes(&self, va: u64, len: u64) -> Option<&[u8]> {
        self.0.bytes(va, len)
    }
}

pub(crate) fn image_profile(p: &ProfileArgs, syms: &mut Symbolizer) -> Result<ImageProfile> {
    let db = Database::open(&p.db.db)?;
    let epochs = db.select(&Epochs::parse(&p.epoch)?)?;
    let file_bid = build_id_of(p.file())?;
    let path = p.image.display().to_string();
    let mut sets = sample_sets(&db, &epochs, &path, &|b| b == file_bid, syms)?;
    // The saved original's own runs from before its optimized version was installed over its path.
    if let Some(installed) = loupe_optimize::lineage::installed_path(&p.image) {
        let at = installed.display().to_string();
        sets.extend(sample_sets(&db, &epochs, &at, &|b| b == file_bid, syms)?.into_iter().filter(|s| s.build_id == file_bid));
    }
    sets.extend(crate::optimize_bat::optimized_sets(&p.db.db, &db, &epochs, &p.image, p.file(), &file_bid, syms)?);
    if sets.is_empty() {
        bail!("no samples of {} in {} (epochs {})", path, p.db.db.display(), p.epoch);
    }
    let builds: std::collections::BTreeSet<&str> = sets.iter().map(|s| s.build_id.as_str()).collect();
    if !builds.contains(file_bid.as_str()) {
        let have: Vec<&str> = builds.into_iter().collect();
        check_build_id(have[0], Some(&file_bid).filter(|b| !b.is_empty()).map(String::as_str)).map_err(|e| anyhow!("{}: {e}", path))?;
    }
    let combined = combine(&file_bid, &sets, p.half_life);
    if combined.refused > 0 {
        eprintln!("loupe: left out {} sample set(s) of other builds of {path}", combined.refused);
    }
    profile_from(
        &p.image,
        p.file(),
        &file_bid,
        combined,
        ColdPolicy { cold_fraction: p.cold_fraction, skid: !p.no_skid, infer: p.infer },
        (!p.no_probes).then_some(p.db.db.as_path()),
        syms,
    )
}

/// Block profiles of every sampled function of build `bid` of the program
/// at `path` (its code read from the file, or from the database's image
/// cache when another build is at the path now); `file` is the build's ELF
/// file when it is not at `path`, for BOLT's names. With `probes` (the
/// database), blocks counted by `optimize probe` take those counts.
pub(crate) fn profile_from(
    path: &Path,
    file: &Path,
    bid: &str,
    combined: Combined,
    policy: ColdPolicy,
    probes: Option<&Path>,
    syms: &mut Symbolizer,
) -> Result<ImageProfile> {
    let image = db_image(path, bid);
    let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", path.display()))?;
    let ranges: Vec<(u64, u64)> = code.find("").iter().map(|f| (f.start, f.size)).collect();
    let tally = probes.and_then(|db| crate::optimize_probe::tally_of(db, bid));
    let measured = tally.as_ref().map(|t| loupe_optimize::probing::measured_by_function(t, &ranges)).unwrap_or_default();
    if !measured.is_empty() {
        eprintln!("loupe: {} function(s) with blocks counted by execute breakpoints (optimize probe)", measured.len());
    }
    // BOLT's names (NAME/N for static functions) from the file's symbol
    // table, when the file at the path is still this build.
    let same_build = build_id_of(file).is_ok_and(|b| b.eq_ignore_ascii_case(bid));
    let names = match same_build.then(|| loupe_optimize::bolt_names::read_symbols(file)) {
        Some(Ok(elf)) => Some(loupe_optimize::bolt_names::bolt_names(&elf)),
        _ => None,
    };
    let functions = block_profiles(&View(&code), &combined, policy, &measured, names.as_ref());
    Ok(ImageProfile { image, build_id: bid.to_string(), combined, functions })
}

pub(crate) fn db_image(path: &Path, bid: &str) -> ImageId {
    let canon = std::fs::canonicalize(path).unwrap_or(path.to_path_buf());
    ImageId::elf(&canon.display().to_string(), loupe_model::BuildId::from_hex(bid))
}

fn llvm_lines(ip: &ImageProfile, syms: &mut Symbolizer) -> Result<Vec<FunctionLines>> {
    let code = syms.code(&ip.image).map_err(|r| anyhow!("cannot read {}: {r}", ip.image.path))?;
    let mut out = Vec::new();
    for f in &ip.functions {
        let bytes = code.bytes(f.start, f.size).unwrap_or(&[]);
        let insns = loupe_calc::decode::decode(f.start, bytes);
        // Offsets count from the prologue's line (the function's opening
        // line); lines of other files (an #include inside a body) and
        // lines before it are left out.
        let lines: Vec<Option<(String, u32)>> = insns.iter().map(|i| code.outer_line(i.addr)).collect();
        let Some(Some((file, first))) = lines.first().cloned() else { continue };
        let same = |l: &Option<(String, u32)>| l.as_ref().filter(|(f, n)| *f == file && *n >= first).map(|(_, n)| *n);
        let mut fl = FunctionLines { name: f.name.clone(), head: count(f.blocks.first().map_or(0.0, |b| b.count)), ..Default::default() };
        for (k, i) in insns.iter().enumerate() {
            let off = i.addr - f.start;
            let b = f.blocks.partition_point(|b| b.offset <= off).saturating_sub(1);
            // Inlined code counts at its call site: the profile has no inline stacks.
            if let (Some(line), Some(blk)) = (same(&lines[k]), f.blocks.get(b)) {
                llvm_sample::add(&mut fl, line.saturating_sub(first), count(blk.count));
            }
        }
        out.push(fl);
    }
    Ok(out)
}

fn count(c: f64) -> u64 {
    (c * fdata::SCALE).round() as u64
}

/// The file of build `hex` of the program at `image`: the file there when it
/// is that build, else its copy in the database's image cache.
fn file_of_build(db: &Path, image: &Path, hex: &str) -> Result<PathBuf> {
    let hex = hex.trim().to_ascii_lowercase();
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("--build-id {hex:?} is not a hexadecimal build-id");
    }
    if build_id_of(image).is_ok_and(|b| b.eq_ignore_ascii_case(&hex)) {
        return Ok(image.to_path_buf());
    }
    let cached = layout::cached_image(db, &hex);
    if build_id_of(&cached).is_ok_and(|b| b.eq_ignore_ascii_case(&hex)) {
        return Ok(cached);
    }
    bail!("build {hex} is neither at {} nor in the image cache {}", image.display(), layout::images_dir(db).display())
}

fn export(mut a: ExportArgs) -> Result<u8> {
    if let Some(hex) = &a.build_id {
        let file = file_of_build(&a.profile.db.db, &a.profile.image, hex)?;
        if file != a.profile.image {
            eprintln!("loupe: build {hex} is no longer at {}: reading it from {}", a.profile.image.display(), file.display());
        }
        a.profile.file = Some(file);
    }
    let mut syms = symbolizer(&a.profile.db.db);
    // Real branch records, when the PMU had an LBR, beat anything derived from IP samples.
    let lbr = if a.format == ExportFormat::Bolt { crate::optimize_lbr::lbr_fdata(&a.profile, &mut syms)? } else { None };
    if let Some(f) = lbr {
        eprintln!("{}", crate::optimize_lbr::describe(&f));
        return emit(a.output.as_deref(), &f.text);
    }
    let ip = image_profile(&a.profile, &mut syms)?;
    let text = match a.format {
        ExportFormat::Bolt => {
            eprintln!("loupe: no branch records (LBR) of this build: wrote BOLT's no-LBR form (block counts from IP samples)");
            fdata::write_no_lbr(&ip.functions)
        }
        ExportFormat::BoltEdges => fdata::write_edges(&ip.functions),
        ExportFormat::LlvmSample => llvm_sample::write_text(&llvm_lines(&ip, &mut syms)?),
        ExportFormat::Json => {
            let doc = serde_json::json!({
                "image": ip.image.path, "build_id": ip.build_id, "raw_samples": ip.combined.raw,
                "aged_samples": ip.combined.total(), "sets_used": ip.combined.used, "sets_refused": ip.combined.refused,
                "functions": ip.functions,
            });
            serde_json::to_string_pretty(&doc)? + "\n"
        }
    };
    emit(a.output.as_deref(), &text)
}

fn emit(output: Option<&Path>, text: &str) -> Result<u8> {
    match output {
        Some(p) => loupe_files::write(p, text).with_context(|| format!("cannot write {}", p.display()))?,
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(0)
}

pub(crate) fn log_decision(db: &Path, d: &Decision) -> Result<()> {
    loupe_files::create_dir_all(&layout::optimize_dir(db))?;
    let mut f = loupe_files::append(&layout::decisions_log(db))?;
    writeln!(f, "{}", serde_json::to_string(d)?)?;
    Ok(())
}

fn optimize(a: RunArgs) -> Result<u8> {
    let p = &a.profile;
    let mut syms = symbolizer(&p.db.db);
    let progress = crate::progress::Progress::spinner(&format!("profiling {} from the database", p.image.display()));
    let ip = image_profile(p, &mut syms)?;
    drop(progress);
    let suffix = if a.rebuild.is_some() { "loupe-pgo" } else { "loupe-bolt" };
    let out_path = a.output.clone().unwrap_or_else(|| PathBuf::from(format!("{}.{suffix}", p.image.display())));
    let (prof_path, text) = match (&a.rebuild, a.profile_kind) {
        (Some(_), _) => (format!("{}.prof", out_path.display()), llvm_sample::write_text(&llvm_lines(&ip, &mut syms)?)),
        (None, BoltProfile::Edges) => (
            format!("{}.fdata", out_path.display()),
            match crate::optimize_lbr::lbr_fdata(p, &mut syms)? {
                Some(f) => {
                    eprintln!("{}", crate::optimize_lbr::describe(&f));
                    f.text
                }
                None => fdata::write_edges(&ip.functions),
            },
        ),
        (None, BoltProfile::Blocks) => (format!("{}.fdata", out_path.display()), fdata::write_no_lbr(&ip.functions)),
    };
    let prof_path = PathBuf::from(prof_path);
    loupe_files::write(&prof_path, text)?;
    let cold: usize = ip.functions.iter().map(|f| f.blocks.iter().filter(|b| b.cold).count()).sum();
    let blocks: usize = ip.functions.iter().map(|f| f.blocks.len()).sum();
    eprintln!(
        "loupe: profile of {} (build {}): {} samples ({:.0} after aging) in {} functions, {cold} of {blocks} blocks confidently cold",
        p.image.display(),
        ip.build_id,
        ip.combined.raw,
        ip.combined.total(),
        ip.functions.len()
    );
    if ip.combined.total() < a.min_samples {
        bail!(
            "profile of {} not mature: {:.0} samples (after aging), --min-samples is {:.0}; keep collecting",
            p.image.display(),
            ip.combined.total(),
            a.min_samples
        );
    }
    let bolt = match &a.rebuild {
        Some(_) => None,
        None => Some(tool::find_bolt(a.bolt.as_deref()).map_err(|e| anyhow!(e))?),
    };
    let mut decision = Decision {
        unix_time: now_unix(),
        image: p.image.display().to_string(),
        build_id: ip.build_id.clone(),
        candidate_build_id: None,
        replaces: None,
        action: "discarded".into(),
        reason: String::new(),
        measurement: None,
    };
    let progress = crate::progress::Progress::spinner(&format!("optimizing {}, then checking and measuring it", p.image.display()));
    let verdict = evaluate(&a, bolt.as_ref(), &prof_path, &out_path, &mut decision, &progress);
    drop(progress);
    if let Err(e) = &verdict {
        decision.reason = format!("{}{e}", decision.reason);
        let _ = std::fs::remove_file(&out_path);
    }
    log_decision(&p.db.db, &decision)?;
    println!("{}: {} ({})", p.image.display(), decision.action, decision.reason);
    Ok(if verdict.is_ok() { 0 } else { 2 })
}

/// BOLT (or the rebuild), check, measure, and install when asked: the reason for any refusal.
fn evaluate(
    a: &RunArgs,
    bolt: Option<&tool::Program>,
    prof: &Path,
    out: &Path,
    d: &mut Decision,
    progress: &crate::progress::Progress,
) -> Result<(), loupe_optimize::Error> {
    let trial = Trial {
        image: &a.profile.image,
        check: &a.check,
        bench: &a.bench,
        rounds: a.rounds,
        min_gain: a.min_gain,
        install: a.install,
        profile: prof,
        out,
    };
    let opt = match (bolt, &a.rebuild) {
        (Some(bolt), _) => Optimizer::Bolt(bolt),
        (None, Some(cmd)) => Optimizer::Rebuild(cmd),
        (None, None) => return Err(loupe_optimize::Error::new(loupe_optimize::ErrorKind::Tool, "no optimizer")),
    };
    manager::evaluate(&trial, opt, &manage::Shell, &crate::optimize_manage::Disk, d, &mut |l| progress.println(&format!("loupe: {l}")))
}

fn status(a: StatusArgs, out: &mut dyn Write) -> Result<u8> {
    let log = layout::decisions_log(&a.db.db);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let want = a.image.display().to_string();
    let saved = manage::saved_original(&a.image);
    // Decisions about the saved original (`run PATH.loupe-orig`) are about the program at PATH too.
    let decisions = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Decision>(line).ok())
        .filter(|d| d.image == want || d.image == saved.display().to_string());
    if a.format == crate::flags::Format::Json {
        let decisions: Vec<Decision> = decisions.collect();
        let doc = serde_json::json!({ "image": want, "installed": saved.exists(),
            "original": saved.exists().then(|| saved.display().to_string()), "decisions": decisions });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "{want}: {}",
        if saved.exists() { format!("optimized version installed, original at {}", saved.display()) } else { "original in place".into() }
    )?;
    for d in decisions {
        writeln!(out, "  {}  {:<10} build {}  {}", crate::flags::iso_local(d.unix_time), d.action, d.build_id, d.reason)?;
    }
    Ok(0)
}

fn rollback(a: StatusArgs, out: &mut dyn Write) -> Result<u8> {
    manage::rollback(&a.image).map_err(|e| anyhow!(e))?;
    let d = Decision {
        unix_time: now_unix(),
        image: a.image.display().to_string(),
        build_id: build_id_of(&a.image)?,
        candidate_build_id: None,
        replaces: None,
        action: "rolled-back".into(),
        reason: "by request".into(),
        measurement: None,
    };
    log_decision(&a.db.db, &d)?;
    writeln!(out, "{}: original restored", a.image.display())?;
    Ok(0)
}
