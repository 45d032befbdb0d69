//go:build chaos

package chaos_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitrun/orbit/internal/auth"
	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/testkit/dbtest"
	"github.com/orbitrun/orbit/internal/testkit/netproxy"
	"github.com/orbitrun/orbit/internal/testkit/orbitproc"
	"github.com/orbitrun/orbit/internal/testkit/testdb"
	"github.com/orbitrun/orbit/modules/admin"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

var (
	flagRate  = flag.Int("chaos.rate", 100, "results offered per second (tasks submitted, each yields one result)")
	flagKills = flag.Int("chaos.kills", 5, "SIGKILLs of the server, of the SDK consumer and of a receiver between its Inbox COMMIT and its ACK, each")
	flagGap   = flag.Duration("chaos.gap", 4*time.Second, "steady load between two faults")
	flagDrain = flag.Duration("chaos.drain", 5*time.Minute, "longest wait, after the last fault, for every result to be applied and acknowledged")
	flagOut   = flag.String("chaos.out", "", "also write the result table (Markdown) to this file")
)

const (
	// eventLease and workerLease are the leases of the run: short, so that
	// what a killed process held comes back within seconds.
	eventLease  = 3 * time.Second
	workerLease = 3 * time.Second
	// outage is how long the database stays down.
	outage = 10 * time.Second
	// stallFor is how long a consumer's socket is not read: longer than
	// the lease.
	stallFor = eventLease + 2*time.Second
	// holdFor is how long a receiver's frames to the server are held
	// before it is killed: its handlers commit what they were given and
	// their ACKs never leave the proxy.
	holdFor = time.Second
	// receiverName is the receiving purpose of both receiver processes.
	receiverName = "chaos-view"
	// databases on the run's own server.
	orbitDatabase    = "orbit"
	receiverDatabase = "receiver"
)

// Fault kinds, in the order of the result table.
const (
	kindServerKill    = "SIGKILL orbit serve"
	kindConsumerKill  = "SIGKILL SDK consumer"
	kindReceiverKill  = "SIGKILL receiver between Inbox COMMIT and ACK"
	kindWorkerKill    = "SIGKILL SDK worker mid-task"
	kindDBStop        = "database stopped 10 s"
	kindDBCut         = "DB connections cut mid-transaction"
	kindCommitLost    = "orbit COMMIT reply dropped / COMMIT cut"
	kindRecvCommit    = "receiver COMMIT reply dropped"
	kindConsumerStall = "consumer socket stalled > lease"
)

var kindOrder = []string{kindServerKill, kindConsumerKill, kindReceiverKill, kindWorkerKill, kindDBStop,
	kindDBCut, kindCommitLost, kindRecvCommit, kindConsumerStall}

// fault is one injected fault and what ends its recovery: the first ACK
// after end on any subscription (sub and events empty, tasks nil), on sub,
// of one of events on the receiver's subscription, or the completion of
// one of tasks.
type fault struct {
	kind       string
	start, end time.Time
	sub        string
	events     []string
	tasks      []string
	note       string
}

// run is the whole set-up of TestF1_Chaos.
type run struct {
	t        *testing.T
	dbsrv    *testdb.Server
	pool     *sql.DB // Orbit's database, direct
	orbitCut *dbtest.CommitCutter
	recvCut  *dbtest.CommitCutter
	serve    orbitproc.Serve
	server   *orbitproc.Process
	token    string
	queueID  string
	subA     string // the receivers' subscription
	subB     string // the SDK consumer's subscription
	self     string // this test binary, for the SDK processes
	recvBin  string
	recvDSN  string // through recvCut
	tally    *tally

	workers     [2]*child
	workerGen   [2]int
	consumer    *child
	consumerGen int
	consumerPx  *netproxy.Proxy
	receivers   [2]*child
	receiverPx  [2]*netproxy.Proxy
	receiverGen [2]int

	faults  []fault
	drained bool // every task succeeded and every result was ACKed on both subscriptions
}

// TestF1_Chaos is `make chaos`: the real orbit binary, two SDK worker
// processes, an SDK consumer process and two `receiver consume` processes
// of the result-inbox example under a steady offered load, with every
// fault of F-1 injected several times; then both databases are read and
// the result table printed. It fails when a result was lost or applied
// twice.
func TestF1_Chaos(t *testing.T) {
	began := time.Now()
	loadStart := loadAverage()
	r := &run{t: t, tally: newTally()}
	r.setUp()
	t.Logf("set up in %s (builds included); offering %d results/s", time.Since(began).Round(time.Second), *flagRate)

	p := startProducer(t, r.serve.Addr, r.token, r.queueID, *flagRate)
	time.Sleep(*flagGap)
	for _, f := range r.schedule() {
		f()
		time.Sleep(*flagGap)
	}
	loadEnd := time.Now()
	p.stop()
	t.Logf("load phase %s: %d tasks submitted (%.0f/s), %d submit errors retried",
		loadEnd.Sub(p.began).Round(time.Second), p.submitted.Load(), float64(p.submitted.Load())/loadEnd.Sub(p.began).Seconds(), p.retries.Load())

	r.drained = r.drain(int(p.submitted.Load()))
	drained := time.Since(loadEnd)
	r.stopAll()
	rep := r.report(int(p.submitted.Load()))
	rep.loadSeconds = loadEnd.Sub(p.began).Seconds()
	rep.drain = drained
	rep.total = time.Since(began)
	rep.rate = *flagRate
	rep.loadStart, rep.loadEnd = loadStart, loadAverage()
	table := rep.markdown()
	fmt.Println(table)
	if *flagOut != "" {
		if err := os.WriteFile(*flagOut, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
	if !r.drained {
		t.Errorf("the run did not drain within %s: %d tasks unfinished, %d results not yet ACKed on both subscriptions; lower -chaos.rate for this machine", *flagDrain, rep.unfinished, rep.undelivered)
	}
	if rep.lost != 0 || rep.appliedTwice != 0 || rep.appendedTwice != 0 {
		t.Errorf("lost %d, applied twice %d, results appended twice %d: all must be 0", rep.lost, rep.appliedTwice, rep.appendedTwice)
		for _, l := range rep.evidence {
			t.Log(l)
		}
	}
}

// setUp starts the database server, builds the binaries and starts every
// process.
func (r *run) setUp() {
	t := r.t
	type built struct {
		bin string
		err error
	}
	dir := t.TempDir()
	recvBuild := make(chan built, 1)
	go func() {
		bin, err := buildReceiver(dir)
		recvBuild <- built{bin, err}
	}()
	bin := orbitproc.Build(t, dir, false)
	r.dbsrv = testdb.NewServer(t)
	ctx := context.Background()
	var err error
	if r.pool, err = db.Open(ctx, r.dbsrv.DSN); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.pool.Close() })
	if _, err := r.pool.Exec("CREATE DATABASE `" + receiverDatabase + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatal(err)
	}
	recvDirect := r.dbsrv.Server.DSN(receiverDatabase)
	b := <-recvBuild
	if b.err != nil {
		t.Fatal(b.err)
	}
	r.recvBin = b.bin
	initCmd := exec.Command(r.recvBin, "init")
	initCmd.Env = []string{"PATH=" + os.Getenv("PATH"), "ORBIT_RECEIVER_DSN=" + recvDirect}
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("receiver init: %v\n%s", err, out)
	}
	r.self, err = os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// Orbit and the receivers reach MySQL through proxies that cut
	// connections and COMMITs on demand.
	r.orbitCut = dbtest.NewCommitCutter(t, r.dbsrv.DSN)
	r.recvCut = dbtest.NewCommitCutter(t, recvDirect)
	r.recvDSN = r.recvCut.DSN(recvDirect)

	store := admin.NewStore(r.pool)
	sc, err := store.ScopeEnsure(ctx, &admin.ScopeEnsureParams{Namespace: "chaos", Application: "chaos", Environment: "chaos", Queue: "results"})
	if err != nil {
		t.Fatal(err)
	}
	_, r.token, err = store.CredentialCreate(ctx, &admin.CredentialCreateParams{
		NamespaceID: sc.NamespaceID, ApplicationID: sc.ApplicationID, EnvironmentID: sc.EnvironmentID,
		Label: "chaos", Permissions: auth.AllPermissions, Queues: []string{sc.QueueID},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.queueID = sc.QueueID

	r.serve = orbitproc.Serve{Bin: bin, Dir: dir, Addr: orbitproc.FreeAddr(t), DSN: r.orbitCut.DSN(r.dbsrv.DSN), Env: []string{
		"ORBIT_EVENTS_LEASE_DURATION=" + eventLease.String(),
		"ORBIT_EVENTS_POLL_INTERVAL=100ms",
		"ORBIT_WORKERS_LEASE_DURATION=" + workerLease.String(),
		"ORBIT_WORKERS_HEARTBEAT_INTERVAL=1s",
		"ORBIT_WORKERS_POLL_INTERVAL=100ms",
		"ORBIT_TASKS_SWEEP_INTERVAL=500ms",
		"ORBIT_SUBSCRIPTIONS_RECOVER_INTERVAL=500ms",
		"ORBIT_SUBSCRIPTIONS_MATERIALIZE_INTERVAL=100ms",
	}}
	r.server = orbitproc.Start(t, r.serve)

	client := r.client()
	for _, s := range []struct {
		name string
		id   *string
	}{{"receiver", &r.subA}, {"consumer", &r.subB}} {
		res, err := client.CreateSubscription(ctx, "chaos:"+s.name, orbit.CreateSubscriptionRequest{
			Name: s.name, QueueID: r.queueID, Types: []string{orbit.EventTypeTaskSucceeded},
			MaxPending: 1000, MaxAttempts: 100,
		})
		if err != nil {
			t.Fatal(err)
		}
		*s.id = res.Subscription.ID
	}

	for i := range r.workers {
		r.startWorker(i)
	}
	r.consumerPx = netproxy.Start(t, r.serve.Addr)
	r.startConsumer()
	for i := range r.receivers {
		r.receiverPx[i] = netproxy.Start(t, r.serve.Addr)
		r.startReceiver(i)
	}
}

func (r *run) client() *orbit.Client {
	hc := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	r.t.Cleanup(hc.CloseIdleConnections)
	c, err := orbit.NewClient("http://"+r.serve.Addr, r.token, orbit.WithHTTPClient(hc))
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *run) startWorker(i int) {
	r.workerGen[i]++
	name := fmt.Sprintf("worker-%d.%d", i, r.workerGen[i])
	r.workers[i] = startChild(r.t, name, r.self, []string{
		envRole + "=worker", envURL + "=http://" + r.serve.Addr, envToken + "=" + r.token,
		envQueue + "=" + r.queueID, envName + "=" + name,
	}, r.tally.worker(name), "-test.run=^$")
}

func (r *run) startConsumer() {
	r.consumerGen++
	r.consumer = startChild(r.t, fmt.Sprintf("consumer.%d", r.consumerGen), r.self, []string{
		envRole + "=consumer", envURL + "=" + r.consumerPx.URL(), envToken + "=" + r.token, envSub + "=" + r.subB,
	}, r.tally.consumer, "-test.run=^$")
}

func (r *run) startReceiver(i int) {
	r.receiverGen[i]++
	r.receivers[i] = startChild(r.t, fmt.Sprintf("receiver-%d.%d", i, r.receiverGen[i]), r.recvBin, []string{
		orbit.EnvURL + "=" + r.receiverPx[i].URL(), orbit.EnvToken + "=" + r.token, orbit.EnvQueueID + "=" + r.queueID,
		"ORBIT_SUBSCRIPTION_ID=" + r.subA, "ORBIT_RECEIVER_DSN=" + r.recvDSN, "RECEIVER_NAME=" + receiverName,
	}, r.tally.receiver, "consume")
}

// schedule returns the faults of the run, interleaved so that each kind
// meets the others' after-effects.
func (r *run) schedule() []func() {
	var out []func()
	for i := range *flagKills {
		out = append(out, r.serverKill, r.consumerKill, func() { r.receiverKill(i % 2) })
		switch i {
		case 0, 2, 4:
			out = append(out, func() { r.workerKill(i % 2) }, r.dbCut)
		case 1, 3:
			out = append(out, r.dbStop, r.receiverCommitLost, r.consumerStall)
		}
		if i < 3 {
			out = append(out, []func(){r.commitCutBefore, r.commitCutAfter, r.commitCutAfter}[i])
		}
	}
	return out
}

func (r *run) record(f fault) {
	r.faults = append(r.faults, f)
	r.t.Logf("%s  %-48s %s", f.start.Format("15:04:05.000"), f.kind, f.note)
}

func (r *run) serverKill() {
	start := time.Now()
	r.server.Kill(r.t)
	r.server = orbitproc.Start(r.t, r.serve)
	r.record(fault{kind: kindServerKill, start: start, end: time.Now(), note: fmt.Sprintf("listening again after %s", time.Since(start).Round(time.Millisecond))})
}

func (r *run) consumerKill() {
	start := time.Now()
	r.consumer.kill(r.t)
	r.startConsumer()
	r.record(fault{kind: kindConsumerKill, start: start, end: start, sub: r.subB})
}

// receiverKill holds what receiver i sends to the server: its handlers
// commit the events they were given, and their ACKs stay in the proxy.
// Once the Inbox shows events committed whose deliveries are still
// LEASED, the receiver is killed; the held ACKs die with its connections.
func (r *run) receiverKill(i int) {
	r.receiverPx[i].Hold(true)
	time.Sleep(holdFor)
	window := r.committedUnacked()
	start := time.Now()
	r.receivers[i].kill(r.t)
	r.receiverPx[i].Cut()
	r.startReceiver(i)
	r.record(fault{kind: kindReceiverKill, start: start, end: start, events: window,
		note: fmt.Sprintf("%d events committed in the Inbox, not ACKed, at the kill", len(window))})
}

// committedUnacked returns the events of the receivers' subscription that
// are LEASED on the platform and committed in the Inbox.
func (r *run) committedUnacked() []string {
	rows, err := r.pool.Query("SELECT d.event_id FROM `"+orbitDatabase+"`.event_deliveries d JOIN `"+receiverDatabase+"`.receiver_inbox i"+
		" ON i.consumer_name = ? AND i.queue_id = d.queue_id AND i.event_id = d.event_id"+
		" WHERE d.subscription_id = ? AND d.state = 'LEASED'", receiverName, r.subA)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// workerKill kills worker i with SIGKILL at a moment when some of its
// tasks are in their handler.
func (r *run) workerKill(i int) {
	name := fmt.Sprintf("worker-%d.%d", i, r.workerGen[i])
	for deadline := time.Now().Add(5 * time.Second); r.tally.inflightCount(name) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	r.workers[i].kill(r.t)
	mid := r.tally.takeInflight(name)
	r.startWorker(i)
	r.record(fault{kind: kindWorkerKill, start: start, end: start, tasks: mid, note: fmt.Sprintf("%d tasks in their handler at the kill", len(mid))})
}

// dbStop stops the database for outage and starts it again, checking F-2
// on the way: /healthz 200 and /readyz 503 while it is down, and the
// consumer's connection kept.
func (r *run) dbStop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	before := r.consumerPx.Accepted()
	if err := r.dbsrv.Stop(ctx); err != nil {
		r.t.Fatal(err)
	}
	time.Sleep(outage / 2)
	health, ready := status(r.serve.Addr, "/healthz"), status(r.serve.Addr, "/readyz")
	if health != http.StatusOK || ready != http.StatusServiceUnavailable {
		r.t.Errorf("F-2: with the database down /healthz = %d, /readyz = %d; want 200 and 503", health, ready)
	}
	time.Sleep(time.Until(start.Add(outage)))
	if err := r.dbsrv.Restart(ctx); err != nil {
		r.t.Fatal(err)
	}
	reconnects := r.consumerPx.Accepted() - before
	r.record(fault{kind: kindDBStop, start: start, end: time.Now(),
		note: fmt.Sprintf("/healthz %d, /readyz %d while down; consumer connections opened meanwhile: %d", health, ready, reconnects)})
}

func status(addr, path string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (r *run) dbCut() {
	start := time.Now()
	n := r.orbitCut.CutAll()
	m := r.recvCut.CutAll()
	r.record(fault{kind: kindDBCut, start: start, end: start, note: fmt.Sprintf("%d orbit and %d receiver connections cut", n, m)})
}

func (r *run) commitCutBefore() { r.commitCut(dbtest.CutBeforeCommit, "COMMIT never reached MySQL") }
func (r *run) commitCutAfter() {
	r.commitCut(dbtest.CutAfterCommit, "MySQL committed, its reply dropped")
}

func (r *run) commitCut(mode dbtest.CutMode, what string) {
	start := time.Now()
	done := r.orbitCut.CutNextCommit(mode)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("no COMMIT of orbit passed the proxy within 30 s")
	}
	r.record(fault{kind: kindCommitLost, start: start, end: time.Now(), note: what})
}

// receiverCommitLost drops the reply to one Inbox COMMIT: the receiver
// reports the commit unconfirmed, does not ACK, and the redelivery finds
// the committed record.
func (r *run) receiverCommitLost() {
	start := time.Now()
	seen := r.tally.unconfirmedCount()
	done := r.recvCut.CutNextCommit(dbtest.CutAfterCommit)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("no receiver COMMIT passed the proxy within 30 s")
	}
	end := time.Now()
	var events []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if events = r.tally.unconfirmedSince(seen); len(events) > 0 {
			break
		}
	}
	r.record(fault{kind: kindRecvCommit, start: start, end: end, events: events,
		note: fmt.Sprintf("receiver printed commit_unconfirmed for %d events", len(events))})
}

// consumerStall stops reading the SDK consumer's socket for longer than
// the lease, then lets it read again.
func (r *run) consumerStall() {
	start := time.Now()
	r.consumerPx.Stall(true)
	time.Sleep(stallFor)
	r.consumerPx.Stall(false)
	r.record(fault{kind: kindConsumerStall, start: start, end: time.Now(), sub: r.subB,
		note: fmt.Sprintf("no reads for %s (lease %s)", stallFor, eventLease)})
}

// drain waits until every submitted task has succeeded and both
// subscriptions have acknowledged every result.
func (r *run) drain(submitted int) bool {
	deadline := time.Now().Add(*flagDrain)
	var last string
	for {
		var tasks, succeeded, events, ackedA, ackedB int
		err := r.pool.QueryRow(`SELECT
				(SELECT COUNT(*) FROM tasks WHERE queue_id = ?),
				(SELECT COUNT(*) FROM tasks WHERE queue_id = ? AND state = 'SUCCEEDED'),
				(SELECT COUNT(*) FROM result_events WHERE queue_id = ? AND type = 'task.succeeded'),
				(SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'ACKED'),
				(SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'ACKED')`,
			r.queueID, r.queueID, r.queueID, r.subA, r.subB).Scan(&tasks, &succeeded, &events, &ackedA, &ackedB)
		if err == nil {
			last = fmt.Sprintf("submitted %d, tasks %d, succeeded %d, task.succeeded results %d, ACKED receiver %d, consumer %d",
				submitted, tasks, succeeded, events, ackedA, ackedB)
			if tasks == submitted && succeeded == tasks && events == succeeded && ackedA == events && ackedB == events {
				r.t.Logf("drained: %s", last)
				return true
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			r.t.Logf("not drained within %s: %s", *flagDrain, last)
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stopAll stops every client process with SIGTERM, then the server.
func (r *run) stopAll() {
	for _, c := range append(append([]*child{r.consumer}, r.workers[:]...), r.receivers[:]...) {
		c.stop(r.t)
	}
	r.server.Stop(r.t)
}

// producer submits tasks at a fixed rate through the SDK client: task n is
// due at began + n/rate; a submission that fails is sent again with the
// same idempotency key until it is accepted, so no task the producer meant
// is missing and none is created twice.
type producer struct {
	began     time.Time
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	submitted atomic.Int64
	retries   atomic.Int64
}

// submitters bounds the submissions in flight.
const submitters = 64

func startProducer(t *testing.T, addr, token, queueID string, rate int) *producer {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: submitters}, Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	client, err := orbit.NewClient("http://"+addr, token, orbit.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &producer{began: time.Now(), cancel: cancel}
	due := make(chan int)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(due)
		for n := 0; ; n++ {
			at := p.began.Add(time.Duration(n) * time.Second / time.Duration(rate))
			select {
			case <-time.After(time.Until(at)):
			case <-ctx.Done():
				return
			}
			select {
			case due <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range submitters {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for n := range due {
				p.submit(client, queueID, n)
			}
		}()
	}
	return p
}

// submit sends task n until the server accepts it. It keeps trying after
// stop: a task the producer started must exist.
func (p *producer) submit(client *orbit.Client, queueID string, n int) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := client.SubmitTask(ctx, fmt.Sprintf("chaos-%d", n), orbit.SubmitTaskRequest{
			QueueID: queueID, Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Idempotent: true, MaxAttempts: 50,
		})
		cancel()
		if err == nil {
			p.submitted.Add(1)
			return
		}
		p.retries.Add(1)
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the schedule and waits for the submissions in flight.
func (p *producer) stop() {
	p.cancel()
	p.wg.Wait()
}

// shortList names a few ids for a failure report.
func shortList(ids []string) string {
	if len(ids) > 10 {
		return strings.Join(ids[:10], " ") + fmt.Sprintf(" … (%d in all)", len(ids))
	}
	return strings.Join(ids, " ")
}
