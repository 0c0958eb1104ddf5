//! Labels a process's cgroup path shows: its systemd unit, its container
//! id (Docker, containerd, CRI-O, Podman) and its Kubernetes pod uid.

/// Labels from the text of `/proc/PID/cgroup` (v1 or v2), in a fixed order.
pub fn from_cgroup(text: &str) -> Vec<(String, String)> {
    // The unified (v2) line "0::/path" when there is one, else the first v1 line with a path.
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .or_else(|| text.lines().filter_map(|l| l.splitn(3, ':').nth(2)).find(|p| *p != "/"))
        .unwrap_or("");
    let mut labels = Vec::new();
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if let Some(unit) = parts.iter().rev().find(|p| p.ends_with(".service")) {
        labels.push(("unit".to_string(), unit.to_string()));
    }
    if let Some(pod) = parts.iter().find_map(|p| pod_uid(p)) {
        labels.push(("pod".to_string(), pod));
    }
    if let Some(id) = parts.iter().rev().find_map(|p| container_id(p)) {
        labels.push(("container".to_string(), id));
    }
    labels
}

/// The labels of a running process (none when it has gone).
pub fn of_pid(pid: u32) -> Vec<(String, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map(|t| from_cgroup(&t)).unwrap_or_default()
}

/// "pod<uid>" or systemd's "kubepods-burstable-pod<uid with _>.slice".
fn pod_uid(part: &str) -> Option<String> {
    let name = part.strip_suffix(".slice").unwrap_or(part);
    let uid = name.strip_prefix("pod").or_else(|| name.rsplit_once("-pod").map(|(_, u)| u))?;
    (uid.len() >= 32).then(|| uid.replace('_', "-"))
}

/// A 64-hex-digit id, bare or as "docker-<id>.scope", "cri-containerd-<id>.scope", "libpod-<id>.scope".
fn container_id(part: &str) -> Option<String> {
    let name = part.strip_suffix(".scope").unwrap_or(part);
    let id = name.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_give_unit_container_and_pod() {
        // Checks literal cgroup files of a systemd service, a Docker container, a Kubernetes pod (v1 and systemd driver) and a login shell.
        let id = "a".repeat(64);
        assert_eq!(from_cgroup("0::/system.slice/nginx.service\n"), [("unit".into(), "nginx.service".into())]);
        assert_eq!(from_cgroup(&format!("0::/system.slice/docker-{id}.scope\n")), [("container".into(), id.clone())]);
        let uid = "0f2b1f3c-1d9e-4b9a-9a57-3d2d6f8a1b2c";
        let v1 = format!("12:pids:/kubepods/burstable/pod{uid}/{id}\n1:name=systemd:/kubepods/burstable/pod{uid}/{id}\n");
        assert_eq!(from_cgroup(&v1), [("pod".into(), uid.into()), ("container".into(), id.clone())]);
        let sd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope\n",
            uid.replace('-', "_")
        );
        assert_eq!(from_cgroup(&sd), [("pod".into(), uid.into()), ("container".into(), id)]);
        assert!(from_cgroup("0::/user.slice/user-0.slice/session-3.scope\n").is_empty());
    }
}
