#!/usr/bin/env bash
# Installs what building and testing Loupe needs on Debian 12 (run as root).
# Idempotent: skips apt when everything is already there.
set -euo pipefail
pkgs=(build-essential pkg-config linux-perf valgrind bpftrace libc6-dbg binutils python3 clang bpftool libelf-dev zlib1g-dev make llvm-19 golang-go g++ default-jdk-headless liblttng-ust-dev lttng-tools babeltrace2 libxml2-utils bolt-19 graphviz)
pkgs+=(clickhouse-server clickhouse-client curl)  # the fleet store's tests (scripts/clickhouse.sh starts private servers; no system service)
pkgs+=(man-db systemd)  # tests of the generated man pages and of dist/loupe.service (systemd-analyze verify)
pkgs+=(nodejs)  # JIT frames: Node's perf map and jitdump (crates/cli/tests/jit.rs)
pkgs+=(xz-utils)  # the stripped-library test's workload (xz with Debian's liblzma)
pkgs+=(libatomic1)  # the Python trace runtime's compare-and-swap (sdk/python/loupe_trace.py)
pkgs+=(chromium)  # browser tests of loupe serve's pages (web/test.sh drives it with playwright-core)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# npm builds the web UI (crates/serve's build.rs); Node.js from NodeSource bundles it, Debian's nodejs does not.
if ! command -v npm >/dev/null; then
  echo "setup: installing npm" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi
if ! command -v cargo >/dev/null; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH"
  done
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup or Debian's cargo)" >&2; exit 1; }
