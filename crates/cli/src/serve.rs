//! `loupe serve`: the CLI's side of the HTTP API. A request's query
//! parameters become the command's flags, parsed by the same clap
//! definitions as the command line (so the API cannot drift from the CLI),
//! with `--format json` and the served database forced; the command runs
//! into a buffer through [`crate::run`]. The server itself (routing,
//! limits, token, assets) is `loupe_serve`.

use crate::flags::{Cli, ServeArgs};
use anyhow::{bail, Result};
use clap::{Arg, ArgAction, CommandFactory, Parser, ValueHint};
use loupe_serve::{Api, ApiError, ApiErrorKind, Config, Reply, Server};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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
    // A quarter of the budget for whole answers, the rest for symbol tables.
    let api = CliApi::new(&a.dbs, (a.cache_mb << 20) / 4)?;
    let names: Vec<String> = api.dbs.iter().map(|(n, d)| format!("{n}={}", d.display())).collect();
    let mut config = Config::new(a.listen);
    config.token = a.token.filter(|t| !t.is_empty());
    config.time_limit = a.time_limit;
    if let Some(w) = a.workers {
        config.workers = w.max(1);
    }
    let server = Server::bind(config, Arc::new(api))?;
    if a.cache_mb > 0 {
        crate::symbol_cache::enable((a.cache_mb << 20) - (a.cache_mb << 20) / 4);
    }
    let host = if a.listen.ip().is_unspecified() { "127.0.0.1".to_string() } else { a.listen.ip().to_string() };
    let host = if a.listen.is_ipv6() { format!("[{host}]") } else { host };
    println!("Serving http://{host}:{}/ (databases: {})", server.local_addr().port(), names.join(", "));
    server.serve();
    Ok(0)
}

/// The served databases, by name; the first is the default.
pub struct CliApi {
    dbs: Vec<(String, PathBuf)>,
    answers: Mutex<Answers>,
}

/// Answers kept by command line, dropped when any served database changes
/// (see [`crate::symbol_cache::full_stamp`]) and, least recently used
/// first, past a budget: the pages ask the same questions again (reloads,
/// going back, the overview's per-epoch calls), and a whole machine's
/// flame tree takes seconds to build from named stacks.
struct Answers {
    budget: usize,
    used: usize,
    clock: u64,
    stamp: Vec<Option<std::time::SystemTime>>,
    kept: HashMap<Vec<String>, (Reply, u64)>,
}

impl Answers {
    fn new(budget: usize) -> Answers {
        Answers { budget, used: 0, clock: 0, stamp: Vec::new(), kept: HashMap::new() }
    }

    /// The kept answer to `argv`, after forgetting everything when `stamp` moved.
    fn get(&mut self, argv: &[String], stamp: Vec<Option<std::time::SystemTime>>) -> Option<Reply> {
        if stamp != self.stamp {
            self.kept.clear();
            self.used = 0;
            self.stamp = stamp;
        }
        self.clock += 1;
        let clock = self.clock;
        self.kept.get_mut(argv).map(|(r, used)| {
            *used = clock;
            r.clone()
        })
    }

    /// Keeps `reply` for `argv` if it fits, dropping the least recently used.
    fn put(&mut self, argv: Vec<String>, reply: &Reply, stamp: &[Option<std::time::SystemTime>]) {
        if reply.body.len() > self.budget || stamp != self.stamp.as_slice() {
            return;
        }
        while self.used + reply.body.len() > self.budget {
            let Some(oldest) = self.kept.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| k.clone()) else { break };
            self.used -= self.kept.remove(&oldest).map_or(0, |(r, _)| r.body.len());
        }
        self.used += reply.body.len();
        if let Some((old, _)) = self.kept.insert(argv, (reply.clone(), self.clock)) {
            self.used -= old.body.len();
        }
    }
}

impl CliApi {
    pub fn new(specs: &[String], answer_budget: usize) -> Result<CliApi> {
        let mut dbs: Vec<(String, PathBuf)> = Vec::new();
        for s in specs {
            let (name, dir) = match s.split_once('=') {
                Some((n, d)) if !n.is_empty() && !n.contains('/') => (n.to_string(), PathBuf::from(d)),
                _ => (PathBuf::from(s).file_name().map_or(s.clone(), |f| f.to_string_lossy().into_owned()), PathBuf::from(s)),
            };
            loupe_store::Database::open(&dir)?;
            if name.contains(':') || name.contains(',') {
                bail!("database name {name:?} contains ':' or ',', which separate diff sides; name it with --db NAME=DIR");
            }
            if dbs.iter().any(|(n, _)| *n == name) {
                bail!("two databases named {name:?}; name them with --db NAME=DIR");
            }
            dbs.push((name, dir));
        }
        Ok(CliApi { dbs, answers: Mutex::new(Answers::new(answer_budget)) })
    }

    /// Serving nothing: what the OpenAPI document needs (it depends on no database).
    #[cfg(test)]
    pub fn empty() -> CliApi {
        CliApi { dbs: Vec::new(), answers: Mutex::new(Answers::new(0)) }
    }

    fn stamp(&self) -> Vec<Option<std::time::SystemTime>> {
        self.dbs.iter().flat_map(|(_, d)| crate::symbol_cache::full_stamp(d)).collect()
    }

    fn db(&self, name: Option<&str>) -> Result<&PathBuf, ApiError> {
        let Some(name) = name else { return Ok(&self.dbs[0].1) };
        self.dbs.iter().find(|(n, _)| n == name).map(|(_, d)| d).ok_or_else(|| {
            let have: Vec<&str> = self.dbs.iter().map(|(n, _)| n.as_str()).collect();
            ApiError::new(ApiErrorKind::NotFound, format!("no database named {name:?} (served: {})", have.join(", ")))
        })
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
    fn argv(&self, command: &str, params: &[(String, String)]) -> Result<Vec<String>, ApiError> {
        if !SERVED.contains(&command) {
            return Err(ApiError::new(ApiErrorKind::NotFound, format!("no API command {command:?} (served: {})", SERVED.join(", "))));
        }
        let words: Vec<&str> = command.split('/').collect();
        let cmd = subcommand(&words);
        let mut argv: Vec<String> = std::iter::once("loupe").chain(words.iter().copied()).map(String::from).collect();
        let mut positional: Vec<(usize, String)> = Vec::new();
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
                (Some(i), _) => positional.push((i, self.positional(command, value)?)),
                (None, Some(long)) => flag(&mut argv, arg, long, value)?,
                (None, None) => return Err(bad(format!("{command} has no flag --{name}"))),
            }
        }
        if !DOWNLOADS.contains(&command) {
            argv.extend(["--format".to_string(), "json".to_string()]);
        }
        if find_arg(&cmd, "db").is_some() {
            argv.extend(["--db".to_string(), self.db(db)?.display().to_string()]);
        } else if let Some(name) = db {
            self.db(Some(name))?;
            return Err(bad(format!("{command} reads the databases its sides name; db={name} is not a flag of it")));
        }
        positional.sort_by_key(|(i, _)| *i);
        if !positional.is_empty() {
            argv.push("--".into());
            argv.extend(positional.into_iter().map(|(_, v)| v));
        }
        Ok(argv)
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
        let argv = self.argv(command, params)?;
        let stamp = self.stamp();
        if let Some(r) = self.answers.lock().unwrap_or_else(|p| p.into_inner()).get(&argv, stamp.clone()) {
            return Ok(r);
        }
        let reply = self.run(&argv)?;
        self.answers.lock().unwrap_or_else(|p| p.into_inner()).put(argv, &reply, &stamp);
        Ok(reply)
    }

    fn openapi(&self) -> Vec<u8> {
        let doc = crate::openapi::document(SERVED, DOWNLOADS, &refused);
        serde_json::to_vec_pretty(&doc).expect("a JSON value serializes")
    }
}

impl CliApi {
    fn run(&self, argv: &[String]) -> Result<Reply, ApiError> {
        let cli = Cli::try_parse_from(argv).map_err(|e| bad(clap_message(&e)))?;
        let download = match &cli.command {
            crate::flags::Command::Export(a) => Some(download_type(a.format)),
            _ => None,
        };
        let mut out = Vec::new();
        crate::output::set_serving(true);
        crate::run(cli.command, &mut out).map_err(|e| api_error(&e))?;
        Ok(match download {
            Some((content_type, name)) => Reply::download(out, content_type, name),
            None => Reply::json(out),
        })
    }
}

/// Flags that would make a served command trace instead of read: `locks`
/// shows the result kept in the database, never starts probes.
const TRACING: &[(&str, &str)] = &[("locks", "duration"), ("locks", "libc")];

/// Arguments a request may not give for `command` (the OpenAPI document
/// leaves them out).
fn refused(command: &str, a: &Arg) -> bool {
    let id = a.get_id().as_str();
    let chosen = DOWNLOADS.contains(&command) && id == "format";
    (FORCED.contains(&id) && !chosen) || (is_path(a) && !NAMES_NOT_PATHS.contains(&(command, id))) || TRACING.contains(&(command, id))
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
        let mut a = Answers::new(10);
        assert_eq!(a.get(&argv("top"), t(1)), None);
        a.put(argv("top"), &reply(4), &t(1));
        a.put(argv("flame"), &reply(4), &t(1));
        assert_eq!(a.get(&argv("top"), t(1)), Some(reply(4)));
        // 4 + 4 + 4 > 10: flame, used least recently, goes.
        a.put(argv("epochs"), &reply(4), &t(1));
        assert_eq!((a.get(&argv("flame"), t(1)), a.used), (None, 8));
        a.put(argv("huge"), &reply(11), &t(1));
        assert_eq!(a.get(&argv("huge"), t(1)), None, "larger than the whole budget");
        assert_eq!(a.get(&argv("top"), t(2)), None, "the database changed");
        assert_eq!((a.kept.len(), a.used), (0, 0));
        a.put(argv("top"), &reply(4), &t(1));
        assert_eq!(a.get(&argv("top"), t(2)), None, "an answer computed before the change is not kept");
    }
}
