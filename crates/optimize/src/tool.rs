//! The external optimizers behind a trait, so tests and other back ends
//! can stand in for them: llvm-bolt (Debian's `bolt-19`).

use crate::error::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Clone, Debug)]
pub struct ToolOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

pub trait Tool {
    fn describe(&self) -> String;
    fn run(&self, args: &[String]) -> Result<ToolOutput>;
}

/// A program on disk, run with its arguments.
pub struct Program {
    pub path: PathBuf,
}

impl Tool for Program {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn run(&self, args: &[String]) -> Result<ToolOutput> {
        let out = Command::new(&self.path)
            .args(args)
            .output()
            .map_err(|e| Error::new(ErrorKind::Tool, format!("cannot run {}: {e}", self.path.display())))?;
        Ok(ToolOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Where llvm-bolt is: the explicit path, else LLVM 19's own directory.
/// Not `/usr/bin/perf2bolt-19`: that symlink acts as llvm-bolt or perf2bolt
/// by its name, and Debian's names confuse it.
pub fn find_bolt(explicit: Option<&Path>) -> Result<Program> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => vec!["/usr/lib/llvm-19/bin/llvm-bolt".into(), "/usr/bin/llvm-bolt-19".into(), "/usr/bin/llvm-bolt".into()],
    };
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .map(|path| Program { path })
        .ok_or_else(|| Error::new(ErrorKind::Tool, "llvm-bolt not found: install Debian package bolt-19 or pass --bolt PATH"))
}

/// Morph's three layout optimizations in BOLT's terms: block reordering
/// (branch alignment), hot/cold splitting (fluff removal), function
/// reordering (procedure layout); plus BOLT's address translation table so
/// samples of the optimized binary can be mapped back.
pub fn bolt_args(input: &Path, fdata: &Path, output: &Path) -> Vec<String> {
    bolt_args_with(input, fdata, output, &default_opts())
}

/// BOLT's command line with the optimization options `opts` instead of
/// the default ones.
pub fn bolt_args_with(input: &Path, fdata: &Path, output: &Path, opts: &[String]) -> Vec<String> {
    let mut v = vec![input.display().to_string(), "-o".into(), output.display().to_string(), format!("-data={}", fdata.display())];
    v.extend(opts.iter().cloned());
    v
}

/// The default optimization options (see `bolt_args`).
pub fn default_opts() -> Vec<String> {
    vec![
        "-reorder-blocks=ext-tsp".into(),
        "-split-functions".into(),
        "-split-all-cold".into(),
        "-reorder-functions=hfsort".into(),
        "-dyno-stats".into(),
        "-enable-bat".into(),
    ]
}

#[derive(Clone, Debug, Default)]
pub struct BoltReport {
    /// The input had relocations (linked with --emit-relocs): functions
    /// could be moved and split.
    pub relocation_mode: bool,
    /// What could not be done, and how to enable it.
    pub skipped: Vec<String>,
    /// Functions BOLT matched to the profile, as BOLT reports it.
    pub profiled_functions: Option<String>,
    /// The output's own build-id (hex), derived from the input's and the
    /// profile (see `identity`); `None` when the input has none.
    pub build_id: Option<String>,
    pub log: String,
}

/// Reads what BOLT did from its log.
pub fn parse_bolt_log(log: &str) -> BoltReport {
    let relocation_mode = log.contains("enabling relocation mode");
    let mut skipped = Vec::new();
    if !relocation_mode {
        skipped.push(
            "function reordering, and moving split-off cold code away from its function (no relocations: relink with -Wl,--emit-relocs)"
                .into(),
        );
    }
    let profiled_functions = log
        .lines()
        .find(|l| l.contains("functions in the binary") && l.contains("have non-empty execution profile"))
        .map(|l| l.trim().to_string());
    BoltReport { relocation_mode, skipped, profiled_functions, build_id: None, log: log.to_string() }
}

/// BOLT's refusal to reorder functions of a binary without relocations.
const NEEDS_RELOCS: &str = "function reordering only works when relocations are enabled";

/// Runs BOLT on `input` with `fdata`, writing `output`. A binary linked
/// without relocations gets what BOLT can do without them (block
/// reordering and splitting inside functions), and the report says so.
pub fn run_bolt(tool: &dyn Tool, input: &Path, fdata: &Path, output: &Path) -> Result<BoltReport> {
    run_bolt_with(tool, input, fdata, output, &default_opts())
}

/// `run_bolt` with optimization options `opts` in place of the defaults.
pub fn run_bolt_with(tool: &dyn Tool, input: &Path, fdata: &Path, output: &Path, opts: &[String]) -> Result<BoltReport> {
    let mut args = bolt_args_with(input, fdata, output, opts);
    let mut out = tool.run(&args)?;
    if !out.success && format!("{}{}", out.stdout, out.stderr).contains(NEEDS_RELOCS) {
        args.retain(|a| !a.starts_with("-reorder-functions"));
        out = tool.run(&args)?;
    }
    let log = format!("{}{}", out.stdout, out.stderr);
    if !out.success || !output.is_file() {
        let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(Error::new(ErrorKind::Tool, format!("{} failed: {last}", tool.describe())));
    }
    let mut report = parse_bolt_log(&log);
    // An input without a build-id leaves the output without one too.
    if crate::identity::read_build_id(input).is_ok() {
        let id = crate::identity::give_identity(input, fdata, output)?;
        report.build_id = Some(id.iter().map(|b| format!("{b:02x}")).collect());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Without "enabling relocation mode" BOLT cannot move functions; the
    // report says so and how to fix it.
    #[test]
    fn log_without_relocations() {
        let r = parse_bolt_log("BOLT-INFO: Target architecture: x86_64\nBOLT-INFO: 2 out of 14 functions in the binary (14.3%) have non-empty execution profile\n");
        assert!(!r.relocation_mode);
        assert!(r.skipped[0].contains("--emit-relocs"));
        assert!(r.profiled_functions.unwrap().starts_with("BOLT-INFO: 2 out of 14"));
        assert!(parse_bolt_log("BOLT-INFO: enabling relocation mode\n").skipped.is_empty());
    }

    // Without relocations BOLT refuses function reordering; the run is
    // retried without it and the report names what was skipped.
    #[test]
    fn retries_without_function_reordering() {
        struct NoRelocs(std::cell::RefCell<Vec<Vec<String>>>, std::path::PathBuf);
        impl Tool for NoRelocs {
            fn describe(&self) -> String {
                "fake-bolt".into()
            }
            fn run(&self, args: &[String]) -> Result<ToolOutput> {
                self.0.borrow_mut().push(args.to_vec());
                if args.iter().any(|a| a.starts_with("-reorder-functions")) {
                    return Ok(ToolOutput { success: false, stdout: String::new(), stderr: format!("BOLT-ERROR: {NEEDS_RELOCS}\n") });
                }
                std::fs::write(&self.1, b"x").unwrap();
                Ok(ToolOutput { success: true, stdout: "BOLT-INFO: Target architecture: x86_64\n".into(), stderr: String::new() })
            }
        }
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out");
        let t = NoRelocs(Default::default(), out.clone());
        let r = run_bolt(&t, Path::new("in"), Path::new("p.fdata"), &out).unwrap();
        assert_eq!(t.0.borrow().len(), 2);
        assert!(!r.relocation_mode && r.skipped[0].contains("--emit-relocs"));
    }

    // A tool that fails is reported with its last line, and no output file means failure.
    #[test]
    fn failing_tool() {
        struct Fails;
        impl Tool for Fails {
            fn describe(&self) -> String {
                "fake-bolt".into()
            }
            fn run(&self, _: &[String]) -> Result<ToolOutput> {
                Ok(ToolOutput { success: false, stdout: String::new(), stderr: "BOLT-ERROR: bad\n".into() })
            }
        }
        let e = run_bolt(&Fails, Path::new("/nonexistent/in"), Path::new("p.fdata"), Path::new("/nonexistent/out")).unwrap_err();
        assert_eq!((e.to_string().as_str(), e.kind()), ("fake-bolt failed: BOLT-ERROR: bad", ErrorKind::Tool));
    }
}
