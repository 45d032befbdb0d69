package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"

	"github.com/orbitrun/orbit/internal/httpx"
)

// Page is one page of a list, its items as the server sent them.
type Page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// List gets one page of the list at path.
func (c *Client) List(ctx context.Context, path string, query url.Values) (Page, json.RawMessage, error) {
	raw, err := c.Get(ctx, path, query)
	if err != nil {
		return Page{}, nil, err
	}
	var p Page
	if err := json.Unmarshal(raw, &p); err != nil {
		return Page{}, nil, fmt.Errorf("GET %s: the reply is not a page: %w", path, err)
	}
	return p, raw, nil
}

// named is what name resolution reads of an item.
type named struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// QueueID turns --queue into a queue id: the id of the granted queue of
// that name (GET /v1/queues?name=), else the value itself when it is an
// id. Empty means the credentials file's queue. flag names the flag in
// errors.
func (c *Client) QueueID(ctx context.Context, flag, value string) (string, error) {
	if value == "" {
		if c.Credentials.QueueID != "" {
			return c.Credentials.QueueID, nil
		}
		return "", fmt.Errorf("%s: required (the credentials file names no queue)", flag)
	}
	if httpx.ValidName(value, 128) {
		p, _, err := c.List(ctx, "/v1/queues", url.Values{"name": {value}})
		if err != nil {
			return "", err
		}
		for _, item := range p.Items {
			var q named
			if json.Unmarshal(item, &q) == nil && q.Name == value {
				return q.ID, nil
			}
		}
	}
	if httpx.ValidID(value) {
		return value, nil
	}
	return "", fmt.Errorf("%s: no queue named %q among the queues this credential is granted (orbit queue list shows them)", flag, value)
}

// SubscriptionID turns a SUB argument into a subscription id: an id as it
// is, otherwise the name of one of the credential's subscriptions on the
// queue queueFlag names (default: the credentials file's queue).
func (c *Client) SubscriptionID(ctx context.Context, value, queueFlag, queue string) (string, error) {
	if httpx.ValidID(value) {
		return value, nil
	}
	if !httpx.ValidName(value, 128) {
		return "", fmt.Errorf("SUB: %q is neither a subscription id nor a name", value)
	}
	queueID, err := c.QueueID(ctx, queueFlag, queue)
	if err != nil {
		return "", err
	}
	q := url.Values{"queue_id": {queueID}, "limit": {"100"}}
	for {
		p, _, err := c.List(ctx, "/v1/subscriptions", q)
		if err != nil {
			return "", err
		}
		for _, item := range p.Items {
			var s named
			if json.Unmarshal(item, &s) == nil && s.Name == value {
				return s.ID, nil
			}
		}
		if p.NextCursor == "" {
			return "", fmt.Errorf("SUB: no subscription named %q of this credential on queue %s", value, queueID)
		}
		q.Set("cursor", p.NextCursor)
	}
}

// Revision reads the decimal-string revision member of an object.
func Revision(raw json.RawMessage) (uint64, error) {
	var v struct {
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("the reply has no revision: %w", err)
	}
	n, err := strconv.ParseUint(v.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the reply's revision %q is not a number", v.Revision)
	}
	return n, nil
}

// Count reads a count member that may be a JSON number or a decimal
// string.
func Count(raw json.RawMessage) (uint64, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strconv.ParseUint(s, 10, 64)
	}
	var n uint64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, fmt.Errorf("%s is not a count", raw)
	}
	return n, nil
}

// PathID escapes an id for a path.
func PathID(id string) string { return url.PathEscape(id) }
