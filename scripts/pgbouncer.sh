#!/usr/bin/env bash
# A private PgBouncer in front of the local PostgreSQL, for tenure's tests and for trying tenure
# behind a transaction-mode pooler by hand:
#
#   scripts/pgbouncer.sh start    # 127.0.0.1:6432, database `test` in transaction mode,
#                                 # `test_session` (the same database) in session mode
#   scripts/pgbouncer.sh status
#   scripts/pgbouncer.sh stop
#
# Then: TENURE_TEST_PGBOUNCER_URL=postgres://postgres@127.0.0.1:6432/test?pooler=transaction
#
# Environment: PGBOUNCER_PORT (6432), PGBOUNCER_UPSTREAM (127.0.0.1:5432, trust auth for user
# postgres), PGBOUNCER_DIR (config, log and pid file; default /tmp/tenure-pgbouncer-<port>).
# Listens on 127.0.0.1 only. Running as root, it runs PgBouncer as the user `postgres`
# (PgBouncer refuses to run as root).
set -euo pipefail

port=${PGBOUNCER_PORT:-6432}
upstream=${PGBOUNCER_UPSTREAM:-127.0.0.1:5432}
dir=${PGBOUNCER_DIR:-/tmp/tenure-pgbouncer-$port}
up_host=${upstream%:*}
up_port=${upstream##*:}

answers() {
  psql "postgres://postgres@127.0.0.1:$port/test" -tAc 'SELECT 1' 2>/dev/null | grep -q 1
}

running() {
  [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null
}

start() {
  if running; then
    echo "pgbouncer already running on 127.0.0.1:$port (pid $(cat "$dir/pgbouncer.pid"))"
    return 0
  fi
  mkdir -p "$dir"
  echo '"postgres" ""' >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
test = host=$up_host port=$up_port dbname=test
test_session = host=$up_host port=$up_port dbname=test pool_mode=session
; Any other database name: the same-named database there (e.g. tenure-faults' tenure_faults).
* = host=$up_host port=$up_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
; Debian's 1.18 keeps no prepared statements across transactions: clients must not rely on them.
max_client_conn = 1000
default_pool_size = 20
reserve_pool_size = 5
; sqlx sends it at startup unless told not to (tenure's ?pooler=transaction does not).
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
admin_users = postgres
EOF
  local as_user=()
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    as_user=(-u postgres)
  fi
  pgbouncer -d -q "${as_user[@]}" "$dir/pgbouncer.ini"
  for _ in $(seq 1 50); do
    if answers; then
      echo "pgbouncer is up on 127.0.0.1:$port (transaction mode: /test, session mode: /test_session)"
      return 0
    fi
    sleep 0.2
  done
  echo "pgbouncer did not answer on 127.0.0.1:$port within 10 s; see $dir/pgbouncer.log" >&2
  return 1
}

stop() {
  if running; then
    local pid
    pid=$(cat "$dir/pgbouncer.pid")
    kill "$pid"
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || { echo "pgbouncer stopped"; return 0; }
      sleep 0.1
    done
    echo "pgbouncer (pid $pid) did not stop" >&2
    return 1
  fi
  echo "pgbouncer is not running on port $port"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status)
    if running && answers; then echo "pgbouncer is up on 127.0.0.1:$port"; else echo "pgbouncer is down"; exit 1; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
