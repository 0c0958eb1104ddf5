//! What the kernel lets this process profile, decided before anything is
//! opened, so a recording either runs in the widest mode allowed or is
//! refused with the capability or sysctl it lacks (never a bare EACCES).
//!
//! The kernel's rules (`kernel/events/core.c`, Documentation/admin-guide/perf-security.rst):
//! CAP_PERFMON (or CAP_SYS_ADMIN) allows everything; without it,
//! `kernel.perf_event_paranoid` allows per-CPU (system-wide) events at ≤ 0,
//! kernel samples of one's own processes at ≤ 1, user-space samples of
//! them at ≤ 2 (Debian's 3 forbids even that). Loading BPF programs that
//! attach to perf events needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN).
//!
//! ```
//! use loupe_collector::privilege::{Privileges, Scope, plan};
//! use loupe_collector::daemon::BackendChoice;
//! let nobody = Privileges::parse("2\n", "CapEff:\t0000000000000000\n");
//! let p = plan(&nobody, Scope::OwnProcesses, BackendChoice::Auto).unwrap();
//! assert!(p.user_only && p.backend == BackendChoice::Stream);
//! assert!(plan(&nobody, Scope::SystemWide, BackendChoice::Auto).unwrap_err().to_string().contains("CAP_PERFMON"));
//! ```

use crate::daemon::BackendChoice;
use crate::error::{Error, ErrorKind};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The sysctl and the effective capabilities that decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Privileges {
    /// `kernel.perf_event_paranoid`; 2 (the kernel's default) if unreadable.
    pub paranoid: i32,
    /// Effective capability bits (`CapEff` in /proc/self/status).
    pub caps: u64,
}

impl Privileges {
    /// This process's, from /proc.
    pub fn current() -> Privileges {
        let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Privileges::parse(&paranoid, &status)
    }

    /// From the text of the sysctl and of /proc/self/status.
    pub fn parse(paranoid: &str, status: &str) -> Privileges {
        let caps =
            status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok()).unwrap_or(0);
        Privileges { paranoid: paranoid.trim().parse().unwrap_or(2), caps }
    }

    fn has(&self, cap: u32) -> bool {
        self.caps & (1 << cap) != 0
    }

    /// CAP_PERFMON, or CAP_SYS_ADMIN which kernels before 5.8 ask for instead.
    pub fn perfmon(&self) -> bool {
        self.has(CAP_PERFMON) || self.has(CAP_SYS_ADMIN)
    }

    /// May load BPF programs and attach them to perf events.
    pub fn bpf(&self) -> bool {
        self.has(CAP_SYS_ADMIN) || (self.has(CAP_BPF) && self.has(CAP_PERFMON))
    }

    /// May sample the kernel in its own processes.
    pub fn kernel_samples(&self) -> bool {
        self.perfmon() || self.paranoid <= 1
    }
}

/// What a recording profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A command Loupe starts, or processes of the same user (`-p PID`).
    OwnProcesses,
    /// Every process on every CPU (`record` without a command, `daemon`).
    SystemWide,
}

/// How a recording runs given the privileges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Sample user space only (`exclude_kernel`).
    pub user_only: bool,
    /// The backend to use (the stream when BPF is not allowed and the
    /// caller left the choice to Loupe).
    pub backend: BackendChoice,
    /// One line for the user when the plan narrows what was asked for.
    pub note: Option<String>,
}

fn refuse(msg: String) -> Error {
    Error::new(ErrorKind::Privilege, msg)
}

/// Decides the widest recording the privileges allow, or refuses naming
/// what is missing. `-p PID` of one's own processes is `OwnProcesses`.
pub fn plan(p: &Privileges, scope: Scope, backend: BackendChoice) -> Result<Plan, Error> {
    let paranoid = p.paranoid;
    if scope == Scope::SystemWide && !p.perfmon() && paranoid > 0 {
        return Err(refuse(format!(
            "system-wide profiling needs CAP_PERFMON (or root), or kernel.perf_event_paranoid <= 0 (it is {paranoid}); \
             without them profile your own command: loupe record -- CMD"
        )));
    }
    if !p.perfmon() && paranoid > 2 {
        return Err(refuse(format!(
            "profiling needs CAP_PERFMON (or root), or kernel.perf_event_paranoid <= 2 for your own processes (it is {paranoid}): \
             sysctl -w kernel.perf_event_paranoid=2"
        )));
    }
    let backend = match backend {
        BackendChoice::Bpf if !p.bpf() => {
            return Err(refuse(
                "--backend bpf needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, or root); --backend stream needs neither".into(),
            ))
        }
        BackendChoice::Auto if !p.bpf() => BackendChoice::Stream,
        b => b,
    };
    let user_only = !p.kernel_samples();
    let note = user_only.then(|| {
        format!(
            "profiling user space only: kernel samples need CAP_PERFMON (or root), or kernel.perf_event_paranoid <= 1 (it is {paranoid})"
        )
    });
    Ok(Plan { user_only, backend, note })
}

/// Refuses `what`, a path that loads BPF programs (uprobes, the BPF
/// backend), unless the privileges allow it, naming the capabilities.
pub fn require_bpf(p: &Privileges, what: &str) -> Result<(), Error> {
    if p.bpf() {
        return Ok(());
    }
    Err(refuse(format!("{what} loads eBPF programs: it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, or root)")))
}

/// Why the backend is the stream when [`plan`] chose it (for `backend ...`).
pub fn stream_reason(p: &Privileges) -> Option<&'static str> {
    (!p.bpf()).then_some("stream (BPF needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(paranoid: i32, caps: &[u32]) -> Privileges {
        Privileges { paranoid, caps: caps.iter().fold(0, |a, c| a | 1 << c) }
    }

    #[test]
    fn status_text_parses() {
        // Checks CapEff parsing against a root shell's and an ordinary user's /proc/self/status lines.
        let root = Privileges::parse("-1\n", "Name:\tx\nCapEff:\t000001ffffffffff\n");
        assert!(root.perfmon() && root.bpf() && root.paranoid == -1);
        let user = Privileges::parse("2", "CapEff:\t0000000000000000\n");
        assert!(!user.perfmon() && !user.bpf() && !user.kernel_samples());
    }

    #[test]
    fn unprivileged_own_processes_are_user_space_only_at_paranoid_2() {
        // Checks the kernel's ladder: <= 1 everything of one's own, 2 user space only, 3 nothing.
        let p = plan(&with(1, &[]), Scope::OwnProcesses, BackendChoice::Stream).unwrap();
        assert!(!p.user_only && p.note.is_none());
        let p = plan(&with(2, &[]), Scope::OwnProcesses, BackendChoice::Auto).unwrap();
        assert!(p.user_only && p.backend == BackendChoice::Stream);
        assert!(p.note.unwrap().contains("kernel.perf_event_paranoid <= 1 (it is 2)"));
        let e = plan(&with(3, &[]), Scope::OwnProcesses, BackendChoice::Stream).unwrap_err();
        assert!(e.kind() == ErrorKind::Privilege && e.to_string().contains("perf_event_paranoid <= 2"), "{e}");
    }

    #[test]
    fn refusals_name_the_capability_or_sysctl() {
        // Checks system-wide and BPF refusals, and that CAP_PERFMON alone allows system-wide streaming but not BPF.
        let e = plan(&with(2, &[]), Scope::SystemWide, BackendChoice::Auto).unwrap_err().to_string();
        assert!(e.contains("CAP_PERFMON") && e.contains("perf_event_paranoid <= 0 (it is 2)"), "{e}");
        let e = plan(&with(-1, &[]), Scope::OwnProcesses, BackendChoice::Bpf).unwrap_err().to_string();
        assert!(e.contains("CAP_BPF") && e.contains("CAP_PERFMON"), "{e}");
        let p = plan(&with(2, &[CAP_PERFMON]), Scope::SystemWide, BackendChoice::Auto).unwrap();
        assert_eq!((p.user_only, p.backend), (false, BackendChoice::Stream));
        let p = plan(&with(2, &[CAP_PERFMON, CAP_BPF]), Scope::SystemWide, BackendChoice::Auto).unwrap();
        assert_eq!(p.backend, BackendChoice::Auto);
        let e = require_bpf(&with(-1, &[CAP_PERFMON]), "loupe locks").unwrap_err().to_string();
        assert!(e.starts_with("loupe locks loads eBPF") && e.contains("CAP_BPF"), "{e}");
        assert!(require_bpf(&with(2, &[CAP_SYS_ADMIN]), "loupe locks").is_ok());
    }
}
