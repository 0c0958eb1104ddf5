#!/usr/bin/env bash
# Every test: unit tests of each crate and the privileged end-to-end tests
# (real perf events, real workloads with self-measured ground truth).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo test --workspace --release 2>&1
