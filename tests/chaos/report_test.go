//go:build chaos

package chaos_test

import (
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// report is what the run's databases and the clients' output say.
type report struct {
	date, machine, server                 string
	loadStart, loadEnd                    string // /proc/loadavg, 1 minute
	rate                                  int
	loadSeconds                           float64
	drain, total                          time.Duration
	submitted, tasks, succeeded, produced int
	applied                               int
	lost, appliedTwice, appendedTwice     int
	unfinished, undelivered               int // backlog when the drain did not complete
	dupConsumer, dupReceiver              int
	redeliveredA, redeliveredB            int
	tasksRunTwice                         int
	outcomes                              map[string]int
	otherResults                          map[string]int // results of other types: not subscribed
	faults                                map[string]*faultStats
	evidence                              []string
}

// faultStats are the figures of one fault kind.
type faultStats struct {
	injected, caught, windowed int // caught counts the faults whose window held something
	recoveries                 []time.Duration
	unrecovered                int
	// The events a receiver fault caught (committed in the Inbox, not
	// ACKed): ACKed later by the stored ACK intent with their first proof,
	// or redelivered and deduplicated by the Inbox.
	intentAcked, redelivered int
}

// delivery is a delivery as the report reads it.
type delivery struct {
	state    string
	attempts int
	acked    sql.NullTime
}

func (r *run) report(submitted int) *report {
	t := r.t
	rep := &report{
		date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		machine:   fmt.Sprintf("%d cores, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version()),
		submitted: submitted,
		outcomes:  map[string]int{},
		faults:    map[string]*faultStats{},
	}
	q := func(query string, args []any, scan func(*sql.Rows) error) {
		t.Helper()
		rows, err := r.pool.Query(query, args...)
		if err != nil {
			t.Fatalf("report: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatalf("report: %v", err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("report: %v", err)
		}
	}
	if err := r.pool.QueryRow("SELECT VERSION()").Scan(&rep.server); err != nil {
		t.Fatal(err)
	}

	finished := map[string]time.Time{}
	q(`SELECT id, state, finished_at FROM tasks WHERE queue_id = ?`, []any{r.queueID}, func(rows *sql.Rows) error {
		var id, state string
		var at sql.NullTime
		if err := rows.Scan(&id, &state, &at); err != nil {
			return err
		}
		rep.tasks++
		if state == "SUCCEEDED" {
			rep.succeeded++
			finished[id] = at.Time
		}
		return nil
	})
	events := map[string]string{} // succeeded event → task
	perTask := map[string]int{}
	q(`SELECT id, task_id FROM result_events WHERE queue_id = ? AND type = 'task.succeeded'`, []any{r.queueID}, func(rows *sql.Rows) error {
		var id, task string
		if err := rows.Scan(&id, &task); err != nil {
			return err
		}
		events[id] = task
		perTask[task]++
		return nil
	})
	rep.produced = len(events)
	rep.otherResults = map[string]int{}
	q(`SELECT type, COUNT(*) FROM result_events WHERE queue_id = ? AND type <> 'task.succeeded' GROUP BY type`, []any{r.queueID}, func(rows *sql.Rows) error {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			return err
		}
		rep.otherResults[typ] = n
		return nil
	})
	for task, n := range perTask {
		if n > 1 {
			rep.appendedTwice++
			rep.evidence = append(rep.evidence, fmt.Sprintf("task %s has %d task.succeeded results", task, n))
		}
	}
	if rep.tasks != submitted {
		rep.lost += max(submitted-rep.tasks, 0)
		rep.evidence = append(rep.evidence, fmt.Sprintf("%d tasks submitted and accepted, %d in the queue", submitted, rep.tasks))
	}
	rep.unfinished = rep.tasks - rep.succeeded

	deliveries := func(sub string) map[string]delivery {
		out := map[string]delivery{}
		q(`SELECT d.event_id, d.state, d.attempts, a.acknowledged_at FROM event_deliveries d
			LEFT JOIN delivery_acks a ON a.delivery_id = d.id WHERE d.subscription_id = ?`, []any{sub}, func(rows *sql.Rows) error {
			var id string
			var d delivery
			if err := rows.Scan(&id, &d.state, &d.attempts, &d.acked); err != nil {
				return err
			}
			out[id] = d
			return nil
		})
		return out
	}
	subA, subB := deliveries(r.subA), deliveries(r.subB)

	inbox := map[string]bool{}
	q("SELECT event_id, applied FROM `"+receiverDatabase+"`.receiver_inbox WHERE consumer_name = ? AND queue_id = ?",
		[]any{receiverName, r.queueID}, func(rows *sql.Rows) error {
			var id string
			var applied bool
			if err := rows.Scan(&id, &applied); err != nil {
				return err
			}
			inbox[id] = applied
			return nil
		})
	q("SELECT task_id, applied_events FROM `"+receiverDatabase+"`.receiver_task_views WHERE consumer_name = ? AND queue_id = ?",
		[]any{receiverName, r.queueID}, func(rows *sql.Rows) error {
			var task string
			var n int
			if err := rows.Scan(&task, &n); err != nil {
				return err
			}
			if n > 1 {
				rep.appliedTwice++
				rep.evidence = append(rep.evidence, fmt.Sprintf("receiver view of task %s advanced %d times", task, n))
			}
			return nil
		})

	r.tally.mu.Lock()
	// A result is lost when its delivery was acknowledged but the
	// receiver holds no applied Inbox record of it (or the SDK consumer's
	// handler never saw it), or, once the run has drained, when it was
	// never acknowledged at all. Before the drain completes, a result not
	// yet acknowledged is backlog, counted apart.
	var lostA, lostB, unacked []string
	for id := range events {
		applied, ok := inbox[id]
		if ok && applied {
			rep.applied++
		}
		if subA[id].state == "ACKED" && !(ok && applied) {
			lostA = append(lostA, id)
		}
		if subB[id].state == "ACKED" && r.tally.consumerGot[id] == 0 {
			lostB = append(lostB, id)
		}
		if subA[id].state != "ACKED" || subB[id].state != "ACKED" {
			unacked = append(unacked, id)
		}
	}
	rep.undelivered = len(unacked)
	for _, n := range r.tally.consumerGot {
		rep.dupConsumer += max(n-1, 0)
	}
	for _, n := range r.tally.receiverCalls {
		rep.dupReceiver += max(n-1, 0)
	}
	for _, n := range r.tally.workerStarts {
		if n > 1 {
			rep.tasksRunTwice++
		}
	}
	for o, n := range r.tally.outcomes {
		rep.outcomes[o] = n
	}
	r.tally.mu.Unlock()
	for _, d := range subA {
		if d.attempts > 1 {
			rep.redeliveredA++
		}
	}
	for _, d := range subB {
		if d.attempts > 1 {
			rep.redeliveredB++
		}
	}
	rep.lost += len(lostA) + len(lostB)
	if r.drained {
		rep.lost += len(unacked) + rep.unfinished
	}
	if len(lostA) > 0 {
		rep.evidence = append(rep.evidence, "results ACKED on the receiver's subscription without an applied Inbox record: "+shortList(lostA))
	}
	if len(lostB) > 0 {
		rep.evidence = append(rep.evidence, "results the SDK consumer never handled: "+shortList(lostB))
	}
	if len(unacked) > 0 && r.drained {
		rep.evidence = append(rep.evidence, "results without an ACKED delivery on both subscriptions: "+shortList(unacked))
	}

	// Recovery: from the end of each fault to the first ACK after it.
	acksAll, acksB := ackTimes(subA, subB), ackTimes(subB)
	for _, f := range r.faults {
		st := rep.faults[f.kind]
		if st == nil {
			st = &faultStats{}
			rep.faults[f.kind] = st
		}
		st.injected++
		var at time.Time
		switch {
		case f.events != nil || f.kind == kindReceiverKill || f.kind == kindRecvCommit:
			st.windowed++
			// The events the fault caught are acknowledged in the end:
			// by the restarted receiver's ACK intent with their first
			// proof (K-13), or redelivered (a second attempt) and
			// deduplicated by the Inbox.
			caught := 0
			for _, id := range f.events {
				d := subA[id]
				if !d.acked.Valid {
					continue
				}
				if d.attempts < 2 {
					st.intentAcked++
				} else {
					st.redelivered++
				}
				caught++
				if at.IsZero() || d.acked.Time.Before(at) {
					at = d.acked.Time
				}
			}
			if caught > 0 {
				st.caught++
			}
		case f.tasks != nil || f.kind == kindWorkerKill:
			st.windowed++
			if len(f.tasks) > 0 {
				st.caught++
			}
			for _, id := range f.tasks {
				if fin, ok := finished[id]; ok && (at.IsZero() || fin.Before(at)) {
					at = fin
				}
			}
		case f.sub != "":
			at = firstAfter(acksB, f.end)
		default:
			at = firstAfter(acksAll, f.end)
		}
		if at.IsZero() {
			st.unrecovered++
			continue
		}
		st.recoveries = append(st.recoveries, max(at.Sub(f.end), 0))
	}
	return rep
}

// ackTimes returns the ACK times of the deliveries, sorted.
func ackTimes(sets ...map[string]delivery) []time.Time {
	var out []time.Time
	for _, set := range sets {
		for _, d := range set {
			if d.acked.Valid {
				out = append(out, d.acked.Time)
			}
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// firstAfter returns the first of the sorted times after t, or zero.
func firstAfter(times []time.Time, t time.Time) time.Time {
	i := sort.Search(len(times), func(i int) bool { return times[i].After(t) })
	if i == len(times) {
		return time.Time{}
	}
	return times[i]
}

// markdown renders the report as the tables of docs/reliability.md.
func (rep *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Command: `make chaos` · date: %s · machine: %s · database: %s\n\n", rep.date, rep.machine, rep.server)
	fmt.Fprintf(&b, "Offered %d results/s for %.0f s (submitted %.0f/s, completed %.0f/s); load average %s at start, %s at the end; drain after the last fault %s; whole run %s (builds included).\n\n",
		rep.rate, rep.loadSeconds, float64(rep.submitted)/rep.loadSeconds, float64(rep.succeeded)/(rep.loadSeconds+rep.drain.Seconds()), rep.loadStart, rep.loadEnd, rep.drain.Round(time.Second), rep.total.Round(time.Second))
	b.WriteString("| figure | value |\n| --- | ---: |\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("tasks submitted / SUCCEEDED", fmt.Sprintf("%d / %d", rep.submitted, rep.succeeded))
	row("results produced (task.succeeded in the log)", rep.produced)
	var others []string
	for typ, n := range rep.otherResults {
		others = append(others, fmt.Sprintf("%s %d", typ, n))
	}
	sort.Strings(others)
	if len(others) > 0 {
		row("other results in the log (not subscribed)", strings.Join(others, " · "))
	}
	row("results applied at the receiver (Inbox, view advanced)", rep.applied)
	if rep.unfinished > 0 || rep.undelivered > 0 {
		row("NOT DRAINED: tasks unfinished / results not yet ACKed on both subscriptions", fmt.Sprintf("%d / %d", rep.unfinished, rep.undelivered))
	}
	row("**lost** (must be 0)", fmt.Sprintf("**%d**", rep.lost))
	row("**applied twice** (must be 0)", fmt.Sprintf("**%d**", rep.appliedTwice))
	row("results appended twice (must be 0)", rep.appendedTwice)
	row("duplicate deliveries seen (SDK consumer + receiver)", fmt.Sprintf("%d (%d + %d)", rep.dupConsumer+rep.dupReceiver, rep.dupConsumer, rep.dupReceiver))
	row("deliveries with more than one attempt (receiver / consumer subscription)", fmt.Sprintf("%d / %d", rep.redeliveredA, rep.redeliveredB))
	row("tasks run twice (idempotent tasks)", rep.tasksRunTwice)
	var outs []string
	for o, n := range rep.outcomes {
		outs = append(outs, fmt.Sprintf("%s %d", o, n))
	}
	sort.Strings(outs)
	row("receiver outcomes", strings.Join(outs, " · "))
	b.WriteString("\n| fault | injected | caught something in its window | recovery p50 | recovery max |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, kind := range kindOrder {
		st := rep.faults[kind]
		if st == nil {
			continue
		}
		caught := "—"
		if st.windowed > 0 {
			caught = fmt.Sprintf("%d of %d", st.caught, st.windowed)
		}
		p50, mx := "—", "—"
		if n := len(st.recoveries); n > 0 {
			slices.Sort(st.recoveries)
			p50 = st.recoveries[(n-1)/2].Round(time.Millisecond).String()
			mx = st.recoveries[n-1].Round(time.Millisecond).String()
		}
		if st.unrecovered > 0 {
			mx += fmt.Sprintf(" (%d without)", st.unrecovered)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", kind, st.injected, caught, p50, mx)
	}
	for _, kind := range []string{kindReceiverKill, kindRecvCommit} {
		if st := rep.faults[kind]; st != nil && st.intentAcked+st.redelivered > 0 {
			fmt.Fprintf(&b, "\n%s: %d events committed in the Inbox and not ACKed at the faults; %d ACKed with their first proof from the stored ACK intent (no redelivery), %d redelivered and deduplicated by the Inbox.\n",
				kind, st.intentAcked+st.redelivered, st.intentAcked, st.redelivered)
		}
	}
	b.WriteString("\nRecovery is the time from the end of a fault to the first ACK after it: on any subscription for faults of the server and the database, on the consumer's subscription for the consumer's faults, of the events caught in the window for the receiver's faults (their ACK from the stored intent, or their redelivery, deduplicated by the Inbox), and the first completion of a task that was in the killed worker's handler.\n")
	return b.String()
}

// loadAverage returns the machine's 1-minute load average.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(raw))[0]
}
