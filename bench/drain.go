package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/tracing"
	"github.com/orbitrun/orbit/modules/tasks"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

// Settings of the backlog drain.
const (
	drainConsumers  = 4
	drainMaxPending = 1000
	prefillTx       = 500 // results appended per prefill transaction
	prefillWorkers  = 3
)

// drainResult is the backlog drain: results already in the log, delivered
// to and acknowledged by consumers of one subscription.
type drainResult struct {
	Events       int
	Prefill      time.Duration
	PrefillRate  float64
	Elapsed      time.Duration
	Rate         float64
	Cost         cost
	Stats        orbit.ConsumerStats
	AckedInDB    int
	RSS, PeakRSS int64
	Profile      string // path of the CPU profile
	ProfileTop   string // `go tool pprof -top` of it
	DBSamples    string // statements found running and waiting in the database
	// TableStats is the row work of each table and index of the Orbit
	// database over the drain (MariaDB's user statistics), when available.
	TableStats string
	// PerSecond is the number of acknowledgements confirmed in each second
	// of the drain.
	PerSecond []int
	// Traced is set for the drain with the server's tracing exporter on;
	// Exports and ExportBytes are what the OTLP exporter sent.
	Traced               bool
	Exports, ExportBytes int64
}

// prefill appends n task.cancelled results to the queue's log through the
// tasks store (TaskInsert, then TaskCancel, which appends), prefillTx per
// transaction. Every task has a sampled W3C trace context of its own, as
// if a traced producer had submitted it, so that every delivery carries
// one.
func prefill(ctx context.Context, e *env, queue string, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, prefillWorkers)
	for range prefillWorkers {
		wg.Go(func() {
			for {
				start := int(next.Add(prefillTx)) - prefillTx
				if start >= n || ctx.Err() != nil {
					return
				}
				count := min(prefillTx, n-start)
				err := db.Tx(ctx, e.pool, func(tx *sql.Tx) error {
					ids := make([]string, 0, count)
					for i := range count {
						t, err := tasks.TaskInsert(ctx, tx, &tasks.TaskInsertParams{
							NamespaceID: e.cred.NamespaceID, QueueID: e.cred.Queues[queue], CredentialID: e.cred.ID,
							Input: fmt.Appendf(nil, `{"i":%d}`, start+i), MaxAttempts: 3,
							Trace: tracing.Context{Parent: "00-" + db.NewID() + "-" + db.NewID()[:16] + "-01"},
						})
						if err != nil {
							return err
						}
						ids = append(ids, t.ID)
					}
					for _, id := range ids {
						if _, _, err := tasks.TaskCancel(ctx, tx, id, "bench prefill"); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("prefill: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	s, err := tasks.StreamGet(ctx, e.pool, e.cred.Queues[queue])
	if err != nil {
		return err
	}
	if s.Head != uint64(n) {
		return fmt.Errorf("prefill: log head is %d, want %d", s.Head, n)
	}
	return nil
}

// errNackOnce is the handler result of the NACK-then-ACK drain.
var errNackOnce = errors.New("bench: NACK the first delivery")

// drainHandler returns the handler of a drain: it acknowledges every
// delivery or, with nackFirst, NACKs the first delivery of every event
// with delay 0 and acknowledges the second (K-2, K-15).
func drainHandler(nackFirst bool) orbit.EventHandler {
	return func(_ context.Context, d *orbit.Delivery) error {
		if nackFirst && d.Proof.Epoch == 1 {
			return orbit.Retry(errNackOnce, 0)
		}
		return nil
	}
}

// runDrain fills a queue's log with n results, unless prefilled says how
// long an earlier run took to fill it, then measures how fast
// drainConsumers consumers of one new subscription named name (from
// sequence 0) receive and acknowledge them all, under a CPU profile. The
// queue is "drain"; with nackFirst it is "nack" and every event is NACKed
// once with delay 0 before it is acknowledged.
func runDrain(ctx context.Context, e *env, name string, n int, prefilled, timeout time.Duration, nackFirst bool) (*drainResult, error) {
	queue := "drain"
	if nackFirst {
		queue = "nack"
	}
	res := &drainResult{Events: n, Prefill: prefilled}
	if prefilled == 0 {
		start := time.Now()
		if err := prefill(ctx, e, queue, n); err != nil {
			return nil, err
		}
		res.Prefill = time.Since(start)
	}
	res.PrefillRate = float64(n) / res.Prefill.Seconds()

	client, hc, err := e.newClient(4)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()

	res.Profile = filepath.Join(e.dir, name+".cpu.pprof")
	f, err := os.Create(res.Profile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	runtime.GC()
	userStats := e.startUserStats(ctx)
	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	profiling := true
	defer func() {
		if profiling {
			pprof.StopCPUProfile()
		}
	}()
	sampler := e.startSampler(ctx, sampleEvery)
	defer sampler.stop()
	zero := uint64(0)
	began := time.Now()
	sub, err := e.subscribe(ctx, client, name, queue, &zero, drainMaxPending)
	if err != nil {
		return nil, err
	}
	cs, err := e.startConsumers(ctx, []string{sub}, drainConsumers, drainHandler(nackFirst))
	if err != nil {
		return nil, err
	}
	defer cs.stop()

	// Sample the acknowledgements once a second while waiting.
	sampleDone := make(chan struct{})
	var samples []int
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := uint64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a := cs.acked()
				samples = append(samples, int(a-last))
				last = a
				if a >= uint64(n) {
					return
				}
			}
		}
	}()
	if err := cs.waitAcked(ctx, uint64(n), timeout); err != nil {
		return nil, fmt.Errorf("drain: %w", err)
	}
	res.Elapsed = time.Since(began)
	pprof.StopCPUProfile()
	profiling = false
	res.DBSamples = sampler.finish(10)
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if userStats {
		res.TableStats = e.userStats(ctx, n)
	}
	<-sampleDone
	res.PerSecond = samples
	res.Cost = before.to(after)
	res.Rate = float64(n) / res.Elapsed.Seconds()
	res.RSS, res.PeakRSS = rss()
	res.Stats = cs.stats()
	if err := e.pool.QueryRowContext(ctx, `SELECT COUNT(*) FROM event_deliveries WHERE subscription_id = ? AND state = 'ACKED'`, sub).Scan(&res.AckedInDB); err != nil {
		return nil, err
	}
	if res.AckedInDB != n {
		return nil, fmt.Errorf("drain: %d deliveries ACKED in the database, want %d", res.AckedInDB, n)
	}
	if err := cs.stop(); err != nil {
		return nil, fmt.Errorf("drain consumers: %w", err)
	}
	res.ProfileTop = pprofTop(ctx, res.Profile)
	return res, nil
}

// pprofTop returns the top functions of a CPU profile by flat and by
// cumulative time, as `go tool pprof -top` prints them, or why it could not.
func pprofTop(ctx context.Context, path string) string {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	var b strings.Builder
	for _, mode := range []string{"-flat", "-cum"} {
		cmd := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", mode, "-nodecount=18", path)
		out, err := cmd.Output()
		if err != nil {
			return fmt.Sprintf("(go tool pprof failed: %v)", err)
		}
		// Keep the table, drop the header lines about the file.
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		for i, l := range lines {
			if strings.Contains(l, "flat%") {
				lines = lines[max(i-1, 0):]
				break
			}
		}
		fmt.Fprintf(&b, "sorted by %s:\n%s\n\n", strings.TrimPrefix(mode, "-"), strings.Join(lines, "\n"))
	}
	return strings.TrimRight(b.String(), "\n")
}

// runTracedDrain runs the drain again on a server whose tracing exporter
// is on (tracing.otlp_endpoint set to a local sink, every trace sampled),
// then goes back to a server without tracing for the rows after it.
func runTracedDrain(ctx context.Context, e *env, n int, prefilled time.Duration) (_ *drainResult, err error) {
	sink, err := startOTLPSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	traces, err := tracing.Open(ctx, tracing.Config{OTLPEndpoint: sink.URL(), SampleRatio: 1, ServiceVersion: "bench"})
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := e.restartServer(ctx, nil); err == nil {
			err = rerr
		}
	}()
	if err := e.restartServer(ctx, traces.TracerProvider()); err != nil {
		return nil, err
	}
	res, err := runDrain(ctx, e, "drain-traced", n, prefilled, 4*time.Minute, false)
	if err != nil {
		return nil, err
	}
	flushCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := traces.Shutdown(flushCtx); err != nil {
		return nil, err
	}
	res.Traced = true
	res.Exports, res.ExportBytes = sink.requests.Load(), sink.bytes.Load()
	return res, nil
}

// startUserStats turns MariaDB's user statistics on and clears them, and
// reports whether it could (MySQL has none).
func (e *env) startUserStats(ctx context.Context) bool {
	for _, q := range []string{`SET GLOBAL userstat = 1`, `FLUSH TABLE_STATISTICS`, `FLUSH INDEX_STATISTICS`} {
		if _, err := e.admin.ExecContext(ctx, q); err != nil {
			return false
		}
	}
	return true
}

// userStats returns the rows read and changed in each table of the Orbit
// database, and the rows read through each of its indexes, per item, since
// startUserStats. ROWS_CHANGED_X_INDEXES counts every index of a changed
// table, changed or not.
func (e *env) userStats(ctx context.Context, items int) string {
	var b strings.Builder
	rows, err := e.admin.QueryContext(ctx, `SELECT TABLE_NAME, ROWS_READ, ROWS_CHANGED, ROWS_CHANGED_X_INDEXES
		FROM information_schema.TABLE_STATISTICS WHERE TABLE_SCHEMA = ? ORDER BY ROWS_READ DESC`, orbitDatabase)
	if err != nil {
		return fmt.Sprintf("(table statistics: %v)", err)
	}
	for rows.Next() {
		var name string
		var read, changed, changedX int64
		if err := rows.Scan(&name, &read, &changed, &changedX); err != nil {
			break
		}
		fmt.Fprintf(&b, "table %-28s read %8.2f  changed %6.2f  changed×indexes %6.2f per item\n", name,
			float64(read)/float64(items), float64(changed)/float64(items), float64(changedX)/float64(items))
	}
	rows.Close()
	rows, err = e.admin.QueryContext(ctx, `SELECT TABLE_NAME, INDEX_NAME, ROWS_READ
		FROM information_schema.INDEX_STATISTICS WHERE TABLE_SCHEMA = ? ORDER BY ROWS_READ DESC`, orbitDatabase)
	if err != nil {
		return b.String() + fmt.Sprintf("(index statistics: %v)", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, index string
		var read int64
		if err := rows.Scan(&table, &index, &read); err != nil {
			break
		}
		fmt.Fprintf(&b, "index %-22s %-34s read %8.2f per item\n", table, index, float64(read)/float64(items))
	}
	return strings.TrimRight(b.String(), "\n")
}
