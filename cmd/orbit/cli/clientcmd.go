package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/orbitrun/orbit/cmd/orbit/client"
	"github.com/orbitrun/orbit/internal/httpx"
)

// clientFlags are the flags every client command shares (orbit queue,
// task, sub, events): where the server and the credential are, and the
// output format.
type clientFlags struct {
	server      string
	credentials string
	output      string
}

// addClientFlags adds the shared flags to a command group, for every
// command under it.
func addClientFlags(cmd *cobra.Command) *clientFlags {
	f := &clientFlags{}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.server, "server", "", "server URL (default $ORBIT_URL, else the credentials file's url, else "+client.DefaultServer+")")
	pf.StringVar(&f.credentials, "credentials", "", "credentials file (default $ORBIT_CREDENTIALS_FILE, else "+client.DevCredentialsFile+" of orbit dev)")
	pf.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	return f
}

// connect checks the shared flags and returns a client and a printer.
func (f *clientFlags) connect(cmd *cobra.Command) (*client.Client, *printer, error) {
	p, err := f.printer(cmd)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(client.Options{Server: f.server, CredentialsFile: f.credentials})
	if err != nil {
		return nil, nil, err
	}
	return c, p, nil
}

// connectQueue connects and resolves --queue (flag value queue) to a
// queue id.
func (f *clientFlags) connectQueue(cmd *cobra.Command, queue string) (*client.Client, *printer, string, error) {
	c, p, err := f.connect(cmd)
	if err != nil {
		return nil, nil, "", err
	}
	queueID, err := c.QueueID(cmd.Context(), "--queue", queue)
	if err != nil {
		return nil, nil, "", err
	}
	return c, p, queueID, nil
}

func (f *clientFlags) printer(cmd *cobra.Command) (*printer, error) {
	if f.output != "table" && f.output != "json" {
		return nil, fmt.Errorf("-o/--output: %q is not table or json", f.output)
	}
	return &printer{out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), in: cmd.InOrStdin(), json: f.output == "json"}, nil
}

// printer writes a command's result: the server's JSON with -o json, a
// table otherwise. Notes (idempotency keys, next cursors, questions) go to
// standard error, so that standard output holds only the result.
type printer struct {
	out, errOut io.Writer
	in          io.Reader
	json        bool
}

// note writes a line to standard error.
func (p *printer) note(format string, args ...any) {
	fmt.Fprintf(p.errOut, format+"\n", args...)
}

// raw prints JSON as the server sent it, indented.
func (p *printer) raw(raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("the reply is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := p.out.Write(buf.Bytes())
	return err
}

// object prints one object: its JSON, or one "member: value" line per
// member in the server's order. With nested, members that are objects
// (a receipt's task, a delivery's event) are listed member by member as
// "outer.inner"; deeper values are printed as compact JSON.
func (p *printer) object(raw json.RawMessage, nested bool) error {
	if p.json {
		return p.raw(raw)
	}
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	if err := describe(tw, "", raw, nested); err != nil {
		return err
	}
	return tw.Flush()
}

func describe(w io.Writer, prefix string, raw json.RawMessage, nested bool) error {
	members, err := orderedMembers(raw)
	if err != nil {
		return err
	}
	for _, m := range members {
		if nested && isObject(m.value) {
			if err := describe(w, prefix+m.name+".", m.value, false); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "%s%s:\t%s\n", prefix, m.name, cell(m.value))
	}
	return nil
}

type member struct {
	name  string
	value json.RawMessage
}

// orderedMembers returns an object's members in their order.
func orderedMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("the reply is not a JSON object")
	}
	var out []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{name, v})
	}
	return out, nil
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// cell renders a JSON value for a table: a string without quotes, null or
// nothing as "-", anything else as compact JSON.
func cell(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "-"
		}
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// column is a column of a table: its header and the member it shows
// ("a.b" reaches into a nested object).
type column struct {
	header, member string
}

// field returns the member at path of an object, or nil.
func field(raw json.RawMessage, path string) json.RawMessage {
	for _, name := range strings.Split(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		raw = m[name]
	}
	return raw
}

// table prints items as a table of columns, or with -o json the whole
// reply raw.
func (p *printer) table(raw json.RawMessage, items []json.RawMessage, columns []column) error {
	if p.json {
		return p.raw(raw)
	}
	return p.rows(items, columns, true)
}

// rows prints items under columns, with the header line when header is
// set.
func (p *printer) rows(items []json.RawMessage, columns []column, header bool) error {
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	if header {
		heads := make([]string, len(columns))
		for i, c := range columns {
			heads[i] = c.header
		}
		fmt.Fprintln(tw, strings.Join(heads, "\t"))
	}
	for _, item := range items {
		cells := make([]string, len(columns))
		for i, c := range columns {
			cells[i] = cell(field(item, c.member))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// page prints a page of a list and, on standard error, how to get the
// next one.
func (p *printer) page(pg client.Page, raw json.RawMessage, columns []column) error {
	if err := p.table(raw, pg.Items, columns); err != nil {
		return err
	}
	if pg.NextCursor != "" && !p.json {
		p.note("more: repeat with --cursor %s", pg.NextCursor)
	}
	return nil
}

// idempotencyKey returns --idempotency-key when set (checked against the
// C-13 syntax), else a new key.
func idempotencyKey(flag string) (string, error) {
	if flag == "" {
		return client.NewKey(), nil
	}
	if !httpx.ValidIdempotencyKey(flag) {
		return "", fmt.Errorf("--idempotency-key: must be 1 to 128 characters of A-Z a-z 0-9 . _ - :")
	}
	return flag, nil
}

// noteKey prints the idempotency key of a write and the flags that repeat
// the same request safely.
func (p *printer) noteKey(key string, repeat ...string) {
	flags := append([]string{"--idempotency-key", key}, repeat...)
	p.note("idempotency key: %s (to repeat this request safely: %s)", key, strings.Join(flags, " "))
}

// confirm asks question on standard error and reads the answer from
// standard input; only "y" or "yes" confirms.
func (p *printer) confirm(question string) error {
	fmt.Fprintf(p.errOut, "%s [y/N] ", question)
	line, _ := bufio.NewReader(p.in).ReadString('\n')
	if !isTerminal(p.in) {
		// The answer was not typed, so it was not echoed: end the line.
		fmt.Fprintln(p.errOut)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errors.New("not confirmed; nothing was changed (pass --yes to skip the question)")
}

// conflict rewords a STATE_CONFLICT of a write that carried a revision
// the command read itself: the object changed in between.
func conflict(err error, what string) error {
	if client.IsCode(err, "STATE_CONFLICT") {
		return fmt.Errorf("%w; %s changed since this command read it, nothing was changed: look again and repeat the command", err, what)
	}
	return err
}

// send makes one idempotent write: it notes the key and the flags that
// repeat it (repeat), sends body with method to path and prints the reply.
// With what set, the write carried a revision the command read itself, and
// a STATE_CONFLICT is reworded as a change of what in between (conflict).
func (p *printer) send(ctx context.Context, c *client.Client, method, path, key string, body map[string]any, what string, repeat ...string) error {
	p.noteKey(key, repeat...)
	raw, err := c.Do(ctx, method, path, nil, key, body)
	if err != nil {
		if what != "" {
			return conflict(err, what)
		}
		return err
	}
	return p.object(raw, true)
}

// expectedRevision returns --expected-revision when given, else the current
// revision of the object at path (of its member, when member is set).
func expectedRevision(cmd *cobra.Command, c *client.Client, path, member string, expected uint64) (string, error) {
	if cmd.Flags().Changed("expected-revision") {
		return strconv.FormatUint(expected, 10), nil
	}
	raw, err := c.Get(cmd.Context(), path, nil)
	if err != nil {
		return "", err
	}
	if member != "" {
		raw = field(raw, member)
	}
	n, err := client.Revision(raw)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(n, 10), nil
}

// listPage lists one page of path with query q (plus --limit and
// --cursor) and prints it under columns.
func (p *printer) listPage(ctx context.Context, c *client.Client, path string, q url.Values, limit int, cursor string, columns []column) error {
	pageQuery(q, limit, cursor)
	pg, raw, err := c.List(ctx, path, q)
	if err != nil {
		return err
	}
	return p.page(pg, raw, columns)
}

// requireReason checks --reason, which every audited change needs.
func requireReason(reason string) error {
	if strings.TrimSpace(reason) == "" {
		return errors.New("--reason: required: say why, it is kept in the audit log")
	}
	return nil
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
