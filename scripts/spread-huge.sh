#!/usr/bin/env bash
# What a group of a million shards costs its members (issue 35.4): two `tenure spread` members
# of a group of 1,000,000 shards with --max-per-member 2 on one database; once they settled,
# each member's CPU (utime + stime of /proc/PID/stat) over 60 s and its RSS, and the size of
# `tenure status --json`. Tables of a prefix of their own (`huge<pid>_`), left behind.
#
#   scripts/spread-huge.sh postgres://postgres@127.0.0.1:5432/test_me
#   TENURE_BIN=target/release/tenure scripts/spread-huge.sh sqlite:///tmp/huge.db
#
# Needs bc and python3. Measured figures: docs/benchmarks.md#spreading.
set -euo pipefail

tenure=${TENURE_BIN:-target/debug/tenure}
export TENURE_DATABASE_URL="$1" TENURE_TABLE_PREFIX="huge$$_"
"$tenure" migrate >/dev/null 2>&1
member() {
    "$tenure" spread huge --shards 1000000 --max-per-member 2 --ttl 10s -- sleep 100000 \
        >/dev/null 2>&1 &
    echo $!
}
a=$(member)
b=$(member)
trap 'kill -TERM "$a" "$b" 2>/dev/null || true' EXIT
sleep 15
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
a0=$(ticks "$a"); b0=$(ticks "$b"); t0=$(date +%s.%N)
sleep 60
a1=$(ticks "$a"); b1=$(ticks "$b"); t1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
for m in "a $a $a0 $a1" "b $b $b0 $b1"; do
    set -- $m
    cpu=$(echo "scale=2; 100 * ($4 - $3) / $hz / ($t1 - $t0)" | bc)
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$2/status")
    echo "member $1: $cpu% of a core, RSS $rss kB"
done
status=$(mktemp)
"$tenure" status --json >"$status" 2>/dev/null
echo "tenure status --json: $(wc -c <"$status") bytes"
python3 -c 'import json, sys; g = json.load(open(sys.argv[1]))["groups"][0]; print({k: g[k] for k in ("shards", "members", "unowned")})' "$status"
rm -f "$status"
