// go_check: Go's clientv3 and its concurrency package (etcd 3.4, Debian's
// golang-etcd-server-dev) against one etcd endpoint: a Mutex taken, contended and handed
// over, fenced with IsOwner; an Election campaigned, observed, proclaimed and resigned;
// a session whose lease is revoked. It prints what it sees, one line each, with no ids or
// absolute revisions, so that a real etcd and tenure serve must print the same lines.
//
// Built by tests/etcd/go.rs with GO111MODULE=off and GOPATH=/usr/share/gocode (offline).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

// The longest any awaited event may take (a bound, not a pace: events are awaited as they
// come).
const bound = 60 * time.Second

func say(format string, args ...interface{}) {
	fmt.Printf(format+"\n", args...)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func check(what string, err error) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// count is how many keys start with prefix.
func count(cli *clientv3.Client, prefix string) int64 {
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	check("count "+prefix, err)
	return resp.Count
}

// waitCount waits until prefix holds n keys.
func waitCount(cli *clientv3.Client, prefix string, n int64) {
	deadline := time.Now().Add(bound)
	for count(cli, prefix) != n {
		if time.Now().After(deadline) {
			fail("%s never held %d keys", prefix, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func session(cli *clientv3.Client) *concurrency.Session {
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	check("session", err)
	return s
}

func mutex(cli *clientv3.Client) {
	ctx := context.Background()
	s1, s2 := session(cli), session(cli)
	defer s1.Close()
	defer s2.Close()
	const pfx = "/go/lock"
	m1 := concurrency.NewMutex(s1, pfx)
	m2 := concurrency.NewMutex(s2, pfx)
	check("m1 lock", m1.Lock(ctx))
	say("mutex: m1 holds %s/<its lease>: %v", pfx, m1.Key() == fmt.Sprintf("%s/%x", pfx, s1.Lease()))
	fenced, err := cli.Txn(ctx).If(m1.IsOwner()).Then(clientv3.OpPut("/go/fenced", "m1")).Commit()
	check("m1 fenced put", err)
	say("mutex: m1's fenced put succeeded: %v", fenced.Succeeded)

	// (A waiter that gives up is not part of this: Go's Mutex.Lock, cancelled while its Txn's
	// answer is on the way, returns without deleting the key it put, on etcd as on tenure;
	// tenure's own lock service and etcdctl's give-up are tested elsewhere.)
	// m2 waits behind m1 and takes it when m1 unlocks.
	waited := make(chan error, 1)
	go func() { waited <- m2.Lock(ctx) }()
	waitCount(cli, pfx+"/", 2)
	say("mutex: m2 waits behind m1 (2 keys)")
	m1Rev := m1.Header().Revision
	check("m1 unlock", m1.Unlock(ctx))
	select {
	case err := <-waited:
		say("mutex: m2 locked after m1's unlock: %v", err)
	case <-time.After(bound):
		fail("m2 never locked")
	}
	say("mutex: m2's revision is after m1's: %v", m2.Header().Revision > m1Rev)
	old, err := cli.Txn(ctx).If(m1.IsOwner()).Then(clientv3.OpPut("/go/fenced", "m1 late")).Commit()
	check("m1 late fenced put", err)
	say("mutex: m1's fenced put after its unlock succeeded: %v", old.Succeeded)
	now, err := cli.Txn(ctx).If(m2.IsOwner()).Then(clientv3.OpPut("/go/fenced", "m2")).Commit()
	check("m2 fenced put", err)
	say("mutex: m2's fenced put succeeded: %v", now.Succeeded)
	got, err := cli.Get(ctx, "/go/fenced")
	check("get fenced", err)
	say("mutex: /go/fenced = %s (version %d)", got.Kvs[0].Value, got.Kvs[0].Version)
	check("m2 unlock", m2.Unlock(ctx))
	say("mutex: keys left: %d", count(cli, pfx+"/"))
}

func election(cli *clientv3.Client) {
	ctx := context.Background()
	s1, s2 := session(cli), session(cli)
	defer s2.Close()
	const pfx = "/go/election"
	e1 := concurrency.NewElection(s1, pfx)
	e2 := concurrency.NewElection(s2, pfx)
	_, err := e1.Leader(ctx)
	say("election: leader before any campaign: %v", err)
	check("e1 campaign", e1.Campaign(ctx, "a"))
	leader, err := e1.Leader(ctx)
	check("leader", err)
	say("election: leader %s", leader.Kvs[0].Value)

	watching, stop := context.WithCancel(ctx)
	defer stop()
	observed := concurrency.NewElection(s2, pfx).Observe(watching)
	next := func() string {
		select {
		case resp, ok := <-observed:
			if !ok {
				fail("observe ended")
			}
			return string(resp.Kvs[0].Value)
		case <-time.After(bound):
			fail("observe saw nothing")
		}
		return ""
	}
	say("election: observed %s", next())

	campaigned := make(chan error, 1)
	go func() { campaigned <- e2.Campaign(ctx, "b") }()
	waitCount(cli, pfx+"/", 2)
	say("election: e2 campaigns behind e1 (2 keys)")
	check("proclaim", e1.Proclaim(ctx, "a2"))
	say("election: observed %s", next())
	check("resign", e1.Resign(ctx))
	select {
	case err := <-campaigned:
		say("election: e2 leads after e1 resigned: %v", err)
	case <-time.After(bound):
		fail("e2 never led")
	}
	say("election: observed %s", next())
	leader, err = e2.Leader(ctx)
	check("leader", err)
	say("election: leader %s", leader.Kvs[0].Value)

	// A leader whose session ends (its lease revoked) is no leader: the key goes with it.
	check("s1 close", s1.Close())
	_, err = cli.Revoke(ctx, s2.Lease())
	check("revoke", err)
	select {
	case <-s2.Done():
		say("election: e2's session ended with its lease")
	case <-time.After(bound):
		fail("e2's session never ended")
	}
	_, err = e1.Leader(ctx)
	say("election: leader after the revoke: %v", err)
}

func main() {
	if len(os.Args) != 2 {
		fail("usage: go_check HOST:PORT")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{os.Args[1]},
		DialTimeout: bound,
	})
	check("connect", err)
	defer cli.Close()
	mutex(cli)
	election(cli)
}
