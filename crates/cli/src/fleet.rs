//! The fleet commands: shipping beside `record`/`daemon` (`--ship`),
//! `loupe fleet init`, and `top --source`. The store itself lives in
//! `loupe_fleet`; here are flags, the flush hook and printing.

use crate::flags::{FleetArgs, FleetCommand, Format, ShipArgs, SourceArgs, TopArgs, TopBy};
use crate::symbols::Symbols;
use anyhow::{bail, Context, Result};
use loupe_analysis::top::top as top_table;
use loupe_analysis::{SymInfo, SymbolSource, Unnamed};
use loupe_collector::daemon::FlushSink;
use loupe_fleet::client::Client;
use loupe_fleet::query::{self, Cond, Selection};
use loupe_fleet::rows::{image_key, image_of, rows_of, Batch, Row, RowContext, SymRow};
use loupe_fleet::schema::{self, InitOptions};
use loupe_fleet::ship::{ShipOptions, Shipper};
use loupe_fleet::url::FleetUrl;
use loupe_model::{EventName, ImageOffset, ProcessKey, Profile};
use loupe_store::query::{choose_events, Filter};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Cgroup labels per pid, read once per batch (pids are reused).
    labels: HashMap<u32, Vec<(String, String)>>,
    warned: bool,
    /// Names offsets for the symbols table (`--ship-symbols`), with this database's image cache.
    syms_db: Option<std::path::PathBuf>,
    /// (build, offset) pairs already named: each is uploaded once.
    named: HashSet<(String, u64)>,
}

impl SinkState {
    /// Names of the pending rows' offsets not uploaded yet; offsets that get
    /// no name are not tried again. Procedures only: source lines would make
    /// the daemon parse every binary's DWARF (hundreds of MB on a busy host).
    fn new_symbols(&mut self) -> Vec<SymRow> {
        let Some(db) = &self.syms_db else { return Vec::new() };
        let mut todo: BTreeMap<(String, loupe_model::ImageId), Vec<ImageOffset>> = BTreeMap::new();
        for r in &self.pending {
            let image = image_of(&r.kind, &r.image, &r.build_id, r.content_hash);
            let Some(key) = image_key(&image) else { continue };
            if self.named.insert((key.clone(), r.offset)) {
                todo.entry((key, image)).or_default().push(ImageOffset(r.offset));
            }
        }
        // A symbolizer per batch: what it loaded is freed when the batch is named.
        let mut syms = Symbols::for_db(db);
        let mut out = Vec::new();
        for ((key, image), offsets) in todo {
            for (off, sym) in offsets.iter().zip(syms.symbolize(&image, &offsets, false)) {
                let Ok(sym) = sym else { continue };
                let (file, line) = (sym.file.unwrap_or_default(), sym.line.unwrap_or(0));
                out.push(SymRow { image_key: key.clone(), offset: off.0, procedure: sym.procedure, file, line });
            }
        }
        out
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

    fn flushed(&mut self) {
        let mut st = self.0.lock().expect("sink");
        st.labels.clear();
        if st.pending.is_empty() {
            return;
        }
        let symbols = st.new_symbols();
        let batch = Batch { symbols, ..Batch::new(std::mem::take(&mut st.pending)) };
        let pushed = st.shipper.as_ref().map(|s| s.push(&batch));
        if let Some(Err(e)) = pushed {
            if !std::mem::replace(&mut st.warned, true) {
                eprintln!("loupe: warning: cannot spool a batch for the fleet store: {e}");
            }
        }
    }
}

/// Starts shipping when `--ship` is given: checks the server first, so a
/// bad URL, wrong credentials, something that is not ClickHouse or a newer
/// schema stop before anything is recorded.
pub fn start(a: &ShipArgs, db: &Path) -> Result<Option<Shipping>> {
    let Some(url) = &a.ship else { return Ok(None) };
    let url = FleetUrl::parse(url)?;
    let mut ctx = RowContext { host: hostname(), labels: Vec::new() };
    for l in &a.labels {
        let (k, v) = l.split_once('=').filter(|(k, _)| !k.is_empty()).with_context(|| format!("bad --label {l:?}: expected key=value"))?;
        if k == "host" {
            ctx.host = v.to_string();
        } else {
            ctx.labels.push((k.to_string(), v.to_string()));
        }
    }
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
        labels: HashMap::new(),
        warned: false,
        syms_db: a.ship_symbols.then(|| db.to_path_buf()),
        named: HashSet::new(),
    };
    Ok(Some(Shipping { state: Arc::new(Mutex::new(state)) }))
}

impl Shipping {
    pub fn sink(&self) -> Box<dyn FlushSink> {
        Box::new(Sink(Arc::clone(&self.state)))
    }

    /// Sends what is left (for a while) and prints what shipping did.
    pub fn finish(self) {
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
    let now = unix_now();
    let mut wheres: Vec<Cond> = s.wheres.iter().map(|w| Cond::parse(w)).collect::<Result<_, _>>()?;
    if !a.pid.pid.is_empty() {
        let pids: Vec<String> = a.pid.pid.iter().map(|p| p.to_string()).collect();
        wheres.push(Cond::Match("pid".into(), format!("^({})$", pids.join("|"))));
    }
    if !a.comm.comm.is_empty() {
        let comms: Vec<String> = a.comm.comm.iter().map(|c| regex_escape(c)).collect();
        wheres.push(Cond::Match("comm".into(), format!("^({})$", comms.join("|"))));
    }
    // The same --since/--until as local epochs (a duration before now or a time), applied to the rows' buckets.
    let at = |t: &crate::flags::TimeSpec| match *t {
        crate::flags::TimeSpec::Ago(secs) => now.saturating_sub(secs),
        crate::flags::TimeSpec::At(unix) => unix,
    };
    let (since, until) = (a.epoch.since.as_ref().map(at), a.epoch.until.as_ref().map(at));
    Ok(Selection { wheres, since, until })
}

fn regex_escape(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c.to_string() } else { format!("\\{c}") }).collect()
}

/// `loupe top --source URL`: grouped in ClickHouse, symbolized here.
pub fn top(a: &TopArgs, source: &str, out: &mut dyn Write) -> Result<u8> {
    if a.children || a.callers.is_some() || a.callees.is_some() {
        bail!("--children, --callers and --callees read call stacks, which --source does not ship yet");
    }
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
    let rows = query::images(client, sel, offsets)?;
    let fleet = ProcessKey::new(0, "fleet");
    let mut profiles: BTreeMap<(loupe_model::ImageId, String), Profile> = BTreeMap::new();
    for r in rows {
        let p =
            profiles.entry((r.image.clone(), r.event.clone())).or_insert_with(|| Profile::new(r.image.clone(), EventName::new(&r.event)));
        p.add(fleet.clone(), ImageOffset(r.offset.unwrap_or(0)), r.samples, 0);
    }
    let profiles: Vec<Profile> = profiles.into_values().collect();
    let present: Vec<EventName> = profiles.iter().map(|p| p.event.clone()).collect();
    let events = choose_events(&present, &a.events)?;
    let filter = Filter { pids: Vec::new(), comms: Vec::new(), image: a.image.image.clone(), cgroup_pids: None };
    let mut syms = FleetSymbols { local: Symbols::for_db(&a.db.db), client };
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
struct FleetSymbols<'a> {
    local: Symbols,
    client: &'a Client,
}

impl SymbolSource for FleetSymbols<'_> {
    fn symbolize(&mut self, image: &loupe_model::ImageId, offsets: &[ImageOffset], lines: bool) -> Vec<Result<SymInfo, Unnamed>> {
        let mut out = self.local.symbolize(image, offsets, lines);
        let missing: Vec<u64> = offsets.iter().zip(&out).filter(|(_, r)| r.is_err()).map(|(o, _)| o.0).collect();
        let Some(key) = image_key(image).filter(|_| !missing.is_empty()) else { return out };
        let Ok(found) = query::symbols(self.client, &key, &missing) else { return out };
        for (off, r) in offsets.iter().zip(out.iter_mut()) {
            if let (Err(_), Some((procedure, file, line))) = (&r, found.get(&off.0)) {
                let file = (lines && !file.is_empty()).then(|| file.clone());
                let line = (lines && *line > 0).then_some(*line);
                *r = Ok(SymInfo { procedure: procedure.clone(), file, line });
            }
        }
        out
    }

    fn inlined(&mut self, image: &loupe_model::ImageId, offsets: &[ImageOffset]) -> Vec<Vec<String>> {
        self.local.inlined(image, offsets)
    }
}
