// Command bench runs Orbit's benchmarks side by side against a throwaway
// durable database server and prints one table (spec 07, § Benchmarks):
// the server's raw single-row commit ceiling, Orbit draining a backlog and
// delivering live results, commit→receive latency at fixed offered loads,
// commit→receive and task assignment across two nodes on one database,
// memory with 128 connected consumers, and Watermill SQL on the same
// server. It writes the same table into docs/benchmarks.md.
//
//	make bench    # or: go run ./bench [-out docs/benchmarks.md]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

type options struct {
	out          string
	timeout      time.Duration
	drainEvents  int
	drainTraced  bool
	liveTasks    int
	peerMessages int
	rawDur       time.Duration
	latencyDur   time.Duration
	peerCap      time.Duration
	fixedRate    float64
	httpRate     float64
	lowRate      float64
	// only names the rows to run (comma-separated); empty runs them all.
	only map[string]bool
}

// rowNames are the row groups -only accepts.
var rowNames = []string{"raw", "metrics", "drain", "floor", "nack", "rss", "live", "livebatch", "latency", "submit", "crossnode", "jetstream", "peer"}

// runs reports whether the row group name is part of this run.
func (o options) runs(name string) bool { return len(o.only) == 0 || o.only[name] }

func main() {
	var o options
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "Markdown file whose marked section receives the results; empty writes nothing")
	flag.DurationVar(&o.timeout, "timeout", 11*time.Minute, "bound on the whole run")
	flag.BoolVar(&o.drainTraced, "drain-traced", true, "with -only drain, also run the drain with the tracing exporter on")
	flag.IntVar(&o.drainEvents, "drain-events", 50000, "results in the log before the backlog drain")
	flag.IntVar(&o.liveTasks, "live-tasks", 8000, "tasks submitted, completed and delivered in the live row")
	flag.IntVar(&liveWorkersPerQueue, "live-workers", 1, "SDK workers per queue in the live row")
	flag.IntVar(&o.peerMessages, "peer-messages", 0, "messages Watermill publishes and consumes (0: same as -drain-events)")
	flag.DurationVar(&o.rawDur, "raw-duration", 5*time.Second, "duration of each raw commit row")
	flag.DurationVar(&o.latencyDur, "latency-duration", 10*time.Second, "duration of each fixed-load row")
	flag.DurationVar(&o.peerCap, "peer-cap", 30*time.Second, "longest a Watermill consumption row may run; the rate is then over what it consumed")
	flag.Float64Var(&o.fixedRate, "fixed-rate", 1000, "offered results per second of the fixed-load row committed by the tasks store")
	flag.Float64Var(&o.httpRate, "http-rate", 2000, "offered results per second of the fixed-load row committed through the HTTP cancel API")
	flag.Float64Var(&o.lowRate, "low-rate", 100, "offered results per second of the low fixed-load row (HTTP cancels)")
	only := flag.String("only", "", "run only these rows, comma-separated ("+strings.Join(rowNames, ", ")+"); prints their summaries and writes no file")
	flag.Parse()
	if *only != "" {
		o.only = map[string]bool{}
		for _, name := range strings.Split(*only, ",") {
			if !slices.Contains(rowNames, name) {
				fmt.Fprintf(os.Stderr, "bench: -only: unknown row %q (want %s)\n", name, strings.Join(rowNames, ", "))
				os.Exit(2)
			}
			o.only[name] = true
		}
		o.out = ""
	}
	if o.peerMessages == 0 {
		o.peerMessages = o.drainEvents
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := run(ctx, log, o); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w (the run is bounded by -timeout %s)", err, o.timeout)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// results holds every row of the run.
type results struct {
	started  time.Time
	total    time.Duration
	settings serverSettings
	opts     options
	raw      []rawResult
	// statements is what a statement and a round trip cost (the raw group).
	statements []statementCostResult
	drain      *drainResult
	// drainTraced is the same drain with the server's tracing exporter on.
	drainTraced *drainResult
	floor       []*floorResult // the drain's SQL alone, claims one at a time and in parallel
	nack        *drainResult   // the drain with every event NACKed once
	rss         *rssResult
	metrics     *metricsResult
	live        *liveResult
	liveBatch   *liveResult
	jetstream   *jetstreamRun
	latency     []latencyResult
	submit      *submitResult
	crossNode   *crossNodeResult
	peerPub     *peerPublish
	peer        []*peerResult

	loadStart, loadEnd string
	runCost            cost // from the server's start to the last row
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	r := &results{started: time.Now(), opts: o}
	step := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%5.1fs] %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
	}

	step("starting a durable database server and the Orbit server")
	e, err := startEnv(ctx, log)
	if err != nil {
		return err
	}
	defer func() {
		step("stopping")
		e.close()
	}()
	r.settings = e.settings
	scrapeCtx, stopScraping := context.WithCancel(ctx)
	defer stopScraping()
	if err := e.startScraper(scrapeCtx); err != nil {
		return err
	}
	r.loadStart = loadAverage()
	first, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	step("%s, innodb_flush_log_at_trx_commit=%s, sync_binlog=%s, log_bin=%s, buffer pool %s, redo log %s, %d cores, GC target %d %% (%s)",
		e.settings.Version, e.settings.FlushLogAtTrxCommit, e.settings.SyncBinlog, e.settings.LogBin,
		mib(e.settings.BufferPool), mib(e.settings.RedoLog), e.settings.Cores,
		e.settings.GCPercent, e.settings.GCPercentSource)

	if o.runs("raw") {
		step("raw commit ceiling: 1, 8 and 32 connections, %s each", o.rawDur)
		if r.raw, err = runRaw(ctx, e, []int{1, 8, 32}, o.rawDur); err != nil {
			return err
		}
		for _, x := range r.raw {
			step("%s", x.summary())
		}
		step("statement costs: %d connections, %s each", statementCostConns, o.statementCostDuration())
		if r.statements, err = runStatementCosts(ctx, e, o.statementCostDuration()); err != nil {
			return err
		}
		for _, x := range r.statements {
			step("%s", x.summary())
		}
	}

	if o.runs("metrics") {
		step("metrics collector: %d queues, %d subscriptions, %d refreshes", metricsQueues, metricsSubscriptions, metricsRefreshes)
		if r.metrics, err = runMetrics(ctx, e); err != nil {
			return err
		}
		step("%s", r.metrics.summary())
	}

	if o.runs("drain") {
		step("backlog drain: appending %d results, then draining them with %d consumers", o.drainEvents, drainConsumers)
		if r.drain, err = runDrain(ctx, e, "drain", o.drainEvents, 0, 4*time.Minute, false); err != nil {
			return err
		}
		step("%s", r.drain.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n%s\n%s\n%s\n%s\n", costLine(r.drain.Cost, r.drain.Events), rowWorkLine(r.drain.Cost, r.drain.Events),
				r.drain.TableStats, r.drain.DBSamples, r.drain.ProfileTop)
		}
	}
	if o.runs("drain") && (o.drainTraced || len(o.only) == 0) {
		step("backlog drain again, from sequence 0 of the same log, with the server's tracing exporter on")
		if r.drainTraced, err = runTracedDrain(ctx, e, o.drainEvents, r.drain.Prefill); err != nil {
			return err
		}
		step("%s", r.drainTraced.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n%s\n", costLine(r.drainTraced.Cost, r.drainTraced.Events), r.drainTraced.ProfileTop)
		}
	}
	if o.runs("floor") {
		for _, parallel := range []bool{false, true} {
			step("schema floor: the drain's own SQL alone on copies of its tables, %d events, %d consumers, claims in parallel %t", o.drainEvents, drainConsumers, parallel)
			f, err := runFloor(ctx, e, o.drainEvents, parallel)
			if err != nil {
				return err
			}
			r.floor = append(r.floor, f)
			step("%s", f.summary())
			if len(o.only) > 0 {
				fmt.Fprintf(os.Stderr, "%s\n%s\n", costLine(f.Cost, f.Events), rowWorkLine(f.Cost, f.Events))
			}
		}
	}
	if o.runs("jetstream") {
		step("NATS JetStream: its own nats-server, file store, %d messages, pull consumer with AckSync at fetch 1 and 100", o.drainEvents)
		if r.jetstream, err = runJetStream(ctx, o.drainEvents, []int{1, 100}, step); err != nil {
			return err
		}
	}
	if o.runs("nack") {
		step("NACK-then-ACK drain: appending %d results, then NACKing each once (delay 0) and ACKing it with %d consumers", o.drainEvents, drainConsumers)
		if r.nack, err = runDrain(ctx, e, "nack", o.drainEvents, 0, 8*time.Minute, true); err != nil {
			return err
		}
		step("NACK-then-ACK %s", r.nack.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n", costLine(r.nack.Cost, r.nack.Events))
		}
	}

	if o.runs("rss") {
		step("memory: %d idle consumers", idleConnections)
		if r.rss, err = runRSS(ctx, e); err != nil {
			return err
		}
		step("%s", r.rss.summary())
	}

	if o.runs("live") {
		step("live: %d tasks over %d queues", o.liveTasks, liveQueues)
		if r.live, err = runLive(ctx, e, "live", o.liveTasks, 0, 3*time.Minute); err != nil {
			return err
		}
		step("%s", r.live.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n%s\n", costLine(r.live.Cost, r.live.Tasks), r.live.DBSamples)
		}
	}
	if o.runs("livebatch") {
		step("live with batch submission: %d tasks over %d queues, %d per request", o.liveTasks, liveQueues, liveBatch)
		if r.liveBatch, err = runLive(ctx, e, "livebatch", o.liveTasks, liveBatch, 3*time.Minute); err != nil {
			return err
		}
		step("batch %s", r.liveBatch.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n%s\n", costLine(r.liveBatch.Cost, r.liveBatch.Tasks), r.liveBatch.DBSamples)
		}
	}

	if o.runs("latency") {
		levels := []loadLevel{{Label: "fixed", Rate: o.fixedRate, Direct: true}, {Label: "fixed", Rate: o.httpRate}, {Label: "fixed", Rate: o.lowRate}}
		if r.live != nil {
			for _, p := range []float64{25, 50, 90} {
				levels = append(levels, loadLevel{Label: fmt.Sprintf("%.0f %% of live peak", p), Rate: max(1, r.live.Rate*p/100)})
			}
		}
		step("latency at fixed offered loads, %s each", o.latencyDur)
		if r.latency, err = runLatency(ctx, e, levels, o.latencyDur, func(x latencyResult) {
			step("%s", x.summary())
			if len(o.only) > 0 {
				fmt.Fprintf(os.Stderr, "%s\nserver steps: %s\n%s\n", costLine(x.Cost, int(x.Committed)), x.Steps, x.DBSamples)
			}
		}); err != nil {
			return err
		}
	}
	if o.runs("crossnode") {
		step("cross-node (N-2): a second Orbit node on the same database; %s/s offered through node A, %s per phase", num(crossNodeRate), o.latencyDur)
		if r.crossNode, err = runCrossNode(ctx, e, crossNodeRate, o.latencyDur); err != nil {
			return err
		}
		step("%s", r.crossNode.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n", costLine(r.crossNode.Cost, int(r.crossNode.Committed)))
		}
	}
	if o.runs("submit") {
		step("HTTP submits: %d requests in flight, one task each, for %s", submitSenders, o.latencyDur)
		if r.submit, err = runSubmit(ctx, e, o.latencyDur); err != nil {
			return err
		}
		step("%s", r.submit.summary())
		if len(o.only) > 0 {
			fmt.Fprintf(os.Stderr, "%s\n%s\n", costLine(r.submit.Cost, int(r.submit.Accepted)), r.submit.DBSamples)
		}
	}
	if len(o.only) > 0 && !o.runs("peer") {
		return nil
	}

	step("Watermill SQL: publishing %d messages", o.peerMessages)
	p, err := newPeer(ctx, e)
	if err != nil {
		return err
	}
	defer p.close()
	if r.peerPub, err = p.publish(ctx, o.peerMessages); err != nil {
		return err
	}
	step("%s", r.peerPub.summary())
	for _, batch := range []int{1, 100} {
		step("Watermill SQL: consuming them with batch %d (at most %s)", batch, o.peerCap)
		c, err := p.consume(ctx, batch, o.peerMessages, o.peerCap)
		if err != nil {
			return fmt.Errorf("watermill batch %d: %w", batch, err)
		}
		r.peer = append(r.peer, c)
		step("%s", c.summary())
	}
	if len(o.only) > 0 {
		return nil
	}
	r.total = time.Since(r.started)
	r.loadEnd = loadAverage()
	last, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	r.runCost = first.to(last)

	table := r.table()
	fmt.Println(table)
	if o.out != "" {
		if err := writeDoc(o.out, r.markdown(table)); err != nil {
			return err
		}
		step("wrote %s", o.out)
	}
	return nil
}
