//! Validation and installation (Morph's Manager deciding whether a
//! re-optimized module replaces the original): the candidate must give the
//! user's check the same result as the original, and be faster on the
//! user's benchmark over alternating runs by a margin a sign test finds
//! significant. Installation renames, never writes in place; the original
//! is kept beside it for `rollback`.

use crate::error::{Error, ErrorKind, Result};
use crate::stats::{median, sign_test};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a finished shell command gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// The exit status as the shell reports it ("exit status: 1").
    pub status: String,
    /// The exit code (None when a signal ended it).
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// How the manager runs the user's check, benchmark and rebuild commands,
/// and reads the CPU they used: the processes, behind a trait so tests can
/// give literal outputs and times.
pub trait Runner {
    /// Runs `sh -c cmd` to completion.
    fn sh(&self, cmd: &str) -> Result<Output>;
    /// User+system CPU seconds of all children waited for so far.
    fn children_cpu(&self) -> f64;
}

/// The real processes: `sh -c`, and `getrusage(RUSAGE_CHILDREN)`.
pub struct Shell;

impl Runner for Shell {
    fn sh(&self, cmd: &str) -> Result<Output> {
        let o = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .output()
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot run sh -c {cmd:?}: {e}")))?;
        Ok(Output { status: o.status.to_string(), code: o.status.code(), stdout: o.stdout, stderr: o.stderr })
    }

    fn children_cpu(&self) -> f64 {
        children_cpu()
    }
}

/// A shell command with `{}` standing for the binary under test.
pub fn command_for(template: &str, binary: &Path) -> String {
    let quoted = format!("'{}'", binary.display().to_string().replace('\'', r"'\''"));
    if template.contains("{}") {
        template.replace("{}", &quoted)
    } else {
        format!("{quoted} {template}")
    }
}

/// The rebuild command with `{profile}` and `{out}` replaced by the
/// quoted paths.
pub fn rebuild_command(template: &str, profile: &Path, out: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    template.replace("{profile}", &q(profile)).replace("{out}", &q(out))
}

/// Runs the rebuild (sampled-profile PGO); it must succeed and write `out`.
pub fn rebuild(run: &dyn Runner, template: &str, profile: &Path, out: &Path) -> Result<()> {
    if !template.contains("{profile}") || !template.contains("{out}") {
        return Err(Error::new(ErrorKind::Input, "--rebuild needs {profile} and {out} in its command"));
    }
    let _ = std::fs::remove_file(out);
    let o = run.sh(&rebuild_command(template, profile, out))?;
    if !o.success() || !out.is_file() {
        let err = String::from_utf8_lossy(&o.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        return Err(Error::new(ErrorKind::Tool, format!("rebuild failed ({}): {last}", o.status)));
    }
    Ok(())
}

/// The check: same exit status and same standard output for both binaries.
pub fn check(run: &dyn Runner, template: &str, original: &Path, candidate: &Path) -> Result<()> {
    let a = run.sh(&command_for(template, original))?;
    let b = run.sh(&command_for(template, candidate))?;
    let fails = |m: String| Err(Error::new(ErrorKind::Check, m));
    if !a.success() {
        return fails(format!("the check fails on the original too ({}): fix the check command", a.status));
    }
    if a.code != b.code {
        return fails(format!("check: candidate exited with {} where the original gave {}", b.status, a.status));
    }
    if a.stdout != b.stdout {
        return fails("check: candidate's output differs from the original's".into());
    }
    Ok(())
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub rounds: usize,
    pub original_secs: Vec<f64>,
    pub candidate_secs: Vec<f64>,
    /// Median over rounds of candidate time / original time.
    pub ratio_median: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    /// Rounds where the candidate was faster, and the sign test's p-value.
    pub wins: usize,
    pub p_value: f64,
}

/// User+system CPU seconds of all children waited for so far.
pub fn children_cpu() -> f64 {
    // SAFETY: getrusage writes one rusage struct into the zeroed value we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The command's CPU time (user+system, itself and its children): on a
/// VM shared with other tenants it moves less than wall time does.
fn time(run: &dyn Runner, cmd: &str) -> Result<f64> {
    let before = run.children_cpu();
    let out = run.sh(cmd)?;
    if !out.success() {
        return Err(Error::new(ErrorKind::Benchmark, format!("benchmark {cmd:?} failed: {}", out.status)));
    }
    Ok(run.children_cpu() - before)
}

/// Runs the benchmark A B A B ... `rounds` times (the order flips every
/// round so neither side always runs second).
pub fn measure(run: &dyn Runner, template: &str, original: &Path, candidate: &Path, rounds: usize) -> Result<Measurement> {
    let (ca, cb) = (command_for(template, original), command_for(template, candidate));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        if r % 2 == 0 {
            a.push(time(run, &ca)?);
            b.push(time(run, &cb)?);
        } else {
            b.push(time(run, &cb)?);
            a.push(time(run, &ca)?);
        }
    }
    Ok(summarize(a, b))
}

pub fn summarize(a: Vec<f64>, b: Vec<f64>) -> Measurement {
    let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y / x).collect();
    let wins = ratios.iter().filter(|r| **r < 1.0).count();
    Measurement {
        rounds: ratios.len(),
        ratio_median: median(&ratios),
        ratio_min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratio_max: ratios.iter().copied().fold(0.0, f64::max),
        wins,
        p_value: sign_test(wins, ratios.len()),
        original_secs: a,
        candidate_secs: b,
    }
}

/// Accept only a significant gain of at least `min_gain` (0.01 = 1%).
pub fn decide(m: &Measurement, min_gain: f64, alpha: f64) -> Result<()> {
    let gain = 1.0 - m.ratio_median;
    let slow = |m: String| Err(Error::new(ErrorKind::NotFaster, m));
    if m.p_value > alpha {
        return slow(format!(
            "not significantly faster: {} of {} rounds faster (sign test p = {:.3}), median ratio {:.3}",
            m.wins, m.rounds, m.p_value, m.ratio_median
        ));
    }
    if gain < min_gain {
        return slow(format!("gain {:.1}% below the required {:.1}%", gain * 100.0, min_gain * 100.0));
    }
    Ok(())
}

/// The original's saved copy beside it.
pub fn saved_original(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".loupe-orig");
    PathBuf::from(s)
}

/// Installs `candidate` at `image`: the original is hard-linked to
/// `IMAGE.loupe-orig` (kept if already there from an earlier install), the
/// candidate copied next to the image and renamed over it, so a running or
/// starting process sees either the old file or the new one, never a mix.
pub fn install(image: &Path, candidate: &Path) -> Result<()> {
    let fail = |m: String| Error::new(ErrorKind::Install, m);
    let orig = saved_original(image);
    if !orig.exists() {
        std::fs::hard_link(image, &orig).map_err(|e| fail(format!("cannot keep the original as {}: {e}", orig.display())))?;
    }
    let mut tmp = image.as_os_str().to_owned();
    tmp.push(".loupe-new");
    let tmp = PathBuf::from(tmp);
    std::fs::copy(candidate, &tmp).map_err(|e| fail(format!("cannot copy the candidate beside {}: {e}", image.display())))?;
    std::fs::rename(&tmp, image).map_err(|e| fail(format!("cannot rename the candidate over {}: {e}", image.display())))
}

/// Puts the original back (a rename) and forgets the saved copy.
pub fn rollback(image: &Path) -> Result<()> {
    let fail = |m: String| Error::new(ErrorKind::Install, m);
    let orig = saved_original(image);
    if !orig.exists() {
        return Err(fail(format!("{} has no saved original ({} missing): nothing to roll back", image.display(), orig.display())));
    }
    std::fs::rename(&orig, image).map_err(|e| fail(format!("cannot restore {}: {e}", image.display())))
}

/// One decision of the manager, kept in its log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Decision {
    pub unix_time: u64,
    pub image: String,
    pub build_id: String,
    pub candidate_build_id: Option<String>,
    /// The optimized build a re-optimization replaced (or tried to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    pub action: String,
    pub reason: String,
    pub measurement: Option<Measurement>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // The rebuild's placeholders become quoted paths; a command without them is refused.
    #[test]
    fn rebuild_commands() {
        assert_eq!(
            rebuild_command("cc -fprofile-sample-use={profile} -o {out} x.c", Path::new("/p f"), Path::new("/o")),
            "cc -fprofile-sample-use='/p f' -o '/o' x.c"
        );
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("new");
        assert!(rebuild(&Shell, "cc x.c", Path::new("/p"), &out).unwrap_err().to_string().contains("{profile}"));
        rebuild(&Shell, "cat {profile} > {out}", Path::new("/etc/hostname"), &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read("/etc/hostname").unwrap());
        assert!(rebuild(&Shell, "false {profile} {out}", Path::new("/p"), &out).unwrap_err().to_string().contains("rebuild failed"));
    }

    // `{}` becomes the quoted binary; without it the binary comes first.
    #[test]
    fn commands() {
        assert_eq!(command_for("{} 100 | head -1", Path::new("/a b/x")), "'/a b/x' 100 | head -1");
        assert_eq!(command_for("--n 3", Path::new("/x")), "'/x' --n 3");
    }

    // Ten wins of ten at 0.9 passes; 6 of 10 does not, nor a 0.5% gain.
    #[test]
    fn decisions() {
        let m = summarize(vec![1.0; 10], vec![0.9; 10]);
        assert_eq!((m.wins, m.ratio_median), (10, 0.9));
        assert!(decide(&m, 0.01, 0.05).is_ok());
        let mixed = summarize(vec![1.0; 10], vec![0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 1.1, 1.1, 1.1, 1.1]);
        assert!(decide(&mixed, 0.01, 0.05).unwrap_err().to_string().contains("not significantly"));
        let small = summarize(vec![1.0; 10], vec![0.995; 10]);
        assert!(decide(&small, 0.01, 0.05).unwrap_err().to_string().contains("below"));
    }

    // Install renames over the image and keeps the original; rollback
    // restores it byte for byte.
    #[test]
    fn install_and_rollback() {
        let d = tempfile::tempdir().unwrap();
        let (img, cand) = (d.path().join("prog"), d.path().join("cand"));
        std::fs::write(&img, b"original").unwrap();
        std::fs::write(&cand, b"optimized").unwrap();
        install(&img, &cand).unwrap();
        assert_eq!(std::fs::read(&img).unwrap(), b"optimized");
        assert_eq!(std::fs::read(saved_original(&img)).unwrap(), b"original");
        rollback(&img).unwrap();
        assert_eq!(std::fs::read(&img).unwrap(), b"original");
        assert!(rollback(&img).is_err());
    }

    // The check sees a different output and a failing original.
    #[test]
    fn checks() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, "#!/bin/sh\necho 1\n").unwrap();
        std::fs::write(&b, "#!/bin/sh\necho 2\n").unwrap();
        for p in [&a, &b] {
            std::process::Command::new("chmod").arg("+x").arg(p).status().unwrap();
        }
        assert!(check(&Shell, "{}", &a, &a).is_ok());
        assert!(check(&Shell, "{}", &a, &b).unwrap_err().to_string().contains("differs"));
        assert!(check(&Shell, "{}; false", &a, &a).unwrap_err().to_string().contains("original too"));
    }
}
