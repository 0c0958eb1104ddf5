//! `loupe serve`: the CLI's side of the HTTP API. A request's query
//! parameters become the command's flags, parsed by the same clap
//! definitions as the command line (so the API cannot drift from the CLI),
//! with `--format json` and the served database forced; the command runs
//! into a buffer through [`crate::run`]. The server itself (routing,
//! limits, token, assets) is `loupe_serve`.

use crate::flags::{Cli, ServeArgs};
use anyhow::{bail, Result};
use clap::{Arg, ArgAction, CommandFactory, Parser, ValueHint};
use loupe_serve::{Api, ApiError, ApiErrorKind, Config, Server};
use std::path::PathBuf;
use std::sync::Arc;

/// The commands served at `/api/<command>`: those whose `--format json` is
/// a result read from a database (not ones that run programs or write files).
pub const SERVED: &[&str] =
    &["top", "flame", "epochs", "diff", "stats", "calc", "annotate", "data/profile", "data/classify", "data/workingset"];

/// Flags a request may not set: the server picks the format and database,
/// and never writes files.
const FORCED: &[&str] = &["format", "output", "db", "source", "help", "version"];

pub fn run(a: ServeArgs) -> Result<u8> {
    let mut api = CliApi::new(&a.dbs)?;
    if let Some(url) = &a.source {
        loupe_fleet::schema::check(&loupe_fleet::client::Client::new(&loupe_fleet::url::FleetUrl::parse(url)?))?;
        api.source = Some(url.clone());
    }
    let names: Vec<String> = api.dbs.iter().map(|(n, d)| format!("{n}={}", d.display())).collect();
    let mut config = Config::new(a.listen);
    config.token = a.token.filter(|t| !t.is_empty());
    config.time_limit = a.time_limit;
    if let Some(w) = a.workers {
        config.workers = w.max(1);
    }
    let server = Server::bind(config, Arc::new(api))?;
    let host = if a.listen.ip().is_unspecified() { "127.0.0.1".to_string() } else { a.listen.ip().to_string() };
    let host = if a.listen.is_ipv6() { format!("[{host}]") } else { host };
    println!("Serving http://{host}:{}/ (databases: {})", server.local_addr().port(), names.join(", "));
    server.serve();
    Ok(0)
}

/// The served databases, by name; the first is the default.
pub struct CliApi {
    dbs: Vec<(String, PathBuf)>,
    /// `--source`: the fleet store the commands that can read one read.
    source: Option<String>,
}

impl CliApi {
    pub fn new(specs: &[String]) -> Result<CliApi> {
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
        Ok(CliApi { dbs, source: None })
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
            if name == "format" && value == "json" {
                continue; // what the API answers anyway
            }
            let arg = find_arg(&cmd, name).ok_or_else(|| bad(format!("{command} has no flag --{name}")))?;
            if FORCED.contains(&arg.get_id().as_str()) || is_path(arg) {
                return Err(bad(format!("--{name} cannot be set over HTTP")));
            }
            match (arg.get_index(), arg.get_long()) {
                (Some(i), _) => positional.push((i, self.positional(command, value)?)),
                (None, Some(long)) => flag(&mut argv, arg, long, value)?,
                (None, None) => return Err(bad(format!("{command} has no flag --{name}"))),
            }
        }
        argv.extend(["--format".to_string(), "json".to_string()]);
        if let Some(url) = self.source.as_ref().filter(|_| find_arg(&cmd, "source").is_some()) {
            argv.extend(["--source".to_string(), url.clone()]);
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

    /// Positional values are diff's and stats' sides.
    fn positional(&self, command: &str, value: &str) -> Result<String, ApiError> {
        match command {
            // With --source, diff's sides select fleet rows (`version=1.2,host~^web-`), not databases.
            "diff" if self.source.is_some() => Ok(value.to_string()),
            "diff" | "stats" => self.side(value),
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
    fn call(&self, command: &str, params: &[(String, String)]) -> Result<Vec<u8>, ApiError> {
        let argv = self.argv(command, params)?;
        let cli = Cli::try_parse_from(&argv).map_err(|e| bad(clap_message(&e)))?;
        let mut out = Vec::new();
        crate::run(cli.command, &mut out).map_err(|e| api_error(&e))?;
        Ok(out)
    }

    fn openapi(&self) -> Vec<u8> {
        let doc = crate::openapi::document(SERVED, FORCED, &|a| is_path(a));
        serde_json::to_vec_pretty(&doc).expect("a JSON value serializes")
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
        _ if e.chain().any(|c| c.is::<crate::procedure::NoSuchProcedure>()) => ApiErrorKind::NotFound,
        _ => ApiErrorKind::Internal,
    };
    ApiError::new(kind, message)
}
