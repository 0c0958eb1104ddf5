//! What `loupe annotate` and `loupe calc` share: finding one procedure of
//! one image in the database, its code, and its samples per event.

use anyhow::{bail, Result};
use loupe_model::{EventName, ImageId};
use loupe_store::query::{Epochs, Filter as Processes, ProfileSource};
use loupe_store::{Database, EpochId};
use loupe_symbolize::{Code, ProcedureRange, Symbolizer, SymbolizerOptions};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A procedure's code as the CFG builder reads it (jump tables included).
pub struct Mem<'a>(pub &'a Code<'a>);

impl loupe_calc::cfg::Memory for Mem<'_> {
    fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        self.0.bytes(vaddr, len as u64).map(<[u8]>::to_vec)
    }
}

pub struct Selected {
    pub image: ImageId,
    pub epochs: Vec<EpochId>,
    /// Per event: samples per ELF virtual address of the whole image.
    pub samples: BTreeMap<EventName, HashMap<u64, u64>>,
    /// Per event: (samples, period sum) of the image, for the mean period.
    pub totals: BTreeMap<EventName, (u64, u64)>,
}

pub struct Filter<'a> {
    pub image: &'a str,
    pub epoch: &'a str,
    pub pids: &'a [u32],
    pub comms: &'a [String],
}

impl Filter<'_> {
    fn processes(&self) -> Processes {
        Processes { pids: self.pids.to_vec(), comms: self.comms.to_vec(), image: None }
    }
}

pub fn symbolizer(db: &Path) -> Symbolizer {
    let mut opts = SymbolizerOptions::default();
    opts.image_cache_dirs.push(loupe_store::layout::images_dir(db));
    Symbolizer::new(opts)
}

pub fn load(db_path: &Path, f: &Filter, syms: &mut Symbolizer) -> Result<Selected> {
    let db = Database::open(db_path)?;
    let epochs = db.select(&Epochs::parse(f.epoch)?)?;
    let image = db.find_image(&epochs, f.image)?;
    let code = syms.code(&image).map_err(|r| anyhow::anyhow!("cannot read {}: {r}", image.path))?;
    let processes = f.processes();
    let mut samples: BTreeMap<EventName, HashMap<u64, u64>> = BTreeMap::new();
    let mut totals: BTreeMap<EventName, (u64, u64)> = BTreeMap::new();
    for &e in &epochs {
        let (profiles, bad) = db.profiles(e, &|i| *i == image)?;
        for p in &bad {
            eprintln!("loupe: skipping corrupt profile {p}");
        }
        for p in profiles {
            let t = totals.entry(p.event.clone()).or_default();
            t.0 += p.total_samples();
            t.1 += p.period_sum;
            let per = samples.entry(p.event.clone()).or_default();
            for (off, n) in p.by_offset(|k| processes.keep_process(k)) {
                if let Some(va) = code.vaddr(off) {
                    *per.entry(va).or_insert(0) += n;
                }
            }
        }
    }
    Ok(Selected { image, epochs, samples, totals })
}

/// A procedure that is not there (typed so that `loupe serve` answers 404).
#[derive(Debug)]
pub struct NoSuchProcedure(pub String);

impl std::fmt::Display for NoSuchProcedure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoSuchProcedure {}

/// The procedure named `name` in `code`; several matches are an error that lists them.
pub fn find_procedure(code: &Code, name: &str, image: &str) -> Result<ProcedureRange> {
    let mut found = code.find(name);
    found.dedup_by(|a, b| a.start == b.start);
    match found.len() {
        0 => bail!(NoSuchProcedure(format!("no procedure {name:?} in {image}"))),
        1 => Ok(found.remove(0)),
        _ => {
            let names: Vec<String> = found.iter().take(10).map(|p| format!("{} at {:x}", p.name, p.start)).collect();
            bail!("procedure {name:?} is ambiguous in {image}: {}", names.join(", "))
        }
    }
}

/// Events to show: those asked for, else every event with samples
/// (cpu-clock first).
pub fn events(sel: &Selected, wanted: &[String]) -> Result<Vec<EventName>> {
    if wanted.is_empty() {
        let mut v: Vec<EventName> = sel.samples.keys().cloned().collect();
        v.sort_by_key(|e| e.as_str() != "cpu-clock");
        return Ok(v);
    }
    wanted
        .iter()
        .map(|w| {
            let e = EventName::new(w);
            if sel.samples.contains_key(&e) {
                Ok(e)
            } else {
                let have: Vec<&str> = sel.samples.keys().map(|e| e.as_str()).collect();
                bail!("no samples of event {w} in {} (events present: {})", sel.image.path, have.join(", "))
            }
        })
        .collect()
}
