package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// dbSampler looks at the server's connections at a fixed interval and
// counts the statements it finds executing, with their thread state: a
// sampling profile of what the database is busy with during a phase. A
// connection between statements (waiting for its client) is not counted.
type dbSampler struct {
	samples int
	running map[string]int // state NUL statement → samples it was executing in
	stop    context.CancelFunc
	done    sync.WaitGroup
}

var (
	spaces  = regexp.MustCompile(`\s+`)
	strs    = regexp.MustCompile(`'(?:[^'\\]|\\.)*'`)
	numbers = regexp.MustCompile(`\b\d+\b`)
	lists   = regexp.MustCompile(`\?(?:, \?)+`)
)

// statementKey shortens a statement to what identifies it: literals
// become ?, lists of them one ?.
func statementKey(q string) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	q = numbers.ReplaceAllString(strs.ReplaceAllString(q, "?"), "?")
	q = lists.ReplaceAllString(q, "?")
	if len(q) > 90 {
		q = q[:90] + "…"
	}
	return q
}

// sampleEvery is how often a sampler reads PROCESSLIST. Each read costs
// the database about a millisecond, which a row's costs include, so the
// samples are no denser than a profile of a few seconds needs.
const sampleEvery = 50 * time.Millisecond

func (e *env) startSampler(ctx context.Context, every time.Duration) *dbSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &dbSampler{running: map[string]int{}, stop: cancel}
	s.done.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := e.admin.QueryContext(ctx, `SELECT COALESCE(STATE, ''), INFO FROM information_schema.PROCESSLIST
				WHERE COMMAND = 'Query' AND INFO IS NOT NULL AND ID <> CONNECTION_ID()`)
			if err != nil {
				continue
			}
			s.samples++
			for rows.Next() {
				var state, q string
				if rows.Scan(&state, &q) == nil {
					// Statements are shortened only in finish, so that
					// the regular expressions stay out of CPU profiles.
					s.running[state+"\x00"+q[:min(len(q), 300)]]++
				}
			}
			rows.Close()
		}
	})
	return s
}

// finish stops sampling and returns the top statements.
func (s *dbSampler) finish(top int) string {
	s.stop()
	s.done.Wait()
	type kv struct {
		k string
		v int
	}
	merged := map[string]int{}
	total := 0
	for k, v := range s.running {
		state, q, _ := strings.Cut(k, "\x00")
		merged[fmt.Sprintf("%-15s %s", state, statementKey(q))] += v
		total += v
	}
	var all []kv
	for k, v := range merged {
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int { return b.v - a.v })
	var b strings.Builder
	fmt.Fprintf(&b, "%d snapshots, %.2f statements executing on average\nshare   thread state    statement\n",
		s.samples, float64(total)/float64(max(s.samples, 1)))
	for _, x := range all[:min(top, len(all))] {
		fmt.Fprintf(&b, "%5.1f %%  %s\n", 100*float64(x.v)/float64(max(total, 1)), x.k)
	}
	return strings.TrimRight(b.String(), "\n")
}
