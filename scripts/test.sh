#!/usr/bin/env bash
# Every test: formatting and lints, unit tests of each crate, and the
# privileged end-to-end tests (real perf events, real workloads with
# self-measured ground truth). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -q -- -D warnings
# API docs build without warnings (broken intra-doc links, unclosed HTML in doc comments); --release
# reuses the dependencies' metadata clippy --release has just built.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --release -q
log=$(mktemp); trap 'rm -f "$log"' EXIT
# --no-fail-fast: one failing test binary must not hide the others' results.
status=0
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log" || status=1
# Every fuzz target for FUZZ_SECONDS; its closing line has cargo's "test result:" form, one test per target.
scripts/fuzz.sh 2>&1 | tee -a "$log" || status=1
# Generated trace stubs: shared byte vectors in C, C++, Python, Go, Java (five
# suites; sdk/test.sh stops at the first failing one).
sdk_passed=5 sdk_failed=0
sdk/test.sh || { sdk_passed=0 sdk_failed=1 status=1; }
# The pages of `loupe serve` (web/): front-end unit tests, then browser tests in Debian's Chromium
# against a real recording; web/test.sh closes with "web: N passed, N failed".
web_log=$(mktemp)
web/test.sh 2>&1 | tee "$web_log" || status=1
read -r web_passed web_failed < <(sed -n 's/^web: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$web_log"; echo)
web_passed=${web_passed:-0} web_failed=${web_failed:-1}
rm -f "$web_log"
sdk_passed=$((sdk_passed + web_passed)) sdk_failed=$((sdk_failed + web_failed))
# One closing line over everything that ran: cargo's per-binary counts plus the SDK and web suites.
# "error: N targets failed" also names targets that never ran (a doc test that did not build).
read -r passed failed targets < <(awk -v sp="$sdk_passed" -v sf="$sdk_failed" '/^test result:/ { p += $4; f += $6 }
    /^error: [0-9]+ targets? failed/ { t = $2 } END { print p + sp, f + sf, t + 0 }' "$log")
summary="loupe: $passed passed, $failed failed"
((targets > 0)) && summary+=", $targets test targets failed"
echo "$summary"
exit "$status"
