#!/usr/bin/env bash
# Every test: formatting and lints, unit tests of each crate, and the
# privileged end-to-end tests (real perf events, real workloads with
# self-measured ground truth). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -q -- -D warnings
log=$(mktemp); trap 'rm -f "$log"' EXIT
cargo test --workspace --release 2>&1 | tee "$log"
sdk/test.sh  # generated trace stubs: shared byte vectors in C, C++, Python, Go, Java
# One closing line over everything that ran: cargo's per-binary counts plus
# the five SDK suites (sdk/test.sh stops at the first failing one).
read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { print p + 5, f }' "$log")
echo "loupe: $passed passed, $failed failed"
