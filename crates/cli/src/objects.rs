//! `loupe data history` and `loupe data flow`: object access histories from
//! hardware breakpoints (DProf §4.3) and the data flow view built from them
//! (§3.4). Collection lives in loupe-objects; this file runs a command under
//! it and formats what the database holds.

use crate::flags::{AllocsArgs, FlowArgs, FlowFormat, Format, HistoryArgs};
use anyhow::{bail, Context, Result};
use loupe_objects::flow::{self, Flow};
use loupe_objects::history::{self, History, HistoryOptions, Line};
use loupe_objects::{AllocTracker, AllocationIndex, SiteNamer, TrackerOptions};
use loupe_perf::GatedChild;
use loupe_symbolize::Symbolizer;
use std::io::Write;
use std::time::Duration;

pub fn allocs(a: AllocsArgs, out: &mut dyn Write) -> Result<u8> {
    let (cmd, args) = a.command.split_first().expect("clap requires a command");
    loupe_files::create_dir_all(&a.db.db).with_context(|| format!("cannot create {}", a.db.db.display()))?;
    let status = if a.preload {
        let env = loupe_objects::preload::install(&a.db.db).context("installing the allocation shim")?;
        let st = std::process::Command::new(cmd).args(args).envs(env.vars).status().with_context(|| format!("running {cmd}"))?;
        st.code().unwrap_or(128)
    } else {
        let mut child = GatedChild::spawn(cmd, args)?;
        let tracker = AllocTracker::start(&a.db.db, &[child.pid as u32], &TrackerOptions::default())?;
        for w in &tracker.warnings {
            eprintln!("loupe: {w}");
        }
        child.release()?;
        let status = child.wait()?;
        let s = tracker.stop()?;
        if s.dropped > 0 {
            eprintln!("loupe: {} allocation events found the ring buffer full and are missing from the log", s.dropped);
        }
        status
    };
    let idx = AllocationIndex::load(&a.db.db)?;
    for b in &idx.stats.bad_files {
        eprintln!("loupe: skipped {b}");
    }
    let rows = site_rows(&idx);
    let text = match a.format {
        Format::Json => {
            serde_json::to_string_pretty(
                &serde_json::json!({ "source": idx.stats.sources.iter().map(|s| s.name()).collect::<Vec<_>>(), "rows": rows.iter().take(a.limit).map(|r| serde_json::json!({"site": r.site, "calls": r.calls, "bytes": r.bytes, "live": r.live})).collect::<Vec<_>>() }),
            )? + "\n"
        }
        Format::Text => render_sites(&rows, a.limit),
    };
    let _ = out.write_all(text.as_bytes());
    Ok(status.clamp(0, 255) as u8)
}

struct SiteRow {
    site: String,
    calls: u64,
    bytes: u64,
    live: u64,
}

fn site_rows(idx: &AllocationIndex) -> Vec<SiteRow> {
    let mut namer = SiteNamer::new(Symbolizer::new(crate::symbols::options()));
    let mut by: std::collections::HashMap<String, SiteRow> = Default::default();
    let mut labels: std::collections::HashMap<(u32, u64), String> = Default::default();
    for al in idx.allocations() {
        let label = labels
            .entry((al.pid, al.site))
            .or_insert_with(|| idx.site_location(al).map_or_else(|| format!("{:#x}", al.site), |l| namer.label(&l)))
            .clone();
        let r = by.entry(label.clone()).or_insert(SiteRow { site: label, calls: 0, bytes: 0, live: 0 });
        r.calls += 1;
        r.bytes += al.size;
        r.live += al.free_ns.is_none() as u64;
    }
    let mut rows: Vec<SiteRow> = by.into_values().collect();
    rows.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    rows
}

fn render_sites(rows: &[SiteRow], limit: usize) -> String {
    let mut s = format!(
        "# Allocation sites ({} in all), by bytes allocated\n# {:>10}  {:>14}  {:>8}  site\n",
        rows.len(),
        "calls",
        "bytes",
        "live"
    );
    for r in rows.iter().take(limit) {
        s.push_str(&format!("  {:>10}  {:>14}  {:>8}  {}\n", r.calls, r.bytes, r.live, r.site));
    }
    s
}

pub fn history(mut a: HistoryArgs, out: &mut dyn Write) -> Result<u8> {
    let chosen = if a.hottest || a.type_name.is_some() { Some(choose_hottest(&mut a)?) } else { None };
    let mut status = 0;
    if let Some((cmd, args)) = a.command.split_first() {
        if a.offsets.len() > 4 {
            bail!("--offset given {} times; the CPU has four debug registers", a.offsets.len());
        }
        loupe_files::create_dir_all(&a.db.db).with_context(|| format!("cannot create {}", a.db.db.display()))?;
        let opts = HistoryOptions {
            site_function: a.site.clone(),
            size: a.size,
            offsets: a.offsets.clone(),
            max_objects: a.objects,
            budget: a.budget,
            max_watch: Duration::from_secs_f64(a.max_watch),
        };
        status = collect(&a.db.db, cmd, args, opts)?;
    }
    let progress = crate::progress::Progress::spinner("reading the histories and naming their code");
    let (histories, hit_ns) = read(&a.db.db)?;
    let mut code = Code::load(&a.db.db)?;
    let text = match a.format {
        Format::Json => {
            let mut j = history_json(&histories, hit_ns, &mut code);
            if let Some(c) = chosen {
                j["chosen"] = serde_json::to_value(c)?;
            }
            serde_json::to_string_pretty(&j)? + "\n"
        }
        Format::Text => render_histories(&histories, hit_ns, a.limit, &mut code),
    };
    drop(progress);
    let _ = out.write_all(text.as_bytes());
    Ok(status)
}

/// Fills --site, --size and --offset from the access samples in --db, saying what it chose and why.
fn choose_hottest(a: &mut HistoryArgs) -> Result<loupe_dataprof::hottest::Choice> {
    use loupe_dataprof::hottest;
    let rows = crate::data::heap_accesses(&a.db)?;
    let Some(c) = hottest::choose(&rows, a.type_name.as_deref()) else {
        match &a.type_name {
            Some(t) => bail!("{}: no access samples in heap objects of type {t:?} (see `loupe data profile`)", a.db.db.display()),
            None => {
                bail!("{}: no access samples in heap objects (record with `loupe record --data`, allocations tracked)", a.db.db.display())
            }
        }
    };
    let Some(function) = hottest::site_function(&c.site) else {
        bail!("{}: the hottest objects' allocation site {} has no symbol to watch it by", a.db.db.display(), c.site)
    };
    eprintln!(
        "loupe: {} {} ({} of {} heap samples); watching objects of {} bytes from {} ({} samples)",
        if a.type_name.is_some() { "heap type" } else { "hottest heap type" },
        c.type_name,
        c.type_samples,
        rows.len(),
        c.size,
        c.site,
        c.samples
    );
    for f in &c.fields {
        let name = if f.field.is_empty() { "?" } else { &f.field };
        eprintln!("loupe:   --offset {}:{}  {name} ({} samples)", f.offset, f.len, f.samples);
    }
    (a.site, a.size) = (Some(function.to_string()), Some(c.size));
    a.offsets = c.fields.iter().map(|f| (f.offset, f.len)).collect();
    Ok(c)
}

fn collect(db: &std::path::Path, cmd: &str, args: &[String], opts: HistoryOptions) -> Result<u8> {
    let mut child = GatedChild::spawn(cmd, args)?;
    let tracker = AllocTracker::start(db, &[child.pid as u32], &TrackerOptions { history: Some(opts), ..Default::default() })?;
    for w in &tracker.warnings {
        eprintln!("loupe: {w}");
    }
    child.release()?;
    let status = child.wait()?;
    let s = tracker.stop()?;
    for e in &s.history_errors {
        eprintln!("loupe: {e}");
    }
    eprintln!(
        "loupe: {} allocations, {} frees tracked; {} objects watched; one breakpoint trap costs {} ns here",
        s.allocs,
        s.frees,
        s.histories,
        s.hit_ns.unwrap_or(0)
    );
    if s.dropped > 0 {
        eprintln!("loupe: {} allocation events found the ring buffer full and are missing from the log", s.dropped);
    }
    Ok(status.clamp(0, 255) as u8)
}

fn read(db: &std::path::Path) -> Result<(Vec<History>, Option<u64>)> {
    history::read(db).with_context(|| {
        format!("{}: no object histories (record them with `loupe data history ... -- CMD`)", db.join(history::FILE).display())
    })
}

/// Names addresses with the maps the allocation log kept for each process.
fn namer(db: &std::path::Path) -> Result<impl FnMut(u32, u64) -> String> {
    let mut code = Code::load(db)?;
    Ok(move |pid: u32, addr: u64| code.name(pid, addr))
}

/// Names code addresses and finds the instruction behind a breakpoint hit.
struct Code {
    idx: AllocationIndex,
    sites: SiteNamer,
    names: std::collections::HashMap<(u32, u64), String>,
    files: std::collections::HashMap<String, Option<Vec<u8>>>,
}

impl Code {
    fn load(db: &std::path::Path) -> Result<Code> {
        let idx = AllocationIndex::load(db).with_context(|| format!("reading the allocation log of {}", db.display()))?;
        let sites = SiteNamer::new(Symbolizer::new(crate::symbols::options()));
        Ok(Code { idx, sites, names: Default::default(), files: Default::default() })
    }

    fn name(&mut self, pid: u32, addr: u64) -> String {
        if let Some(n) = self.names.get(&(pid, addr)) {
            return n.clone();
        }
        let n = match self.idx.locate(pid, addr, u64::MAX) {
            Some(loc) => self
                .sites
                .name(&loc)
                .map(|s| s.procedure)
                .unwrap_or_else(|_| format!("{}+{:#x}", loc.path.rsplit('/').next().unwrap_or(""), loc.offset.0)),
            None => format!("{addr:#x}"),
        };
        self.names.insert((pid, addr), n.clone());
        n
    }

    /// The instruction that made a hit reported at `ip` (the next one's address), and its read/write kind.
    fn accessor(&mut self, pid: u32, ip: u64) -> Option<(u64, Option<loupe_objects::access::Kind>)> {
        let loc = self.idx.locate(pid, ip, u64::MAX)?;
        let start = self.sites.name(&loc).ok()?.procedure_start.0;
        let bytes = self.files.entry(loc.path.clone()).or_insert_with(|| std::fs::read(&loc.path).ok()).as_deref()?;
        // Function start and IP are both file offsets of one mapping, so their distance is the same at run time.
        let code = bytes.get(start as usize..loc.offset.0 as usize)?;
        let runtime_start = ip.checked_sub(loc.offset.0 - start)?;
        loupe_objects::access::instruction_ending_at(code, runtime_start, ip)
    }
}

/// History rows folded twice: identical lines back to back become one line
/// with a count, then lines that alternate (`bump_left`, `bump_right`, again)
/// become one group with its rounds, so a hot loop's field fits a screen.
fn fold_rows(rows: &[(f64, String)]) -> String {
    use loupe_objects::flow::{periods, thousands};
    // (first time, last time, row, count) of each run of identical lines.
    let mut units: Vec<(f64, f64, &str, u64)> = Vec::new();
    for (t, row) in rows {
        match units.last_mut() {
            Some(u) if u.2 == row.as_str() => (u.1, u.3) = (*t, u.3 + 1),
            _ => units.push((*t, *t, row, 1)),
        }
    }
    let mut s = String::new();
    for (i, period, rounds) in periods(&units, |a, b| a.2 == b.2) {
        let group = &units[i..i + period * rounds];
        for j in 0..period {
            let n: u64 = group.iter().skip(j).step_by(period).map(|u| u.3).sum();
            let (t, row) = (group[j].0, group[j].2);
            s.push_str(&format!("  {t:>12.3}{row}"));
            if n > 1 && rounds == 1 {
                s.push_str(&format!("  {:>12}  (the line above {} times in all, until {:.3} us)\n", "", thousands(n), group[j].1));
            } else if n > 1 {
                s.push_str(&format!("  {:>12}  ({} times)\n", "", thousands(n)));
            }
        }
        if rounds > 1 {
            let last = group.last().map_or(0.0, |u| u.1);
            s.push_str(&format!(
                "  {:>12}  (the {period} lines above alternate {} rounds, until {last:.3} us)\n",
                "",
                thousands(rounds as u64)
            ));
        }
    }
    s
}

fn render_histories(hs: &[History], hit_ns: Option<u64>, limit: usize, code: &mut Code) -> String {
    let mut s = format!(
        "# {} object access histories (hardware breakpoints); breakpoint trap cost {} ns\n\
         # function/access: the instruction before the trap IP (breakpoints trap after the access)\n",
        hs.len(),
        hit_ns.map_or("?".into(), |n| n.to_string())
    );
    for h in hs.iter().take(limit) {
        let Line::Object { id, pid, tid, cpu, base, size, site, alloc_ns, setup_ns, offsets } = &h.object else { continue };
        let offs: Vec<String> = offsets.iter().map(|(o, l)| format!("+{o}:{l}")).collect();
        s.push_str(&format!(
            "\nobject #{id}: {size} bytes at {base:#x} (pid {pid}), allocated by {} on cpu{cpu} (tid {tid}); watching {}; set-up {:.1} us\n",
            code.name(*pid, *site),
            offs.join(" "),
            *setup_ns as f64 / 1000.0
        ));
        s.push_str(&format!(
            "  {:>12}  {:>4}  {:>8}  {:>6}  {:>6}  function (instruction)\n",
            "time(us)", "cpu", "tid", "offset", "access"
        ));
        // Rows without their time, so back-to-back repeats fold (a hot loop's field traps thousands of times).
        let mut rows: Vec<(f64, String)> = Vec::new();
        for l in &h.hits {
            if let Line::Hit { offset, ip, tid, cpu, time_ns, .. } = l {
                let t = time_ns.saturating_sub(*alloc_ns) as f64 / 1000.0;
                let (at, kind) = match code.accessor(*pid, *ip) {
                    Some((start, k)) => (format!("{start:#x}"), k.map_or("?", |k| k.label())),
                    None => (format!("before {ip:#x}"), "?"),
                };
                rows.push((t, format!("  {cpu:>4}  {tid:>8}  {:>6}  {kind:>6}  {} ({at})\n", format!("+{offset}"), code.name(*pid, *ip))));
            }
        }
        s.push_str(&fold_rows(&rows));
        match &h.end {
            Some(Line::End { why, time_ns, cpu, site, tid, .. }) if why == "freed" => s.push_str(&format!(
                "  {:>12.3}  {cpu:>4}  {tid:>8}  {:>6}  {:>6}  freed by {}\n",
                time_ns.saturating_sub(*alloc_ns) as f64 / 1000.0,
                "",
                "",
                code.name(*pid, *site)
            )),
            Some(Line::End { why, .. }) => s.push_str(&format!("  (not freed while watched: {why})\n")),
            _ => s.push_str("  (history cut short)\n"),
        }
    }
    s
}

fn history_json(hs: &[History], hit_ns: Option<u64>, code: &mut Code) -> serde_json::Value {
    let mut items = Vec::new();
    for h in hs {
        let Line::Object { pid, site, .. } = &h.object else { continue };
        let Ok(mut o) = serde_json::to_value(&h.object) else { continue };
        o["site_function"] = code.name(*pid, *site).into();
        let mut hits = Vec::new();
        for l in &h.hits {
            let (Line::Hit { ip, .. }, Ok(mut v)) = (l, serde_json::to_value(l)) else { continue };
            v["function"] = code.name(*pid, *ip).into();
            if let Some((start, kind)) = code.accessor(*pid, *ip) {
                v["access_ip"] = start.into();
                v["access"] = kind.map_or("?", |k| k.label()).into();
            }
            hits.push(v);
        }
        o["hits"] = hits.into();
        o["end"] = serde_json::to_value(&h.end).unwrap_or_default();
        items.push(o);
    }
    serde_json::json!({ "source": "hardware breakpoints (debug registers)", "hit_ns": hit_ns, "histories": items })
}

pub fn flow_view(a: FlowArgs, out: &mut dyn Write) -> Result<u8> {
    let (histories, _) = read(&a.db.db)?;
    let mut name = namer(&a.db.db)?;
    let f: Flow = flow::flow(&histories, &mut name);
    let text = match a.format {
        FlowFormat::Text => flow::render_text(&f, a.limit),
        FlowFormat::Json => serde_json::to_string_pretty(&f)? + "\n",
        FlowFormat::Dot => flow::render_dot(&f),
        FlowFormat::Svg => svg(&flow::render_dot(&f))?,
    };
    let _ = out.write_all(text.as_bytes());
    Ok(0)
}

fn svg(dot: &str) -> Result<String> {
    let mut child = match std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!("graphviz `dot` not found (install graphviz), or use --format dot"),
        Err(e) => return Err(e).context("running graphviz `dot`"),
    };
    child.stdin.take().expect("piped").write_all(dot.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("graphviz `dot` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_loop_rows_fold_into_one_alternating_group() {
        // Checks 3 rounds of (left x100, right x50) read as two lines with their totals and one rounds line; a lone last line stays.
        let mut rows = Vec::new();
        for i in 0..450 {
            rows.push((i as f64, if i % 150 < 100 { " L\n" } else { " R\n" }.to_string()));
        }
        rows.push((450.0, " F\n".to_string()));
        let text = fold_rows(&rows);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        assert_eq!(
            lines,
            vec![
                "0.000 L",
                "(300 times)",
                "100.000 R",
                "(150 times)",
                "(the 2 lines above alternate 3 rounds, until 449.000 us)",
                "450.000 F"
            ],
            "{text}"
        );
    }
}
