#!/bin/sh
# The lead's scale checks in one call on a lent machine (no network, nothing
# built there), from the repository root:
#   issue 22: bench/device/unwind.sh (one qsortcb per CPU under the default
#             daemon and at --max-overhead off, two binaries alternating);
#   issue 24: bench/fleet.py --replicate 1000xHOURS on Debian's ClickHouse 18.16.
# Carried in target/devrun (make it here with `bench/device/all.sh pack`):
#   devch-lib.tar.xz   clickhouse-server and the libraries it links (not libc)
#   loupe-before.xz, loupe-after.xz   stripped binaries (the first from main)
#   qsortcb, template.db   the workload and a 5-s selftime recording
# Usage: bench/device/all.sh pack BEFORE AFTER | run OUTDIR [HOURS] [PARALLEL] [FLEET_SECONDS]
# (SKIP_UNWIND=1 / SKIP_FLEET=1 leave one of the two out; ROUNDS=N, SECS=S per unwind round)
set -u
D=target/devrun
xz_to() { python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' "$1" "$2"; }
case "${1:-}" in
pack)
  before=${2:?before binary}; after=${3:?after binary}
  mkdir -p "$D" target/devch/lib
  if [ ! -s "$D/devch-lib.tar.xz" ]; then
    cp /usr/sbin/clickhouse-server target/devch/
    for l in $(ldd /usr/sbin/clickhouse-server | awk '{print $3}' | grep '^/'); do
      case $(basename "$l") in libc.so.6 | libm.so.6) ;; *) cp -L "$l" target/devch/lib/ ;; esac
    done
    tar -C target/devch -cf - lib clickhouse-server | xz -T2 -6 >"$D/devch-lib.tar.xz"
  fi
  rm -rf target/devch
  for b in before after; do
    eval src=\$$b
    strip -o "$D/loupe-$b" "$src" && xz -6 -f "$D/loupe-$b"
  done
  make -s -C testdata/workloads OUT="$PWD/target/bench-workloads"
  cp target/bench-workloads/qsortcb "$D/"
  rm -rf "$D/template.db"
  "$after" record --db "$D/template.db" -- target/bench-workloads/selftime --seconds 5
  du -sh "$D"
  ;;
run)
  out=${2:?outdir}; hours=${3:-24}; par=${4:-8}; fleet_secs=${5:-420}
  mkdir -p "$out" target/device target/bench-workloads /tmp/ch/bin
  for b in before after; do xz_to "$D/loupe-$b.xz" "target/device/loupe-$b" && chmod +x "target/device/loupe-$b"; done
  cp "$D/qsortcb" target/bench-workloads/
  nproc; date -u
  if [ -z "${SKIP_UNWIND:-}" ]; then
    sh bench/device/unwind.sh "$out" "${ROUNDS:-1}" "${SECS:-8}" >"$out/unwind-summary.txt" 2>&1
    cat "$out/unwind-summary.txt"; date -u
  fi
  [ -n "${SKIP_FLEET:-}" ] && exit 0
  python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall('/tmp/ch')" "$D/devch-lib.tar.xz"
  # Only the server sees the bundled libraries.
  printf '#!/bin/sh\nexec env LD_LIBRARY_PATH=/tmp/ch/lib /tmp/ch/clickhouse-server "$@"\n' >/tmp/ch/bin/clickhouse-server
  chmod +x /tmp/ch/bin/clickhouse-server
  LD_LIBRARY_PATH=/tmp/ch/lib ldd /tmp/ch/clickhouse-server | grep 'not found'
  PATH=/tmp/ch/bin:$PATH timeout "$fleet_secs" python3 bench/fleet.py --loupe target/device/loupe-after --db "$D/template.db" \
    --hosts 20 --replicate "1000x$hours" --parallel "$par" --workers "$(($(nproc) - 4))" --json "$out/fleet.json" \
    >"$out/fleet.out" 2>"$out/fleet.log"
  echo "fleet rc=$?"; tail -30 "$out/fleet.log"; date -u
  ;;
*) echo "usage: $0 pack BEFORE AFTER | run OUTDIR [HOURS] [PARALLEL] [FLEET_SECONDS]" >&2; exit 2 ;;
esac
