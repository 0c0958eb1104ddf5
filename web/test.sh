#!/usr/bin/env bash
# Browser tests of `loupe serve`: records the selftime workload (it measures its own CPU time per
# procedure: the ground truth), two runs of scaling (run 2 doubles `grow` by construction) and
# dataprof's false sharing (two threads write fields a and b of one struct counters),
# serves both databases on a free loopback port, and drives the pages in Debian's Chromium.
# Screenshots of each page go to $LOUPE_SCREENSHOTS (LOUPE_SCREENSHOTS=docs/screenshots to refresh the README's). Run as root from anywhere; prints
# "web: N passed, N failed" last. LOUPE overrides the binary (default target/release/loupe).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
loupe=${LOUPE:-${CARGO_TARGET_DIR:-$root/target}/release/loupe}
[ -x "$loupe" ] || { echo "web/test.sh: no loupe binary at $loupe (cargo build --release -p loupe)" >&2; exit 1; }
command -v chromium >/dev/null || { echo "web/test.sh: chromium is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
cd web
# Unit tests of the pure logic, then the dependencies the browser tests need (lockfile-exact).
[ -d node_modules ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund --loglevel=error
unit=$(NO_COLOR=1 npm test --silent 2>&1) || { echo "$unit"; echo "web: 0 passed, 1 failed"; exit 1; }
unit_passed=$(sed -n 's/^ *Tests *\([0-9]*\) passed.*/\1/p' <<<"$unit")
echo "web: ${unit_passed:-0} unit tests passed"
cd "$root"
# The same build of the workloads as the cargo tests' (crates/cli/tests/util).
wl=$root/target/testdata-workloads
make -s -C testdata/workloads OUT="$wl" >/dev/null
tmp=$(mktemp -d /tmp/loupe-web.XXXXXX)
server=
cleanup() {
  # The server ends by SIGTERM (status 143): not the script's status under set -e.
  if [ -n "$server" ] && kill "$server" 2>/dev/null; then wait "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"$loupe" record --freq 2000 --db "$tmp/db" -- "$wl/selftime" --seconds 3 --out "$tmp/truth.json" 2>/dev/null
"$loupe" record --freq 4000 --db "$tmp/scal" -- "$wl/scaling" --out "$tmp/s1.json" 2>/dev/null
"$loupe" epoch --db "$tmp/scal" >/dev/null
"$loupe" record --freq 4000 --db "$tmp/scal" -- "$wl/scaling" grow=200 --out "$tmp/s2.json" 2>/dev/null
# Data samples go beside the CPU profile (record --data adds no CPU samples to the epoch).
"$loupe" record --data --freq 2000 --allocs off --db "$tmp/db" -- "$wl/dataprof" falseshare 1 >/dev/null 2>&1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$loupe" serve --db "$tmp/db" --db "scal=$tmp/scal" --listen "127.0.0.1:$port" >"$tmp/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://127.0.0.1:$port/api/epochs" 2>/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.log" >&2; exit 1; }
  sleep 0.2
done
umask 077
status=0
node web/tests/browser.mjs "http://127.0.0.1:$port" "$tmp/truth.json" "$tmp/s1.json" "$tmp/s2.json" "${LOUPE_SCREENSHOTS:-$tmp/screenshots}" | tee "$tmp/browser.log" || status=1
read -r bp bf < <(sed -n 's/^browser: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$tmp/browser.log")  || true
echo "web: $((unit_passed + ${bp:-0})) passed, $((${bf:-1})) failed"
exit "$status"
