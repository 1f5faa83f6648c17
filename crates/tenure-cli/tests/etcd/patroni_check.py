"""Patroni's etcd3 DCS (Debian's patroni 3.0.2, patroni/dcs/etcd3.py: it speaks only etcd's
JSON gateway) against one etcd endpoint, as a Patroni member uses it: initialize the cluster,
register the member, take the leader key with its lease, update it, read the cluster through
its watch-fed cache, delete the key. Prints what it sees, one line per step, for
tests/etcd/python.rs to compare with a real etcd's. Usage: patroni_check.py HOST:PORT
"""
import sys
import time

from patroni.dcs.etcd3 import Etcd3


def cluster_when(dcs, check, what):
    """The cluster as Patroni reads it, once `check` holds (its cache follows a watch)."""
    deadline = time.time() + 15
    while True:
        cluster = dcs.get_cluster()
        if check(cluster) or time.time() > deadline:
            return cluster
        time.sleep(0.1)


def main(host):
    dcs = Etcd3({"hosts": host, "scope": "pg", "name": "pg-0", "ttl": 30,
                 "retry_timeout": 10, "loop_wait": 10, "namespace": "/service/"})
    out = lambda *a: print(*a, flush=True)
    cluster = dcs.get_cluster()
    out("empty cluster", cluster.initialize, cluster.leader, cluster.members)
    out("initialize", dcs.initialize(create_new=True, sysid="7100"))
    out("initialize again", dcs.initialize(create_new=True, sysid="7100"))
    out("touch_member", dcs.touch_member({"conn_url": "postgres://127.0.0.1:5432/postgres",
                                          "api_url": "http://127.0.0.1:8008/patroni",
                                          "state": "running", "role": "master"}))
    out("take the leader key", dcs.attempt_to_acquire_leader())
    out("take it again", dcs.attempt_to_acquire_leader())
    cluster = cluster_when(dcs, lambda c: c.leader is not None and c.members, "the leader")
    out("leader", cluster.leader and cluster.leader.name, [m.name for m in cluster.members],
        cluster.initialize)
    out("update_leader", dcs.update_leader(1234))
    cluster = cluster_when(dcs, lambda c: c.last_lsn == 1234, "the optime")
    out("optime", cluster.last_lsn)
    out("delete_leader", dcs.delete_leader())
    cluster = cluster_when(dcs, lambda c: c.leader is None, "no leader")
    out("leader after delete", cluster.leader)
    out("cancel_initialization", dcs.cancel_initialization())
    out("delete_cluster", dcs.delete_cluster())
    cluster = cluster_when(dcs, lambda c: c.initialize is None and not c.members, "nothing")
    out("cluster after delete", cluster.initialize, cluster.members)


if __name__ == "__main__":
    main(sys.argv[1])
