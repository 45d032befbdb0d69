package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/cmd/orbit/client"
	orbit "github.com/orbitrun/orbit/sdk/go"
)

func eventsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Client: watch and consume a subscription's result events",
	}
	flags := addClientFlags(cmd)
	cmd.AddCommand(eventsTailCommand(flags))
	return cmd
}

var tailColumns = []column{
	{"SEQUENCE", "sequence"}, {"TYPE", "event.type"}, {"TASK", "event.aggregate_id"}, {"STATE", "state"},
	{"ATTEMPTS", "attempts"}, {"EVENT", "event_id"}, {"DELIVERY", "id"},
}

func eventsTailCommand(flags *clientFlags) *cobra.Command {
	var (
		sub      subArg
		noAck    bool
		count    int
		capacity int
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "tail SUB",
		Short: "Print a subscription's deliveries as they come, and ACK them (or only watch)",
		Long: `Consumes a subscription over the event connection (orbit.events.v1,
permission events:consume): prints each delivery as it arrives and
acknowledges it. Use it to drain or inspect a subscription by hand; each
event it ACKs is gone for the subscription's real consumer.

With --no-ack it only watches (permission events:read): it takes no lease,
acknowledges nothing and never competes with the real consumer; it polls
the deliveries list every --interval and prints each delivery that is new
or changed state, with its event.

With -o json each delivery is one JSON line: {"delivery": …, "event": …}.
It runs until interrupted (Ctrl-C), or until it has printed --count
deliveries.

Examples:
  orbit events tail billing
  orbit events tail billing --no-ack -o json | jq .event.snapshot.result`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 0 {
				return fmt.Errorf("--count: must not be negative")
			}
			if capacity < 1 || capacity > orbit.MaxEventCapacity {
				return fmt.Errorf("--capacity: %d is not from 1 to %d", capacity, orbit.MaxEventCapacity)
			}
			if interval < 10*time.Millisecond {
				return fmt.Errorf("--interval: %s is shorter than 10ms", interval)
			}
			c, p, id, err := sub.connect(cmd, flags, args[0])
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			t := &tail{p: p, count: count}
			if noAck {
				return t.watch(ctx, c, id, interval)
			}
			return t.consume(ctx, c, id, capacity)
		},
	}
	sub.add(cmd)
	cmd.Flags().BoolVar(&noAck, "no-ack", false, "only watch: take no lease and acknowledge nothing")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many deliveries (default: run until interrupted)")
	cmd.Flags().IntVar(&capacity, "capacity", 1, fmt.Sprintf("deliveries held at once, 1 to %d", orbit.MaxEventCapacity))
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "with --no-ack: how often to look")
	return cmd
}

// tail prints deliveries, one line (or JSON line) each, until count is
// reached.
type tail struct {
	p     *printer
	count int

	mu      sync.Mutex
	printed int
	header  bool
}

// errCountReached refuses a delivery that arrives after --count was
// reached: it is neither printed nor acknowledged.
var errCountReached = errors.New("--count reached")

// print writes one delivery and reports whether that reached count; a
// delivery after count is not printed (errCountReached).
func (t *tail) print(delivery, event json.RawMessage) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count > 0 && t.printed >= t.count {
		return true, errCountReached
	}
	t.printed++
	if t.p.json {
		line, err := json.Marshal(struct {
			Delivery json.RawMessage `json:"delivery"`
			Event    json.RawMessage `json:"event"`
		}{delivery, event})
		if err != nil {
			return false, err
		}
		_, err = fmt.Fprintf(t.p.out, "%s\n", line)
		return t.count > 0 && t.printed >= t.count, err
	}
	// The row reads the delivery's members and the event's under "event.".
	var row map[string]json.RawMessage
	if err := json.Unmarshal(delivery, &row); err != nil {
		return false, err
	}
	row["event"] = event
	item, err := json.Marshal(row)
	if err != nil {
		return false, err
	}
	err = t.p.rows([]json.RawMessage{item}, tailColumns, !t.header)
	t.header = true
	return t.count > 0 && t.printed >= t.count, err
}

// consume leases, prints and acknowledges deliveries with the SDK's
// event consumer.
func (t *tail) consume(ctx context.Context, c *client.Client, subID string, capacity int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		errMu    sync.Mutex
		printErr error
	)
	consumer, err := orbit.NewEventConsumer(orbit.EventConsumerConfig{
		BaseURL: c.Server(), Token: c.Token(), SubscriptionID: subID, Capacity: capacity, Concurrency: 1,
		Logger: slog.New(slog.NewTextHandler(t.p.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, func(_ context.Context, d *orbit.Delivery) error {
		delivery, err := json.Marshal(d.EventDelivery)
		if err != nil {
			return err
		}
		done, err := t.print(delivery, d.EventJSON)
		if errors.Is(err, errCountReached) {
			return err // not acknowledged: redelivered to the next consumer
		}
		if err != nil {
			errMu.Lock()
			printErr = err
			errMu.Unlock()
			cancel()
			return err
		}
		if done {
			// The handler returns nil, so this delivery is acknowledged
			// while the consumer shuts down.
			cancel()
		}
		return nil
	})
	if err != nil {
		return err
	}
	runErr := consumer.Run(ctx)
	st := consumer.Stats()
	t.p.note("delivered %d, acknowledged %d", st.Delivered, st.Acked)
	errMu.Lock()
	defer errMu.Unlock()
	if printErr != nil {
		return printErr
	}
	return runErr
}

// watch polls the deliveries list and prints the deliveries that are new
// or changed state since the last look, oldest first, each with its event.
// It changes nothing on the server.
func (t *tail) watch(ctx context.Context, c *client.Client, subID string, interval time.Duration) error {
	seen := map[string]string{} // delivery id -> state and revision
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	events := map[string]json.RawMessage{} // delivery id -> event
	for {
		pg, _, err := c.List(ctx, subPath(subID)+"/deliveries", url.Values{"limit": {"100"}})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		type change struct {
			seq  uint64
			id   string
			item json.RawMessage
		}
		var changes []change
		for _, item := range pg.Items {
			id := cell(field(item, "id"))
			mark := cell(field(item, "state")) + "/" + cell(field(item, "revision"))
			if seen[id] == mark {
				continue
			}
			seen[id] = mark
			seq, _ := strconv.ParseUint(cell(field(item, "sequence")), 10, 64)
			changes = append(changes, change{seq, id, item})
		}
		slices.SortFunc(changes, func(a, b change) int {
			if a.seq != b.seq {
				return cmp.Compare(a.seq, b.seq)
			}
			return cmp.Compare(a.id, b.id)
		})
		for _, ch := range changes {
			ev, ok := events[ch.id]
			if !ok {
				raw, err := c.Get(ctx, subPath(subID)+"/deliveries/"+client.PathID(ch.id), nil)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				ev = field(raw, "event")
				events[ch.id] = ev
			}
			done, err := t.print(ch.item, ev)
			if err != nil || done {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
