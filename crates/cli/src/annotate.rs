//! `loupe annotate`: one procedure's disassembly with samples and percent
//! per instruction per event, source lines interleaved (like perf annotate).

use crate::flags::{AnnotateArgs, Format};
use crate::procedure::{events, find_procedure, load, symbolizer, Filter};
use anyhow::{anyhow, Result};
use loupe_analysis::top::pct;
use loupe_calc::decode::decode;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

struct Row {
    addr: u64,
    text: String,
    counts: Vec<u64>,
    file: Option<String>,
    line: Option<u32>,
}

pub fn run(a: AnnotateArgs, out: &mut dyn Write) -> Result<u8> {
    let p = &a.proc_;
    let mut syms = symbolizer(&p.db.db);
    let filter = Filter { image: &p.image, epoch: &p.epoch, pids: &p.pid, comms: &p.comm };
    let sel = load(&p.db.db, &filter, &mut syms)?;
    let evs = events(&sel, &a.events)?;
    let code = syms.code(&sel.image).map_err(|r| anyhow!("cannot read {}: {r}", sel.image.path))?;
    let proc_ = find_procedure(&code, &p.procedure, &sel.image.path)?;
    let bytes = code.bytes(proc_.start, proc_.size).ok_or_else(|| anyhow!("{} has no bytes in the file", proc_.name))?;
    let decoded = decode(proc_.start, bytes);
    let progress = crate::progress::Progress::bar(decoded.len() as u64, &format!("placing {}'s lines", proc_.name));
    let rows: Vec<Row> = decoded
        .into_iter()
        .map(|x| {
            progress.inc(1);
            let counts = evs.iter().map(|e| sel.samples[e].get(&x.addr).copied().unwrap_or(0)).collect();
            let (file, line) = code.line(x.addr);
            Row { addr: x.addr, text: x.text, counts, file, line }
        })
        .collect();
    let totals: Vec<u64> = (0..evs.len()).map(|k| rows.iter().map(|r| r.counts[k]).sum()).collect();
    let names: Vec<&str> = evs.iter().map(|e| e.as_str()).collect();
    match p.format {
        Format::Json => json(out, &sel.image.path, &proc_.name, &names, &rows, &totals),
        Format::Text => text(out, &sel.image.path, &proc_.name, &names, &rows, &totals, a.source),
    }?;
    Ok(0)
}

/// Samples per source line (first event), hottest first.
fn line_totals(rows: &[Row]) -> Vec<((String, u32), u64)> {
    let mut by: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for r in rows {
        if let (Some(f), Some(l)) = (&r.file, r.line) {
            *by.entry((f.clone(), l)).or_insert(0) += r.counts.first().copied().unwrap_or(0);
        }
    }
    let mut v: Vec<_> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

fn json(out: &mut dyn Write, image: &str, procedure: &str, evs: &[&str], rows: &[Row], totals: &[u64]) -> Result<()> {
    let per = |counts: &[u64], f: &dyn Fn(usize, u64) -> serde_json::Value| -> serde_json::Value {
        evs.iter().enumerate().map(|(k, e)| (e.to_string(), f(k, counts[k]))).collect()
    };
    let insns: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "address": format!("{:x}", r.addr), "instruction": r.text,
                "samples": per(&r.counts, &|_, n| n.into()),
                "percent": per(&r.counts, &|k, n| ((pct(n, totals[k]) * 100.0).round() / 100.0).into()),
                "file": r.file, "line": r.line,
            })
        })
        .collect();
    let lines: Vec<serde_json::Value> =
        line_totals(rows).into_iter().map(|((f, l), n)| serde_json::json!({"file": f, "line": l, "samples": n})).collect();
    let doc = serde_json::json!({
        "image": image, "procedure": procedure, "events": evs,
        "total_samples": per(totals, &|_, n| n.into()), "instructions": insns, "lines": lines,
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

fn text(out: &mut dyn Write, image: &str, procedure: &str, evs: &[&str], rows: &[Row], totals: &[u64], source: bool) -> Result<()> {
    let head: Vec<String> = evs.iter().zip(totals).map(|(e, t)| format!("{t} samples of {e}")).collect();
    writeln!(out, " Percent |      Source code & Disassembly of {procedure} in {image} ({})", head.join(", "))?;
    writeln!(out, "{}", "-".repeat(78))?;
    let hot: HashMap<(String, u32), u64> = line_totals(rows).into_iter().take(5).filter(|(_, n)| *n > 0).collect();
    let mut files: HashMap<String, Option<Vec<String>>> = HashMap::new();
    let mut last_line = None;
    for r in rows {
        if source {
            if let (Some(f), Some(l)) = (&r.file, r.line) {
                if last_line != Some((f.clone(), l)) {
                    let src = files
                        .entry(f.clone())
                        .or_insert_with(|| std::fs::read_to_string(f).ok().map(|s| s.lines().map(String::from).collect()));
                    let text = src.as_ref().and_then(|v| v.get(l as usize - 1)).map_or("", |s| s.as_str());
                    let mark = if hot.contains_key(&(f.clone(), l)) { '*' } else { ' ' };
                    let share = hot.get(&(f.clone(), l)).map_or(String::new(), |n| format!("{:.2}%", pct(*n, totals[0])));
                    let base = f.rsplit('/').next().unwrap_or(f);
                    writeln!(out, "{share:>8}{mark}:   {base}:{l}  {}", text.trim_end())?;
                    last_line = Some((f.clone(), l));
                }
            }
        }
        let cols: String = r
            .counts
            .iter()
            .enumerate()
            .map(|(k, n)| if *n == 0 { format!("{:>8} ", "") } else { format!("{:>8.2} ", pct(*n, totals[k])) })
            .collect();
        let counts: String = r.counts.iter().map(|n| format!("{n:>7} ")).collect();
        writeln!(out, "{cols}:   {:>8x}:  {counts} {}", r.addr, r.text)?;
    }
    Ok(())
}
