//! BOLT's branch fdata from the branch records (LBR) the database holds for
//! an image's build: every selected epoch's `.branches` files of the image,
//! weighted by age like the PC samples, mapped to virtual addresses and
//! written by [`loupe_optimize::lbr::write_fdata`]. Records of other builds
//! are left out and counted, never applied.

use crate::optimize::{build_id_of, db_image, ProfileArgs};
use anyhow::{anyhow, Result};
use loupe_model::ImageKind;
use loupe_optimize::combine::age_weight;
use loupe_optimize::lbr::{self, Branch, LbrFdata, Trace};
use loupe_store::Database;
use loupe_symbolize::Symbolizer;
use std::collections::BTreeMap;
use std::path::Path;

/// The image's branch fdata, or None when no epoch holds branch records of
/// the build on disk (then the caller writes the no-LBR form).
pub(crate) fn lbr_fdata(p: &ProfileArgs, syms: &mut Symbolizer) -> Result<Option<LbrFdata>> {
    lbr_fdata_of(&p.db.db, &p.image, &p.epoch, p.half_life, syms)
}

/// [`lbr_fdata`] for the program at `image`, from the epochs `epoch` names
/// (a number, `current` or `all`), aged with `half_life` seconds (for
/// callers without [`ProfileArgs`], such as the manager).
pub(crate) fn lbr_fdata_of(db: &Path, image: &Path, epoch: &str, half_life: f64, syms: &mut Symbolizer) -> Result<Option<LbrFdata>> {
    let db = Database::open(db)?;
    let epochs = crate::top::select_epochs(&db, epoch)?;
    let file_bid = build_id_of(image)?;
    if file_bid.is_empty() {
        return Ok(None);
    }
    let path = image.display().to_string();
    let want = std::fs::canonicalize(image).map(|x| x.display().to_string()).unwrap_or(path.clone());
    let all = db.epochs()?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut weighted: BTreeMap<(u64, u64), (f64, f64)> = BTreeMap::new();
    let mut runs: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let mut refused = 0;
    for e in epochs {
        let end = all.iter().find(|x| x.id.0 > e.0).map_or(now, |x| x.started_unix);
        let (profiles, bad) = db.load_branches(e, &|i| i.kind == ImageKind::Elf && (i.path == want || i.path == path))?;
        for b in &bad {
            eprintln!("loupe: skipping corrupt branch records {b}");
        }
        for bp in profiles {
            let bid = bp.image.build_id.as_ref().map(|b| b.to_hex()).unwrap_or_default();
            if !bid.eq_ignore_ascii_case(&file_bid) {
                refused += 1;
                continue;
            }
            let w = age_weight(now.saturating_sub(end) as f64, half_life);
            let code = syms.code(&bp.image).map_err(|r| anyhow!("cannot read {}: {r}", bp.image.path))?;
            for (&(from, to), c) in &bp.records {
                if let (Some(f), Some(t)) = (code.vaddr(from), code.vaddr(to)) {
                    let x = weighted.entry((f, t)).or_default();
                    x.0 += c.taken as f64 * w;
                    x.1 += c.mispredicted as f64 * w;
                }
            }
            for (&(start, end), &n) in &bp.traces {
                if let (Some(s), Some(e)) = (code.vaddr(start), code.vaddr(end)) {
                    *runs.entry((s, e)).or_default() += n as f64 * w;
                }
            }
        }
    }
    if refused > 0 {
        eprintln!("loupe: left out {refused} branch-record file(s) of other builds of {path}");
    }
    if weighted.is_empty() {
        return Ok(None);
    }
    let branches: Vec<Branch> = weighted
        .into_iter()
        .map(|((from, to), (n, m))| Branch { from, to, taken: n.round() as u64, mispredicted: m.round() as u64 })
        .collect();
    let traces: Vec<Trace> = runs.into_iter().map(|((start, end), n)| Trace { start, end, count: n.round() as u64 }).collect();
    Ok(Some(lbr::write_fdata(&branches, &traces, &functions(image, &file_bid, syms)?)))
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
