//! `loupe calc` (DCPI's dcpicalc): estimated execution counts, CPI and
//! stall culprits of one procedure, printed like DCPI's Figures 2 and 4.

use crate::flags::{CalcArgs, Format};
use crate::machine::{check_model, measure_ghz, LlvmMca, ModelCheck};
use crate::procedure::{find_procedure, load, symbolizer, Filter, Mem, Selected};
use anyhow::{anyhow, bail, Result};
use loupe_calc::culprit::Cause;
use loupe_calc::estimate::{Combine, Options};
use loupe_calc::hwbound::{self, Bound, EventSamples, HwEvents, Penalties};
use loupe_calc::mca::MachineModel;
use loupe_calc::{analyze_counted, Calc, Counted};
use loupe_model::EventName;
use loupe_store::query::ProfileSource;
use loupe_store::Database;
use std::io::Write;
use std::path::Path;

pub fn run(a: CalcArgs, out: &mut dyn Write) -> Result<u8> {
    let p = &a.proc_;
    if !(a.memory_ns.is_finite() && a.memory_ns > 0.0) {
        bail!("--memory-ns must be a positive number of nanoseconds, got {}", a.memory_ns);
    }
    let mut syms = symbolizer(&p.db.db);
    let filter = Filter { image: &p.image, epoch: &p.epoch, pids: &p.pid, comms: &p.comm };
    let progress = crate::progress::Progress::spinner(&format!("reading the samples of {}", p.image));
    let sel = load(&p.db.db, &filter, &mut syms)?;
    let ev = EventName::new(&a.event);
    let Some(samples) = sel.samples.get(&ev) else {
        let have: Vec<&str> = sel.samples.keys().map(|e| e.as_str()).collect();
        bail!("no samples of event {} in {} (events present: {})", a.event, sel.image.path, have.join(", "));
    };
    let (n, period_sum) = sel.totals[&ev];
    let (ghz, clock_note, clock_source) = match (a.event.as_str(), a.cpu_ghz) {
        ("cycles", _) => (1.0, "period counted in cycles".to_string(), "cycles"),
        ("cpu-clock" | "task-clock", Some(g)) => (g, format!("clock {g:.2} GHz (--cpu-ghz)"), "flag"),
        ("cpu-clock" | "task-clock", None) => match recorded_ghz(&p.db.db, &sel, &ev)? {
            Some((g, with, of)) if with == of => (g, format!("clock {g:.2} GHz (recorded with the profile)"), "recorded"),
            Some((g, with, of)) => {
                eprintln!("loupe: warning: {} of {of} epochs have no recorded clock; using the others' {g:.2} GHz", of - with);
                (g, format!("clock {g:.2} GHz (recorded with {with} of {of} epochs)"), "recorded")
            }
            None => {
                let g = measure_ghz();
                eprintln!("loupe: warning: the profile has no recorded clock (older loupe); measured this machine's: {g:.2} GHz");
                (g, format!("clock {g:.2} GHz (measured here)"), "measured")
            }
        },
        (e, _) => bail!("calc needs a time event (cpu-clock, task-clock or cycles), not {e}"),
    };
    let period_cycles = period_sum as f64 / n.max(1) as f64 * ghz;
    let code = syms.code(&sel.image).map_err(|r| anyhow!("cannot read {}: {r}", sel.image.path))?;
    let proc_ = find_procedure(&code, &p.procedure, &sel.image.path)?;
    let bytes = code.bytes(proc_.start, proc_.size).ok_or_else(|| anyhow!("{} has no bytes in the file", proc_.name))?;
    progress.stage(&format!("modelling {} ({} bytes) with llvm-mca", proc_.name, proc_.size));
    let mut model = LlvmMca::find(a.llvm_mca.as_deref(), &a.mcpu)?;
    // Timed on this machine's clock now, whatever the profile's was.
    let model_check = check_model(&mut model, measure_ghz())?;
    let combine = if a.solver == "global" { Combine::Global } else { Combine::Local };
    let opt = Options { combine, branching_loops: a.branching_loops == "on", retire_window: a.retire_window as usize };
    let counts = counts_of(&p.db.db, &sel.image.path, &proc_.name);
    let counted = counts.as_ref().map_or_else(Vec::new, counted_points);
    let mut calc =
        analyze_counted(proc_.start, bytes, samples, period_cycles, &mut model, &Mem(&code), opt, &counted).map_err(|e| anyhow!("{e}"))?;
    // Software events (clocks, faults, switches) are not hardware evidence; names perf does not know here (raw PMU events) may be.
    let hw: Vec<&str> = sel
        .samples
        .keys()
        .map(|e| e.as_str())
        .filter(|e| *e != a.event && loupe_perf::parse_event(e).map_or(true, |s| loupe_perf::is_hardware(&s)))
        .collect();
    let bounding = if hw.is_empty() {
        Vec::new()
    } else {
        let events = hw_events(&sel, &hw);
        let core_ghz = if a.event == "cycles" { recorded_ghz(&p.db.db, &sel, &ev)?.map_or_else(measure_ghz, |g| g.0) } else { ghz };
        let pen = Penalties::at_clock(core_ghz, a.memory_ns);
        hwbound::apply(&mut calc, &events, &pen);
        let with_cycles = |c| hwbound::bounding_events(c, &events).into_iter().map(|(e, p)| (e, pen.cycles(p))).collect();
        Cause::ALL.iter().map(|&c| (c, with_cycles(c))).collect()
    };
    let head = Header {
        procedure: &proc_.name,
        image: &sel.image.path,
        epochs: epoch_ranges(&sel.epochs),
        event: &a.event,
        model: model.describe(),
        model_check,
        counting: counts.map(|c| counting_note(&c, counted.len())),
        clock: clock_note,
        clock_source,
        ghz,
        hw_events: hw.join(", "),
        bounding,
    };
    match p.format {
        Format::Json => json(out, &head, &calc),
        Format::Text => text(out, &head, &calc),
    }?;
    Ok(0)
}

struct Header<'a> {
    procedure: &'a str,
    image: &'a str,
    epochs: String,
    event: &'a str,
    model: String,
    /// The model against loops timed here at start.
    model_check: ModelCheck,
    /// What `record --count` measured, when it did.
    counting: Option<(String, serde_json::Value)>,
    clock: String,
    /// Where the clock came from: "recorded", "measured", "flag" or "cycles".
    clock_source: &'static str,
    ghz: f64,
    hw_events: String,
    /// Per cause, the events present that bound it and the cycles each event costs at most (empty without hardware events).
    bounding: Vec<(Cause, Vec<(&'static str, f64)>)>,
}

/// The procedure's counts from `record --count`, if any; unreadable ones are named and left out.
fn counts_of(db: &Path, image: &str, procedure: &str) -> Option<loupe_probe::count::Counts> {
    let path = crate::count::counts_path(db, image, procedure);
    match loupe_probe::count::Counts::load(&path) {
        Ok(c) => c.filter(|c| c.image == image || Path::new(&c.image).file_name() == Path::new(image).file_name()),
        Err(e) => {
            eprintln!("loupe: warning: ignoring unreadable counts {}: {e}", path.display());
            None
        }
    }
}

/// The instructions counted, with executions and 95% half-widths.
fn counted_points(c: &loupe_probe::count::Counts) -> Vec<Counted> {
    c.all_executions().into_iter().map(|(a, (e, h))| Counted { address: a.0, executions: e, half_width: h }).collect()
}

/// One line and a JSON object saying what the counting measured and cost.
fn counting_note(c: &loupe_probe::count::Counts, used: usize) -> (String, serde_json::Value) {
    let entries =
        c.entries.map_or_else(|| format!("not counted: {}", c.not_counted.as_deref().unwrap_or("no uprobe reading")), |e| e.to_string());
    // Whole calls in windows, or one call longer than any window chained across them by an induction register.
    let how = if c.classes.iter().any(|k| !k.windows.is_empty()) || c.entries != Some(1) { "whole calls" } else { "one call chained" };
    let refused = c.refused();
    // The first reason stands for the rest in the text; JSON lists each class's.
    let left = refused.first().map_or(String::new(), |r| format!("; {} left estimated, e.g. {:#x}: {}", refused.len(), r.0 .0, r.1));
    let line = match &c.not_counted {
        Some(why) => {
            format!("nothing counted: {why} (windows armed {:.2} s of a {:.2} s run, {} traps)", c.armed_secs, c.wall_secs, c.traps)
        }
        None => format!(
            "{used} of {} classes counted ({entries} entries by uprobe, {how} in windows armed {:.2} s of a {:.2} s run, {} traps{left})",
            c.classes.len() + 1,
            c.armed_secs,
            c.wall_secs,
            c.traps
        ),
    };
    let why: Vec<serde_json::Value> =
        refused.iter().map(|(a, w)| serde_json::json!({"address": format!("{:#x}", a.0), "why": w})).collect();
    let v = serde_json::json!({"classes_counted": used, "entries": c.entries, "armed_secs": c.armed_secs,
        "wall_secs": c.wall_secs, "traps": c.traps, "not_counted": why, "given_up": c.not_counted});
    (line, v)
}

fn how(counted: bool, executions: Option<f64>) -> Option<&'static str> {
    executions.map(|_| if counted { "counted" } else { "estimated" })
}

fn interval_json(i: Option<(f64, f64)>) -> serde_json::Value {
    i.map_or(serde_json::Value::Null, |(a, b)| serde_json::json!([a.round(), b.round()]))
}

/// The selection's hardware events, each with its mean events per sample.
fn hw_events(sel: &Selected, names: &[&str]) -> HwEvents {
    names
        .iter()
        .filter_map(|n| {
            let e = EventName::new(n);
            let (count, period_sum) = sel.totals.get(&e).copied()?;
            let samples = sel.samples.get(&e)?.clone();
            Some((n.to_string(), EventSamples { samples, period: period_sum as f64 / count.max(1) as f64 }))
        })
        .collect()
}

/// The core clock stored with the selected epochs (`loupe record` and the
/// daemon measure it while recording), averaged with the weight of each
/// epoch's period sum of `ev` in the image: (GHz, epochs with a clock,
/// epochs with samples); None when no epoch with samples has one.
fn recorded_ghz(db: &Path, sel: &Selected, ev: &EventName) -> Result<Option<(f64, usize, usize)>> {
    let db = Database::open(db)?;
    let infos = db.list_epochs()?;
    let (mut sum, mut weight, mut with, mut of) = (0.0, 0.0, 0, 0);
    for &e in &sel.epochs {
        let (totals, _) = db.totals(e)?;
        let w: u64 = totals.iter().filter(|x| x.image == sel.image && &x.event == ev).map(|x| x.period_sum).sum();
        if w == 0 {
            continue;
        }
        of += 1;
        let ghz = infos.iter().find(|i| i.id == e).and_then(|i| i.meta.clock.ghz);
        if let Some(g) = ghz.filter(|g| *g > 0.0) {
            with += 1;
            sum += g * w as f64;
            weight += w as f64;
        }
    }
    Ok((with > 0).then(|| (sum / weight, with, of)))
}

/// Epochs as runs: 1-168 for a week of hourly epochs, not 168 numbers.
fn epoch_ranges(epochs: &[loupe_store::EpochId]) -> String {
    let mut ids: Vec<u32> = epochs.iter().map(|e| e.0).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for id in ids {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == id => *hi = id,
            _ => runs.push((id, id)),
        }
    }
    let text: Vec<String> = runs.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    text.join(",")
}

fn hex(a: u64) -> String {
    format!("{a:x}")
}

fn json(out: &mut dyn Write, h: &Header, c: &Calc) -> Result<()> {
    let insns: Vec<serde_json::Value> = c
        .instructions
        .iter()
        .map(|r| {
            let culprits: Vec<serde_json::Value> = r
                .culprits
                .iter()
                .zip(&r.bounds)
                .map(|(k, b)| {
                    serde_json::json!({"cause": k.cause, "at": k.at.map(hex), "bound_cycles": b.bound_cycles.map(f64::round),
                        "ruled_out": b.ruled_out, "evidence": b.evidence})
                })
                .collect();
            serde_json::json!({
                "address": hex(r.address), "instruction": r.instruction, "samples": r.samples,
                "executions": r.executions.map(f64::round), "how": how(r.counted, r.executions),
                "interval": interval_json(r.interval), "cpi": r.cpi, "confidence": r.confidence,
                "min_cycles": r.min_cycles, "stall": r.stall.max(0.0), "culprits": culprits,
            })
        })
        .collect();
    let blocks: Vec<serde_json::Value> = c
        .blocks
        .iter()
        .map(|b| {
            serde_json::json!({"start": hex(b.start), "end": hex(b.end), "executions": b.executions.map(f64::round),
                "interval": interval_json(b.interval),
                "confidence": b.confidence, "class": b.class, "how": b.how, "reachable": b.reachable})
        })
        .collect();
    let edges: Vec<serde_json::Value> = c
        .edges
        .iter()
        .map(|e| serde_json::json!({"from": hex(e.from), "to": hex(e.to), "executions": e.executions.map(f64::round), "confidence": e.confidence}))
        .collect();
    let doc = serde_json::json!({
        "procedure": h.procedure, "image": h.image, "epochs": h.epochs, "event": h.event,
        "model": h.model, "model_check": model_check_json(&h.model_check),
        "counting": h.counting.as_ref().map(|c| c.1.clone()), "clock": h.clock, "clock_source": h.clock_source, "cpu_ghz": h.ghz, "period_cycles": c.period_cycles,
        "hardware_events": if h.hw_events.is_empty() { serde_json::Value::Null } else { h.hw_events.clone().into() },
        "missing_edges": c.missing_edges, "classes": c.classes,
        "instructions": insns, "blocks": blocks, "edges": edges, "summary": c.summary,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

fn model_check_json(m: &ModelCheck) -> serde_json::Value {
    let loops: Vec<serde_json::Value> =
        m.loops.iter().map(|(n, mo, t)| serde_json::json!({"loop": n, "modelled_cycles": mo, "timed_cycles": t})).collect();
    serde_json::json!({"loops": loops, "mean_error": m.error()})
}

fn text(out: &mut dyn Write, h: &Header, c: &Calc) -> Result<()> {
    let s = &c.summary;
    writeln!(out, "*** {} in {} (epoch {}), {} samples of {}", h.procedure, h.image, h.epochs, s.samples, h.event)?;
    writeln!(out, "*** model: {}; {}; {:.0} cycles per sample", h.model, h.clock, c.period_cycles)?;
    writeln!(out, "*** model check: {}", h.model_check.describe())?;
    if let Some((line, _)) = &h.counting {
        writeln!(out, "*** counted: {line}")?;
    }
    let cfg_note =
        if c.missing_edges { "CFG missing edges (unresolved indirect jump): one class per block and edge" } else { "CFG complete" };
    writeln!(out, "*** {} blocks, {} frequency classes; {cfg_note}", c.blocks.len(), c.classes)?;
    if h.hw_events.is_empty() {
        writeln!(out, "*** No hardware event samples (no PMU): culprits are possible causes, not bounded by event counts.")?;
    } else {
        hw_note(out, h)?;
    }
    writeln!(out, "***")?;
    writeln!(out, "{:>8}  {:<40} {:>8} {:>12} {:>8} {:<6}  Culprit", "Addr", "Instruction", "Samples", "Executions", "CPI", "Conf")?;
    let mut block = usize::MAX;
    for r in &c.instructions {
        if r.block != block {
            block = r.block;
            block_header(out, c, block)?;
        }
        if !r.culprits.is_empty() {
            bubbles(out, r, !h.bounding.is_empty())?;
        }
        let execs = r.executions.map_or("-".into(), |e| format!("{e:.0}"));
        let cpi = r.cpi.map_or("-".into(), |x| format!("{x:.1}cy"));
        let conf = if r.counted { "counted".into() } else { r.confidence.map_or("-".into(), |x| format!("{x:?}").to_lowercase()) };
        let live = r.culprits.iter().zip(&r.bounds).filter(|(_, b)| !b.ruled_out);
        let blame: Vec<String> = live.filter_map(|(k, _)| k.at).map(hex).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        writeln!(
            out,
            "{:>8x}  {:<40} {:>8} {:>12} {:>8} {:<6}  {}",
            r.address,
            r.instruction,
            r.samples,
            execs,
            cpi,
            conf,
            blame.join(" ")
        )?;
    }
    summary(out, c, &h.bounding)
}

fn block_header(out: &mut dyn Write, c: &Calc, b: usize) -> Result<()> {
    let blk = &c.blocks[b];
    let rows: Vec<&loupe_calc::InsnReport> = c.instructions.iter().filter(|r| r.block == b).collect();
    let n = rows.len() as f64;
    let best: f64 = rows.iter().map(|r| r.min_cycles).sum();
    let actual: Option<f64> = rows.iter().map(|r| r.cpi).sum();
    let execs = blk.executions.map_or("unknown".into(), |e| format!("{e:.0}"));
    let conf = match (blk.how, blk.interval) {
        (Some(h), Some((lo, hi))) if h.counted() => format!(" (counted, 95% {lo:.0}-{hi:.0})"),
        _ => blk.confidence.map_or(String::new(), |x| format!(" ({x:?} confidence)").to_lowercase()),
    };
    writeln!(out)?;
    writeln!(out, "*** block {:x}-{:x}: executions {execs}{conf}", blk.start, blk.end)?;
    writeln!(out, "*** Best-case {best:.1}/{n} = {:.2}CPI", best / n)?;
    if let Some(a) = actual {
        writeln!(out, "*** Actual {a:.1}/{n} = {:.2}CPI", a / n)?;
    }
    Ok(())
}

/// Figure 2's bubbles: the letters of the culprits not ruled out, what
/// they mean, the stall; with hardware events, each culprit's bound and
/// the ruled-out ones after them.
fn bubbles(out: &mut dyn Write, r: &loupe_calc::InsnReport, events: bool) -> Result<()> {
    let pairs: Vec<_> = r.culprits.iter().zip(&r.bounds).collect();
    let letters: String = pairs.iter().filter(|(_, b)| !b.ruled_out).map(|(k, _)| k.cause.letter()).collect();
    let why: Vec<String> = pairs
        .iter()
        .filter(|(_, b)| !b.ruled_out)
        .map(|(k, b)| {
            let base = match k.at {
                Some(a) => format!("{} = {} at {a:x}", k.cause.letter(), k.cause.name()),
                None => format!("{} = {}", k.cause.letter(), k.cause.name()),
            };
            if events {
                format!("{base} [{}]", bound_text(b, r.executions))
            } else {
                base
            }
        })
        .collect();
    let ruled_out: Vec<String> =
        pairs.iter().filter(|(_, b)| b.ruled_out).map(|(k, b)| format!("{} [{}]", k.cause.letter(), evidence_text(b))).collect();
    let ruled = if ruled_out.is_empty() { String::new() } else { format!("; ruled out: {}", ruled_out.join(", ")) };
    let why = if why.is_empty() { "all culprits ruled out".to_string() } else { why.join(", ") };
    writeln!(out, "{:>10}{letters:<6} ({why}{ruled}) ... {:.1}cy stall", "", r.stall)?;
    Ok(())
}

/// "at most 3.1cy: branch-misses 37 samples, ..." or "possible, not bounded".
fn bound_text(b: &Bound, executions: Option<f64>) -> String {
    match (b.bound_cycles, executions.filter(|e| *e > 0.0)) {
        (Some(x), Some(e)) => format!("at most {:.1}cy: {}", x / e, evidence_text(b)),
        _ if !b.evidence.is_empty() => format!("possible, not bounded: {}", evidence_text(b)),
        _ => "possible, not bounded".to_string(),
    }
}

/// "branch-misses 0 samples, 41.2 expected".
fn evidence_text(b: &Bound) -> String {
    let each: Vec<String> = b
        .evidence
        .iter()
        .map(|e| match e.expected_samples {
            Some(x) => format!("{} {} samples, {x:.1} expected", e.event, e.samples),
            None => format!("{} {} samples, counts only part", e.event, e.samples),
        })
        .collect();
    each.join("; ")
}

/// The header line when the database has hardware events: which bound
/// which cause, and with what penalty.
fn hw_note(out: &mut dyn Write, h: &Header) -> Result<()> {
    let each = |e: &[(&str, f64)]| e.iter().map(|(n, p)| format!("{n} ({p:.0}cy each)")).collect::<Vec<_>>().join(", ");
    let used: Vec<String> =
        h.bounding.iter().filter(|(_, e)| !e.is_empty()).map(|(c, e)| format!("{} bounds {}", each(e), c.letter())).collect();
    if used.is_empty() {
        writeln!(out, "*** Hardware events present: {} (none of them bounds a culprit: culprits are possible, not bounded)", h.hw_events)?;
    } else {
        writeln!(
            out,
            "*** Hardware events present: {}; {} (events x period x penalty; no sample where >= {} expected rules out)",
            h.hw_events,
            used.join(", "),
            hwbound::RULE_OUT_SAMPLES
        )?;
    }
    Ok(())
}

/// Figure 4: where the procedure's cycles went.
fn summary(out: &mut dyn Write, c: &Calc, bounding: &[(Cause, Vec<(&'static str, f64)>)]) -> Result<()> {
    let s = &c.summary;
    let cyc = s.samples_with_estimates as f64 * c.period_cycles;
    let pct = |x: f64| if cyc > 0.0 { 100.0 * x / cyc } else { 0.0 };
    writeln!(out)?;
    writeln!(out, "*** Summary of the procedure (cycles from samples with estimates: {cyc:.0})")?;
    writeln!(
        out,
        "*** Best-case {:.0}/{:.0} = {:.2}CPI",
        s.best_case_cycles,
        s.instructions_executed,
        s.best_case_cycles / s.instructions_executed.max(1.0)
    )?;
    writeln!(out, "*** Actual {:.0}/{:.0} = {:.2}CPI", cyc, s.instructions_executed, cyc / s.instructions_executed.max(1.0))?;
    writeln!(out, "***")?;
    for cause in Cause::ALL {
        let (lo, hi) = s.causes[cause.name()];
        let names = |e: &[(&str, f64)]| e.iter().map(|x| x.0).collect::<Vec<_>>().join(", ");
        let by = bounding.iter().find(|(c, _)| *c == cause).map(|(_, e)| {
            if e.is_empty() {
                "  possible, not bounded".to_string()
            } else {
                format!("  bounded by {}", names(e))
            }
        });
        writeln!(out, "*** {:<20} {:>5.1}% to {:>5.1}%{}", cause.name(), pct(lo), pct(hi), by.unwrap_or_default())?;
    }
    writeln!(out, "***")?;
    writeln!(out, "*** {:<20} {:>5.1}%", "Unexplained stall", pct(s.unexplained_stall))?;
    writeln!(out, "*** {:<20} {:>5.1}%", "Unexplained gain", pct(s.unexplained_gain))?;
    writeln!(out, "*** -----")?;
    writeln!(out, "*** {:<20} {:>5.1}%", "Subtotal dynamic", pct(s.dynamic_stall))?;
    writeln!(out, "*** {:<20} {:>5.1}%", "Static (best case)", pct(s.best_case_cycles))?;
    if s.samples > s.samples_with_estimates {
        writeln!(out, "*** {} samples in blocks without an estimate", s.samples - s.samples_with_estimates)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use loupe_store::EpochId;

    #[test]
    fn epochs_print_as_runs() {
        // Checks consecutive epochs collapse to a-b runs and single ones stay alone.
        let e = |v: &[u32]| super::epoch_ranges(&v.iter().map(|&x| EpochId(x)).collect::<Vec<_>>());
        assert_eq!(e(&[1, 2, 3, 5, 7, 8]), "1-3,5,7-8");
        assert_eq!(e(&[4]), "4");
    }
}
