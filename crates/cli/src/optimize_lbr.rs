//! BOLT's branch fdata from the branch records (LBR) the database holds for
//! an image's build: every selected epoch's `.branches` files of the image,
//! weighted by age like the PC samples, mapped to virtual addresses and
//! written by [`loupe_optimize::lbr::write_fdata`]. Records of other builds
//! are left out and counted, never applied; records of the optimized builds
//! Loupe made from this one (the decision log says which) are mapped back
//! through BOLT's address table, both ends, and folded in (a record with an
//! end the table cannot map is counted and left out, never guessed).

use crate::flags::optimize::ProfileArgs;
use crate::optimize::{build_id_of, code_image, db_image, epoch_ages};
use crate::optimize_bat::{candidate_files, installed_path, made_from, translators};
use anyhow::{anyhow, Result};
use loupe_model::branches::BranchProfile;
use loupe_model::ImageKind;
use loupe_optimize::bat::Translator;
use loupe_optimize::combine::age_weight;
use loupe_optimize::lbr::{self, Branch, LbrFdata, Trace};
use loupe_store::{Database, EpochId};
use loupe_symbolize::Symbolizer;
use std::collections::BTreeMap;
use std::path::Path;

/// The image's branch fdata, or None when no epoch holds branch records of
/// the build (then the caller writes the no-LBR form).
pub(crate) fn lbr_fdata(p: &ProfileArgs, syms: &mut Symbolizer) -> Result<Option<LbrFdata>> {
    let epochs = crate::top::select_epochs(&Database::open(&p.db.db)?, &p.epoch)?;
    lbr_fdata_of(&p.db.db, &p.image, p.file(), &epochs, p.half_life, syms)
}

/// Aged branch and straight-run counts at the original build's addresses.
#[derive(Default)]
struct Acc {
    branches: BTreeMap<(u64, u64), (f64, f64)>,
    runs: BTreeMap<(u64, u64), f64>,
    /// Files of builds neither this one nor one Loupe made from it.
    refused: usize,
}

/// What folding one build's records in gave: executions mapped, and
/// executions left out because an end has no original.
#[derive(Default)]
struct Folded {
    mapped: u64,
    lost: u64,
}

impl Acc {
    /// Adds the records of build `bid` filed under `path` in the epochs of
    /// `ages` (each with its age), their ends mapped through `t` when given
    /// (an optimized build).
    #[allow(clippy::too_many_arguments)]
    fn fold(
        &mut self,
        db: &Database,
        ages: &[(EpochId, f64)],
        path: &Path,
        bid: &str,
        others: &dyn Fn(&str) -> bool,
        t: Option<&Translator>,
        half_life: f64,
        syms: &mut Symbolizer,
    ) -> Result<Folded> {
        let s = path.display().to_string();
        let want = std::fs::canonicalize(path).map(|x| x.display().to_string()).unwrap_or(s.clone());
        let mut out = Folded::default();
        for &(e, age) in ages {
            let (profiles, bad) = db.load_branches(e, &|i| i.kind == ImageKind::Elf && (i.path == want || i.path == s))?;
            for b in &bad {
                eprintln!("loupe: skipping corrupt branch records {b}");
            }
            for bp in profiles {
                let pb = bp.image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default();
                if !pb.eq_ignore_ascii_case(bid) {
                    self.refused += usize::from(!others(&pb));
                    continue;
                }
                let w = age_weight(age, half_life);
                let f = self.add(&bp, path, bid, t, w, syms)?;
                (out.mapped, out.lost) = (out.mapped + f.mapped, out.lost + f.lost);
            }
        }
        Ok(out)
    }

    /// One profile's records, weighted `w`.
    fn add(&mut self, bp: &BranchProfile, path: &Path, bid: &str, t: Option<&Translator>, w: f64, syms: &mut Symbolizer) -> Result<Folded> {
        let image = code_image(&bp.image, path, bid);
        let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", bp.image.path))?;
        let map = |va: u64| match t {
            Some(t) => t.branch_end_to_original(va),
            None => Some(va),
        };
        let mut out = Folded::default();
        for (&(from, to), c) in &bp.records {
            let (Some(f), Some(g)) = (code.vaddr(from), code.vaddr(to)) else { continue };
            match (map(f), map(g)) {
                (Some(f), Some(g)) => {
                    let x = self.branches.entry((f, g)).or_default();
                    x.0 += c.taken as f64 * w;
                    x.1 += c.mispredicted as f64 * w;
                    out.mapped += c.taken;
                }
                _ => out.lost += c.taken,
            }
        }
        for (&(start, end), &n) in &bp.traces {
            let (Some(s), Some(e)) = (code.vaddr(start), code.vaddr(end)) else { continue };
            let run = match t {
                Some(t) => t.run_to_original(s, e),
                None => Some((s, e)),
            };
            match run {
                Some(r) => *self.runs.entry(r).or_default() += n as f64 * w,
                None => out.lost += n,
            }
        }
        Ok(out)
    }
}

/// [`lbr_fdata`] for the program at `image` (build of the ELF `file`, which
/// is `image` itself unless that build is gone from its path), from
/// `epochs`, aged with `half_life` seconds. Folds in: the build's records at `image`; for a
/// saved original (PATH.loupe-orig), its records at PATH from before an
/// optimized version was installed there; and the records of every
/// optimized build Loupe made from it, mapped through BOLT's table.
pub(crate) fn lbr_fdata_of(
    db_dir: &Path,
    image: &Path,
    file: &Path,
    epochs: &[EpochId],
    half_life: f64,
    syms: &mut Symbolizer,
) -> Result<Option<LbrFdata>> {
    let db = Database::open(db_dir)?;
    let file_bid = build_id_of(file)?;
    if file_bid.is_empty() {
        return Ok(None);
    }
    let made = made_from(db_dir, &file_bid);
    let ours = |b: &str| made.contains(&b.to_ascii_lowercase());
    let ages = epoch_ages(&db, epochs)?;
    let mut acc = Acc::default();
    for at in std::iter::once(image.to_path_buf()).chain(installed_path(image)) {
        acc.fold(&db, &ages, &at, &file_bid, &ours, None, half_life, syms)?;
    }
    for (bid, t) in translators(db_dir, image, file, &file_bid) {
        let mut f = Folded::default();
        for at in candidate_files(image) {
            let g = acc.fold(&db, &ages, &at, &bid, &|_| true, Some(&t), half_life, syms)?;
            (f.mapped, f.lost) = (f.mapped + g.mapped, f.lost + g.lost);
        }
        if f.mapped + f.lost > 0 {
            eprintln!(
                "loupe: {} branch/run execution(s) of optimized build {bid} mapped back through BOLT's address table, {} left out (an end it has no original for)",
                f.mapped, f.lost
            );
        }
    }
    if acc.refused > 0 {
        eprintln!("loupe: left out {} branch-record file(s) of other builds of {}", acc.refused, image.display());
    }
    if acc.branches.is_empty() {
        return Ok(None);
    }
    let branches: Vec<Branch> = acc
        .branches
        .into_iter()
        .map(|((from, to), (n, m))| Branch { from, to, taken: n.round() as u64, mispredicted: m.round() as u64 })
        .collect();
    let traces: Vec<Trace> = acc.runs.into_iter().map(|((start, end), n)| Trace { start, end, count: n.round() as u64 }).collect();
    Ok(Some(lbr::write_fdata(&branches, &traces, &functions(file, &file_bid, syms)?)))
}

/// Every sized function of the file, under BOLT's name for it.
fn functions(path: &Path, bid: &str, syms: &mut Symbolizer) -> Result<Vec<lbr::Function>> {
    let image = db_image(path, bid);
    let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", path.display()))?;
    let names =
        loupe_optimize::bolt_names::read_symbols(path).map(|s| loupe_optimize::bolt_names::bolt_names(&s)).map_err(|e| anyhow!(e))?;
    let mut seen = std::collections::HashSet::new();
    Ok(code
        .find("")
        .into_iter()
        .filter(|f| seen.insert(f.start))
        .map(|f| lbr::Function {
            start: f.start,
            size: f.size,
            code: code.bytes(f.start, f.size).map(<[u8]>::to_vec).unwrap_or_default(),
            bolt_name: names.get(&f.start).cloned().unwrap_or(f.name),
        })
        .collect())
}

/// What the fdata holds, for the user.
pub(crate) fn describe(f: &LbrFdata) -> String {
    let mut s = format!(
        "loupe: wrote BOLT branch fdata from branch records (LBR): {} lines in {} functions: {} branches taken {} times",
        f.lines,
        f.functions,
        f.lines - f.fallthrough_lines,
        f.taken
    );
    if f.fallthrough_lines > 0 {
        s += &format!(", {} fall-throughs of straight runs between records, {} times", f.fallthrough_lines, f.fallthroughs);
    }
    if f.returns > 0 {
        s += &format!("; {} returns left out (as perf2bolt does)", f.returns);
    }
    if f.left_out > 0 {
        s += &format!("; {} executions of branches outside any function left out", f.left_out);
    }
    if f.bad_traces > 0 {
        s += &format!("; {} straight runs that cannot have happened as recorded left out", f.bad_traces);
    }
    s
}
