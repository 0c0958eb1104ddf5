#!/usr/bin/env bash
# The fleet scale benchmark (issue 24) on a lent machine that has no
# ClickHouse and no network: Debian's clickhouse-server and its libraries
# travel with the run (xz, ~26 MB; the device tool carries 64 MiB in all).
#   here:    bench/device/fleet_bundle.sh pack      -> target/devcarry (carry it)
#   device:  bench/device/fleet_bundle.sh run [HOSTS] [HOURS]   (writes $OUT/fleet.json)
# Tried here with 3 hosts (bundle, server start, ingest, queries); the
# session that made it was not lent a machine, so no 1,000-host figure yet.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=$PWD/target/devcarry
case "${1:-}" in
pack)
  rm -rf "$D" target/devch && mkdir -p "$D" target/devch/lib
  cp /usr/sbin/clickhouse-server target/devch/
  for l in $(ldd /usr/sbin/clickhouse-server | awk '{print $3}' | grep '^/'); do
    case $(basename "$l") in libc.so.6 | libm.so.6) ;; *) cp -L "$l" target/devch/lib/ ;; esac
  done
  tar -C target/devch -cf - lib clickhouse-server | xz -T2 -6 >"$D/devch-lib.tar.xz"
  [ -x target/release/loupe ] || cargo build --release -p loupe
  strip -o "$D/loupe" target/release/loupe
  make -s -C testdata/workloads OUT="$PWD/target/devch/workloads"
  target/release/loupe record --db "$D/template.db" -- target/devch/workloads/selftime --seconds 5
  rm -rf target/devch
  du -sh "$D"
  ;;
run)
  mkdir -p /tmp/ch
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall('/tmp/ch')" "$D/devch-lib.tar.xz"
  export PATH=/tmp/ch:$PATH LD_LIBRARY_PATH=/tmp/ch/lib
  ldd /tmp/ch/clickhouse-server | grep 'not found' || true
  nproc
  mkdir -p target/release && cp "$D/loupe" target/release/loupe
  python3 bench/fleet.py --loupe target/release/loupe --db "$D/template.db" --hosts "${2:-1000}" --hours "${3:-1}" \
    --workers "$(($(nproc) - 4))" --json "${OUT:-/tmp}/fleet.json"
  ;;
*) echo "usage: $0 pack | run [HOSTS] [HOURS]" >&2; exit 2 ;;
esac
