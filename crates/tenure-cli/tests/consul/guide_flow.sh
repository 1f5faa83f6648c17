#!/usr/bin/env bash
# Consul's leader-election guide, verbatim with curl, against `tenure serve` at $1 with the
# token $2: create a session, acquire the key with the node's body, watch it with a blocking
# query that sees the Session cleared when the leader releases, then lock-delay after a
# session is destroyed. Every step checks its answer; the first failure exits non-zero.
set -euo pipefail
base=$1
token=$2
key=${3:-service/guide/leader}
h=(-H "X-Consul-Token: $token")
fail() { echo "FAIL: $*" >&2; exit 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

# 1. Each node creates a session (a lock-delay of 2s keeps the test short; Consul's default
#    of 15s is tenure's too).
s1=$(curl -sf "${h[@]}" -X PUT -d '{"Name": "guide-node-1", "TTL": "10s", "LockDelay": "2s"}' \
  "$base/v1/session/create" | json 'd["ID"]')
s2=$(curl -sf "${h[@]}" -X PUT -d '{"Name": "guide-node-2", "LockDelay": "2s"}' \
  "$base/v1/session/create" | json 'd["ID"]')
[ -n "$s1" ] && [ -n "$s2" ] || fail "no session ids"

# 2. Both try to acquire with their body; exactly one wins.
won1=$(curl -sf "${h[@]}" -X PUT -d 'node-1:8080' "$base/v1/kv/$key?acquire=$s1")
won2=$(curl -sf "${h[@]}" -X PUT -d 'node-2:8080' "$base/v1/kv/$key?acquire=$s2")
[ "$won1" = true ] || fail "node 1 did not acquire a free key: $won1"
[ "$won2" = false ] || fail "node 2 acquired a held key: $won2"

# 3. Discover the leader: the key's Session, and its body.
entry=$(curl -sf "$base/v1/kv/$key")
[ "$(echo "$entry" | json 'd[0]["Session"]')" = "$s1" ] || fail "Session is not node 1's: $entry"
[ "$(curl -sf "$base/v1/kv/$key?raw")" = "node-1:8080" ] || fail "raw body"
[ "$(echo "$entry" | json 'd[0]["LockIndex"]')" = 1 ] || fail "LockIndex: $entry"
index=$(curl -sf -o /dev/null -w '%header{x-consul-index}' "$base/v1/kv/$key")
[ -n "$index" ] || fail "no X-Consul-Index"
# The session shows on its node.
curl -sf "$base/v1/session/info/$s1" | json 'd[0]["Name"]' | grep -qx guide-node-1 || fail "session info"

# 4. Node 2 watches with a blocking query; node 1 releases; the watch returns with the
#    Session cleared, well before its wait.
watch_out=$(mktemp)
( curl -sf "$base/v1/kv/$key?index=$index&wait=30s" > "$watch_out" ) &
watcher=$!
sleep 1
kill -0 "$watcher" 2>/dev/null || fail "the blocking query returned before any change"
started=$(date +%s%N)
[ "$(curl -sf "${h[@]}" -X PUT "$base/v1/kv/$key?release=$s1")" = true ] || fail "release"
wait "$watcher"
waited_ms=$(( ($(date +%s%N) - started) / 1000000 ))
[ "$waited_ms" -lt 10000 ] || fail "the watch took ${waited_ms}ms"
echo "$(cat "$watch_out")" | json '"Session" not in d[0]' | grep -qx True || fail "watch: $(cat "$watch_out")"

# 5. Node 2 acquires at once (an explicit release has no lock-delay).
[ "$(curl -sf "${h[@]}" -X PUT -d 'node-2:8080' "$base/v1/kv/$key?acquire=$s2")" = true ] \
  || fail "node 2 did not acquire after the release"
[ "$(curl -sf "$base/v1/kv/$key" | json 'd[0]["LockIndex"]')" = 2 ] || fail "LockIndex not 2"

# 6. Node 2's session is destroyed: the lock is released, but lock-delay keeps node 1 out
#    for 2s; then node 1 acquires.
[ "$(curl -sf "${h[@]}" -X PUT "$base/v1/session/destroy/$s2")" = true ] || fail "destroy"
[ "$(curl -sf "${h[@]}" -X PUT -d 'node-1:8080' "$base/v1/kv/$key?acquire=$s1")" = false ] \
  || fail "acquired within the lock-delay"
sleep 2.5
[ "$(curl -sf "${h[@]}" -X PUT -d 'node-1:8080' "$base/v1/kv/$key?acquire=$s1")" = true ] \
  || fail "node 1 did not acquire after the lock-delay"
[ "$(curl -sf "$base/v1/kv/$key" | json 'd[0]["LockIndex"]')" = 3 ] || fail "LockIndex not 3"

# 7. Writes need the token; bad input gets Consul's codes and writes nothing.
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code -X PUT -d x "$base/v1/kv/$key")" = 403 ] || fail "a write without the token"
# A TTL out of range, or one that does not parse, is a 500 in Consul's words (Consul's RPC
# refuses it; Patroni recognises "Invalid Session TTL" and reads /v1/agent/self).
[ "$(code "${h[@]}" -X PUT -d '{"TTL": "5s"}' "$base/v1/session/create")" = 500 ] || fail "TTL 5s"
curl -s "${h[@]}" -X PUT -d '{"TTL": "5s"}' "$base/v1/session/create" \
  | grep -qx "Invalid Session TTL '5000000000', must be between \[10s=24h0m0s\]" || fail "TTL 5s text"
[ "$(code "${h[@]}" -X PUT -d '{"Behavior": "explode"}' "$base/v1/session/create")" = 400 ] || fail "behavior"
[ "$(code "${h[@]}" -X PUT -d '{"TTL": "15"}' "$base/v1/session/create")" = 500 ] || fail "a TTL without a unit"
[ "$(code "${h[@]}" -X PUT -d x "$base/v1/kv/other?acquire=$s2")" = 500 ] || fail "destroyed session"
[ "$(code "${h[@]}" -X PUT "$base/v1/session/renew/$s2")" = 404 ] || fail "renew of a destroyed session"
[ "$(code "${h[@]}" -X PUT --path-as-is -d x "$base/v1/kv/a/../b")" = 400 ] || fail "a key with .."
[ "$(code "${h[@]}" -X PUT -d x "$base/v1/kv/a%00b")" = 400 ] || fail "a key with NUL"
[ "$(code "$base/v1/kv/$key?index=abc")" = 400 ] || fail "a malformed index"
[ "$(code "$base/v1/kv/$key?index=1&wait=soon")" = 400 ] || fail "a malformed wait"
[ "$(code "$base/v1/session/list?wait=5")" = 400 ] || fail "a wait without a unit"
head -c 524289 /dev/zero > "$watch_out"
[ "$(code "${h[@]}" -X PUT --data-binary "@$watch_out" "$base/v1/kv/big")" = 413 ] || fail "oversized"
[ "$(code "$base/v1/kv/big")" = 404 ] || fail "the oversized value was written"
[ "$(code "$base/v1/kv/b")" = 404 ] || fail "a refused key was written"
[ "$(curl -sf "${h[@]}" -X PUT -d v "$base/v1/kv/$key?cas=1")" = false ] || fail "a CAS mismatch"
[ "$(curl -sf "$base/v1/kv/$key?raw")" = "node-1:8080" ] || fail "a CAS mismatch wrote"
rm -f "$watch_out"
echo "guide flow: ok"
