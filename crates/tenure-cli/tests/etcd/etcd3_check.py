"""python3-etcd3 (Debian's, 0.12) against one etcd endpoint: prints what it sees, one line
per step, for tests/etcd/python.rs to compare with a real etcd's. Usage: etcd3_check.py HOST PORT
"""
import queue
import sys
import threading

import etcd3


def main(host, port):
    c = etcd3.client(host=host, port=int(port), timeout=15)
    out = lambda *a: print(*a, flush=True)

    out("members", len(list(c.members)))
    out("status version", c.status().version[:4])

    out("put", c.put("/app/a", "1").header.revision)
    c.put("/app/b", "2")
    c.put("/app/c", "3")
    value, meta = c.get("/app/a")
    out("get", value, meta.create_revision, meta.mod_revision, meta.version, meta.lease_id)
    out("get absent", c.get("/nope"))
    out("prefix", [(v, m.key) for v, m in c.get_prefix("/app/")])
    out("prefix desc", [m.key for _, m in c.get_prefix("/app/", sort_order="descend")])
    out("range", [m.key for _, m in c.get_range("/app/a", "/app/c")])
    out("all keys only", [m.key for _, m in c.get_all(keys_only=True)])
    out("put_if_not_exists", c.put_if_not_exists("/app/a", "x"), c.put_if_not_exists("/app/new", "x"))
    out("replace", c.replace("/app/a", "1", "11"), c.replace("/app/a", "1", "12"))
    ok, responses = c.transaction(
        compare=[c.transactions.value("/app/a") == "11", c.transactions.version("/app/b") > 0],
        success=[c.transactions.put("/app/t", "yes"), c.transactions.get("/app/a")],
        failure=[c.transactions.put("/app/t", "no")],
    )
    out("txn", ok, [[(v, m.key) for v, m in r] if isinstance(r, list) else type(r).__name__ for r in responses])
    ok, _ = c.transaction(compare=[c.transactions.mod("/app/a") < 2], success=[], failure=[c.transactions.delete("/app/t")])
    out("txn else", ok, c.get("/app/t"))
    out("delete", c.delete("/app/b"), c.delete("/app/b"))
    resp = c.delete("/app/c", prev_kv=True, return_response=True)
    out("delete prev", resp.deleted, [kv.value for kv in resp.prev_kvs])

    lease = c.lease(30)
    out("lease", lease.granted_ttl, 25 <= lease.remaining_ttl <= 30)
    c.put("/app/leased", "v", lease=lease)
    out("lease keys", lease.keys, c.get("/app/leased")[1].lease_id == lease.id)
    out("refresh", [r.TTL for r in lease.refresh()])
    lease.revoke()
    out("revoked", c.get("/app/leased"), lease.remaining_ttl)
    try:
        c.put("/app/x", "v", lease=12345)
        out("put with an unknown lease: accepted")
    except Exception as e:
        out("put with an unknown lease:", e.code().name, e.details())

    events = queue.Queue()
    watch_id = c.add_watch_prefix_callback("/w/", events.put, prev_kv=True)
    c.put("/w/1", "a")
    c.put("/w/1", "b")
    c.delete("/w/1")
    for _ in range(3):
        response = events.get(timeout=15)
        for e in response.events:
            out("event", type(e).__name__, e.key, e.value, e.prev_value if hasattr(e, "prev_value") else None, e.mod_revision)
    c.cancel_watch(watch_id)
    it, cancel = c.watch("/w/2", start_revision=1)
    c.put("/w/2", "z")
    for e in it:
        out("watch from 1", type(e).__name__, e.key, e.value)
        break
    cancel()

    lock = c.lock("py-lock", ttl=20)
    out("lock", lock.acquire(timeout=10), lock.is_acquired())
    other = c.lock("py-lock", ttl=20)
    out("second lock without waiting", other.acquire(timeout=0))
    out("release", lock.release(), lock.is_acquired())

    rev = c.get_all_response().header.revision
    c.compact(rev - 1)
    it, cancel = c.watch("/app/a", start_revision=2)
    try:
        next(it)
        out("watch below the floor: answered")
    except Exception as e:
        out("watch below the floor:", type(e).__name__)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
