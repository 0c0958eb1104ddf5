#!/usr/bin/env bash
# Fleet store scale benchmark on a 16-CPU machine (issue 24), for the lead:
#   bench/device/fleet.sh [OUT_DIR]        (about 5 minutes; writes OUT_DIR/fleet.json)
# Needs clickhouse-server (Debian's, as scripts/setup.sh installs it) and root
# (the template is a 5 s recording of testdata's selftime). Builds loupe if
# target/release/loupe is missing. 20 hosts x 1 h go through the shipper's
# row format and HTTP (the ingest rate), then are copied inside ClickHouse
# to HOSTS x HOURS (default 1,000 x 24 at 100 Hz x 8 CPUs) and queried:
# bench/fleet.py --replicate; OLD_LOUPE=path adds the schema-2 "before".
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
if ! command -v clickhouse-server >/dev/null && [ ! -x /usr/sbin/clickhouse-server ]; then
  echo "fleet.sh: clickhouse-server is not installed here (apt-get install clickhouse-server); nothing measured" >&2
  exit 3
fi
[ -x target/release/loupe ] || cargo build --release -p loupe
nproc
python3 bench/fleet.py --loupe target/release/loupe --hosts 20 --replicate "${HOSTS:-1000}x${HOURS:-24}" \
  ${OLD_LOUPE:+--old-loupe "$OLD_LOUPE"} --workers "${WORKERS:-12}" --json "$out/fleet.json"
