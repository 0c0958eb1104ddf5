#!/usr/bin/env bash
# Fuzzes every parser of untrusted bytes (the targets in fuzz/fuzz_targets) for
# FUZZ_SECONDS each, starting from the committed seeds in fuzz/corpus/<target>.
# New inputs go to a scratch corpus, so the tree stays clean; a crashing input
# is kept in fuzz/artifacts/<target>/ (reproduce: cargo fuzz run <target> <file>,
# then keep it as a regression test in the owning crate).
#
# Uses nightly when rustup has it, else stable with RUSTC_BOOTSTRAP=1 (what
# cargo-fuzz's flags need); installs cargo-fuzz when missing. No sanitizer by
# default (FUZZ_SANITIZER=address to add ASan): the parsers are safe Rust, and
# debug assertions (overflow checks) stay on.
set -euo pipefail
cd "$(dirname "$0")/.."
# A failure before fuzzing (no cargo-fuzz, no build) still ends with a result line that counts as one failure.
trap 'echo "test result: FAILED. 0 passed; 1 failed; scripts/fuzz.sh stopped before fuzzing"' ERR
source scripts/setup.sh
# 10 s each by default: on CI's two cores installing cargo-fuzz and the instrumented
# build take most of the ~8 minutes this step may use (twelve targets at 60 s would
# be 12 minutes more). Longer local runs: FUZZ_SECONDS=300 scripts/fuzz.sh.
seconds=${FUZZ_SECONDS:-10}
sanitizer=${FUZZ_SANITIZER:-none}
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi
flags=(--release --debug-assertions --sanitizer "$sanitizer")
cd fuzz
cargo "${toolchain[@]}" fuzz build "${flags[@]}"
trap - ERR
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
passed=0 failed=()
for t in $(cargo fuzz list); do
  mkdir -p "$scratch/$t" "corpus/$t"
  # The scratch files the targets make (databases, buffers, ELF copies) go under $scratch too.
  if TMPDIR="$scratch" cargo "${toolchain[@]}" fuzz run "${flags[@]}" "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 2>"$scratch/$t.log"; then
    passed=$((passed + 1))
    awk -v t="$t" '/^stat::number_of_executed_units/ { n = $2 } /^stat::peak_rss_mb/ { r = $2 }
      END { printf "fuzz %s: %d runs, %d MB peak\n", t, n, r }' "$scratch/$t.log"
  else
    failed+=("$t")
    tail -n 40 "$scratch/$t.log"
    echo "fuzz $t: FAILED (input kept in fuzz/artifacts/$t/)"
  fi
done
# Cargo's summary format, so that scripts/test.sh counts each target as one test.
echo "test result: fuzz. $passed passed; ${#failed[@]} failed; ${seconds} s per target${failed:+; failed: ${failed[*]}}"
exit $((${#failed[@]} > 0))
