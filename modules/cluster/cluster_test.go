package cluster_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/internal/testkit/servertest"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules"
	"github.com/orbitrun/orbit/modules/cluster"
	"github.com/orbitrun/orbit/modules/subscriptions"
	"github.com/orbitrun/orbit/modules/tasks"
)

// A node registers at start, beats its heartbeat with the database clock,
// starts before (and so stops after) the modules whose connections it
// closes, and marks itself stopped at Stop (N-3).
func TestN3_NodeRegistersAndHeartbeats(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, fastHeartbeat(), servertest.ModuleConfig("cluster", func(c *cluster.Config) { c.NodeName = "node-a" }))
	if srv.NodeID == "" || node(srv).NodeID() != srv.NodeID {
		t.Fatalf("node id %q, cluster module's %q", srv.NodeID, node(srv).NodeID())
	}
	var first nodeRow
	eventually(t, "the node's row", func() bool {
		var ok bool
		first, ok = readNode(t, srv.DB, srv.NodeID)
		return ok
	})
	if first.name != "node-a" || first.pid != os.Getpid() || first.stopped || first.dead || first.heartbeatMS != int(heartbeat/time.Millisecond) || !first.startedBeforeNow {
		t.Fatalf("node row %+v", first)
	}
	eventually(t, "a later heartbeat", func() bool {
		r, _ := readNode(t, srv.DB, srv.NodeID)
		return r.heartbeatAt.After(first.heartbeatAt)
	})

	host, err := modules.NewHost(modules.NewInstances(), modules.Role("server"))
	if err != nil {
		t.Fatal(err)
	}
	order := host.IDs()
	at := func(id string) int { return slices.Index(order, id) }
	for _, id := range []string{"events", "workers"} {
		if at("cluster") < 0 || at("cluster") > at(id) {
			t.Errorf("start order %v: cluster must start before %s, to stop after it", order, id)
		}
	}

	if err := node(srv).Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := readNode(t, srv.DB, srv.NodeID); !r.stopped || r.dead {
		t.Fatalf("after Stop: %+v, want stopped", r)
	}
	// A second Stop does nothing.
	if err := node(srv).Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A node that stops beating is marked dead by another after 3 heartbeat
// intervals; its worker and event sessions are closed in the database
// and `orbit cluster status` shows it dead (N-3). Its connections, which
// still run here, find their sessions closed and close with 1012.
func TestN3_DeadNodeSessionsClosed(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ns := nodes(t, pool, 2, polls(100*time.Millisecond))
	a, b := ns[0], ns[1]
	cred := credential(t, a)
	w := worker(t, b, cred)
	c := consumer(t, b, cred, subscribe(t, a, cred))
	if n := openSessions(t, pool, b.NodeID); n != 2 {
		t.Fatalf("open sessions of node b: %d, want 2", n)
	}

	cluster.Kill(t, node(b))
	if _, err := pool.Exec(`UPDATE nodes SET heartbeat_at = heartbeat_at - INTERVAL 1 HOUR WHERE id = ?`, b.NodeID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node b marked dead", func() bool {
		r, _ := readNode(t, pool, b.NodeID)
		return r.dead
	})
	if n := openSessions(t, pool, b.NodeID); n != 0 {
		t.Errorf("open sessions of the dead node: %d, want 0", n)
	}
	if r, _ := readNode(t, pool, a.NodeID); r.dead {
		t.Error("node a is marked dead too")
	}
	if !strings.Contains(a.Logs(), "node marked dead") {
		t.Errorf("node a did not log the death of node b:\n%s", a.Logs())
	}

	w.ExpectClose(closeServiceRestart)
	frames := c.ExpectClose(closeServiceRestart)
	if len(frames) != 1 || frames[0].Type != "error" || frames[0].Error.Code != "UNAVAILABLE" {
		t.Errorf("consumer got %v before the close, want one UNAVAILABLE error", frames)
	}

	list, err := cluster.NodeList(context.Background(), pool, []cluster.Connections{&tasks.Module{}, &subscriptions.Module{}})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, v := range list {
		states[v.ID] = v.State()
		if v.ID == b.NodeID && (v.Connections["worker"] != 0 || v.Connections["event"] != 0) {
			t.Errorf("dead node's connections %v", v.Connections)
		}
	}
	if states[a.NodeID] != "alive" || states[b.NodeID] != "dead" {
		t.Errorf("states %v, want a alive and b dead", states)
	}
}

// A node that finds itself marked dead (its heartbeat matches no live row)
// logs it, registers again and closes at once, with 1012, the connections
// whose sessions were closed for it; new connections work (N-3).
func TestN3_NodeMarkedDeadRegistersAgain(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ns := nodes(t, pool, 2, polls(never))
	a, b := ns[0], ns[1]
	cred := credential(t, a)
	w := worker(t, b, cred)
	c := consumer(t, b, cred, subscribe(t, a, cred))

	// What a reaper does to a node whose heartbeat was late.
	for _, q := range []string{
		`UPDATE nodes SET dead_at = UTC_TIMESTAMP(6) WHERE id = ?`,
		`UPDATE worker_sessions SET closed_at = UTC_TIMESTAMP(6) WHERE node_id = ? AND closed_at IS NULL`,
		`UPDATE event_sessions SET closed_at = UTC_TIMESTAMP(6) WHERE node_id = ? AND closed_at IS NULL`,
	} {
		if _, err := pool.Exec(q, b.NodeID); err != nil {
			t.Fatal(err)
		}
	}
	// The connections poll once an hour: only the node's own wake-up
	// closes them.
	w.ExpectClose(closeServiceRestart)
	c.ExpectClose(closeServiceRestart)
	eventually(t, "node b alive again", func() bool {
		r, _ := readNode(t, pool, b.NodeID)
		return !r.dead
	})
	if !strings.Contains(b.Logs(), "this node was marked dead by another node") {
		t.Errorf("node b did not log that it was marked dead:\n%s", b.Logs())
	}
	worker(t, b, cred)
	// Node a closes again the sessions of a node dead within the last
	// heartbeats; a node registered again keeps its new ones.
	time.Sleep(5 * heartbeat)
	if n := openSessions(t, pool, b.NodeID); n != 1 {
		t.Errorf("open sessions of node b after it registered again: %d, want 1", n)
	}
}

// When the database holds every node's heartbeat for many intervals, as
// the survivors of a Galera cluster hold every commit until they have
// evicted a dead node, each heartbeat commits late with the time its
// statement began: no node may take the others' late heartbeats for death
// once the database lets go (N-3, N-8).
func TestN3_StalledHeartbeatsReapNoOne(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ns := nodes(t, pool, 2)
	a, b := ns[0], ns[1]

	// Every heartbeat waits for the lock on its node's row.
	tx, err := pool.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`SELECT id FROM nodes WHERE id IN (?, ?) FOR UPDATE`, a.NodeID, b.NodeID); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	time.Sleep(10 * heartbeat)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * heartbeat)
	for _, s := range ns {
		if r, _ := readNode(t, pool, s.NodeID); r.dead {
			t.Errorf("node %s was marked dead after the stall", s.NodeID)
		}
		if strings.Contains(s.Logs(), "this node was marked dead by another node") {
			t.Errorf("node %s logged that it was marked dead:\n%s", s.NodeID, s.Logs())
		}
	}
}

// A result committed through node A reaches a consumer connected to node
// B, a task submitted through A is assigned to a worker on B, and a cancel
// requested through A reaches that worker, while every poll interval is an
// hour: only the relayed signals can deliver them (N-2).
func TestN2_CrossNodeWake(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ns := nodes(t, pool, 2, polls(never))
	a, b := ns[0], ns[1]

	t.Run("TaskAssignedAndCancelled", func(t *testing.T) {
		t.Parallel()
		cred := credential(t, a)
		w := worker(t, b, cred)
		// Let the dispatcher's first look pass, so that only a wake-up
		// finds the task.
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		id := submit(t, a, cred)
		assign := w.NextType("task.assign")
		t.Logf("task.assign on node b %s after the submit on node a", time.Since(start))
		var body struct {
			Task struct {
				ID string `json:"id"`
			} `json:"task"`
		}
		if err := assign.DecodeBody(&body); err != nil || body.Task.ID != id {
			t.Fatalf("assign %s, want task %s", assign, id)
		}
		cancel(t, a, cred, id)
		w.NextType("task.cancel")
	})
	t.Run("ResultDelivered", func(t *testing.T) {
		t.Parallel()
		cred := credential(t, a)
		c := consumer(t, b, cred, subscribe(t, a, cred))
		time.Sleep(200 * time.Millisecond)
		for range 3 {
			start := time.Now()
			id := submit(t, a, cred)
			cancel(t, a, cred, id)
			d := c.NextType("event.deliver")
			t.Logf("event.deliver on node b %s after the cancel on node a", time.Since(start))
			var body struct {
				Event struct {
					AggregateID string `json:"aggregate_id"`
				} `json:"event"`
			}
			if err := d.DecodeBody(&body); err != nil || body.Event.AggregateID != id {
				t.Fatalf("deliver %s, want the result of task %s", d, id)
			}
		}
	})
}

// A wake-up relayed from another node wakes this node's waiters but is
// not published again: this node's counters and publications stay where
// they were (N-2).
func TestN2_RemoteWakesAreNotPublishedBack(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ns := nodes(t, pool, 2, polls(never))
	a, b := ns[0], ns[1]
	counters := func(id string) int64 {
		var n int64
		if err := pool.QueryRow(`SELECT COALESCE(SUM(counter), 0) FROM node_signals WHERE node_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	beforeA, beforeB, publishedB := counters(a.NodeID), counters(b.NodeID), cluster.Published(node(b))

	woken := b.Instances["tasks"].(*tasks.Module).Submitted()
	// A commit through the store announces submitted, appended and cancel
	// requested on node a.
	if err := a.Instances["tasks"].(*tasks.Module).Store().Tx(context.Background(), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(bound):
		t.Fatal("node b's submitted waiters were not woken")
	}
	eventually(t, "node a published", func() bool { return counters(a.NodeID) > beforeA })
	time.Sleep(10 * heartbeat)
	if after := counters(b.NodeID); after != beforeB {
		t.Errorf("node b's counters moved from %d to %d: the relayed wake-up was published back", beforeB, after)
	}
	if p := cluster.Published(node(b)); p != publishedB {
		t.Errorf("node b published %d times", p-publishedB)
	}
}

// `orbit cluster status` lists every node with its state, heartbeat age
// and open connections, as a table or as JSON (N-3).
func TestN3_ClusterStatusCommand(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ns := nodes(t, pool, 3)
	a, b, c := ns[0], ns[1], ns[2]
	cred := credential(t, a)
	worker(t, a, cred)
	worker(t, a, cred)
	consumer(t, a, cred, subscribe(t, a, cred))
	if err := node(b).Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	cluster.Kill(t, node(c))
	if _, err := pool.Exec(`UPDATE nodes SET heartbeat_at = heartbeat_at - INTERVAL 1 HOUR WHERE id = ?`, c.NodeID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node c marked dead", func() bool {
		r, _ := readNode(t, pool, c.NodeID)
		return r.dead
	})

	run := func(args ...string) (string, error) {
		cli := modules.CLI{Open: func(*cobra.Command) (*modules.Env, func(), error) {
			return &modules.Env{DB: pool}, func() {}, nil
		}}
		cmd := (&cluster.Module{}).Commands(cli)[0]
		var out bytes.Buffer
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}

	out, err := run("status")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got, want := strings.Join(strings.Fields(lines[0]), " "), "NAME ID PID STATE HEARTBEAT EVENTS WORKERS STARTED"; got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
	rows := map[string][]string{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		rows[f[1]] = f
	}
	// NAME ID PID STATE HEARTBEAT(age "ago") EVENTS WORKERS STARTED
	for id, want := range map[string][]string{
		a.NodeID: {"alive", "1", "2"}, b.NodeID: {"stopped", "0", "0"}, c.NodeID: {"dead", "0", "0"},
	} {
		r := rows[id]
		if len(r) != 9 || r[3] != want[0] || r[6] != want[1] || r[7] != want[2] {
			t.Errorf("row of %s: %v, want state %s, events %s, workers %s", id, r, want[0], want[1], want[2])
		}
	}

	out, err = run("status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var views []struct {
		ID             string         `json:"id"`
		Name           string         `json:"name"`
		State          string         `json:"state"`
		HeartbeatAt    string         `json:"heartbeat_at"`
		HeartbeatAgeMS *int64         `json:"heartbeat_age_ms"`
		DeadAt         string         `json:"dead_at"`
		StoppedAt      string         `json:"stopped_at"`
		Connections    map[string]int `json:"connections"`
	}
	if err := json.Unmarshal([]byte(out), &views); err != nil || len(views) != 3 {
		t.Fatalf("json: %v\n%s", err, out)
	}
	for _, v := range views {
		if v.Name == "" || v.HeartbeatAt == "" || v.HeartbeatAgeMS == nil {
			t.Errorf("node %+v lacks a field", v)
		}
		switch v.ID {
		case a.NodeID:
			if v.State != "alive" || v.Connections["worker"] != 2 || v.Connections["event"] != 1 {
				t.Errorf("node a: %+v", v)
			}
		case c.NodeID:
			if v.State != "dead" || v.DeadAt == "" || *v.HeartbeatAgeMS < time.Hour.Milliseconds() {
				t.Errorf("node c: %+v", v)
			}
		case b.NodeID:
			if v.State != "stopped" || v.StoppedAt == "" {
				t.Errorf("node b: %+v", v)
			}
		}
	}

	if _, err := run("status", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "-o/--output") {
		t.Errorf("-o yaml: %v, want an error naming -o/--output", err)
	}
}

// A bad cluster section is refused with every key at fault named.
func TestN3_ConfigErrorsNameTheirKeys(t *testing.T) {
	t.Parallel()
	info, _ := modules.Lookup("cluster")
	m := info.New()
	cfg := m.(modules.Configurer).Config().(*cluster.Config)
	cfg.NodeName = strings.Repeat("n", 256)
	cfg.HeartbeatInterval = 0
	cfg.SignalInterval = 20 * time.Millisecond
	cfg.SignalIdleMax = 10 * time.Millisecond
	err := m.(modules.Validator).Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, key := range []string{"cluster.node_name", "cluster.heartbeat_interval", "cluster.signal_idle_max"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name %s", err, key)
		}
	}
}
