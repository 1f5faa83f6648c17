"""ZooKeeper's side of tenure-bench: kazoo's Election and Lock recipes.

The benchmark embeds this file, writes it to its temporary directory and runs it with python3:

  zk_peer.py version
      prints kazoo's version (the benchmark's check that kazoo is installed).
  zk_peer.py election --hosts H --path P --id ID --timeout S -- CMD...
      one candidate: joins kazoo's Election on P with a session timeout of S seconds, runs
      CMD as its child once elected (ZK_LOCK_SEQ = the sequence number of its lock node),
      and leaves the election (deleting its node) and exits when the child exits.
  zk_peer.py locks --hosts H --name N --start-at NS --warmup S --run S --out FILE
      one task of the lock-cycle benchmark, on its own client (session) and lock name:
      from CLOCK_MONOTONIC instant NS, acquire + release a kazoo Lock in a loop for
      warmup + run seconds, and write the latencies (ms) of the cycles started after the
      warm-up to FILE as JSON (and how late it was for NS: its warm-up is that much shorter).
"""

import json
import os
import signal
import subprocess
import sys
import time


def mono():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def client(hosts, timeout):
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=timeout)
    zk.start(timeout=10)
    return zk


def election(hosts, path, ident, timeout, cmd):
    zk = client(hosts, timeout)
    elect = zk.Election(path, ident)
    status = []

    def lead():
        env = dict(os.environ)
        node = elect.lock.node or ""
        env["ZK_LOCK_SEQ"] = node[-10:].lstrip("0") or "0"
        status.append(subprocess.call(cmd, env=env))

    # SIGTERM (the benchmark stopping) leaves like a child's exit does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        elect.run(lead)
    finally:
        zk.stop()
        zk.close()
    return status[0] if status else 1


def locks(hosts, name, start_at, warmup, run, out, timeout):
    zk = client(hosts, timeout)
    lock = zk.Lock("/tenure-bench/locks/" + name, "bench")
    # Everyone measures the same window: the tasks are separate processes.
    begin = start_at / 1e9
    late_ms = max(0.0, mono() - begin) * 1e3
    time.sleep(max(0.0, begin - mono()))
    measure_from = begin + warmup
    end = measure_from + run
    latencies, errors, first_error = [], 0, None
    while mono() < end:
        t0 = mono()
        try:
            if not lock.acquire(blocking=False):
                raise RuntimeError("kazoo: %s was not free" % name)
            lock.release()
            ok = True
        except Exception as e:  # noqa: BLE001 - counted, like the other systems' errors
            ok = False
            err = "%s: %s" % (type(e).__name__, e)
        took = mono() - t0
        if t0 < measure_from:
            continue
        if ok:
            latencies.append(took * 1e3)
        else:
            errors += 1
            first_error = first_error or err
            time.sleep(0.01)
    zk.stop()
    zk.close()
    with open(out, "w") as f:
        json.dump(
            {
                "latencies_ms": latencies,
                "errors": errors,
                "first_error": first_error,
                "late_ms": late_ms,
            },
            f,
        )
    return 0


def main(argv):
    if argv[:1] == ["version"]:
        import kazoo.version

        print(kazoo.version.__version__)
        return 0
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    else:
        cmd = []
    opts = dict(zip(argv[1::2], argv[2::2]))
    hosts = opts["--hosts"]
    timeout = float(opts.get("--timeout", "10"))
    if argv[:1] == ["election"]:
        return election(hosts, opts["--path"], opts["--id"], timeout, cmd)
    if argv[:1] == ["locks"]:
        return locks(
            hosts,
            opts["--name"],
            int(opts["--start-at"]),
            float(opts["--warmup"]),
            float(opts["--run"]),
            opts["--out"],
            timeout,
        )
    print("usage: zk_peer.py version | election ... | locks ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
