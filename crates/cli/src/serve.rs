//! `loupe serve`: the CLI's side of the HTTP API. A request's query
//! parameters become the command's flags, parsed by the same clap
//! definitions as the command line (so the API cannot drift from the CLI),
//! with `--format json` and the served database forced; the command runs
//! into a buffer through [`crate::run`]. A served fleet source (`--source`)
//! becomes the command's `--source URL`, so fleet answers go through the
//! same query layer as `loupe top --source`. The server itself (routing,
//! limits, token, assets) is `loupe_serve`.

use crate::flags::{Cli, ServeArgs};
use anyhow::{bail, Result};
use clap::{Arg, ArgAction, CommandFactory, Parser, ValueHint};
use loupe_serve::{Api, ApiError, ApiErrorKind, Config, Reply, Server};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The commands served at `/api/<command>`: those whose `--format json` is
/// a result read from a database (not ones that run programs or write
/// files), and `export`, whose answer is the file it would write.
pub const SERVED: &[&str] = &[
    "top",
    "flame",
    "epochs",
    "diff",
    "stats",
    "calc",
    "annotate",
    "data/profile",
    "data/classify",
    "data/workingset",
    "locks",
    "optimize/status",
    "export",
];

/// Commands whose `format` the request picks (a file type), not JSON.
pub const DOWNLOADS: &[&str] = &["export"];

/// Arguments with a path's value hint that only name something to look
/// up, never a file the server reads: `optimize status IMAGE` finds IMAGE's
/// lines in the database's decisions log.
const NAMES_NOT_PATHS: &[(&str, &str)] = &[("optimize/status", "image")];

/// Flags a request may not set: the server picks the format and database,
/// and never writes files.
const FORCED: &[&str] = &["format", "output", "db", "help", "version"];

pub fn run(a: ServeArgs) -> Result<u8> {
    // A quarter of the budget for whole answers, a quarter for named stacks, the rest for symbol tables.
    let quarter = (a.cache_mb << 20) / 4;
    let mut api = CliApi::new(&a.dbs, quarter)?;
    api.add_sources(&a.sources, a.source_ttl)?;
    let names = api.describe();
    let mut config = Config::new(a.listen);
    config.token = a.token.filter(|t| !t.is_empty());
    config.time_limit = a.time_limit;
    config.allow_ingest = a.allow_ingest;
    config.max_body_bytes = a.max_ingest_mb << 20;
    if let Some(w) = a.workers {
        config.workers = w.max(1);
    }
    let server = Server::bind(config, Arc::new(api))?;
    if a.cache_mb > 0 {
        crate::symbol_cache::enable((a.cache_mb << 20) - 2 * quarter);
        crate::stack_cache::enable(quarter);
    }
    let host = if a.listen.ip().is_unspecified() { "127.0.0.1".to_string() } else { a.listen.ip().to_string() };
    let host = if a.listen.is_ipv6() { format!("[{host}]") } else { host };
    println!("Serving http://{host}:{}/ ({names})", server.local_addr().port());
    server.serve();
    Ok(0)
}

/// The served databases and fleet sources, by name; the first database (or,
/// serving none, the first source) is the default.
pub struct CliApi {
    dbs: Vec<(String, PathBuf)>,
    /// Fleet stores: name and `clickhouse://` URL.
    sources: Vec<(String, String)>,
    /// How long a fleet answer is kept (see [`Answers`]).
    source_ttl: Duration,
    answers: Mutex<Answers>,
}

/// What a request's `db=NAME` reads.
enum Served<'a> {
    Db(&'a PathBuf),
    Source(&'a str),
}

/// The command line a request stands for, and whether it reads a fleet
/// source (whose answers are kept only [`CliApi::source_ttl`]).
struct Argv {
    words: Vec<String>,
    fleet: bool,
}

/// Answers kept by command line, dropped when any served database changes
/// (see [`crate::symbol_cache::full_stamp`]) and, least recently used
/// first, past a budget: the pages ask the same questions again (reloads,
/// going back, the overview's per-epoch calls), and a whole machine's
/// flame tree takes seconds to build from named stacks.
///
/// A fleet answer's command line holds its source's URL, so answers are
/// keyed by source; it is kept until a deadline (`--source-ttl`) rather
/// than stamped: asking ClickHouse what changed would cost a query per
/// request that grows with the tables (18.16 counts rows by reading a
/// column), and the newest bucket would miss a spool's late batches, whose
/// buckets are old. A deadline bounds staleness at no cost, and hosts add
/// data only once per flush interval anyway.
struct Answers {
    budget: usize,
    used: usize,
    clock: u64,
    stamp: Vec<Option<std::time::SystemTime>>,
    kept: HashMap<Vec<String>, Kept>,
}

/// One kept answer, when it was last used, and until when it holds (fleet answers).
struct Kept {
    reply: Reply,
    used: u64,
    until: Option<Instant>,
}

impl Answers {
    fn new(budget: usize) -> Answers {
        Answers { budget, used: 0, clock: 0, stamp: Vec::new(), kept: HashMap::new() }
    }

    /// The kept answer to `argv` unless past its deadline at `now`, after
    /// forgetting everything when `stamp` moved.
    fn get(&mut self, argv: &[String], stamp: Vec<Option<std::time::SystemTime>>, now: Instant) -> Option<Reply> {
        if stamp != self.stamp {
            self.kept.clear();
            self.used = 0;
            self.stamp = stamp;
        }
        if self.kept.get(argv).is_some_and(|k| k.until.is_some_and(|t| now >= t)) {
            self.used -= self.kept.remove(argv).map_or(0, |k| k.reply.body.len());
        }
        self.clock += 1;
        let clock = self.clock;
        self.kept.get_mut(argv).map(|k| {
            k.used = clock;
            k.reply.clone()
        })
    }

    /// Keeps `reply` for `argv` (until `until`, if given) if it fits,
    /// dropping the least recently used.
    fn put(&mut self, argv: Vec<String>, reply: &Reply, stamp: &[Option<std::time::SystemTime>], until: Option<Instant>) {
        if reply.body.len() > self.budget || stamp != self.stamp.as_slice() {
            return;
        }
        while self.used + reply.body.len() > self.budget {
            let Some(oldest) = self.kept.iter().min_by_key(|(_, k)| k.used).map(|(k, _)| k.clone()) else { break };
            self.used -= self.kept.remove(&oldest).map_or(0, |k| k.reply.body.len());
        }
        self.used += reply.body.len();
        if let Some(old) = self.kept.insert(argv, Kept { reply: reply.clone(), used: self.clock, until }) {
            self.used -= old.reply.body.len();
        }
    }
}

/// Makes, in the background, the merged forms that a day's first question
/// would otherwise make (a database written by an older Loupe, or epochs
/// closed while no reader asked): later questions over many epochs then
/// read a few blocks. Not niced: a question that needs a block this thread
/// is making waits for it (the store makes one block at a time).
fn warm(dir: &Path) {
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        if let Ok(db) = loupe_store::Database::open(&dir) {
            let _ = db.merge_closed();
        }
    });
}

impl CliApi {
    pub fn new(specs: &[String], answer_budget: usize) -> Result<CliApi> {
        let mut dbs: Vec<(String, PathBuf)> = Vec::new();
        for s in specs {
            let (name, dir) = match s.split_once('=') {
                Some((n, d)) if !n.is_empty() && !n.contains('/') => (n.to_string(), PathBuf::from(d)),
                _ => (PathBuf::from(s).file_name().map_or(s.clone(), |f| f.to_string_lossy().into_owned()), PathBuf::from(s)),
            };
            // The merged forms' folder now, so that the first one made later does not look like a change to the database.
            loupe_store::Database::open(&dir)?.prepare_merged();
            warm(&dir);
            if name.contains(':') || name.contains(',') {
                bail!("database name {name:?} contains ':' or ',', which separate diff sides; name it with --db NAME=DIR");
            }
            if dbs.iter().any(|(n, _)| *n == name) {
                bail!("two databases named {name:?}; name them with --db NAME=DIR");
            }
            dbs.push((name, dir));
        }
        Ok(CliApi { dbs, sources: Vec::new(), source_ttl: Duration::ZERO, answers: Mutex::new(Answers::new(answer_budget)) })
    }

    /// Serves the fleet stores `specs` (`[NAME=]URL`, named by their
    /// database by default), each checked now: a wrong URL, password or
    /// schema fails at start rather than at the first request.
    pub fn add_sources(&mut self, specs: &[String], ttl: Duration) -> Result<()> {
        for s in specs {
            let (name, url) = match s.split_once('=') {
                Some((n, u)) if !s.starts_with("clickhouse://") => (n.to_string(), u.to_string()),
                _ => (loupe_fleet::url::FleetUrl::parse(s)?.database, s.clone()),
            };
            let parsed = loupe_fleet::url::FleetUrl::parse(&url)?;
            loupe_fleet::schema::check(&loupe_fleet::client::Client::new(&parsed))?;
            if name.is_empty() || name.contains([':', ',', '/']) {
                bail!("source name {name:?} is empty or contains ':', ',' or '/'; name it with --source NAME=URL");
            }
            if self.dbs.iter().any(|(n, _)| *n == name) || self.sources.iter().any(|(n, _)| *n == name) {
                bail!("two databases or sources named {name:?}; name them with --db NAME=DIR and --source NAME=URL");
            }
            self.sources.push((name, url));
        }
        self.source_ttl = ttl;
        Ok(())
    }

    /// What is served, for the start-up line (passwords hidden).
    fn describe(&self) -> String {
        let dbs: Vec<String> = self.dbs.iter().map(|(n, d)| format!("{n}={}", d.display())).collect();
        let mut line = format!("databases: {}", dbs.join(", "));
        if !self.sources.is_empty() {
            let show = |u: &str| loupe_fleet::url::FleetUrl::parse(u).map_or_else(|_| u.to_string(), |u| u.display());
            let sources: Vec<String> = self.sources.iter().map(|(n, u)| format!("{n}={}", show(u))).collect();
            line = if dbs.is_empty() { String::new() } else { format!("{line}; ") };
            line += &format!("sources: {}", sources.join(", "));
        }
        line
    }

    /// Serving nothing: what the OpenAPI document needs (it depends on no database).
    #[cfg(test)]
    pub fn empty() -> CliApi {
        CliApi { dbs: Vec::new(), sources: Vec::new(), source_ttl: Duration::ZERO, answers: Mutex::new(Answers::new(0)) }
    }

    fn stamp(&self) -> Vec<Option<std::time::SystemTime>> {
        self.dbs.iter().flat_map(|(_, d)| crate::symbol_cache::full_stamp(d)).collect()
    }

    /// A local database by name (default: the first).
    fn db(&self, name: Option<&str>) -> Result<&PathBuf, ApiError> {
        match self.served(name)? {
            Served::Db(d) => Ok(d),
            Served::Source(_) => Err(bad(format!("{} is a fleet source; this reads a local database", name.unwrap_or("the default")))),
        }
    }

    /// A database or source by name (default: the first database, else the first source).
    fn served(&self, name: Option<&str>) -> Result<Served<'_>, ApiError> {
        let db = |n: &str| self.dbs.iter().find(|(d, _)| d == n).map(|(_, d)| Served::Db(d));
        let source = |n: &str| self.sources.iter().find(|(s, _)| s == n).map(|(_, u)| Served::Source(u.as_str()));
        match name {
            None => self.dbs.first().map(|(_, d)| Served::Db(d)).or_else(|| self.sources.first().map(|(_, u)| Served::Source(u))),
            Some(n) => db(n).or_else(|| source(n)),
        }
        .ok_or_else(|| {
            let have: Vec<&str> = self.dbs.iter().map(|(n, _)| n.as_str()).chain(self.sources.iter().map(|(n, _)| n.as_str())).collect();
            ApiError::new(ApiErrorKind::NotFound, format!("no database named {:?} (served: {})", name.unwrap_or(""), have.join(", ")))
        })
    }

    /// A diff side naming a source, `NAME` or `NAME:SELECTION`: its URL and selection.
    fn fleet_side<'s>(&self, spec: &'s str) -> Option<(&str, &'s str)> {
        let (name, sel) = spec.split_once(':').unwrap_or((spec, ""));
        self.sources.iter().find(|(n, _)| n == name).map(|(_, u)| (u.as_str(), sel))
    }

    /// A diff or stats side: each comma-joined part `NAME:EPOCH`, `NAME` or
    /// `EPOCH` (of the default database) becomes `DIR:EPOCH`.
    fn side(&self, spec: &str) -> Result<String, ApiError> {
        let parts = spec.split(',').filter(|p| !p.is_empty()).map(|p| {
            let (name, epoch) = match p.rsplit_once(':') {
                Some((n, e)) => (Some(n), e),
                None if is_epoch_word(p) => (None, p),
                None => (Some(p), "current"),
            };
            Ok(format!("{}:{epoch}", self.db(name)?.display()))
        });
        let parts = parts.collect::<Result<Vec<String>, ApiError>>()?;
        if parts.is_empty() {
            return Err(bad(format!("empty side {spec:?}")));
        }
        Ok(parts.join(","))
    }

    /// The command line a request stands for.
    fn argv(&self, command: &str, params: &[(String, String)]) -> Result<Argv, ApiError> {
        if !SERVED.contains(&command) {
            return Err(ApiError::new(ApiErrorKind::NotFound, format!("no API command {command:?} (served: {})", SERVED.join(", "))));
        }
        let words: Vec<&str> = command.split('/').collect();
        let cmd = subcommand(&words);
        let mut argv: Vec<String> = std::iter::once("loupe").chain(words.iter().copied()).map(String::from).collect();
        let mut positional: Vec<(usize, String)> = Vec::new();
        let mut fleet_sides: Vec<&str> = Vec::new();
        let mut db = None;
        for (name, value) in params {
            if name == "db" {
                db = Some(value.as_str());
                continue;
            }
            if name == "format" && value == "json" && !DOWNLOADS.contains(&command) {
                continue; // what the API answers anyway
            }
            let arg = find_arg(&cmd, name).ok_or_else(|| bad(format!("{command} has no flag --{name}")))?;
            if refused(command, arg) {
                return Err(bad(format!("--{name} cannot be set over HTTP")));
            }
            match (arg.get_index(), arg.get_long()) {
                (Some(i), _) => match self.fleet_side(value).filter(|_| matches!(command, "diff" | "stats")) {
                    Some((url, sel)) => {
                        fleet_sides.push(url);
                        positional.push((i, sel.to_string()));
                    }
                    None => positional.push((i, self.positional(command, value)?)),
                },
                (None, Some(long)) => flag(&mut argv, arg, long, value)?,
                (None, None) => return Err(bad(format!("{command} has no flag --{name}"))),
            }
        }
        if !DOWNLOADS.contains(&command) {
            argv.extend(["--format".to_string(), "json".to_string()]);
        }
        let fleet = match (fleet_sides.first(), find_arg(&cmd, "db").is_some()) {
            (Some(url), _) => {
                one_source(&fleet_sides, positional.len())?;
                argv.extend(["--source".to_string(), url.to_string()]);
                true
            }
            (None, true) => self.database_flags(&cmd, command, db, &mut argv)?,
            (None, false) => false,
        };
        if !fleet && argv.iter().any(|w| w.starts_with("--where=")) {
            return Err(bad("where= filters a fleet source's rows: pick a source with db=NAME (see /api/databases)".into()));
        }
        if let (false, Some(name)) = (find_arg(&cmd, "db").is_some(), db) {
            self.served(Some(name))?;
            return Err(bad(format!("{command} reads the databases its sides name; db={name} is not a flag of it")));
        }
        positional.sort_by_key(|(i, _)| *i);
        if !positional.is_empty() {
            argv.push("--".into());
            argv.extend(positional.into_iter().map(|(_, v)| v));
        }
        Ok(Argv { words: argv, fleet })
    }

    /// `--db DIR`, or `--source URL` for a served source (commands that take
    /// one); true for a source.
    fn database_flags(&self, cmd: &clap::Command, command: &str, db: Option<&str>, argv: &mut Vec<String>) -> Result<bool, ApiError> {
        match self.served(db)? {
            Served::Db(dir) => {
                argv.extend(["--db".to_string(), dir.display().to_string()]);
                Ok(false)
            }
            Served::Source(url) if find_arg(cmd, "source").is_some() => {
                argv.extend(["--source".to_string(), url.to_string()]);
                Ok(true)
            }
            Served::Source(_) => Err(bad(format!(
                "{command} reads a local database, and {} is a fleet source (sources answer top, flame, export, diff and stats)",
                db.unwrap_or("the default")
            ))),
        }
    }

    /// Positional values are diff's and stats' sides, and optimize status's image.
    fn positional(&self, command: &str, value: &str) -> Result<String, ApiError> {
        match command {
            "diff" | "stats" => self.side(value),
            // The program whose decisions to show: looked up in the log, never read (see NAMES_NOT_PATHS).
            "optimize/status" => Ok(value.to_string()),
            _ => Err(bad(format!("{command} takes no positional argument"))),
        }
    }
}

/// A fleet diff compares two selections of one source.
fn one_source(urls: &[&str], sides: usize) -> Result<(), ApiError> {
    if urls.len() != sides {
        return Err(bad("diff and stats compare selections of one fleet source, or local databases, not one of each".into()));
    }
    if urls.iter().any(|u| u != &urls[0]) {
        return Err(bad("diff and stats compare selections of one fleet source, not of two".into()));
    }
    Ok(())
}

fn bad(message: String) -> ApiError {
    ApiError::new(ApiErrorKind::BadRequest, message)
}

fn is_epoch_word(e: &str) -> bool {
    let num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    e == "all" || e == "current" || num(e) || e.split_once('-').is_some_and(|(a, b)| num(a) && num(b))
}

/// The clap definition of `loupe WORDS...`.
pub(crate) fn subcommand(words: &[&str]) -> clap::Command {
    let mut c = Cli::command();
    // Built, so that positionals have their indexes.
    c.build();
    for w in words {
        c = c.find_subcommand(w).cloned().expect("SERVED names only existing commands");
    }
    c
}

/// A flag by its long name, or a positional by its id or value name (`a`, `run`).
fn find_arg<'c>(cmd: &'c clap::Command, name: &str) -> Option<&'c Arg> {
    cmd.get_arguments().find(|a| {
        a.get_long() == Some(name)
            || (a.is_positional()
                && (a.get_id() == name || a.get_value_names().is_some_and(|v| v.iter().any(|v| v.eq_ignore_ascii_case(name)))))
    })
}

/// Arguments that name files or programs, which a request may never give.
fn is_path(a: &Arg) -> bool {
    matches!(
        a.get_value_hint(),
        ValueHint::AnyPath
            | ValueHint::FilePath
            | ValueHint::DirPath
            | ValueHint::ExecutablePath
            | ValueHint::CommandName
            | ValueHint::CommandString
            | ValueHint::CommandWithArguments
    )
}

/// `name=value` as a flag: switches take an empty value or true/false;
/// flags of several values (`work=1,2`) split on commas.
fn flag(argv: &mut Vec<String>, arg: &Arg, long: &str, value: &str) -> Result<(), ApiError> {
    if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::Count) {
        match value {
            "" | "true" | "1" => argv.push(format!("--{long}")),
            "false" | "0" => {}
            _ => return Err(bad(format!("--{long} is a switch: give {long}= or {long}=true, not {value:?}"))),
        }
        return Ok(());
    }
    if arg.get_num_args().is_some_and(|n| n.min_values() > 1) {
        argv.push(format!("--{long}"));
        argv.extend(value.split([',', ' ']).filter(|v| !v.is_empty()).map(String::from));
        return Ok(());
    }
    argv.push(format!("--{long}={value}"));
    Ok(())
}

impl Api for CliApi {
    fn call(&self, command: &str, params: &[(String, String)]) -> Result<Reply, ApiError> {
        if command == "databases" {
            return Ok(Reply::json(self.listing()));
        }
        let Argv { words: argv, fleet } = self.argv(command, params)?;
        let stamp = self.stamp();
        if let Some(r) = self.answers.lock().unwrap_or_else(|p| p.into_inner()).get(&argv, stamp.clone(), Instant::now()) {
            return Ok(r);
        }
        // The deadline counts from the question: the answer may already be that old when it is kept.
        let until = fleet.then(|| Instant::now() + self.source_ttl);
        if fleet && self.source_ttl.is_zero() {
            return self.run(&argv);
        }
        let reply = self.run(&argv)?;
        self.answers.lock().unwrap_or_else(|p| p.into_inner()).put(argv, &reply, &stamp, until);
        Ok(reply)
    }

    fn openapi(&self) -> Vec<u8> {
        let mut doc = crate::openapi::document(SERVED, DOWNLOADS, &refused);
        doc["paths"]["/api/databases"] = databases_path();
        doc["paths"]["/api/ingest/pprof"] = crate::openapi::ingest_path();
        serde_json::to_vec_pretty(&doc).expect("a JSON value serializes")
    }

    /// `POST /api/ingest/pprof?label=K=V...[&db=NAME][&event=TYPE]`: the body stored in a served fleet source.
    fn ingest(&self, format: &str, params: &[(String, String)], body: &[u8]) -> Result<Reply, ApiError> {
        let bad = |m: String| ApiError::new(ApiErrorKind::BadRequest, m);
        if format != "pprof" {
            return Err(ApiError::new(ApiErrorKind::NotFound, format!("no ingest of {format:?}: only /api/ingest/pprof")));
        }
        let (mut labels, mut db, mut event) = (Vec::new(), None, None);
        for (k, v) in params {
            match k.as_str() {
                "label" => labels.push(v.clone()),
                "db" => db = Some(v.as_str()),
                "event" => event = Some(v.as_str()),
                _ => return Err(bad(format!("unknown parameter {k:?} of ingest: label, db and event are"))),
            }
        }
        let source = match db {
            Some(name) => self.sources.iter().find(|(n, _)| n == name),
            None => self.sources.first(),
        };
        let Some((name, url)) = source else {
            return Err(bad(format!("no fleet source {} is served: ingest stores into a --source", db.unwrap_or(""))));
        };
        let stored = crate::fleet::ingest_bytes(url, &labels, body, event).map_err(|e| match e.kind {
            crate::fleet::IngestErrorKind::Input => bad(format!("{:#}", e.error)),
            crate::fleet::IngestErrorKind::Store => ApiError::new(ApiErrorKind::Internal, format!("{:#}", e.error)),
        })?;
        let doc = serde_json::json!({ "source": name, "host": stored.host, "event": stored.event, "samples": stored.samples,
            "stacks": stored.stacks });
        Ok(Reply::json(serde_json::to_vec_pretty(&doc).expect("a JSON value serializes")))
    }
}

impl CliApi {
    /// `/api/databases`: what `db=` may name, in order (the first is the default when a database is served).
    fn listing(&self) -> Vec<u8> {
        let dbs = self.dbs.iter().map(|(n, _)| serde_json::json!({ "name": n, "kind": "database" }));
        let sources = self.sources.iter().map(|(n, _)| serde_json::json!({ "name": n, "kind": "source" }));
        let doc = serde_json::json!({ "databases": dbs.chain(sources).collect::<Vec<_>>() });
        serde_json::to_vec(&doc).expect("a JSON value serializes")
    }

    fn run(&self, argv: &[String]) -> Result<Reply, ApiError> {
        let cli = Cli::try_parse_from(argv).map_err(|e| bad(clap_message(&e)))?;
        let download = match &cli.command {
            crate::flags::Command::Export(a) => Some(download_type(a.format)),
            _ => None,
        };
        crate::output::set_serving(true);
        let out = match cli.command {
            // The answer's own buffer, not a copy of it (a whole machine's tree is 26 MB).
            crate::flags::Command::Flame(a) if crate::stacks::flame_is_kept(&a) => crate::stacks::flame_kept(&a),
            command => {
                let mut out = Vec::new();
                crate::run(command, &mut out).map(|_| out)
            }
        }
        .map_err(|e| api_error(&e))?;
        Ok(match download {
            Some((content_type, name)) => Reply::download(out, content_type, name),
            None => Reply::json(out),
        })
    }
}

/// `/api/databases` in the OpenAPI document: not a command, so written here.
fn databases_path() -> serde_json::Value {
    let entry = serde_json::json!({ "type": "object", "required": ["name", "kind"], "properties": {
        "name": { "type": "string" }, "kind": { "type": "string", "enum": ["database", "source"] } } });
    let answer = serde_json::json!({ "type": "object", "required": ["databases"],
        "properties": { "databases": { "type": "array", "items": entry } } });
    serde_json::json!({ "get": {
        "operationId": "databases",
        "summary": "The served databases (`--db`) and fleet sources (`--source`) by name, in order",
        "description": "What `db=NAME` may name; without `db=`, commands read the first database (or the first source when only sources are served). Sources answer top, flame, export, diff and stats.",
        "parameters": [],
        "responses": { "200": { "description": "The names", "content": { "application/json": { "schema": answer } } } },
    }})
}

/// Flags that would make a served command trace instead of read: `locks`
/// shows the result kept in the database, never starts probes.
const TRACING: &[(&str, &str)] = &[("locks", "duration"), ("locks", "libc")];

/// Arguments a request may not give for `command` (the OpenAPI document
/// leaves them out).
fn refused(command: &str, a: &Arg) -> bool {
    let id = a.get_id().as_str();
    let chosen = DOWNLOADS.contains(&command) && id == "format";
    // `--source URL` (a fleet store) is picked by `db=NAME`; annotate's `--source` is a switch (show source lines).
    let fleet_url = id == "source" && !matches!(a.get_action(), ArgAction::SetTrue);
    (FORCED.contains(&id) && !chosen)
        || fleet_url
        || (is_path(a) && !NAMES_NOT_PATHS.contains(&(command, id)))
        || TRACING.contains(&(command, id))
}

/// An export's content type and the file name a browser saves it under.
fn download_type(f: crate::flags::ExportFormat) -> (&'static str, &'static str) {
    use crate::flags::ExportFormat as F;
    match f {
        F::Pprof => ("application/gzip", "loupe.pb.gz"),
        F::Collapsed => ("text/plain; charset=utf-8", "loupe.txt"),
        F::Perfetto => ("application/octet-stream", "loupe.pftrace"),
        F::Speedscope => ("application/json", "loupe.speedscope.json"),
    }
}

/// clap's message without its usage lines and `error:` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("bad arguments");
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// The query layer's "no such epoch/image/event" and a missing procedure
/// are 404; a selection that does not parse is 400; the rest 500.
fn api_error(e: &anyhow::Error) -> ApiError {
    use loupe_store::ErrorKind as K;
    let message = e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ");
    let store = e.chain().find_map(|c| c.downcast_ref::<loupe_store::Error>()).map(|s| s.kind().clone());
    let kind = match store {
        Some(K::NoSuchEpoch | K::NoSuchImage | K::NoSuchEvent) => ApiErrorKind::NotFound,
        Some(K::BadSelection) => ApiErrorKind::BadRequest,
        _ if e.chain().any(|c| c.is::<crate::procedure::NoSuchProcedure>() || c.is::<crate::locks::NoKeptResult>()) => {
            ApiErrorKind::NotFound
        }
        _ => ApiErrorKind::Internal,
    };
    ApiError::new(kind, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn answers_are_kept_within_the_budget_and_forgotten_when_a_database_changes() {
        // Checks the answer cache: a hit after a put, least recently used dropped past the budget, all dropped on a new stamp.
        let t = |s| vec![Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s))];
        let argv = |w: &str| vec!["loupe".to_string(), w.to_string()];
        let reply = |n: usize| Reply::json(vec![b'x'; n]);
        let now = Instant::now();
        let mut a = Answers::new(10);
        assert_eq!(a.get(&argv("top"), t(1), now), None);
        a.put(argv("top"), &reply(4), &t(1), None);
        a.put(argv("flame"), &reply(4), &t(1), None);
        assert_eq!(a.get(&argv("top"), t(1), now), Some(reply(4)));
        // 4 + 4 + 4 > 10: flame, used least recently, goes.
        a.put(argv("epochs"), &reply(4), &t(1), None);
        assert_eq!((a.get(&argv("flame"), t(1), now), a.used), (None, 8));
        a.put(argv("huge"), &reply(11), &t(1), None);
        assert_eq!(a.get(&argv("huge"), t(1), now), None, "larger than the whole budget");
        assert_eq!(a.get(&argv("top"), t(2), now), None, "the database changed");
        assert_eq!((a.kept.len(), a.used), (0, 0));
        a.put(argv("top"), &reply(4), &t(1), None);
        assert_eq!(a.get(&argv("top"), t(2), now), None, "an answer computed before the change is not kept");
    }

    #[test]
    fn a_kept_answer_is_handed_out_without_a_copy() {
        // Checks that a hit shares the kept bytes (a whole machine's flame tree is 26-34 MB; copying it was a third of a request).
        let mut a = Answers::new(100);
        let (argv, kept) = (vec!["loupe".to_string(), "flame".to_string()], Reply::json(vec![b'x'; 50]));
        a.put(argv.clone(), &kept, &[], None);
        let hit = a.get(&argv, Vec::new(), Instant::now()).unwrap();
        assert!(Arc::ptr_eq(&hit.body, &kept.body) && a.used == 50);
    }

    #[test]
    fn a_fleet_answer_is_kept_until_its_deadline() {
        // Checks that an answer put with a deadline is served before it and forgotten (its bytes freed) at it.
        let stamp = Vec::new();
        let argv = vec!["loupe".to_string(), "top".to_string(), "--source".to_string(), "clickhouse://h:1/p".to_string()];
        let (now, ttl) = (Instant::now(), Duration::from_secs(10));
        let mut a = Answers::new(100);
        a.put(argv.clone(), &Reply::json(b"{}".to_vec()), &stamp, Some(now + ttl));
        assert_eq!(a.get(&argv, stamp.clone(), now + ttl / 2), Some(Reply::json(b"{}".to_vec())));
        assert_eq!(a.get(&argv, stamp.clone(), now + ttl), None, "past its deadline");
        assert_eq!((a.kept.len(), a.used), (0, 0));
    }

    /// A database `run` and a source `fleet`, without a server (argv only).
    fn served() -> CliApi {
        let mut api = CliApi::empty();
        api.dbs.push(("run".into(), PathBuf::from("/tmp/run.db")));
        api.sources.push(("fleet".into(), "clickhouse://127.0.0.1:9/prof".into()));
        api
    }

    fn params(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn db_naming_a_source_becomes_its_url_and_diff_sides_its_selections() {
        // Checks request routing: db=SOURCE gives --source URL (a fleet answer), SOURCE:SELECTION sides give one --source and the selections, and mixes are refused.
        let api = served();
        let a = api.argv("top", &params(&[("db", "fleet"), ("where", "host=web-1"), ("by", "host")])).unwrap();
        assert!(a.fleet);
        assert_eq!(
            a.words,
            ["loupe", "top", "--where=host=web-1", "--by=host", "--format", "json", "--source", "clickhouse://127.0.0.1:9/prof"]
        );
        let a = api.argv("top", &params(&[("by", "image")])).unwrap();
        assert!(!a.fleet);
        assert_eq!(a.words, ["loupe", "top", "--by=image", "--format", "json", "--db", "/tmp/run.db"]);
        let a = api.argv("diff", &params(&[("a", "fleet:host=a,since=1h"), ("b", "fleet")])).unwrap();
        assert!(a.fleet);
        assert_eq!(
            a.words,
            ["loupe", "diff", "--format", "json", "--source", "clickhouse://127.0.0.1:9/prof", "--", "host=a,since=1h", ""]
        );
        let refused = |command: &str, p: &[(&str, &str)]| api.argv(command, &params(p)).err().map(|e| e.message().to_string());
        assert!(refused("diff", &[("a", "fleet:host=a"), ("b", "run:1")]).unwrap().contains("not one of each"));
        assert!(refused("epochs", &[("db", "fleet")]).unwrap().contains("fleet source"));
        assert!(refused("stats", &[("run", "fleet:host=a"), ("run", "run:1")]).unwrap().contains("not one of each"));
        let a = api.argv("stats", &params(&[("run", "fleet:host=a"), ("run", "fleet:host=b")])).unwrap();
        assert!(a.fleet);
        assert_eq!(a.words, ["loupe", "stats", "--format", "json", "--source", "clickhouse://127.0.0.1:9/prof", "--", "host=a", "host=b"]);
        assert!(refused("top", &[("source", "clickhouse://evil:1/x")]).unwrap().contains("cannot be set"));
        let annotate = api.argv("annotate", &params(&[("image", "x"), ("procedure", "p"), ("source", "")])).unwrap();
        assert!(
            annotate.words.contains(&"--source".to_string()) && !annotate.fleet,
            "annotate's --source is a switch: {:?}",
            annotate.words
        );
        assert!(refused("top", &[("db", "nope")]).unwrap().contains("served: run, fleet"));
        assert!(refused("top", &[("where", "host=a")]).unwrap().contains("fleet source's rows"));
        let listing: serde_json::Value = serde_json::from_slice(&api.call("databases", &[]).unwrap().body).unwrap();
        assert_eq!(
            listing,
            serde_json::json!({ "databases": [{ "name": "run", "kind": "database" }, { "name": "fleet", "kind": "source" }] })
        );
    }
}
