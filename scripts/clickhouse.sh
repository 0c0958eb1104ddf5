#!/usr/bin/env bash
# Starts or stops two ClickHouse servers for Loupe's fleet tests: loopback
# only, free ports, a temporary config and data directory under DIR, and a
# `remote_servers` cluster named `loupe` with one shard on each.
#   scripts/clickhouse.sh start DIR   prints "http://127.0.0.1:PORT" per server, one a line
#   scripts/clickhouse.sh stop DIR    stops what start started there
#   scripts/clickhouse.sh kill DIR N / revive DIR N   stops server N (1 or 2) / starts it again, same ports and data
# Users: `default` (no password) and `loupe` (password `loupe-secret`).
# Never starts Debian's system service: the config is our own.
set -euo pipefail
cmd=${1:-}; dir=${2:-}; which=${3:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
server=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)

# A port nobody listens on now (asked of the kernel: bind to port 0).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

users_xml() {
  cat <<XML
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default>
    <loupe><password>loupe-secret</password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></loupe>
  </users>
  <quotas><default></default></quotas>
</yandex>
XML
}

config_xml() { # dir http tcp interserver tcp1 tcp2
  cat <<XML
<yandex>
  <logger><level>warning</level><log>$1/server.log</log><errorlog>$1/error.log</errorlog><size>10M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>$2</http_port>
  <tcp_port>$3</tcp_port>
  <interserver_http_port>$4</interserver_http_port>
  <path>$1/data/</path>
  <tmp_path>$1/tmp/</tmp_path>
  <user_files_path>$1/user_files/</user_files_path>
  <format_schema_path>$1/format_schemas/</format_schema_path>
  <users_config>$1/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>50</max_concurrent_queries>
  <remote_servers>
    <loupe>
      <shard><replica><host>127.0.0.1</host><port>$5</port></replica></shard>
      <shard><replica><host>127.0.0.1</host><port>$6</port></replica></shard>
    </loupe>
  </remote_servers>
</yandex>
XML
}

start() {
  [ -x "$server" ] || { echo "clickhouse.sh: clickhouse-server is not installed (apt-get install clickhouse-server)" >&2; exit 3; }
  mkdir -p -m 0700 "$dir"
  local tcp1 tcp2 i http tcp
  tcp1=$(free_port); tcp2=$(free_port)
  for i in 1 2; do
    local d="$dir/s$i"
    mkdir -p -m 0700 "$d/data" "$d/tmp" "$d/user_files" "$d/format_schemas"
    http=$(free_port); tcp=$tcp1; [ "$i" = 2 ] && tcp=$tcp2
    (umask 077; users_xml >"$d/users.xml"; config_xml "$d" "$http" "$tcp" "$(free_port)" "$tcp1" "$tcp2" >"$d/config.xml")
    echo "$http" >"$d/http_port"
    launch "$i"
  done
  for i in 1 2; do wait_up "$i"; done
}

launch() {
  local d="$dir/s$1"
  (cd "$d" && exec setsid "$server" --config-file="$d/config.xml" >>"$d/stdout.log" 2>&1 </dev/null) &
  echo $! >"$d/pid"
}

wait_up() {
    local i=$1 http n=0
    http=$(cat "$dir/s$i/http_port")
    until [ "$(curl -s "http://127.0.0.1:$http/ping" 2>/dev/null)" = "Ok." ]; do
      n=$((n + 1))
      if [ $n -gt 300 ] || ! kill -0 "$(cat "$dir/s$i/pid")" 2>/dev/null; then
        echo "clickhouse.sh: server $i did not start; its log:" >&2
        tail -20 "$dir/s$i/error.log" "$dir/s$i/stdout.log" >&2 2>/dev/null || true
        stop; exit 1
      fi
      sleep 0.1
    done
    echo "http://127.0.0.1:$http"
}

stop() {
  local i pid
  for i in ${1:-1 2}; do
    [ -f "$dir/s$i/pid" ] || continue
    pid=$(cat "$dir/s$i/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/s$i/pid"
  done
}

case $cmd in
  start) start ;;
  stop) stop ;;
  # A server that dies (SIGKILL, no graceful shutdown: that alone can take ClickHouse 10 s on a loaded machine).
  kill)
    pid=$(cat "$dir/s$which/pid" 2>/dev/null || true)
    [ -n "$pid" ] && { kill -9 "$pid" 2>/dev/null || true; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done; }
    rm -f "$dir/s$which/pid" ;;
  revive) launch "$which"; wait_up "$which" ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
