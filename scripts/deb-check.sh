#!/usr/bin/env bash
# Builds the Debian package, installs it (twice: an install, then an upgrade over it), checks
# what it installed, runs tenure-run@demo and tenure-serve as systemd would and removes the
# package again.
# Needs root, dpkg, cargo-deb, man-db, bash-completion, systemd (for systemd-analyze) and
# python3; .ci/run installs them. Every wait is bounded and waits for an event.
#
#   scripts/deb-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n--> %s (%d s in)\n' "$*" "$SECONDS"; }
die() { echo "deb-check: $*" >&2; exit 1; }

# Waits at most $1 seconds for the command after it to succeed.
wait_until() {
  local limit=$1; shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# The env files this check writes: never an operator's own.
for file in /etc/tenure/demo.env /etc/tenure/serve.env; do
  [ ! -e "$file" ] || die "$file exists: not overwriting it (this check is for CI machines)"
done
work=$(mktemp -d)
chmod 755 "$work"
demo_pid=
serve_pid=
cleanup() {
  [ -n "$demo_pid" ] && kill "$demo_pid" 2>/dev/null || true
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  rm -f /etc/tenure/demo.env /etc/tenure/serve.env
  rm -rf "$work"
}
trap cleanup EXIT

step "build the package (scripts/build-deb.sh)"
deb=$(scripts/build-deb.sh)
[ -f "$deb" ] || die "scripts/build-deb.sh printed no package path: $deb"
echo "$deb"

step "install it, then again over itself (the upgrade path of postinst)"
# A previous install goes first (a removed package with a postrm stays "config-files": that is
# not installed).
if dpkg-query -W -f='${Status}' tenure 2>/dev/null | grep -q ' installed$'; then dpkg -r tenure >/dev/null; fi
dpkg -i "$deb"
dpkg -i "$deb"
getent passwd tenure >/dev/null || die "postinst created no user tenure"

step "tenure --version from /usr/bin"
version=$(/usr/bin/tenure --version)
echo "$version"
[[ $version =~ ^tenure\ [0-9]+\.[0-9]+\.[0-9]+\ \(commit\ [0-9a-f]{7,}\)$ ]] \
  || die "unexpected version line: $version"

step "man pages: one per command, found by man"
pages=$(dpkg -L tenure | grep -c '^/usr/share/man/man1/tenure.*\.1\.gz$' || true)
commands=$(/usr/bin/tenure man --dir "$work/man" | wc -l)
[ "$pages" -eq "$commands" ] || die "$pages man pages installed, $commands expected"
if [ ! -e /usr/share/man/man1/tenure.1.gz ] && grep -rqs 'path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg.d; then
  die "dpkg is told not to install man pages here (path-exclude in /etc/dpkg/dpkg.cfg.d)"
fi
for page in tenure tenure-run tenure-every tenure-serve; do
  man -w "$page"
done
MANWIDTH=100 man -P cat tenure-run 2>/dev/null | grep -q 'Campaign for NAME' \
  || die "man tenure-run does not render the page of tenure run"

step "bash completion: loaded on demand by bash-completion, completes the commands"
offered=$(bash -c '
  source /usr/share/bash-completion/bash_completion
  _completion_loader tenure
  complete -p tenure >&2
  COMP_WORDS=(tenure ""); COMP_CWORD=1; COMP_LINE="tenure "; COMP_POINT=${#COMP_LINE}
  "$(complete -p tenure | sed -n "s/.*-F \([^ ]*\) .*/\1/p")" tenure "" tenure
  printf "%s\n" "${COMPREPLY[@]}"')
for command in run lock every status serve; do
  grep -qx "$command" <<<"$offered" || die "bash completion does not offer $command: $offered"
done
for file in /usr/share/zsh/vendor-completions/_tenure /usr/share/fish/vendor_completions.d/tenure.fish; do
  [ -s "$file" ] || die "$file is missing"
done

step "systemd-analyze verify: both units, no warning"
units=(tenure-run@demo.service tenure-serve.service)
report=$(systemd-analyze verify "${units[@]}" 2>&1) || die "systemd-analyze verify failed: $report"
[ -z "$report" ] || die "systemd-analyze verify warns: $report"
echo "verified: ${units[*]}"

step "tenure-run@demo, started as systemd would (scripts/unit-exec.py), leads on SQLite"
mkdir -p /etc/tenure
cat >"$work/demo-job" <<'EOF'
#!/bin/sh
echo "demo leads with term $TENURE_TERM as $(id -un)" >"$1"
exec sleep 600
EOF
chmod 755 "$work/demo-job"
# Where the command, as the user tenure, reports that it runs.
install -d -o tenure -g tenure "$work/out"
install -m 600 /dev/null /etc/tenure/demo.env
# No TENURE_DATABASE_URL: the unit's default, /var/lib/tenure/tenure.db.
cat >/etc/tenure/demo.env <<EOF
TENURE_COMMAND=$work/demo-job $work/out/demo-leads
TENURE_TTL=4s
EOF
python3 scripts/unit-exec.py /usr/lib/systemd/system/tenure-run@.service demo 2>"$work/demo.log" &
demo_pid=$!
leading() { grep -q 'leadership acquired' "$work/demo.log" && grep -q 'notify READY=1' "$work/demo.log" && [ -s "$work/out/demo-leads" ]; }
wait_until 60 leading || { cat "$work/demo.log"; die "tenure-run@demo did not lead within 60 s"; }
cat "$work/out/demo-leads"
grep -q ' as tenure$' "$work/out/demo-leads" || die "the command did not run as the user tenure"
grep -q 'tenure: database sqlite:///var/lib/tenure/tenure.db' "$work/demo.log" \
  || die "not on the unit's default database: $(cat "$work/demo.log")"
main=$(sed -n 's/^unit-exec: main pid //p' "$work/demo.log")
cmdline=$(tr '\0' ' ' <"/proc/$main/cmdline")
[ "$cmdline" = "/usr/bin/tenure run demo --ttl 4s --keep-campaigning -- $work/demo-job $work/out/demo-leads " ] \
  || die "unexpected command line: $cmdline"
# Read as the unit's user: a file root creates next to the database (its doorbell, a WAL)
# would lock the unit out of it later.
db=(setpriv --reuid=tenure --regid=tenure --init-groups env XDG_STATE_HOME=/var/lib /usr/bin/tenure)
holder=$("${db[@]}" leader demo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"]["holder"])')
grep -q "leadership acquired.*candidate=$holder" "$work/demo.log" || die "the lease's holder $holder is not this tenure"

step "stop it as systemctl stop would (SIGTERM to tenure): it releases the lease"
kill -TERM "$demo_pid"
wait_until 30 sh -c "! kill -0 $demo_pid 2>/dev/null" || die "tenure-run@demo still runs 30 s after SIGTERM"
wait "$demo_pid" || true
demo_pid=
"${db[@]}" leader demo --json | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["leader"] is not None)' \
  || die "the lease of demo was not released"
"${db[@]}" history demo --limit 1 | grep -q released || die "no release in demo's history"
echo "released"

step "tenure-serve, started as systemd would, serves the units' default database"
install -m 600 /dev/null /etc/tenure/serve.env
echo "TENURE_SERVE_OPTIONS=--listen 127.0.0.1:0" >/etc/tenure/serve.env
python3 scripts/unit-exec.py /usr/lib/systemd/system/tenure-serve.service 2>"$work/serve.log" &
serve_pid=$!
wait_until 60 grep -q '^tenure: listening on http://' "$work/serve.log" \
  || { cat "$work/serve.log"; die "tenure-serve did not listen within 60 s"; }
url=$(sed -n 's/^tenure: listening on //p' "$work/serve.log")
python3 - "$url/v1/status/demo" <<'PY' || die "tenure-serve does not show demo: $(cat "$work/serve.log")"
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=30) as answer:
    body = json.load(answer)
assert "demo" in json.dumps(body), body
print(f"{sys.argv[1]}: {json.dumps(body)[:120]}")
PY
kill -TERM "$serve_pid"
wait_until 30 sh -c "! kill -0 $serve_pid 2>/dev/null" || die "tenure-serve still runs 30 s after SIGTERM"
wait "$serve_pid" || die "tenure-serve did not exit cleanly on SIGTERM: $(cat "$work/serve.log")"
serve_pid=

step "dpkg -r tenure removes everything it installed"
installed=$(dpkg -L tenure | grep -v '^/\.$')
dpkg -r tenure
[ ! -e /usr/bin/tenure ] || die "/usr/bin/tenure is still there"
while read -r path; do
  [ -d "$path" ] || [ ! -e "$path" ] || die "$path is still there"
done <<<"$installed"
! man -w tenure 2>/dev/null || die "man still finds tenure"
echo "removed after $SECONDS s"
