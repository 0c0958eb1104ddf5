//! The fleet commands: shipping beside `record`/`daemon` (`--ship`),
//! `loupe fleet init`, and `top|flame|export|diff --source`. The store
//! itself lives in `loupe_fleet`; here are flags, the flush hook, and the
//! adapters that turn fleet query results into what the local commands
//! render (stack tables, flat profiles).

use crate::flags::{By, EpochFlag, FleetArgs, FleetCommand, Format, Selection as StackSelection, ShipArgs, SourceArgs, TopArgs, TopBy};
use crate::symbols::Symbols;
use anyhow::{bail, Context, Result};
use loupe_analysis::callgraph::{self, CallData};
use loupe_analysis::pprof::Span;
use loupe_analysis::top::top as top_table;
use loupe_analysis::{SymInfo, SymbolSource, Unnamed};
use loupe_collector::daemon::FlushSink;
use loupe_fleet::client::Client;
use loupe_fleet::query::{self, Cond, Selection};
use loupe_fleet::rows::{image_key, image_of, rows_of, stack_rows_of, Batch, Row, RowContext, StackDef, StackRow, SymRow};
use loupe_fleet::schema::{self, InitOptions};
use loupe_fleet::ship::{ShipOptions, Shipper};
use loupe_fleet::symbols::Uploader;
use loupe_fleet::url::FleetUrl;
use loupe_model::stacks::StackProfile;
use loupe_model::{EventName, ImageOffset, ProcessKey, Profile};
use loupe_store::query::{choose_events, choose_stack_events, Filter, Flat};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Stack hashes a shipper remembers before it starts over (16 MB or so;
/// starting over re-sends definitions, which queries read once).
const MAX_KNOWN_STACKS: usize = 1 << 20;

/// How long the last flush may wait for the server before its batches stay in the spool.
const FINAL_SEND_WAIT: Duration = Duration::from_secs(15);

/// Shipping in progress: the sink the engine calls and the shipper behind it.
pub struct Shipping {
    state: Arc<Mutex<SinkState>>,
}

struct SinkState {
    shipper: Option<Shipper>,
    ctx: RowContext,
    pending: Vec<Row>,
    pending_stacks: Vec<StackRow>,
    pending_defs: Vec<StackDef>,
    /// Stacks whose definition has been spooled: each is sent once per run
    /// (forgotten when the spool drops a batch, which may have held some).
    known_stacks: HashSet<u64>,
    /// Cgroup labels per pid, read once per batch (pids are reused).
    labels: HashMap<u32, Vec<(String, String)>>,
    warned: bool,
    /// Uploads each build's procedure table once (`--ship-symbols`), on its own thread.
    uploader: Option<Uploader>,
}

impl SinkState {
    /// Offers the builds of the pending rows and stacks to the uploader.
    fn offer_builds(&mut self) {
        let Some(up) = &mut self.uploader else { return };
        for r in &self.pending {
            up.offer(&image_of(&r.kind, &r.image, &r.build_id, r.content_hash));
        }
        for d in &self.pending_defs {
            for (image, _) in d.frames() {
                up.offer(&image);
            }
        }
    }
}

struct Sink(Arc<Mutex<SinkState>>);

impl FlushSink for Sink {
    fn profiles(&mut self, profiles: &[Profile]) {
        let mut st = self.0.lock().expect("sink");
        let st = &mut *st;
        let labels = &mut st.labels;
        let rows = rows_of(profiles, unix_now(), &st.ctx, &mut |pid| {
            labels.entry(pid).or_insert_with(|| loupe_fleet::labels::of_pid(pid)).clone()
        });
        st.pending.extend(rows);
    }

    fn stacks(&mut self, tables: &[StackProfile]) {
        let mut st = self.0.lock().expect("sink");
        let st = &mut *st;
        if st.known_stacks.len() > MAX_KNOWN_STACKS {
            st.known_stacks.clear();
        }
        let labels = &mut st.labels;
        let (rows, defs) = stack_rows_of(
            tables,
            unix_now(),
            &st.ctx,
            &mut |pid| labels.entry(pid).or_insert_with(|| loupe_fleet::labels::of_pid(pid)).clone(),
            &mut st.known_stacks,
        );
        st.pending_stacks.extend(rows);
        st.pending_defs.extend(defs);
    }

    fn flushed(&mut self) {
        let mut st = self.0.lock().expect("sink");
        st.labels.clear();
        if st.pending.is_empty() && st.pending_stacks.is_empty() {
            return;
        }
        st.offer_builds();
        let (stacks, stack_rows) = (std::mem::take(&mut st.pending_defs), std::mem::take(&mut st.pending_stacks));
        let batch = Batch { stacks, stack_rows, ..Batch::new(std::mem::take(&mut st.pending)) };
        let dropped_before = st.shipper.as_ref().map(|s| s.report().dropped.batches);
        let pushed = st.shipper.as_ref().map(|s| s.push(&batch));
        if st.shipper.as_ref().map(|s| s.report().dropped.batches) != dropped_before {
            // A dropped batch may have carried stack definitions later batches name: send them again.
            st.known_stacks.clear();
        }
        if let Some(Err(e)) = pushed {
            if !std::mem::replace(&mut st.warned, true) {
                eprintln!("loupe: warning: cannot spool a batch for the fleet store: {e}");
            }
        }
    }
}

/// Host and labels from `--label`s: `host=NAME` replaces this host's name.
fn row_context(labels: &[String]) -> Result<RowContext> {
    let mut ctx = RowContext { host: hostname(), labels: Vec::new() };
    for l in labels {
        let (k, v) = l.split_once('=').filter(|(k, _)| !k.is_empty()).with_context(|| format!("bad --label {l:?}: expected key=value"))?;
        if k == "host" {
            ctx.host = v.to_string();
        } else {
            ctx.labels.push((k.to_string(), v.to_string()));
        }
    }
    Ok(ctx)
}

/// `loupe ingest pprof FILE... --ship URL`: each file one batch (stacks,
/// leaf samples and the names the profile gives), sent at once; a batch
/// id makes a retry harmless, as for shipped flushes.
pub fn ingest(a: crate::flags::IngestArgs) -> Result<u8> {
    let crate::flags::IngestFormat::Pprof(p) = a.format;
    let url = FleetUrl::parse(&p.ship)?;
    let client = Client::new(&url);
    schema::check(&client)?;
    let ctx = row_context(&p.labels)?;
    for file in &p.files {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let s = store_pprof(&client, &ctx, &bytes, p.event.as_deref()).map_err(|e| e.error.context(file.display().to_string()))?;
        eprintln!(
            "loupe: {}: {} samples of {} ({} stacks) stored in {} as host {}",
            file.display(),
            s.samples,
            s.event,
            s.stacks,
            url.display(),
            s.host
        );
    }
    Ok(0)
}

/// What one ingested profile stored.
pub struct Stored {
    pub host: String,
    pub event: String,
    pub samples: u64,
    /// Stack definitions sent with it.
    pub stacks: usize,
}

/// Whose fault an ingest's failure is: the request's (labels, URL, a
/// corrupt profile) or the store's.
pub enum IngestErrorKind {
    Input,
    Store,
}

pub struct IngestError {
    pub kind: IngestErrorKind,
    pub error: anyhow::Error,
}

fn input(error: anyhow::Error) -> IngestError {
    IngestError { kind: IngestErrorKind::Input, error }
}

fn store(error: impl Into<anyhow::Error>) -> IngestError {
    IngestError { kind: IngestErrorKind::Store, error: error.into() }
}

/// One pprof profile (gzipped or not) stored at `url` with `labels`
/// (`key=value`, `host=` naming the host), as `loupe ingest pprof` stores
/// a file: `loupe serve --allow-ingest`.
pub fn ingest_bytes(url: &str, labels: &[String], bytes: &[u8], event: Option<&str>) -> std::result::Result<Stored, IngestError> {
    let url = FleetUrl::parse(url).map_err(|e| input(e.into()))?;
    let ctx = row_context(labels).map_err(input)?;
    let client = Client::new(&url);
    schema::check(&client).map_err(store)?;
    store_pprof(&client, &ctx, bytes, event)
}

/// One profile as one batch: its stacks, leaf samples and the names it gives.
fn store_pprof(client: &Client, ctx: &RowContext, bytes: &[u8], event: Option<&str>) -> std::result::Result<Stored, IngestError> {
    let imported = loupe_analysis::pprof_import::import(bytes, event)
        .map_err(|e| input(anyhow::Error::new(e).context("not a usable pprof profile")))?;
    let bucket = imported.time_unix.unwrap_or_else(unix_now);
    let rows = rows_of(&imported.flat, bucket, ctx, &mut |_| Vec::new());
    let (stack_rows, stacks) = stack_rows_of(&imported.stacks, bucket, ctx, &mut |_| Vec::new(), &mut HashSet::new());
    let symbols = imported
        .names
        .iter()
        .filter_map(|(image, off, name)| {
            Some(SymRow { image_key: image_key(image)?, offset: off.0, procedure: name.clone(), file: String::new(), line: 0 })
        })
        .collect();
    let batch = Batch { symbols, stacks, stack_rows, ..Batch::new(rows) };
    loupe_fleet::ship::send(client, &batch).map_err(|e| store(anyhow::Error::new(e).context("storing the profile")))?;
    let samples = batch.stack_rows.iter().map(|r| r.count).sum();
    Ok(Stored { host: ctx.host.clone(), event: imported.event.to_string(), samples, stacks: batch.stacks.len() })
}

/// Starts shipping when `--ship` is given: checks the server first, so a
/// bad URL, wrong credentials, something that is not ClickHouse or a newer
/// schema stop before anything is recorded.
pub fn start(a: &ShipArgs, db: &Path) -> Result<Option<Shipping>> {
    let Some(url) = &a.ship else { return Ok(None) };
    let url = FleetUrl::parse(url)?;
    let ctx = row_context(&a.labels)?;
    let opts = ShipOptions {
        spool_dir: a.spool.clone().unwrap_or_else(|| db.join("fleet-spool")),
        max_spool_bytes: a.spool_max,
        timeout: loupe_fleet::client::DEFAULT_TIMEOUT,
    };
    let (shipper, note) = Shipper::start(&url, &opts).context("--ship")?;
    if let Some(n) = note {
        eprintln!("loupe: fleet: {n}");
    }
    eprintln!("loupe: shipping to {} as host {} (spool {})", url.display(), ctx.host, opts.spool_dir.display());
    let state = SinkState {
        shipper: Some(shipper),
        ctx,
        pending: Vec::new(),
        pending_stacks: Vec::new(),
        pending_defs: Vec::new(),
        known_stacks: HashSet::new(),
        labels: HashMap::new(),
        warned: false,
        uploader: if a.ship_symbols { Some(start_uploader(&url, db)?) } else { None },
    };
    Ok(Some(Shipping { state: Arc::new(Mutex::new(state)) }))
}

/// The `--ship-symbols` thread, naming builds with this database's image cache (for the vDSO and replaced binaries).
fn start_uploader(url: &FleetUrl, db: &Path) -> Result<Uploader> {
    let mut syms = Symbols::for_db(db);
    let namer: loupe_fleet::symbols::Namer = Box::new(move |image| syms.procedures(image));
    Ok(Uploader::start(url, loupe_fleet::client::DEFAULT_TIMEOUT, namer)?)
}

impl Shipping {
    pub fn sink(&self) -> Box<dyn FlushSink> {
        Box::new(Sink(Arc::clone(&self.state)))
    }

    /// Sends what is left (for a while) and prints what shipping did.
    pub fn finish(self) {
        let uploader = self.state.lock().expect("sink").uploader.take();
        if let Some(up) = uploader {
            let r = up.finish(FINAL_SEND_WAIT);
            eprintln!(
                "loupe: symbols: uploaded {} builds ({} procedures); {} already in the fleet store, {} unreadable",
                r.builds, r.procedures, r.already_there, r.unreadable
            );
        }
        let Some(shipper) = self.state.lock().expect("sink").shipper.take() else { return };
        let (url, spool) = (shipper.url().display(), shipper.spool_dir().to_path_buf());
        let r = shipper.finish(FINAL_SEND_WAIT);
        let mut line = format!("loupe: shipped {} batches ({} samples) to {url}", r.sent_batches, r.sent_samples);
        if r.pending_batches > 0 {
            line += &format!("; {} batches wait in {} for the next run", r.pending_batches, spool.display());
        }
        if r.dropped.batches > 0 {
            line += &format!("; dropped {} batches ({} samples) from the full spool", r.dropped.batches, r.dropped.samples);
        }
        if let Some(e) = r.last_error.filter(|_| r.pending_batches > 0) {
            line += &format!("; last error: {e}");
        }
        eprintln!("{line}");
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "unknown".into())
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub fn run(a: FleetArgs) -> Result<u8> {
    match a.command {
        FleetCommand::Init(i) => {
            let opts = InitOptions { cluster: i.cluster.clone(), retention_days: schema::parse_retention(&i.retention)? };
            for u in &i.urls {
                let url = FleetUrl::parse(u)?;
                let info = schema::init(&Client::new(&url), &opts)?;
                let layout = if info.cluster.is_empty() { "one server".to_string() } else { format!("cluster {}", info.cluster) };
                let keep =
                    if info.retention_days == 0 { "kept for ever".to_string() } else { format!("kept {} days", info.retention_days) };
                println!("{}: schema version {} ({layout}, rows {keep})", url.display(), info.version);
            }
            Ok(0)
        }
    }
}

/// The rows `top --source` reads.
fn selection(s: &SourceArgs, a: &TopArgs) -> Result<Selection> {
    selection_of(s, &a.pid.pid, &a.comm.comm, &a.epoch)
}

/// The rows a query reads: `--where`s, `--pid`s, `--comm`s and `--since`/`--until`.
fn selection_of(s: &SourceArgs, pid: &[u32], comm: &[String], epoch: &EpochFlag) -> Result<Selection> {
    let now = unix_now();
    let mut wheres: Vec<Cond> = s.wheres.iter().map(|w| Cond::parse(w)).collect::<Result<_, _>>()?;
    if !pid.is_empty() {
        let pids: Vec<String> = pid.iter().map(|p| p.to_string()).collect();
        wheres.push(Cond::Match("pid".into(), format!("^({})$", pids.join("|"))));
    }
    if !comm.is_empty() {
        let comms: Vec<String> = comm.iter().map(|c| regex_escape(c)).collect();
        wheres.push(Cond::Match("comm".into(), format!("^({})$", comms.join("|"))));
    }
    // The same --since/--until as local epochs (a duration before now or a time), applied to the rows' buckets.
    let at = |t: &crate::flags::TimeSpec| match *t {
        crate::flags::TimeSpec::Ago(secs) => now.saturating_sub(secs),
        crate::flags::TimeSpec::At(unix) => unix,
    };
    let (since, until) = (epoch.since.as_ref().map(at), epoch.until.as_ref().map(at));
    Ok(Selection { wheres, since, until })
}

/// A diff side's selection: the shared `--where`s and the side's own
/// conditions, joined by commas (`KEY=VALUE`, `KEY~REGEX`, `since=TIME`, `until=TIME`).
fn side_selection(s: &SourceArgs, spec: &str) -> Result<Selection> {
    let now = unix_now();
    let mut sel = selection_of(s, &[], &[], &EpochFlag { epoch: "all".into(), since: None, until: None })?;
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("since", t)) => sel.since = Some(query::parse_time(t, now)?),
            Some(("until", t)) => sel.until = Some(query::parse_time(t, now)?),
            _ => sel.wheres.push(Cond::parse(part)?),
        }
    }
    Ok(sel)
}

/// Opens a `--source` for reading: checks the server and its schema, and
/// names frames from this host's files (and `db`'s image cache), then from
/// the names the shipping hosts uploaded.
pub fn open_source(source: &str, db: &Path) -> Result<(Client, FleetSymbols)> {
    let url = FleetUrl::parse(source)?;
    let client = Client::new(&url);
    schema::check(&client)?;
    Ok((client, FleetSymbols { local: Symbols::for_db(db), client: Client::new(&url) }))
}

/// One side of a fleet diff as flat profiles, summed in ClickHouse per
/// (image, event, offset), or per (image, event) for `--by image`.
pub fn flat_of(client: &Client, source: &SourceArgs, spec: &str, by: By) -> Result<Flat> {
    let sel = side_selection(source, spec)?;
    let rows = query::images(client, &sel, by != By::Image)?;
    Ok(Flat { profiles: fleet_profiles(rows), ..Flat::default() })
}

/// Query rows as one profile per (image, event), all under one `fleet` process.
fn fleet_profiles(rows: Vec<query::ImageRow>) -> Vec<Profile> {
    let fleet = ProcessKey::new(0, "fleet");
    let mut profiles: BTreeMap<(loupe_model::ImageId, String), Profile> = BTreeMap::new();
    for r in rows {
        let p =
            profiles.entry((r.image.clone(), r.event.clone())).or_insert_with(|| Profile::new(r.image.clone(), EventName::new(&r.event)));
        p.add(fleet.clone(), ImageOffset(r.offset.unwrap_or(0)), r.samples, 0);
    }
    profiles.into_values().collect()
}

/// `flame|export|top --children --source`: the selection's stacks summed
/// in ClickHouse, named here, and when they ran (the first bucket to the end of the last).
pub fn load_stacks(s: &StackSelection, source: &SourceArgs, url: &str, all_events: bool) -> Result<(CallData, Span)> {
    if s.cgroup.cgroup.is_some() {
        bail!("--cgroup reads a local database's cgroups; with --source, use --where unit=..., container=... or pod=...");
    }
    let (client, mut syms) = open_source(url, &s.db.db)?;
    let sel = selection_of(source, &s.pid.pid, &s.comm.comm, &s.epoch)?;
    let tables = query::stacks(&client, &sel)?;
    if tables.is_empty() {
        bail!("no call stacks in the selection of {}", client.url().display());
    }
    let events = choose_stack_events(&tables, s.event.event.as_deref(), all_events)?;
    let filter = Filter { pids: Vec::new(), comms: Vec::new(), image: s.image.image.clone(), cgroup_pids: None };
    let keep_image = |i: &str| filter.keep_image(i);
    let d = callgraph::resolve(&tables, &events, &callgraph::Selection { keep: &|_| true, keep_image: &keep_image }, &mut syms);
    let span = match query::stack_time_range(&client, &sel)? {
        Some((first, last)) => Span {
            start_unix_nanos: first as i64 * 1_000_000_000,
            duration_nanos: (last + loupe_fleet::rows::BUCKET_SECONDS - first) as i64 * 1_000_000_000,
        },
        None => Span::default(),
    };
    Ok((d, span))
}

fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c.to_string() } else { format!("\\{c}") }).collect()
}

/// `loupe top --source URL`: grouped in ClickHouse, symbolized here.
pub fn top(a: &TopArgs, source: &str, out: &mut dyn Write) -> Result<u8> {
    let url = FleetUrl::parse(source)?;
    let client = Client::new(&url);
    schema::check(&client)?;
    let sel = selection(&a.source, a)?;
    let key = match &a.by {
        TopBy::Plain(by) => return top_images(a, &client, &sel, *by, out),
        TopBy::Host => "host".to_string(),
        TopBy::Label(k) => k.clone(),
    };
    let rows = query::by_key(&client, &sel, &key)?;
    print_groups(out, a, &url, &key, &rows)
}

/// Per host or label value: one row per value of the first chosen event.
fn print_groups(out: &mut dyn Write, a: &TopArgs, url: &FleetUrl, key: &str, rows: &[(String, String, u64)]) -> Result<u8> {
    let present: Vec<EventName> = rows.iter().map(|r| EventName::new(&r.1)).collect();
    let events = choose_events(&present, &a.events)?;
    let Some(event) = events.first() else {
        writeln!(out, "# No samples in the selection.")?;
        return Ok(0);
    };
    let mine: Vec<&(String, String, u64)> = rows.iter().filter(|r| r.1 == event.0).collect();
    let total: u64 = mine.iter().map(|r| r.2).sum();
    let pct = |n: u64| if total == 0 { 0.0 } else { (n as f64 * 10000.0 / total as f64).round() / 100.0 };
    match a.format {
        Format::Json => {
            let rows: Vec<serde_json::Value> =
                mine.iter().take(a.limit).map(|r| serde_json::json!({ key: r.0, "samples": r.2, "percent": pct(r.2) })).collect();
            let doc = serde_json::json!({ "source": url.display(), "event": event.0, "by": key, "total_samples": total, "rows": rows });
            writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        }
        Format::Text => {
            writeln!(
                out,
                "# Loupe top, fleet {}\n# Samples: {total} of event '{}'\n#\n# {:>12} {:>7}  {key}\n#",
                url.display(),
                event.0,
                event.0,
                "%"
            )?;
            for r in mine.iter().take(a.limit) {
                writeln!(out, "  {:>12} {:>6.2}%  {}", r.2, pct(r.2), r.0)?;
            }
        }
    }
    Ok(0)
}

/// Per image, procedure, line or address: ClickHouse sums per (image,
/// offset); the table is made as for a local database.
fn top_images(a: &TopArgs, client: &Client, sel: &Selection, by: crate::flags::By, out: &mut dyn Write) -> Result<u8> {
    let offsets = by != crate::flags::By::Image;
    let profiles = fleet_profiles(query::images(client, sel, offsets)?);
    let present: Vec<EventName> = profiles.iter().map(|p| p.event.clone()).collect();
    let events = choose_events(&present, &a.events)?;
    let filter = Filter { pids: Vec::new(), comms: Vec::new(), image: a.image.image.clone(), cgroup_pids: None };
    let mut syms = FleetSymbols { local: Symbols::for_db(&a.db.db), client: Client::new(client.url()) };
    let report = top_table(&profiles, &[], &events, crate::top::group_by(by), &|_| true, &|i| filter.keep_image(i), &mut syms);
    match a.format {
        Format::Json => crate::top::print_json(out, &report, by, a.limit)?,
        Format::Text => {
            let mut text = Vec::new();
            crate::top::print_text(&mut text, &report, by, a.limit, &[], 0)?;
            let text = String::from_utf8_lossy(&text);
            let body = text.split_once('\n').map_or("", |(_, rest)| rest);
            write!(out, "# Loupe top, fleet {}\n{body}", client.url().display())?;
        }
    }
    Ok(0)
}

/// Names from this host's files first, then from what the shipping hosts uploaded.
pub struct FleetSymbols {
    local: Symbols,
    client: Client,
}

impl SymbolSource for FleetSymbols {
    fn symbolize(&mut self, image: &loupe_model::ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>> {
        let mut out = self.local.symbolize(image, offsets, lines);
        let missing: Vec<u64> = offsets.iter().zip(&out).filter(|(_, r)| r.is_err()).map(|(o, _)| o.0).collect();
        let Some(key) = image_key(image).filter(|_| !missing.is_empty()) else { return out };
        // Per-offset names (schema 1 hosts), then the build's uploaded procedure table.
        let found = query::symbols(&self.client, &key, &missing).unwrap_or_default();
        for (off, r) in offsets.iter().zip(out.iter_mut()) {
            if let (Err(_), Some((procedure, file, line))) = (&r, found.get(&off.0)) {
                let file = (lines && !file.is_empty()).then(|| file.clone());
                let line = (lines && *line > 0).then_some(*line);
                *r = Ok(SymInfo { procedure: procedure.clone(), file, line });
            }
        }
        let missing: Vec<u64> = offsets.iter().zip(&out).filter(|(_, r)| r.is_err()).map(|(o, _)| o.0).collect();
        let names = loupe_fleet::symbols::names(&self.client, &key, &missing).unwrap_or_default();
        for (off, r) in offsets.iter().zip(out.iter_mut()) {
            if let (Err(_), Some(procedure)) = (&r, names.get(&off.0)) {
                *r = Ok(SymInfo { procedure: procedure.clone(), file: None, line: None });
            }
        }
        out
    }

    fn inlined(&mut self, image: &loupe_model::ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        self.local.inlined(image, offsets)
    }

    // Unnamed frames are shown at their function's start, as for a local database.
    fn function_starts(&mut self, image: &loupe_model::ImageId, offsets: &[ImageOffset]) -> Vec<Option<ImageOffset>> {
        self.local.function_starts(image, offsets)
    }
}
