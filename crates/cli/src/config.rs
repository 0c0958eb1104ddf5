//! `loupe daemon --config FILE`: a TOML file that sets any daemon flag by its
//! long name (`flush-every = 30`, `max-overhead = "0.5"`, `event = ["cpu-clock"]`).
//! The file is turned into the flags it stands for, checked key by key
//! against the one clap definition (so every flag, present and future, is
//! accepted and validated the same way), and placed before the command
//! line's own flags, which win. `--print-config` prints the effective
//! settings as such a file.

use crate::flags::Cli;
use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration file that cannot be used; displays as `FILE:LINE: what`.
#[derive(Debug)]
pub struct ConfigError {
    path: PathBuf,
    line: Option<usize>,
    message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The arguments with `daemon --config FILE` replaced by the flags the file
/// sets (those the command line sets too are left to the command line).
/// Other commands' arguments come back unchanged.
pub fn expand(args: Vec<OsString>) -> Result<Vec<OsString>, ConfigError> {
    if args.get(1).and_then(|a| a.to_str()) != Some("daemon") {
        return Ok(args);
    }
    let Some(path) = config_path(&args[2..]) else { return Ok(args) };
    let text =
        std::fs::read_to_string(&path).map_err(|e| ConfigError { path: path.clone(), line: None, message: format!("cannot read: {e}") })?;
    // What the command line itself sets, to leave it out of the file's flags.
    let given = daemon_command().try_get_matches_from(&args[1..]).ok();
    let from_file = flags_of(&path, &text, |id| given.as_ref().is_some_and(|m| m.value_source(id) == Some(ValueSource::CommandLine)))?;
    let mut out = args[..2].to_vec();
    out.extend(from_file);
    out.extend(args[2..].iter().cloned());
    Ok(out)
}

fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let a = a.to_str()?;
        if a == "--" {
            return None;
        }
        if a == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(p) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(p));
        }
    }
    None
}

fn daemon_command() -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand("daemon").expect("daemon command").clone()
}

/// The flags `text` sets, each checked alone against the daemon's definition.
fn flags_of(path: &Path, text: &str, on_command_line: impl Fn(&str) -> bool) -> Result<Vec<OsString>, ConfigError> {
    let err = |line, message| ConfigError { path: path.to_path_buf(), line, message };
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        let line = e.span().map(|s| text[..s.start].lines().count().max(1));
        err(line, e.message().to_string())
    })?;
    let cmd = daemon_command();
    let mut out = Vec::new();
    for (key, value) in &flatten(table) {
        // A table's key (`[agents] enable`) is found by its own name.
        let line = line_of(text, key).or_else(|| key.split_once('-').and_then(|(_, inner)| line_of(text, inner)));
        let long = key.replace('_', "-");
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(long.as_str())) else {
            return Err(err(line, format!("unknown daemon option `{key}` (the keys are `loupe daemon --help`'s long flags)")));
        };
        if ["config", "print-config", "help"].contains(&long.as_str()) {
            return Err(err(line, format!("`{key}` cannot be set in a configuration file")));
        }
        if on_command_line(arg.get_id().as_str()) {
            continue;
        }
        let flags = flag_values(&long, arg, value).map_err(|m| err(line, format!("`{key}`: {m}")))?;
        let mut trial: Vec<OsString> = vec!["daemon".into()];
        trial.extend(flags.iter().cloned());
        // A flag that needs another (`spool-max` needs `ship`) is checked with the rest, by the final parse.
        if let Err(e) = cmd.clone().try_get_matches_from(trial).or_else(|e| match e.kind() {
            clap::error::ErrorKind::MissingRequiredArgument => Ok(Default::default()),
            _ => Err(e),
        }) {
            let first = e.to_string().lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
            return Err(err(line, format!("`{key}`: {first}")));
        }
        out.extend(flags);
    }
    Ok(out)
}

/// A section's keys as flags of its name: `[agents] enable = [..]` is `agents-enable = [..]`.
/// Any other table stays one value (a flag given a table is a type error).
fn flatten(table: toml::Table) -> Vec<(String, toml::Value)> {
    let mut out = Vec::new();
    for (key, value) in table {
        match value {
            toml::Value::Table(t) if key == "agents" => out.extend(t.into_iter().map(|(k, v)| (format!("{key}-{k}"), v))),
            v => out.push((key, v)),
        }
    }
    out
}

/// One TOML value as the flag(s) it stands for.
fn flag_values(long: &str, arg: &clap::Arg, value: &toml::Value) -> Result<Vec<OsString>, String> {
    let takes_value = !matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count);
    let scalar = |v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(format!("expected a string or a number, got {}", other.type_str())),
        }
    };
    match value {
        toml::Value::Boolean(b) if !takes_value => Ok(if *b { vec![format!("--{long}").into()] } else { Vec::new() }),
        // An optional value (`stats = true`) stands for the bare flag.
        toml::Value::Boolean(true) if arg.get_num_args().is_some_and(|n| n.min_values() == 0) => Ok(vec![format!("--{long}").into()]),
        _ if !takes_value => Err("expected true or false".into()),
        toml::Value::Array(items) => items.iter().map(|v| Ok(format!("--{long}={}", scalar(v)?).into())).collect(),
        v => Ok(vec![format!("--{long}={}", scalar(v)?).into()]),
    }
}

/// The line of `key = ...` (1-based), for messages.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches('"');
            t.starts_with(key) && t[key.len()..].trim_start().trim_start_matches('"').trim_start().starts_with('=')
        })
        .map(|i| i + 1)
}

/// `--print-config`: every daemon flag with its effective value, as a file
/// `--config` reads back to the same settings (unset optional flags are comments).
pub fn print_daemon_config(args: &[OsString]) -> Option<String> {
    if args.get(1).and_then(|a| a.to_str()) != Some("daemon") || !args.iter().any(|a| a == "--print-config") {
        return None;
    }
    let cmd = daemon_command();
    let m = cmd.clone().try_get_matches_from(&args[1..]).ok()?;
    let mut out = String::from("# loupe daemon configuration (loupe daemon --config FILE); the command line's flags win.\n");
    for arg in cmd.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else { continue };
        if ["config", "print-config", "help"].contains(&long) {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        out.push('\n');
        for line in help.lines() {
            out += &format!("# {line}\n");
        }
        let takes_value = !matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse | ArgAction::Count);
        // Defaults are shown commented out: reading the file back leaves them defaults (and a flag that
        // needs another, like spool-max with ship, is not set alone).
        let default = m.value_source(id) == Some(ValueSource::DefaultValue);
        if default {
            out += "# ";
        }
        if !takes_value {
            out += &format!("{long} = {}\n", m.get_flag(id));
            continue;
        }
        let raw: Vec<String> = m.get_raw(id).map(|v| v.map(|x| x.to_string_lossy().into_owned()).collect()).unwrap_or_default();
        let quoted: Vec<String> = raw.iter().map(|v| toml_literal(v)).collect();
        let many = matches!(arg.get_action(), ArgAction::Append);
        out += &match (quoted.as_slice(), many) {
            ([], _) if m.value_source(id).is_some() => format!("{long} = true\n"),
            ([], _) if default => format!("{long} = \n"),
            ([], _) => format!("# {long} = \n"),
            (q, true) => format!("{long} = [{}]\n", q.join(", ")),
            ([one], false) => format!("{long} = {one}\n"),
            (q, false) => format!("{long} = [{}]\n", q.join(", ")),
        };
    }
    Some(out)
}

/// A flag's value as TOML: a plain number stays a number, anything else a string.
fn toml_literal(v: &str) -> String {
    let plain_number = !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.') && v.parse::<f64>().is_ok();
    if plain_number && !v.starts_with('.') && !v.ends_with('.') {
        v.to_string()
    } else {
        toml::Value::String(v.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_with(text: &str, cmdline: &[&str]) -> Result<Vec<String>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loupe.toml");
        std::fs::write(&path, text).unwrap();
        let mut args: Vec<OsString> = vec!["loupe".into(), "daemon".into(), "--config".into(), path.clone().into()];
        args.extend(cmdline.iter().map(OsString::from));
        expand(args)
            .map(|v| v[2..].iter().map(|a| a.to_string_lossy().into_owned()).collect())
            .map_err(|e| e.to_string().replace(&path.display().to_string(), "FILE"))
    }

    #[test]
    fn keys_become_flags_before_the_command_line_which_wins() {
        // Checks that the file's keys turn into flags, and a flag also on the command line is taken from there only.
        let got = expand_with("flush-every = 30\nmax_overhead = \"0.5\"\n", &["--flush-every", "5"]).unwrap();
        assert_eq!(got[0], "--max-overhead=0.5");
        assert!(!got.iter().any(|a| a == "--flush-every=30"), "{got:?}");
    }

    #[test]
    fn errors_name_the_file_and_line() {
        // Checks one message per kind of mistake, each with its line: syntax, unknown key, bad value, wrong type.
        assert_eq!(
            expand_with("flush-every = 30\nfrobnicate = 1\n", &[]).unwrap_err(),
            "FILE:2: unknown daemon option `frobnicate` (the keys are `loupe daemon --help`'s long flags)"
        );
        let bad = expand_with("# comment\n\nmax-overhead = \"lots\"\n", &[]).unwrap_err();
        assert!(bad.starts_with("FILE:3: `max-overhead`: invalid value 'lots'"), "{bad}");
        assert!(expand_with("flush-every = [\n", &[]).unwrap_err().starts_with("FILE:"), "syntax error");
        let ty = expand_with("flush-every = { a = 1 }\n", &[]).unwrap_err();
        assert!(ty.starts_with("FILE:1: `flush-every`: expected a string or a number"), "{ty}");
    }
}
