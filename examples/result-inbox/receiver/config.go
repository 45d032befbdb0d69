// Package receiver implements the receiver commands of the result-inbox
// example: init, demo and consume (seed 000 §1–3). cmd/receiver and
// `orbit receiver` run this same code.
package receiver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	orbit "github.com/orbitrun/orbit/sdk/go"

	"github.com/orbitrun/orbit/examples/result-inbox/inbox"
)

// Environment variables of the receiver (seed 000 §1–3).
const (
	EnvReceiverDSN    = "ORBIT_RECEIVER_DSN"
	EnvSubscriptionID = "ORBIT_SUBSCRIPTION_ID"
	EnvReceiverName   = "RECEIVER_NAME"
)

// Defaults and bounds of seed 000.
const (
	DefaultReceiverName   = "task-result-view"
	DemoTimeout           = 20 * time.Second
	DemoShutdownTimeout   = 5 * time.Second
	ConsumeConcurrency    = 4
	ConsumeStopTimeout    = 10 * time.Second
	ConsumeHandlerTimeout = inbox.DefaultTxTimeout
)

// Config is everything a receiver command needs. Load fills it from the
// environment; the orbit binary fills it from its YAML section as well.
type Config struct {
	// Credentials come from ORBIT_CREDENTIALS_FILE with ORBIT_URL,
	// ORBIT_TOKEN and ORBIT_QUEUE_ID overriding the file's values.
	Credentials *orbit.Credentials
	// ReceiverDSN is the receiver's own database; it must name the
	// database explicitly.
	ReceiverDSN string
	// ReceiverName is the fixed receiving purpose (RECEIVER_NAME).
	ReceiverName string
	// SubscriptionID is the subscription consume receives from.
	SubscriptionID string
}

// LoadConfig reads the receiver's environment. needCredentials is false
// for init, which talks only to the receiver's database.
func LoadConfig(needCredentials bool) (*Config, error) {
	cfg := &Config{
		ReceiverDSN:    os.Getenv(EnvReceiverDSN),
		ReceiverName:   os.Getenv(EnvReceiverName),
		SubscriptionID: os.Getenv(EnvSubscriptionID),
	}
	if cfg.ReceiverName == "" {
		cfg.ReceiverName = DefaultReceiverName
	}
	if needCredentials {
		creds, err := orbit.LoadCredentialsFromEnv()
		if err != nil {
			return nil, err
		}
		cfg.Credentials = creds
	}
	return cfg, nil
}

// OpenReceiverDB opens the receiver's own database. The DSN must name the
// database explicitly; times are read and written in UTC.
func OpenReceiverDB(ctx context.Context, dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, fmt.Errorf("%s is not set: give the receiver's own database, e.g. receiver:secret@tcp(127.0.0.1:3306)/receiver_example", EnvReceiverDSN)
	}
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: not a valid MySQL DSN", EnvReceiverDSN)
	}
	if c.DBName == "" {
		return nil, fmt.Errorf("%s must name the database explicitly (…/receiver_example)", EnvReceiverDSN)
	}
	c.ParseTime = true
	c.Loc = time.UTC
	c.MultiStatements = false
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	c.Params["time_zone"] = "'+00:00'"
	connector, err := mysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvReceiverDSN, err)
	}
	db := sql.OpenDB(connector)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("receiver database %s: %w", c.DBName, redactAt(err, c))
	}
	return db, nil
}

// redact keeps MySQL's error number and message but nothing of the DSN.
func redact(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return fmt.Errorf("mysql error %d: %s", me.Number, me.Message)
	}
	return errors.New("database unreachable")
}

// redactAt is redact for connecting to c: for a server that cannot be
// reached it names the address tried (host:port or socket), but nothing
// else of the DSN: no user, no password.
func redactAt(err error, c *mysql.Config) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return redact(err)
	}
	return fmt.Errorf("database unreachable at %s %s (%s)", c.Net, c.Addr, reachReason(err))
}

// reachReason names why a connection failed without quoting the driver's
// message, which may hold parts of the DSN.
func reachReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENOENT):
		return "no such socket"
	}
	return "cannot connect"
}

// ownSubscription checks the receiver's settings and fetches its
// subscription (ORBIT_SUBSCRIPTION_ID), refusing one of another queue than
// the configured one, so that a misconfigured receiver touches nothing.
// op names the command in errors, refusal what it refuses ("refusing to
// start").
func ownSubscription(ctx context.Context, cfg *Config, op, refusal string) (*orbit.Subscription, error) {
	if cfg.SubscriptionID == "" {
		return nil, fmt.Errorf("%s is not set: give the id of a subscription this credential created", EnvSubscriptionID)
	}
	if !inbox.ValidConsumerName(cfg.ReceiverName) {
		return nil, fmt.Errorf("%s: %q is not a valid receiver name (at most 64 ASCII letters, digits, '.', '_', '-', a letter or digit first)", EnvReceiverName, cfg.ReceiverName)
	}
	client, err := cfg.Credentials.NewClient()
	if err != nil {
		return nil, err
	}
	sub, err := client.GetSubscription(ctx, cfg.SubscriptionID)
	if err != nil {
		return nil, fmt.Errorf("%s: subscription %s: %w", op, cfg.SubscriptionID, err)
	}
	if sub.QueueID != cfg.Credentials.QueueID {
		return nil, fmt.Errorf("%s: subscription %s belongs to queue %s, not the configured queue %s; %s", op, sub.ID, sub.QueueID, cfg.Credentials.QueueID, refusal)
	}
	return sub, nil
}

// openStore opens the receiver's database and the Inbox of RECEIVER_NAME
// on queueID; the caller closes db.
func openStore(ctx context.Context, cfg *Config, queueID string) (*sql.DB, *inbox.Store, error) {
	db, err := OpenReceiverDB(ctx, cfg.ReceiverDSN)
	if err != nil {
		return nil, nil, err
	}
	store, err := inbox.NewStore(db, cfg.ReceiverName, queueID)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, store, nil
}
