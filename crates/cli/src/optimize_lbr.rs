//! BOLT's branch fdata from the branch records (LBR) the database holds for
//! an image's build: every selected epoch's `.branches` files of the image,
//! and those of the optimized builds Loupe made from it (the decision log
//! says which), read here and folded by `loupe_optimize::lbr_fold` (which
//! decides what is kept, weighted and mapped), then written by
//! [`loupe_optimize::lbr::write_fdata`].

use crate::flags::optimize::ProfileArgs;
use crate::optimize::{build_id_of, code_image, db_image, epoch_ages, View};
use crate::optimize_bat::{made_from, translators};
use anyhow::{anyhow, Result};
use loupe_model::ImageKind;
use loupe_optimize::bat::Translator;
use loupe_optimize::combine::age_weight;
use loupe_optimize::lbr::{self, LbrFdata};
use loupe_optimize::lbr_fold::{Fold, Folded};
use loupe_optimize::lineage::{candidate_files, installed_path};
use loupe_store::query::{Epochs, ProfileSource};
use loupe_store::{Database, EpochId};
use loupe_symbolize::Symbolizer;
use std::path::Path;

/// The image's branch fdata, or None when no epoch holds branch records of
/// the build (then the caller writes the no-LBR form).
pub(crate) fn lbr_fdata(p: &ProfileArgs, syms: &mut Symbolizer) -> Result<Option<LbrFdata>> {
    let epochs = Database::open(&p.db.db)?.select(&Epochs::parse(&p.epoch)?)?;
    lbr_fdata_of(&p.db.db, &p.image, p.file(), &epochs, p.half_life, syms)
}

/// Folds into `acc` the records of build `bid` filed under `path` in the
/// epochs of `ages` (each with its age), their ends mapped through `t`
/// when given (an optimized build); `others` are the builds not refused.
#[allow(clippy::too_many_arguments)]
fn fold(
    acc: &mut Fold,
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
        let (profiles, bad) = db.branch_records(e, &|i| i.kind == ImageKind::Elf && (i.path == want || i.path == s))?;
        for b in &bad {
            eprintln!("loupe: skipping corrupt branch records {b}");
        }
        for bp in profiles {
            let pb = bp.image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default();
            if !acc.admits(&pb, bid, others) {
                continue;
            }
            let image = code_image(&bp.image, path, bid);
            let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", bp.image.path))?;
            out += acc.add(&bp, &|off| code.vaddr(off), t, age_weight(age, half_life));
        }
    }
    Ok(out)
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
    let mut acc = Fold::default();
    for at in std::iter::once(image.to_path_buf()).chain(installed_path(image)) {
        fold(&mut acc, &db, &ages, &at, &file_bid, &ours, None, half_life, syms)?;
    }
    for (bid, t) in translators(db_dir, image, file, &file_bid) {
        let mut f = Folded::default();
        for at in candidate_files(image) {
            f += fold(&mut acc, &db, &ages, &at, &bid, &|_| true, Some(&t), half_life, syms)?;
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
    if acc.is_empty() {
        return Ok(None);
    }
    Ok(acc.fdata(&functions(file, &file_bid, syms)?))
}

/// Every sized function of the file, under BOLT's name for it.
fn functions(path: &Path, bid: &str, syms: &mut Symbolizer) -> Result<Vec<lbr::Function>> {
    let image = db_image(path, bid);
    let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", path.display()))?;
    let names =
        loupe_optimize::bolt_names::read_symbols(path).map(|s| loupe_optimize::bolt_names::bolt_names(&s)).map_err(|e| anyhow!(e))?;
    Ok(loupe_optimize::profile::lbr_functions(&View(&code), &names))
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
