#!/usr/bin/env bash
# The main job: install, build, profile the whole machine for a few seconds
# while the bundled demo workload runs, then print the top procedures.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -q -p loupe
out=target/demo; mkdir -p "$out"
make -s -C testdata/workloads OUT="$PWD/$out" >/dev/null
db=$(mktemp -d /tmp/loupe-demo.XXXXXX)/db
"$out/selftime" --seconds 6 --out "$out/selftime.json" &
wl=$!
sleep 0.5
./target/release/loupe record --db "$db" --duration 5
wait "$wl"
echo
echo "== Top images =="
./target/release/loupe top --db "$db" --by image --limit 10
echo
echo "== Top procedures =="
./target/release/loupe top --db "$db" --by procedure --limit 20
echo
echo "== The demo measured its own CPU time per procedure (ground truth): =="
cat "$out/selftime.json"; echo
echo "Database: $db"
echo
# The web UI over the same database, left running in the background.
port=${LOUPE_DEMO_PORT:-7777}
./target/release/loupe serve --db "demo=$db" --listen "127.0.0.1:$port" >"$out/serve.log" 2>&1 &
srv=$!
sleep 1
if kill -0 "$srv" 2>/dev/null; then
  echo "== Web UI of this profile: http://127.0.0.1:$port/ (API: http://127.0.0.1:$port/api/openapi.json) =="
  echo "Stop the server with: kill $srv"
else
  echo "loupe serve did not start (port $port taken? set LOUPE_DEMO_PORT): $(cat "$out/serve.log")"
fi
