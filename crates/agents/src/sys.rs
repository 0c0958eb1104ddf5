//! The system calls and kernel files the actions use: process_madvise on a
//! pidfd, thread affinity, the THP mode, the kernel version, cache domains.

use crate::error::{err, Error, ErrorKind, Result};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// `MADV_COLLAPSE` (Linux 6.1): collapse the range into huge pages now.
pub const MADV_COLLAPSE: i32 = 25;
/// `MADV_COLD`: on a part of a PMD-mapped huge page the kernel splits the
/// page before deactivating its base pages; the way back of a collapse.
pub const MADV_COLD: i32 = 20;
/// Huge page size on x86-64.
pub const HUGE: u64 = 2 << 20;
pub const PAGE: u64 = 4096;

/// A pidfd for `pid`: actions on it can never reach a later process that
/// reused the number.
pub fn pidfd(pid: u32) -> Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(err(ErrorKind::Process, format_args!("pidfd_open({pid})"), std::io::Error::last_os_error()));
    }
    // SAFETY: the fd was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `process_madvise(fd, [start, start + len), advice)`: bytes advised.
pub fn process_madvise(fd: &OwnedFd, start: u64, len: u64, advice: i32) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let iov = libc::iovec { iov_base: start as *mut libc::c_void, iov_len: len as usize };
    // SAFETY: one iovec describing a range of the other process; the kernel
    // never dereferences it in ours.
    let r = unsafe { libc::syscall(libc::SYS_process_madvise, fd.as_raw_fd(), &iov as *const libc::iovec, 1usize, advice, 0u32) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// The transparent huge page mode (`always`, `madvise`, `never`) from the
/// bracketed word of sysfs's `enabled` file.
pub fn thp_mode_of(text: &str) -> Option<String> {
    let s = text.find('[')?;
    let e = text[s..].find(']')? + s;
    Some(text[s + 1..e].to_string())
}

pub fn thp_mode() -> Option<String> {
    thp_mode_of(&std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?)
}

/// (major, minor) of a `uname -r` string such as `6.18.44-fc-v669`.
pub fn kernel_version_of(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}

/// Why `process_madvise(MADV_COLLAPSE)` cannot run here, or `None` when it can.
pub fn collapse_unavailable() -> Option<String> {
    let release = kernel_release();
    match kernel_version_of(&release) {
        Some(v) if v >= (6, 1) => {}
        _ => return Some(format!("kernel {release} has no MADV_COLLAPSE (Linux 6.1 or later needed)")),
    }
    match thp_mode() {
        Some(m) if m == "always" || m == "madvise" => None,
        Some(m) => {
            Some(format!("transparent huge pages are `{m}` (/sys/kernel/mm/transparent_hugepage/enabled must be always or madvise)"))
        }
        None => Some("this kernel has no transparent huge pages (/sys/kernel/mm/transparent_hugepage/enabled)".into()),
    }
}

/// The CPUs thread `tid` may run on.
pub fn affinity(tid: u32) -> Result<Vec<u32>> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid cpu_set_t and its size.
    if unsafe { libc::sched_getaffinity(tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(err(ErrorKind::Process, format_args!("sched_getaffinity({tid})"), std::io::Error::last_os_error()));
    }
    // SAFETY: CPU_ISSET reads the set within its size.
    Ok((0..libc::CPU_SETSIZE as u32).filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) }).collect())
}

/// Lets thread `tid` run only on `cpus`.
pub fn set_affinity(tid: u32, cpus: &[u32]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes within the set for c < CPU_SETSIZE.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    // SAFETY: a valid cpu_set_t and its size.
    if unsafe { libc::sched_setaffinity(tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A kernel CPU list (`0-3,8`) as CPU numbers.
pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

pub fn online_cpus() -> Vec<u32> {
    parse_cpu_list(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into()))
}

/// One cache and the CPUs that share it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CacheDomain {
    pub level: u32,
    pub cpus: Vec<u32>,
}

/// The data and unified caches of every online CPU under `root`
/// (`/sys/devices/system/cpu`), one entry per distinct (level, CPU set).
pub fn cache_domains_in(root: &Path, cpus: &[u32]) -> Vec<CacheDomain> {
    let mut out: Vec<CacheDomain> = Vec::new();
    for cpu in cpus {
        let Ok(dir) = std::fs::read_dir(root.join(format!("cpu{cpu}/cache"))) else { continue };
        for e in dir.flatten() {
            let p = e.path();
            let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default().trim().to_string();
            if read("type") == "Instruction" {
                continue;
            }
            let (Ok(level), list) = (read("level").parse::<u32>(), parse_cpu_list(&read("shared_cpu_list"))) else { continue };
            let d = CacheDomain { level, cpus: list };
            if !d.cpus.is_empty() && !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out.sort_by(|a, b| a.level.cmp(&b.level).then(a.cpus.cmp(&b.cpus)));
    out
}

pub fn cache_domains() -> Vec<CacheDomain> {
    cache_domains_in(Path::new("/sys/devices/system/cpu"), &online_cpus())
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::new(ErrorKind::Log, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The bracketed word is the mode, wherever it sits.
    #[test]
    fn thp_modes() {
        assert_eq!(thp_mode_of("always [madvise] never\n").as_deref(), Some("madvise"));
        assert_eq!(thp_mode_of("[always] madvise never").as_deref(), Some("always"));
        assert_eq!(thp_mode_of("always madvise never"), None);
    }

    // Release strings of distributions and of this VM.
    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version_of("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(kernel_version_of("5.15.0-91-generic"), Some((5, 15)));
        assert!(kernel_version_of("5.15.0").unwrap() < (6, 1));
        assert_eq!(kernel_version_of("x"), None);
    }

    // Ranges and singletons, as sysfs writes them.
    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,8\n"), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("1"), vec![1]);
        assert!(parse_cpu_list("").is_empty());
    }

    // A constructed sysfs tree: private L1/L2 per CPU, one shared L3; instruction caches left out.
    #[test]
    fn cache_domains_from_sysfs() {
        let d = tempfile::tempdir().unwrap();
        for cpu in 0..2 {
            for (i, (level, ty, shared)) in [
                (1, "Data", cpu.to_string()),
                (1, "Instruction", cpu.to_string()),
                (2, "Unified", cpu.to_string()),
                (3, "Unified", "0-1".into()),
            ]
            .into_iter()
            .enumerate()
            {
                let p = d.path().join(format!("cpu{cpu}/cache/index{i}"));
                std::fs::create_dir_all(&p).unwrap();
                std::fs::write(p.join("level"), format!("{level}\n")).unwrap();
                std::fs::write(p.join("type"), ty).unwrap();
                std::fs::write(p.join("shared_cpu_list"), shared).unwrap();
            }
        }
        let got = cache_domains_in(d.path(), &[0, 1]);
        let want = [(1, vec![0]), (1, vec![1]), (2, vec![0]), (2, vec![1]), (3, vec![0, 1])];
        assert_eq!(got, want.into_iter().map(|(level, cpus)| CacheDomain { level, cpus }).collect::<Vec<_>>());
    }
}
