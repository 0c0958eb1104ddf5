//! `loupe flame`, `loupe export`, and `top --children/--callers/--callees`:
//! read the stack tables of the selected epochs, name them, hand them to
//! the analysis crate, write the result.

use crate::flags::{EventFlag, ExportArgs, ExportFormat, FlameArgs, FlameFormat, Format, Selection as StackSelection, SourceArgs, TopArgs};
use crate::symbols::Symbols;
use anyhow::{bail, Result};
use loupe_analysis::callgraph::{self, CallData, Selection};
use loupe_analysis::top::pct;
use loupe_analysis::{export as ex, flame, pprof};
use loupe_model::stacks::StackProfile;
use loupe_model::EventName;
use loupe_store::query::{choose_stack_events, Filter, ProfileSource};
use loupe_store::{Database, EpochId, EpochInfo};
use std::io::Write;

/// Epochs for a selection: --since/--until by start times, else --epoch.
fn epochs(db: &Database, s: &StackSelection) -> Result<Vec<EpochId>> {
    Ok(db.select(&s.epoch.which()?)?)
}

/// Loads, merges per event, and names the selected stacks (of the fleet store with `--source`).
fn load(s: &StackSelection, source: &SourceArgs, all_events: bool) -> Result<CallData> {
    Ok(load_spanned(s, source, all_events)?.0)
}

/// [`load`], with when the selected epochs ran.
fn load_spanned(s: &StackSelection, source: &SourceArgs, all_events: bool) -> Result<(CallData, pprof::Span)> {
    if let Some(url) = &source.source {
        return crate::fleet::load_stacks(s, source, url, all_events);
    }
    let db = Database::open(&s.db.db)?;
    let ids = epochs(&db, s)?;
    let progress = crate::progress::Progress::spinner(&format!("reading the stacks of {} epochs", ids.len()));
    let (tables, events) = read(&db, s, &ids, all_events)?;
    let filter = filter(&db, s, &ids)?;
    let (keep, keep_image) = (|p: &_| filter.keep_process(p), |i: &str| filter.keep_image(i));
    let mut syms = Symbols::for_db(&s.db.db);
    progress.stage("naming the stacks' code addresses");
    let d = callgraph::resolve(&tables, &events, &Selection { keep: &keep, keep_image: &keep_image }, &mut syms);
    let span = span(&db.list_epochs()?, &ids, &d);
    Ok((d, span))
}

/// The selected epochs' stack tables and the events to show, after the
/// checks every stack command makes.
fn read(db: &Database, s: &StackSelection, ids: &[EpochId], all_events: bool) -> Result<(Vec<StackProfile>, Vec<EventName>)> {
    let stacks = db.stacks(ids)?;
    for p in &stacks.problems {
        eprintln!("loupe: skipping corrupt stack file {p}");
    }
    if stacks.tables.is_empty() && samples_in(db, ids)? == 0 {
        bail!("no samples in the selected epochs of {}", s.db.db.display());
    }
    if stacks.tables.is_empty() {
        bail!("no call stacks in the selected epochs of {} (recorded with --no-stacks, or before stacks existed?)", s.db.db.display());
    }
    let events = choose_stack_events(&stacks.tables, s.event.as_deref(), all_events)?;
    Ok((stacks.tables, events))
}

/// The processes and images a selection keeps.
fn filter(db: &Database, s: &StackSelection, ids: &[EpochId]) -> Result<Filter> {
    let cgroup_pids = crate::cgroup::pids(db, ids, &s.cgroup)?;
    Ok(Filter { pids: s.pid.pid.clone(), comms: s.comm.comm.clone(), image: s.image.image.clone(), cgroup_pids })
}

/// From the first selected epoch's start to the last one's end: the end
/// the database keeps (when its samples were last stored, or the next epoch
/// began), else, in databases written before end times were kept, the next
/// epoch's start, else the start plus the sampled time of the busiest
/// process (at least its wall-clock time when it ran on one thread).
fn span(all: &[EpochInfo], ids: &[EpochId], d: &CallData) -> pprof::Span {
    let Some(first) = all.iter().find(|e| ids.contains(&e.id)) else { return pprof::Span::default() };
    let last = ids.iter().max().copied().unwrap_or(first.id);
    let start = first.start_ns() as i64;
    let kept = all.iter().find(|e| e.id == last).and_then(|e| e.ended_unix_ns).map(|e| e as i64);
    let next = all.iter().find(|e| e.id > last).map(|e| e.start_ns() as i64);
    let duration = kept.or(next).map(|n| n - start).unwrap_or_else(|| {
        let mut per_pid: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for s in &d.stacks {
            *per_pid.entry(s.process.pid).or_default() += s.counts[0];
        }
        let busiest = per_pid.values().max().copied().unwrap_or(0);
        let time = d.events.first().is_some_and(loupe_analysis::is_time_event);
        if time {
            (busiest * d.mean_period[0]) as i64
        } else {
            0
        }
    });
    pprof::Span { start_unix_nanos: start, duration_nanos: duration.max(0) }
}

/// Samples of any event in the epochs, from the index alone.
fn samples_in(db: &Database, epochs: &[EpochId]) -> Result<u64> {
    let mut n = 0;
    for &e in epochs {
        n += db.totals(e)?.0.iter().flat_map(|t| t.processes.iter().map(|(_, c)| c)).sum::<u64>();
    }
    Ok(n)
}

fn warn_truncated(d: &CallData) {
    if let (Some(&total), Some(&cut)) = (d.totals.first(), d.truncated.first()) {
        warn_truncated_of(total, cut);
    }
}

fn warn_truncated_of(total: u64, cut: u64) {
    if total > 0 && cut > 0 {
        eprintln!("loupe: {cut} of {total} stacks ({:.1}%) stopped before the root; they sit under [unwind stopped]", pct(cut, total));
    }
}

pub fn flame(a: FlameArgs, out: &mut dyn Write) -> Result<u8> {
    if flame_is_kept(&a) {
        out.write_all(&flame_kept(&a)?)?;
        return Ok(0);
    }
    let d = load(&a.select, &a.source, false)?;
    warn_truncated(&d);
    let ext = |x: &[&str]| a.output.as_ref().is_some_and(|p| p.extension().is_some_and(|e| x.iter().any(|x| e == *x)));
    let format = a.format.unwrap_or(if ext(&["html", "htm"]) {
        FlameFormat::Html
    } else if ext(&["json"]) {
        FlameFormat::Json
    } else {
        FlameFormat::Svg
    });
    if a.inverted && format != FlameFormat::Json {
        bail!("--inverted draws only the JSON tree (--format json)");
    }
    if a.min_share.is_some() && format != FlameFormat::Json {
        bail!("--min-share prunes only the JSON tree (--format json)");
    }
    let share = a.min_share.unwrap_or(0.0);
    let bytes = match format {
        FlameFormat::Html => flame::html(&d, 0, &a.title),
        FlameFormat::Svg => flame::svg(&d, 0, &a.title),
        // A fleet has no epochs: the JSON says so with an empty list.
        FlameFormat::Json if a.source.source.is_some() => flame_json(&d, a.inverted, share, &[]),
        FlameFormat::Json => flame_json(&d, a.inverted, share, &epochs_of(&a.select)?),
    };
    out.write_all(&bytes.map_err(anyhow::Error::msg)?)?;
    Ok(0)
}

/// `flame --format json`: the tree of [`flame::FlameTree`] with what it covers
/// (docs/serve.md). Fields in alphabetical order, as the JSON object it
/// once was printed them.
fn flame_json(d: &CallData, inverted: bool, min_share: f64, epochs: &[EpochId]) -> Result<Vec<u8>, String> {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        epochs: Vec<u32>,
        event: &'a str,
        inverted: bool,
        root: flame::FlameTree<'a>,
        total: u64,
        unwind_stopped: u64,
    }
    let doc = Doc {
        epochs: epochs.iter().map(|e| e.0).collect(),
        event: &d.events[0].0,
        inverted,
        root: flame::FlameTree::new(d, 0, inverted).prune(min_share),
        total: d.totals[0],
        unwind_stopped: d.truncated[0],
    };
    crate::output::json_text(&doc).map(|s| (s + "\n").into_bytes()).map_err(|e| e.to_string())
}

/// Whether `flame` answers from the server's kept stacks ([`flame_kept`]).
pub fn flame_is_kept(a: &FlameArgs) -> bool {
    a.format == Some(FlameFormat::Json) && a.source.source.is_none() && crate::stack_cache::enabled()
}

/// `flame --format json` in a server: the tree of the selection's stacks
/// among the kept ones of its epochs ([`crate::stack_cache`]), written as
/// [`flame_json`] writes it compact, byte for byte, into one buffer of its
/// exact size (the server sends and keeps that buffer as it is).
pub fn flame_kept(a: &FlameArgs) -> Result<Vec<u8>> {
    let s = &a.select;
    let db = Database::open(&s.db.db)?;
    let ids = epochs(&db, s)?;
    let kept = crate::stack_cache::get(&s.db.db, &ids, s.event.as_deref(), || {
        let (tables, events) = read(&db, s, &ids, false)?;
        let mut syms = Symbols::for_db(&s.db.db);
        Ok(callgraph::resolve(&tables, &events, &Selection { keep: &|_| true, keep_image: &|_| true }, &mut syms))
    })?;
    let filter = filter(&db, s, &ids)?;
    let (keep, keep_image) = (|p: &_| filter.keep_process(p), |i: &str| filter.keep_image(i));
    let (d, index) = (&kept.data, &kept.index);
    let sel = index.select(d, 0, &Selection { keep: &keep, keep_image: &keep_image });
    warn_truncated_of(sel.total, sel.truncated);
    let tree = flame::FlameTree::of_stacks(d, index, &sel.stacks, 0, a.inverted).prune(a.min_share.unwrap_or(0.0));
    let mut head = b"{\"epochs\":".to_vec();
    serde_json::to_writer(&mut head, &ids.iter().map(|e| e.0).collect::<Vec<u32>>())?;
    head.extend_from_slice(b",\"event\":");
    serde_json::to_writer(&mut head, &d.events[0].0)?;
    head.extend_from_slice(if a.inverted { b",\"inverted\":true,\"root\":" } else { b",\"inverted\":false,\"root\":" });
    let tail = format!(",\"total\":{},\"unwind_stopped\":{}}}\n", sel.total, sel.truncated);
    let mut out = Vec::with_capacity(head.len() + tree.json_len() + tail.len());
    out.extend_from_slice(&head);
    tree.write_json(&mut out);
    out.extend_from_slice(tail.as_bytes());
    Ok(out)
}

/// The epochs a selection reads (for the JSON to say which).
fn epochs_of(s: &StackSelection) -> Result<Vec<EpochId>> {
    epochs(&Database::open(&s.db.db)?, s)
}

pub fn export(a: ExportArgs, out: &mut dyn Write) -> Result<u8> {
    let all_events = a.format == ExportFormat::Pprof || a.format == ExportFormat::Speedscope;
    let (d, span) = load_spanned(&a.select, &a.source, all_events)?;
    warn_truncated(&d);
    let bytes = match a.format {
        ExportFormat::Pprof => pprof::encode_gz(&pprof::profile(&d, span)),
        ExportFormat::Collapsed => ex::collapsed_rooted(&d, 0, false, a.root.into()).into_bytes(),
        ExportFormat::Perfetto => ex::perfetto(&d, 0),
        ExportFormat::Speedscope => ex::speedscope(&d, "loupe").into_bytes(),
    };
    out.write_all(&bytes)?;
    Ok(0)
}

/// `top --children` and `--callers/--callees`.
pub fn top(a: TopArgs, out: &mut dyn Write) -> Result<u8> {
    let sel = StackSelection {
        db: a.db.clone(),
        epoch: a.epoch.clone(),
        pid: a.pid.clone(),
        comm: a.comm.clone(),
        image: a.image.clone(),
        event: EventFlag { event: a.events.first().cloned() },
        cgroup: a.cgroup.clone(),
    };
    let d = load(&sel, &a.source, false)?;
    match a.callers.as_deref().or(a.callees.as_deref()) {
        Some(p) => neighbors(out, &d, p, a.callers.is_some(), a.callees.is_some(), a.format, a.limit),
        None => children(out, &d, a.format, a.limit),
    }
}

fn children(out: &mut dyn Write, d: &CallData, format: Format, limit: usize) -> Result<u8> {
    let rows = callgraph::costs(d);
    let total = d.totals[0];
    if format == Format::Json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .take(limit)
            .map(|r| {
                serde_json::json!({ "procedure": r.procedure, "image": r.image,
                    "inclusive": r.inclusive[0], "self": r.self_[0],
                    "inclusive_percent": round2(pct(r.inclusive[0], total)), "self_percent": round2(pct(r.self_[0], total)) })
            })
            .collect();
        let doc = serde_json::json!({ "event": d.events[0].0, "total_samples": total, "truncated_samples": d.truncated[0], "rows": rows });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(0);
    }
    writeln!(out, "# Loupe top --children: {} samples of event '{}' with call stacks", total, d.events[0])?;
    writeln!(out, "# Unwinds stopped before the root: {} ({:.2}%), shown as [unwind stopped]", d.truncated[0], pct(d.truncated[0], total))?;
    writeln!(out, "#\n# {:>9} {:>9}  {:<34} image\n#", "Children", "Self", "procedure")?;
    for r in rows.iter().take(limit) {
        let line = format!("  {:>8.2}% {:>8.2}%  {:<34} {}", pct(r.inclusive[0], total), pct(r.self_[0], total), r.procedure, r.image);
        writeln!(out, "{}", line.trim_end())?;
    }
    if rows.len() > limit {
        writeln!(out, "# ... {} more rows (--limit)", rows.len() - limit)?;
    }
    Ok(0)
}

fn neighbors(out: &mut dyn Write, d: &CallData, p: &str, callers: bool, callees: bool, format: Format, limit: usize) -> Result<u8> {
    let nb = callgraph::neighbors(d, p);
    let total = d.totals[0];
    if nb.inclusive[0] == 0 {
        bail!(crate::procedure::NoSuchProcedure(format!(
            "no procedure named {p:?} in the selected stacks (names are as `loupe top --children` prints them)"
        )));
    }
    let list = |v: &[(String, Vec<u64>)]| -> Vec<serde_json::Value> {
        v.iter()
            .take(limit)
            .map(|(n, c)| serde_json::json!({ "procedure": n, "samples": c[0], "percent": round2(pct(c[0], nb.inclusive[0])) }))
            .collect()
    };
    if format == Format::Json {
        let mut doc = serde_json::json!({ "procedure": p, "event": d.events[0].0, "total_samples": total,
            "inclusive": nb.inclusive[0], "self": nb.self_[0] });
        if callers {
            doc["callers"] = list(&nb.callers).into();
        }
        if callees {
            doc["callees"] = list(&nb.callees).into();
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "# {p}: {:.2}% inclusive, {:.2}% self of {} samples of '{}'",
        pct(nb.inclusive[0], total),
        pct(nb.self_[0], total),
        total,
        d.events[0]
    )?;
    let mut section = |title: &str, v: &[(String, Vec<u64>)]| -> Result<()> {
        writeln!(out, "#\n# {title} (share of {p}'s inclusive samples)")?;
        for (n, c) in v.iter().take(limit) {
            writeln!(out, "  {:>10} {:>7.2}%  {n}", c[0], pct(c[0], nb.inclusive[0]))?;
        }
        Ok(())
    };
    if callers {
        section("callers", &nb.callers)?;
    }
    if callees {
        section("callees", &nb.callees)?;
    }
    Ok(0)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
