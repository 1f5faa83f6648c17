"""A real Consul client (py-consul, from PyPI) against `tenure serve`.

    python3 py_consul_check.py HOST PORT TOKEN

Checks, each with a clear failure message (exit status 1 on the first failure):
1. leader election between two processes with TTL sessions: the leader is SIGKILLed (its
   session is no longer renewed) and the other takes over only after the session's TTL and
   lock-delay, with the next LockIndex; a watcher on blocking `kv.get(index=...)` sees it;
2. a semaphore of 2 built on a KV prefix with check-and-set, as Consul documents it, with
   5 contenders: never more than 2 holders, everyone served;
3. LockIndex rising by one across every acquisition;
4. (run first, while nothing else moves the index) tenure's own admin command reaching a
   Consul key: a blocking `kv.get(index=...)` on a held key returns as soon as `tenure demote`
   takes the lock (the index moves, no Session shown), and the old holder's `release` then
   answers false and writes nothing. Needs TENURE_BIN (the `tenure` binary) and the database
   in TENURE_DATABASE_URL / TENURE_TABLE_PREFIX.

`contender` is the child process of check 1.
"""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import consul

TTL = 10
LOCK_DELAY = 1


def client(host, port, token):
    return consul.Consul(host=host, port=int(port), token=token)


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def contender(host, port, token, key, name):
    """Campaigns for `key` with a TTL session; prints `acquired <LockIndex>` once it leads,
    then renews its session every 2 s until killed."""
    c = client(host, port, token)
    sid = c.session.create(name=name, ttl=TTL, lock_delay=LOCK_DELAY)
    print(f"session {sid}", flush=True)
    index = None
    while not c.kv.put(key, name, acquire=sid):
        index, _ = c.kv.get(key, index=index, wait="2s")
        c.session.renew(sid)
    _, entry = c.kv.get(key)
    print(f"acquired {entry['LockIndex']}", flush=True)
    while True:
        time.sleep(2)
        if c.session.renew(sid) is None:
            print("session lost", flush=True)
            return


def spawn(host, port, token, key, name):
    child = subprocess.Popen(
        [sys.executable, __file__, "contender", host, port, token, key, name],
        stdout=subprocess.PIPE,
        text=True,
    )
    sid = child.stdout.readline().split()[1]
    # One reader per child: a line is never lost to a read that timed out.
    child.lines = queue.Queue()
    threading.Thread(
        target=lambda: [child.lines.put(line.strip()) for line in child.stdout], daemon=True
    ).start()
    return child, sid


def read_line(child, timeout):
    """The child's next line, or None after `timeout` seconds."""
    try:
        return child.lines.get(timeout=timeout)
    except queue.Empty:
        return None


def election(host, port, token):
    c = client(host, port, token)
    key = "service/py-consul/leader"
    a, sid_a = spawn(host, port, token, key, "node-a")
    line = read_line(a, 10)
    if line != "acquired 1":
        fail(f"node-a should lead first with LockIndex 1, said {line!r}")
    b, sid_b = spawn(host, port, token, key, "node-b")
    if read_line(b, 2) is not None:
        fail("node-b acquired a held lock")
    _, entry = c.kv.get(key)
    if entry["Session"] != sid_a or entry["Value"] != b"node-a":
        fail(f"the key should name node-a's session and body: {entry}")

    seen = []
    stop = threading.Event()

    def watch():
        index, entry = c.kv.get(key)
        while not stop.is_set():
            index, entry = c.kv.get(key, index=index, wait="5s")
            seen.append((entry or {}).get("Session"))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    time.sleep(1)
    killed = time.monotonic()
    a.send_signal(signal.SIGKILL)
    a.wait()
    # A TTL session ends twice its TTL after its last renewal, as Consul's.
    line = read_line(b, 2 * TTL + LOCK_DELAY + 10)
    took = time.monotonic() - killed
    if line != "acquired 2":
        fail(f"node-b should take over with LockIndex 2, said {line!r} after {took:.1f}s")
    # node-a renewed at most 2 s before it was killed: its session lives >= 2 TTL - 2 s more,
    # and its lock stays unavailable for the lock-delay after that.
    if took < 2 * TTL - 2 + LOCK_DELAY - 0.5:
        fail(f"node-b took over {took:.1f}s after the kill: before twice node-a's TTL and the lock-delay")
    _, entry = c.kv.get(key)
    if entry["Session"] != sid_b or entry["LockIndex"] != 2:
        fail(f"after the takeover: {entry}")
    time.sleep(0.5)
    stop.set()
    if sid_b not in seen:
        fail(f"the blocking watcher never saw node-b's session: {seen}")
    if c.session.info(sid_a)[1] is not None:
        fail("node-a's session should have ended")
    b.send_signal(signal.SIGKILL)
    b.wait()
    print(f"election: takeover {took:.1f}s after the SIGKILL; watcher saw {len(seen)} changes")


def semaphore(host, port, token, limit=2, contenders=5):
    """Consul's semaphore recipe: a contender key per session under the prefix, and a
    `.lock` key holding {"Limit", "Holders"} updated only with check-and-set."""
    prefix = "service/py-consul/semaphore/"
    lock_key = prefix + ".lock"
    holding = []
    peak = [0]
    served = []
    guard = threading.Lock()
    errors = []

    def contend(n):
        try:
            c = client(host, port, token)
            sid = c.session.create(name=f"sem-{n}", ttl=TTL, lock_delay=0)
            if not c.kv.put(prefix + sid, f"contender {n}", acquire=sid):
                raise AssertionError("could not create its contender key")
            index = None
            while True:
                index, entries = c.kv.get(prefix, recurse=True, index=index, wait="2s")
                entries = entries or []
                live = {e["Key"][len(prefix):] for e in entries if e.get("Session")}
                lock = next((e for e in entries if e["Key"] == lock_key), None)
                state = json.loads(lock["Value"]) if lock and lock["Value"] else {"Limit": limit, "Holders": []}
                holders = [h for h in state["Holders"] if h in live]
                if len(holders) < state["Limit"]:
                    state["Holders"] = holders + [sid]
                    cas = lock["ModifyIndex"] if lock else 0
                    if c.kv.put(lock_key, json.dumps(state), cas=cas):
                        break
            with guard:
                holding.append(n)
                peak[0] = max(peak[0], len(holding))
            time.sleep(0.3)
            with guard:
                holding.remove(n)
                served.append(n)
            while True:
                _, lock = c.kv.get(lock_key)
                state = json.loads(lock["Value"])
                state["Holders"] = [h for h in state["Holders"] if h != sid]
                if c.kv.put(lock_key, json.dumps(state), cas=lock["ModifyIndex"]):
                    break
            c.session.destroy(sid)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"contender {n}: {e!r}")

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        fail("; ".join(errors))
    if sorted(served) != list(range(contenders)):
        fail(f"not every contender was served: {served}")
    if peak[0] > limit:
        fail(f"{peak[0]} contenders held a semaphore of {limit}")
    if peak[0] < 2:
        fail(f"the semaphore never had two holders at once (peak {peak[0]})")
    print(f"semaphore: {contenders} served, at most {peak[0]} at once (limit {limit})")


def lock_index_rises(host, port, token):
    c = client(host, port, token)
    key = "service/py-consul/counter"
    seen = []
    for n in range(4):
        sid = c.session.create(name=f"round-{n}", ttl=TTL, lock_delay=0)
        if not c.kv.put(key, str(n), acquire=sid):
            fail(f"round {n} could not acquire a free key")
        seen.append(c.kv.get(key)[1]["LockIndex"])
        if not c.kv.put(key, str(n), release=sid):
            fail(f"round {n} could not release")
        c.session.destroy(sid)
    if seen != list(range(seen[0], seen[0] + 4)):
        fail(f"LockIndex should rise by one each acquisition: {seen}")
    print(f"lock index: {seen}")


def demote_wakes_watchers(host, port, token):
    key = "service/py-consul/demoted"
    holder = client(host, port, token)
    wait = 30
    # Outlives the whole wait unrenewed: its expiry cannot be what wakes the watcher.
    sid = holder.session.create(name="demoted", ttl=2 * wait, lock_delay=0)
    if not holder.kv.put(key, "holder", acquire=sid):
        fail("could not acquire a free key")
    index, entry = holder.kv.get(key)
    if entry.get("Session") != sid:
        fail(f"the holder does not show: {entry}")
    seen = {}

    def watch():
        watcher = client(host, port, token)
        started = time.monotonic()
        new_index, new_entry = watcher.kv.get(key, index=index, wait=f"{wait}s")
        seen.update(index=new_index, entry=new_entry, after=time.monotonic() - started)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    subprocess.run([os.environ["TENURE_BIN"], "demote", key], check=True, capture_output=True)
    thread.join(timeout=wait - 5)
    if thread.is_alive():
        fail(f"a blocking query on index {index} slept through `tenure demote` ({wait}s wait)")
    if not int(seen["index"]) > int(index):
        fail(f"the index did not move: {index} -> {seen['index']}")
    if seen["entry"].get("Session"):
        fail(f"the demoted key still shows its session: {seen['entry']}")
    if holder.kv.put(key, "stale", release=sid):
        fail("a release by the session tenure demoted was accepted")
    _, entry = holder.kv.get(key)
    if entry["Value"] != b"holder":
        fail(f"the stale release wrote its value: {entry}")
    holder.session.destroy(sid)
    print(f"demote woke the watcher after {seen['after']:.2f}s; index {index} -> {seen['index']}")


def main():
    if sys.argv[1] == "contender":
        contender(*sys.argv[2:7])
        return
    host, port, token = sys.argv[1:4]
    # First, while nothing else moves the index: only the demote can wake its watcher.
    demote_wakes_watchers(host, port, token)
    election(host, port, token)
    semaphore(host, port, token)
    lock_index_rises(host, port, token)
    print("py-consul: ok")


if __name__ == "__main__":
    main()
