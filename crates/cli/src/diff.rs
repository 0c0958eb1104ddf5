//! `loupe diff` and `loupe stats`: read runs (databases, epochs, sums of
//! them), bucket each like `loupe top`, and print the differential profile
//! or the across-run statistics.

use crate::flags::{By, CompareArgs, DiffArgs, DiffMode, Format, SourceArgs, StatsArgs};
use crate::symbols::Symbols;
use crate::top::{detail, group_by};
use anyhow::{bail, Context, Result};
use loupe_analysis::compare::{align, BucketKey};
use loupe_analysis::diff::{diff as diff_rows, diff_measured, DiffParams, DiffRow, Mode};
use loupe_analysis::stats::{stats as stats_rows, StatsRow};
use loupe_analysis::top::{pct, top, TopReport};
use loupe_analysis::SymbolSource;
use loupe_model::EventName;
use loupe_store::query::{choose_events, Epochs, Filter, Flat, ProfileSource};
use loupe_store::{Database, EpochId};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One run: a database and the epochs read from it.
struct Run {
    db: PathBuf,
    epochs: Vec<EpochId>,
}

/// A side or sample set: runs whose samples are summed.
struct Side {
    spec: String,
    runs: Vec<Run>,
}

fn parse_side(spec: &str) -> Result<Side> {
    let runs = spec.split(',').filter(|s| !s.is_empty()).map(parse_run).collect::<Result<Vec<_>>>()?;
    if runs.is_empty() {
        bail!("empty run spec {spec:?}");
    }
    Ok(Side { spec: spec.to_string(), runs })
}

/// `DB` or `DB:EPOCH`; the suffix counts as an epoch only if it reads as one,
/// so a directory name with a colon still works.
fn parse_run(spec: &str) -> Result<Run> {
    let (path, which) = match spec.rsplit_once(':') {
        Some((p, e)) if is_epoch_word(e) => (p, e),
        _ => (spec, "current"),
    };
    let db = Database::open(Path::new(path)).with_context(|| format!("run {spec:?}"))?;
    let which = match which.split_once('-') {
        Some((lo, hi)) => {
            let (lo, hi): (u32, u32) = (lo.parse()?, hi.parse()?);
            Epochs::List((lo..=hi).map(EpochId).collect())
        }
        None => Epochs::parse(which).with_context(|| format!("run {spec:?}"))?,
    };
    let epochs = db.select(&which).with_context(|| format!("run {spec:?}"))?;
    Ok(Run { db: PathBuf::from(path), epochs })
}

fn is_epoch_word(e: &str) -> bool {
    let num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    e == "all" || e == "current" || num(e) || e.split_once('-').is_some_and(|(a, b)| num(a) && num(b))
}

/// Everything the sides share: the grouping, filters and symbolizer.
struct Reader<'a> {
    sel: &'a CompareArgs,
    filter: Filter,
    syms: Box<dyn SymbolSource + 'a>,
}

impl Reader<'_> {
    fn flat(&self, side: &Side) -> Result<Flat> {
        let mut out = Flat::default();
        for run in &side.runs {
            let db = Database::open(&run.db)?;
            let mut flat = db.flat(&run.epochs, detail(self.sel.by), &self.filter)?;
            for p in std::mem::take(&mut flat.problems) {
                eprintln!("loupe: skipping corrupt profile {p}");
            }
            out.extend(flat);
        }
        Ok(out)
    }

    fn report(&mut self, flat: &Flat, event: &EventName) -> TopReport {
        let f = &self.filter;
        let (keep, keep_image) = (|p: &_| f.keep_process(p), |i: &str| f.keep_image(i));
        top(&flat.profiles, &flat.totals, std::slice::from_ref(event), group_by(self.sel.by), &keep, &keep_image, &mut *self.syms)
    }
}

fn compare_filter(sel: &CompareArgs) -> Filter {
    Filter { pids: Vec::new(), comms: sel.comm.comm.clone(), image: sel.image.image.clone(), cgroup_pids: None }
}

/// Parses the sets, loads them, picks the event and buckets each set.
fn read_sets(specs: &[String], sel: &CompareArgs) -> Result<(Vec<Side>, EventName, Vec<TopReport>)> {
    let sides = specs.iter().map(|s| parse_side(s)).collect::<Result<Vec<_>>>()?;
    let dbs: Vec<&Path> = sides.iter().flat_map(|s| s.runs.iter().map(|r| r.db.as_path())).collect();
    let progress = crate::progress::Progress::spinner(&format!("reading the samples of {} runs", dbs.len()));
    let mut reader = Reader { sel, filter: compare_filter(sel), syms: Box::new(Symbols::for_dbs(&dbs)) };
    let flats = sides.iter().map(|s| reader.flat(s)).collect::<Result<Vec<_>>>()?;
    progress.stage(&format!("naming the samples of {} runs", dbs.len()));
    let (event, reports) = bucket_sets(&mut reader, &flats)?;
    Ok((sides, event, reports))
}

/// The sets of a fleet diff: each a selection of the fleet store, summed in ClickHouse.
fn read_fleet_sets(url: &str, source: &SourceArgs, sel: &CompareArgs, specs: &[String]) -> Result<(Vec<Side>, EventName, Vec<TopReport>)> {
    // diff has no --db: the image cache is that of $LOUPE_DB (as for other commands), if any.
    let db = PathBuf::from(std::env::var_os("LOUPE_DB").unwrap_or_else(|| "loupe.db".into()));
    let (client, syms) = crate::fleet::open_source(url, &db)?;
    let progress = crate::progress::Progress::spinner(&format!("asking {url} for {} selections", specs.len()));
    let flats = specs.iter().map(|s| crate::fleet::flat_of(&client, source, s, sel.by)).collect::<Result<Vec<_>>>()?;
    progress.stage("naming the fleet's samples");
    let mut reader = Reader { sel, filter: compare_filter(sel), syms: Box::new(syms) };
    let (event, reports) = bucket_sets(&mut reader, &flats)?;
    let sides = specs.iter().map(|s| Side { spec: format!("{s} in {url}"), runs: Vec::new() }).collect();
    Ok((sides, event, reports))
}

/// Picks the event and buckets each set like `loupe top`.
fn bucket_sets(reader: &mut Reader, flats: &[Flat]) -> Result<(EventName, Vec<TopReport>)> {
    let present: Vec<EventName> = flats.iter().flat_map(Flat::events).collect();
    let wanted: Vec<String> = reader.sel.event.iter().cloned().collect();
    let Some(event) = choose_events(&present, &wanted)?.into_iter().next() else { bail!("no samples in any of the runs") };
    let reports = flats.iter().map(|f| reader.report(f, &event)).collect();
    Ok((event, reports))
}

/// Side A and B: the positional specs, or with --source `--a`/`--b` (or the positionals) as selections.
fn side_specs(a: &DiffArgs) -> Result<[String; 2]> {
    let pick = |flag: &Option<String>, pos: &Option<String>| flag.clone().or_else(|| pos.clone());
    match (pick(&a.fleet_a, &a.a), pick(&a.fleet_b, &a.b)) {
        (Some(x), Some(y)) => Ok([x, y]),
        _ => bail!("diff needs two sides: A and B (with --source, --a SELECTION --b SELECTION)"),
    }
}

pub fn diff(a: DiffArgs, out: &mut dyn Write) -> Result<u8> {
    let specs = side_specs(&a)?;
    let (sides, event, reports) = match &a.source.source {
        Some(url) => read_fleet_sets(url, &a.source, &a.sel, &specs)?,
        None if is_lock_table(&specs[0]) || is_lock_table(&specs[1]) => return diff_locks(&a, &specs, out),
        None => read_sets(&specs, &a.sel)?,
    };
    let (ta, tb) = (reports[0].totals[0], reports[1].totals[0]);
    let mode = mode_of(a.mode);
    let params = DiffParams {
        mode,
        work: a.work.as_ref().map(|w| (w[0], w[1])),
        load: a.load.as_ref().map(|l| (l[0], l[1])),
        saturation: a.saturation,
        // Projections compare fractions of each side's samples, so sides of different lengths compare.
        scale: if mode.ascending() { (ta.max(1) as f64, tb.max(1) as f64) } else { (1.0, 1.0) },
        level: a.level,
        min_change: a.min_change,
    };
    let buckets = align(&reports).into_iter().map(|(k, v)| (k, v[0], v[1])).collect();
    let rows = diff_rows(buckets, &params)?;
    match a.sel.format {
        Format::Json => print_diff_json(out, &rows, &params, &event, (ta, tb), a.sel.by, a.sel.limit),
        Format::Text => print_diff_text(out, &rows, &params, &event, (&sides[0], &sides[1]), (ta, tb), a.sel.by, a.sel.limit),
    }?;
    Ok(0)
}

/// A side given as a file (`loupe locks --format json` output) rather than a database.
fn is_lock_table(spec: &str) -> bool {
    Path::new(spec).is_file()
}

/// Held fraction per lock name; locks sharing a name (heap locks from one init site) are summed.
fn read_lock_table(path: &str) -> Result<std::collections::BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading lock table {path}"))?;
    let doc: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{path} is not JSON"))?;
    let Some(locks) = doc["locks"].as_array() else { bail!("{path} is not a `loupe locks --format json` table (no \"locks\")") };
    let mut out = std::collections::BTreeMap::new();
    for l in locks {
        let (Some(name), Some(f)) = (l["name"].as_str(), l["held_fraction"].as_f64()) else { continue };
        *out.entry(name.to_string()).or_insert(0.0) += f;
    }
    Ok(out)
}

/// McKenney's "Pinpointing Contention" step 4: projected saturation of each
/// lock's held fraction. Measured times have no sampling noise to test.
fn diff_locks(a: &DiffArgs, [sa, sb]: &[String; 2], out: &mut dyn Write) -> Result<u8> {
    if !(is_lock_table(sa) && is_lock_table(sb)) {
        bail!("both sides must be lock tables (loupe locks --format json) or both profile databases");
    }
    let (ta, tb) = (read_lock_table(sa)?, read_lock_table(sb)?);
    let mut names: Vec<&String> = ta.keys().chain(tb.keys()).collect();
    names.sort();
    names.dedup();
    let rows = names.into_iter().map(|n| (n.clone(), ta.get(n).copied().unwrap_or(0.0), tb.get(n).copied().unwrap_or(0.0))).collect();
    let params = DiffParams {
        mode: mode_of(a.mode),
        work: a.work.as_ref().map(|w| (w[0], w[1])),
        load: a.load.as_ref().map(|l| (l[0], l[1])),
        saturation: a.saturation,
        ..DiffParams::new(mode_of(a.mode))
    };
    let rows = diff_measured(rows, &params)?;
    if a.sel.format == Format::Json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .take(a.sel.limit)
            .map(|(k, x, y, s)| serde_json::json!({ "lock": k, "a": x, "b": y, "score": finite(*s), "p_value": null, "significant": true }))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&serde_json::json!({ "mode": params.mode.name(), "rows": rows }))?)?;
        return Ok(0);
    }
    writeln!(out, "# Loupe diff of lock held fractions, mode {}\n# A: {}\n# B: {}\n#", params.mode.name(), sa, sb)?;
    writeln!(out, "# {:>9} {:>9} {:>12}  lock", "A held", "B held", params.mode.name())?;
    for (k, x, y, s) in rows.iter().take(a.sel.limit) {
        writeln!(out, "  {:>8.2}% {:>8.2}% {s:>12.3}  {k}", 100.0 * x, 100.0 * y)?;
    }
    Ok(0)
}

fn mode_of(m: DiffMode) -> Mode {
    match m {
        DiffMode::Ratio => Mode::Ratio,
        DiffMode::Weighted => Mode::Weighted,
        DiffMode::Saturation => Mode::Saturation,
        DiffMode::Powerlaw => Mode::PowerLaw,
    }
}

/// The bucket's fields as `top --format json` names them.
fn key_json(o: &mut serde_json::Value, k: &BucketKey, by: By) {
    o["image"] = k.image.clone().into();
    if by != By::Image {
        o["procedure"] = k.procedure.clone().into();
    }
    match by {
        By::Line => o["line"] = k.line.clone().into(),
        By::Instruction => o["address"] = k.line.clone().into(),
        _ => {}
    }
}

/// Projected loads past this are the floating-point residue of a bucket
/// that does not grow with load (an exponent near 0 raised to a large
/// power): they never saturate, as an infinite projection does.
const NEVER: f64 = 1e12;

/// A score as it is shown: projections past [`NEVER`] become infinite.
fn shown_score(x: f64, mode: Mode) -> f64 {
    match mode {
        Mode::Saturation | Mode::PowerLaw if x.abs() >= NEVER => f64::INFINITY.copysign(x),
        _ => x,
    }
}

/// JSON has no infinity: a projection that never saturates (or a ratio over 0) is `null`.
fn finite(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!(x)
    } else {
        serde_json::Value::Null
    }
}

fn print_diff_json(
    out: &mut dyn Write,
    rows: &[DiffRow<BucketKey>],
    p: &DiffParams,
    event: &EventName,
    totals: (u64, u64),
    by: By,
    limit: usize,
) -> Result<()> {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .take(limit)
        .map(|r| {
            let mut o = serde_json::json!({ "a": r.a, "b": r.b, "score": finite(shown_score(r.score, p.mode)), "p_value": r.p_value,
                "q_value": r.q_value, "significant": r.significant });
            key_json(&mut o, &r.key, by);
            o
        })
        .collect();
    let doc = serde_json::json!({ "mode": p.mode.name(), "event": event.as_str(), "a_total": totals.0, "b_total": totals.1,
        "level": p.level, "rows": rows });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

fn label(k: &BucketKey, by: By) -> String {
    let proc_ = k.procedure.as_deref().unwrap_or("");
    match by {
        By::Image => k.image.clone(),
        By::Procedure => format!("{proc_:<34} {}", k.image),
        By::Line | By::Instruction => format!("{:<30} {proc_:<26} {}", k.line.as_deref().unwrap_or(""), k.image),
    }
}

#[allow(clippy::too_many_arguments)]
fn print_diff_text(
    out: &mut dyn Write,
    rows: &[DiffRow<BucketKey>],
    p: &DiffParams,
    event: &EventName,
    sides: (&Side, &Side),
    totals: (u64, u64),
    by: By,
    limit: usize,
) -> Result<()> {
    writeln!(out, "# Loupe diff, mode {}, event '{event}'", p.mode.name())?;
    writeln!(out, "# A: {} ({} samples)", sides.0.spec, totals.0)?;
    writeln!(out, "# B: {} ({} samples)", sides.1.spec, totals.1)?;
    let sig = rows.iter().filter(|r| r.significant).count();
    writeln!(out, "# {sig} of {} buckets changed significantly (exact binomial test, Benjamini-Hochberg at {})", rows.len(), p.level)?;
    writeln!(out, "#")?;
    let what = match by {
        By::Image => "image",
        By::Procedure => "procedure                          image",
        By::Line => "line                           procedure                  image",
        By::Instruction => "address                        procedure                  image",
    };
    writeln!(out, "# {:>10} {:>10} {:>12} {:>9} {:>4}  {what}", "A", "B", p.mode.name(), "p-value", "sig")?;
    writeln!(out, "#")?;
    for r in rows.iter().take(limit) {
        let score = match shown_score(r.score, p.mode) {
            x if x.is_nan() => "-".to_string(),
            x => format!("{x:.3}"),
        };
        let sig = if r.significant { "yes" } else { "no" };
        writeln!(out, "  {:>10} {:>10} {score:>12} {:>9} {sig:>4}  {}", r.a, r.b, fmt_p(r.p_value), label(&r.key, by).trim_end())?;
    }
    if rows.len() > limit {
        writeln!(out, "# ... {} more rows (--limit)", rows.len() - limit)?;
    }
    Ok(())
}

/// p-values as a person reads them: 0.342, 0.0012, 3.2e-34.
fn fmt_p(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.4}")
    } else {
        format!("{p:.1e}")
    }
}

pub fn stats(a: StatsArgs, out: &mut dyn Write) -> Result<u8> {
    let (sides, event, reports) = match &a.source.source {
        Some(url) => read_fleet_sets(url, &a.source, &a.sel, &a.runs)?,
        None => read_sets(&a.runs, &a.sel)?,
    };
    let rows = stats_rows(align(&reports), a.level);
    let totals: Vec<u64> = reports.iter().map(|r| r.totals[0]).collect();
    let grand: u64 = totals.iter().sum();
    match a.sel.format {
        Format::Json => print_stats_json(out, &rows, &event, &totals, a.sel.by, a.sel.limit),
        Format::Text => print_stats_text(out, &rows, &event, &sides, &totals, grand, a.sel.by, a.sel.limit),
    }?;
    Ok(0)
}

fn print_stats_json(
    out: &mut dyn Write,
    rows: &[StatsRow<BucketKey>],
    event: &EventName,
    totals: &[u64],
    by: By,
    limit: usize,
) -> Result<()> {
    let grand: u64 = totals.iter().sum();
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .take(limit)
        .map(|r| {
            let mut o = serde_json::json!({ "range_percent": 100.0 * r.range, "sum": r.sum, "percent": pct(r.sum, grand),
                "n": r.n, "mean": r.mean, "std_dev": r.std_dev, "min": r.min, "max": r.max, "p_value": r.p_value,
                "significant": r.significant });
            key_json(&mut o, &r.key, by);
            o
        })
        .collect();
    let doc = serde_json::json!({ "event": event.as_str(), "sets": totals, "total": grand, "rows": rows });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_stats_text(
    out: &mut dyn Write,
    rows: &[StatsRow<BucketKey>],
    event: &EventName,
    sides: &[Side],
    totals: &[u64],
    grand: u64,
    by: By,
    limit: usize,
) -> Result<()> {
    writeln!(out, "# Number of samples of event '{event}'")?;
    for (i, (s, t)) in sides.iter().zip(totals).enumerate() {
        writeln!(out, "# set {} = {t}  ({})", i + 1, s.spec)?;
    }
    writeln!(out, "# TOTAL: {grand}")?;
    writeln!(out, "#")?;
    writeln!(out, "# Statistics using the sample counts for each bucket from {} sample set(s)", sides.len())?;
    writeln!(
        out,
        "# {:>7} {:>10} {:>7} {:>3} {:>10} {:>10} {:>9} {:>9} {:>9} {:>4}  bucket",
        "range%", "sum", "%", "N", "mean", "std-dev", "min", "max", "p-value", "sig"
    )?;
    for r in rows.iter().take(limit) {
        writeln!(
            out,
            "  {:>6.1}% {:>10} {:>6.1}% {:>3} {:>10.1} {:>10.2} {:>9} {:>9} {:>9} {:>4}  {}",
            100.0 * r.range,
            r.sum,
            pct(r.sum, grand),
            r.n,
            r.mean,
            r.std_dev,
            r.min,
            r.max,
            fmt_p(r.p_value),
            if r.significant { "yes" } else { "no" },
            label(&r.key, by).trim_end()
        )?;
    }
    if rows.len() > limit {
        writeln!(out, "# ... {} more rows (--limit)", rows.len() - limit)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projections_that_never_saturate_print_as_inf() {
        // Checks the power-law residue (1e55) and true infinities print as inf in text and null in JSON; other modes keep their numbers.
        assert_eq!(format!("{:.3}", shown_score(3.2e55, Mode::PowerLaw)), "inf");
        assert_eq!(format!("{:.3}", shown_score(f64::INFINITY, Mode::Saturation)), "inf");
        assert_eq!(format!("{:.3}", shown_score(12.5, Mode::PowerLaw)), "12.500");
        assert_eq!(shown_score(3.2e55, Mode::Ratio), 3.2e55);
        assert_eq!(finite(shown_score(3.2e55, Mode::PowerLaw)), serde_json::Value::Null);
    }

    #[test]
    fn epoch_suffixes_are_recognized_and_other_colons_kept() {
        // Checks which `DB:SUFFIX` suffixes count as epochs.
        for e in ["3", "all", "current", "2-5"] {
            assert!(is_epoch_word(e), "{e}");
        }
        for e in ["", "x", "3-", "-3", "a-b", "/tmp/x"] {
            assert!(!is_epoch_word(e), "{e}");
        }
    }
}
