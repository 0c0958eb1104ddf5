//! What an operator installs: man pages and shell completions generated from
//! the flag definitions, and the systemd unit in `dist/`, checked by the tools
//! that consume them (man/groff, bash, systemd-analyze).

mod util;
use std::process::Command;
use util::*;

/// The commands `loupe --help` lists (the source of truth the pages must cover).
fn commands() -> Vec<String> {
    let help = String::from_utf8(run_ok(loupe().arg("--help")).stdout).unwrap();
    let list = help.split("Commands:").nth(1).unwrap().split("\n\n").next().unwrap();
    let names: Vec<String> =
        // A command's line is indented two spaces; wrapped descriptions more.
        list.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).filter_map(|l| l.split_whitespace().next()).filter(|n| *n != "help").map(str::to_string).collect();
    assert!(names.len() > 10, "{help}");
    names
}

fn has(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

#[test]
fn man_pages_cover_every_command_and_render_without_warnings() {
    // Checks one page per command `--help` lists (and per data subcommand), each rendered by man with no warning.
    let dir = tempfile::tempdir().unwrap();
    run_ok(loupe().arg("man").arg(dir.path()));
    for c in commands() {
        assert!(dir.path().join(format!("loupe-{c}.1")).exists(), "no page for {c}");
    }
    assert!(dir.path().join("loupe-data-profile.1").exists() && dir.path().join("loupe.1").exists());
    if !has("man") {
        eprintln!("skipping rendering: man is not installed");
        return;
    }
    for page in ["loupe.1", "loupe-top.1", "loupe-record.1", "loupe-data-profile.1"] {
        let out = Command::new("man").args(["--warnings", "-l"]).arg(dir.path().join(page)).env("MANWIDTH", "80").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && out.stderr.is_empty(), "{page}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("SYNOPSIS") && text.contains("OPTIONS") || page == "loupe.1", "{page}:\n{text}");
    }
}

#[test]
fn shell_completions_parse_and_name_every_command() {
    // Checks the bash script is valid bash and completes every command; zsh and fish scripts are generated too.
    let bash = String::from_utf8(run_ok(loupe().args(["completions", "bash"])).stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loupe.bash");
    std::fs::write(&file, &bash).unwrap();
    run_ok(Command::new("bash").arg("-n").arg(&file));
    for c in commands() {
        assert!(bash.contains(&format!("loupe__subcmd__{}", c.replace('-', "__"))), "bash completion lacks {c}");
    }
    for shell in ["zsh", "fish"] {
        let out = run_ok(loupe().args(["completions", shell])).stdout;
        assert!(String::from_utf8_lossy(&out).contains("annotate"), "{shell}");
    }
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    // Checks dist/loupe.service with systemd's own verifier (ExecStart pointed at this build, its man page installed).
    if !has("systemd-analyze") {
        eprintln!("skipping: systemd-analyze is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(repo_root().join("dist/loupe.service")).unwrap();
    let unit = unit.replace("/usr/local/bin/loupe", env!("CARGO_BIN_EXE_loupe"));
    let path = dir.path().join("loupe.service");
    std::fs::write(&path, unit).unwrap();
    let man = dir.path().join("man");
    run_ok(loupe().arg("man").arg(man.join("man1")));
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).env("MANPATH", &man).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !said.contains("loupe.service"), "{said}");
}
