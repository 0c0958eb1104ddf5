#!/usr/bin/env bash
# Every test: formatting and lints, unit tests of each crate, and the
# privileged end-to-end tests (real perf events, real workloads with
# self-measured ground truth). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -q -- -D warnings
cargo test --workspace --release 2>&1
sdk/test.sh  # generated trace stubs: shared byte vectors in C, C++, Python, Go, Java
