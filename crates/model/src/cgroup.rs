//! Control groups as labels: which systemd unit, container and Kubernetes
//! pod a process ran in, read from its cgroup path (no IO here).
//!
//! The path is the process's cgroup v2 path (`0::` in `/proc/PID/cgroup`),
//! else its v1 `name=systemd` one. What the path shows is all there is:
//!
//! | path component                                   | label                |
//! | ------------------------------------------------ | -------------------- |
//! | `*.service`, `*.scope` (innermost)               | `unit`               |
//! | `docker-ID.scope`, `docker/ID`                   | `container` = ID     |
//! | `cri-containerd-ID.scope`, `crio-ID.scope`       | `container` = ID     |
//! | `kubepods-…-podUID.slice`, `podUID` (under kubepods) | `pod` = UID      |
//!
//! ```
//! use loupe_model::cgroup::{labels, parse_proc_cgroup};
//! let path = parse_proc_cgroup("0::/system.slice/nginx.service\n").unwrap();
//! assert_eq!(labels(&path).get("unit").map(String::as_str), Some("nginx.service"));
//! ```

use std::collections::BTreeMap;

/// The label keys [`labels`] may set.
pub const LABEL_KEYS: [&str; 3] = ["unit", "container", "pod"];

/// The cgroup path in `/proc/PID/cgroup` text: the v2 entry (`0::PATH`)
/// unless it is the root and a v1 `name=systemd` entry says more.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    let entry = |prefix: &str| {
        text.lines()
            .find_map(|l| l.split_once(':').filter(|(_, rest)| rest.starts_with(prefix)).map(|(_, rest)| rest[prefix.len()..].to_string()))
    };
    let v2 = entry(":");
    let v1 = entry("name=systemd:");
    match (v2, v1) {
        (Some(p), Some(s)) if p == "/" && s != "/" => Some(s),
        (Some(p), _) => Some(p),
        (None, s) => s,
    }
}

/// Whether `path` is `dir` or lies under it (`dir` given with or without a trailing slash).
pub fn under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    dir.is_empty() || path == dir || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

/// The labels a cgroup path shows.
pub fn labels(path: &str) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(unit) = parts.iter().rev().find(|p| p.ends_with(".service") || p.ends_with(".scope")) {
        out.insert("unit", unit.to_string());
    }
    for (i, p) in parts.iter().enumerate() {
        if let Some(id) = container_id(p, i.checked_sub(1).map(|j| parts[j])) {
            out.insert("container", id);
        }
        if let Some(uid) = pod_uid(p, &parts[..i]) {
            out.insert("pod", uid);
        }
    }
    out
}

/// A container id from a component (`docker-ID.scope`, `crio-ID.scope`,
/// `cri-containerd-ID.scope`) or from an id under `docker`/a pod directory.
fn container_id(part: &str, parent: Option<&str>) -> Option<String> {
    let bare = part.strip_suffix(".scope").unwrap_or(part);
    for prefix in ["docker-", "cri-containerd-", "crio-", "containerd-", "libpod-"] {
        if let Some(id) = bare.strip_prefix(prefix).filter(|id| is_id(id)) {
            return Some(id.to_string());
        }
    }
    let parent_holds_ids = parent.is_some_and(|p| p == "docker" || p.starts_with("pod") || p.contains("-pod"));
    (parent_holds_ids && is_id(part)).then(|| part.to_string())
}

/// A pod uid from `kubepods-QOS-podUID.slice` (dashes written as `_`) or
/// `podUID` under a `kubepods` directory.
fn pod_uid(part: &str, above: &[&str]) -> Option<String> {
    if let Some(rest) = part.strip_suffix(".slice").and_then(|s| s.rsplit_once("-pod")).map(|(_, uid)| uid) {
        return Some(rest.replace('_', "-")).filter(|u| u.len() >= 32);
    }
    let in_kubepods = above.iter().any(|a| a.starts_with("kubepods"));
    part.strip_prefix("pod").filter(|u| in_kubepods && u.len() >= 32).map(str::to_string)
}

/// Container ids are long hex strings (64 digits for docker, containerd, cri-o).
fn is_id(s: &str) -> bool {
    s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e8a1c2b9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f";

    #[test]
    fn proc_cgroup_text_gives_the_v2_path_unless_systemd_v1_says_more() {
        // Checks the path chosen from /proc/PID/cgroup: v2 alone, hybrid with a v1 systemd path, v1 only.
        assert_eq!(parse_proc_cgroup("0::/user.slice/session-2.scope\n").as_deref(), Some("/user.slice/session-2.scope"));
        assert_eq!(
            parse_proc_cgroup("9:name=systemd:/system.slice/a.service\n8:pids:/\n0::/\n").as_deref(),
            Some("/system.slice/a.service")
        );
        assert_eq!(parse_proc_cgroup("9:name=systemd:/\n0::/loupe-t.scope\n").as_deref(), Some("/loupe-t.scope"));
        assert_eq!(parse_proc_cgroup("4:memory:/x\n").as_deref(), None);
    }

    #[test]
    fn units_containers_and_pods_from_the_paths_runtimes_write() {
        // Checks labels from systemd, docker (both cgroup drivers), containerd, cri-o and kubelet paths.
        let l = labels("/system.slice/nginx.service");
        assert_eq!((l.get("unit").map(String::as_str), l.get("container")), (Some("nginx.service"), None));
        let l = labels(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(l.get("container").map(String::as_str), Some(ID));
        assert_eq!(l.get("unit").map(String::as_str), Some(format!("docker-{ID}.scope").as_str()));
        assert_eq!(labels(&format!("/docker/{ID}")).get("container").map(String::as_str), Some(ID));
        let k = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-{ID}.scope");
        let l = labels(&k);
        assert_eq!(l.get("pod").map(String::as_str), Some("1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"));
        assert_eq!(l.get("container").map(String::as_str), Some(ID));
        let l = labels(&format!("/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/{ID}"));
        assert_eq!(l.get("pod").map(String::as_str), Some("1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"));
        assert_eq!(l.get("container").map(String::as_str), Some(ID));
        assert_eq!(labels(&format!("/machine.slice/crio-{ID}.scope")).get("container").map(String::as_str), Some(ID));
        assert!(labels("/").is_empty());
        assert!(labels("/user.slice/user-0.slice").is_empty(), "slices are not units a process runs in");
    }

    #[test]
    fn under_matches_whole_components() {
        // Checks that a directory selects itself and what lies below it, never a sibling sharing a prefix.
        assert!(under("/a.slice/b.service", "/a.slice"));
        assert!(under("/a.slice/b.service", "/a.slice/"));
        assert!(under("/a.slice", "/a.slice"));
        assert!(!under("/a.slice2/b.service", "/a.slice"));
        assert!(under("/anything", "/"));
    }
}
