package httpx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MaxBodyBytes is the largest request body or WebSocket message accepted
// (C-8, C-17).
const MaxBodyBytes = 512 << 10

// MaxJSONDepth is the deepest nesting of objects and arrays accepted in a
// request body or a WebSocket message, counted from the outermost object,
// which is level 1 (C-8). What is accepted is stored and later sent again
// inside a few more levels (the response envelope, task.assign,
// event.deliver); Go's JSON encoders refuse more than 10 000 levels, so a
// limit far below that keeps everything accepted deliverable.
const MaxJSONDepth = 64

// errNull is reported when JSON null is given for a Go value that cannot
// hold it.
var errNull = errors.New("must not be null")

// decodeOptions are the strict rules of C-8. Most of them are also the
// defaults of the json package; they are spelled out so that the contract
// does not depend on those defaults.
var decodeOptions = json.JoinOptions(
	json.RejectUnknownMembers(true),
	json.MatchCaseInsensitiveNames(false),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
	json.WithUnmarshalers(json.UnmarshalFromFunc(rejectNull)),
)

// rejectNull refuses JSON null for Go values that have no null of their own
// (strings, numbers, booleans, structs, arrays), which json would otherwise
// turn silently into the zero value. Pointers, slices, maps, interfaces and
// raw jsontext.Value fields keep their usual handling, so an optional field
// that may be null is declared as a pointer.
func rejectNull(dec *jsontext.Decoder, v any) error {
	if dec.PeekKind() != 'n' {
		return errors.ErrUnsupported
	}
	switch reflect.TypeOf(v).Elem().Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return errors.ErrUnsupported
	}
	return errNull
}

// DecodeJSON reads the request body, at most MaxBodyBytes, and decodes it
// into dst under the rules of C-8. The Content-Type must be
// application/json, optionally with charset=utf-8. Every failure is a
// 400 INVALID_ARGUMENT *Error whose message names the field at fault,
// except a body that does not arrive within the request deadline: 503
// UNAVAILABLE (C-12).
//
// dst is normally a pointer to a struct whose fields all have json tags;
// a field without a tag would be matched by its Go name. JSON null is
// accepted only where Go has a nil (pointers, slices, maps, interfaces and
// jsontext.Value); for any other field it is an error rather than the zero
// value. Fields that are required are declared as pointers and checked with
// Required after decoding. A dst that is not a non-nil pointer is a bug and
// is reported as a plain error, which WriteError turns into INTERNAL.
func DecodeJSON(r *http.Request, dst any) error {
	if err := checkContentType(r.Header.Values("Content-Type")); err != nil {
		return err
	}
	if r.ContentLength > MaxBodyBytes {
		return tooLarge("request body")
	}
	b, err := readBody(r)
	if err != nil {
		return err
	}
	return decodeJSON(b, dst, "request body")
}

// readBody reads the body of r, at most MaxBodyBytes+1 bytes. A body that
// does not arrive within the request deadline (see Middleware) is a 503
// UNAVAILABLE *Error, as C-12 answers a request past its deadline; any
// other failure is a 400 INVALID_ARGUMENT *Error.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &Error{Code: CodeUnavailable, Message: "request deadline exceeded"}
	case errors.As(err, new(*http.MaxBytesError)):
		return nil, tooLarge("request body")
	default:
		return nil, &Error{Code: CodeInvalidArgument, Message: "request body could not be read"}
	}
}

// DecodeJSONBytes decodes b into dst under the same rules as DecodeJSON,
// for input that does not come from an HTTP body, such as WebSocket
// messages.
func DecodeJSONBytes(b []byte, dst any) error {
	return decodeJSON(b, dst, "message")
}

func checkContentType(values []string) error {
	if len(values) != 1 {
		return &Error{Code: CodeInvalidArgument, Message: "Content-Type must be application/json"}
	}
	mediaType, params, err := mime.ParseMediaType(values[0])
	if err != nil || mediaType != "application/json" {
		return &Error{Code: CodeInvalidArgument, Message: "Content-Type must be application/json"}
	}
	for name, value := range params {
		if name != "charset" || !strings.EqualFold(value, "utf-8") {
			return &Error{Code: CodeInvalidArgument, Message: "Content-Type application/json takes no parameter other than charset=utf-8"}
		}
	}
	return nil
}

func tooLarge(what string) *Error {
	return Errorf(CodeInvalidArgument, "%s exceeds %d bytes", what, MaxBodyBytes)
}

var (
	decoders    = sync.Pool{New: func() any { return new(jsontext.Decoder) }}
	emptyReader = bytes.NewReader(nil)
)

// decodeJSON applies the rules of C-8 to b; what names b in messages.
func decodeJSON(b []byte, dst any, what string) error {
	if v := reflect.ValueOf(dst); v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("httpx: decode JSON into %T: not a non-nil pointer", dst)
	}
	if len(b) > MaxBodyBytes {
		return tooLarge(what)
	}
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	if len(trimmed) == 0 {
		return Errorf(CodeInvalidArgument, "%s is empty", what)
	}
	if trimmed[0] != '{' {
		return Errorf(CodeInvalidArgument, "%s must be a JSON object", what)
	}
	if at := depthExceeded(b, MaxJSONDepth); at >= 0 {
		return Errorf(CodeInvalidArgument, "%s nests objects and arrays deeper than %d levels (at byte %d)", what, MaxJSONDepth, at)
	}
	// A decoder reads b in place (a bytes.Buffer is not copied) and comes
	// from a pool: building one per message cost more than decoding a
	// small one.
	dec := decoders.Get().(*jsontext.Decoder)
	defer func() {
		dec.Reset(emptyReader) // drop b
		decoders.Put(dec)
	}()
	dec.Reset(bytes.NewBuffer(b), decodeOptions)
	if err := json.UnmarshalDecode(dec, dst, decodeOptions); err != nil {
		return decodeError(err, b, what)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return Errorf(CodeInvalidArgument, "%s has data after the JSON object", what)
	}
	return nil
}

// depthExceeded returns the offset of the first '{' or '[' in the JSON
// text b that opens level max+1, or -1 when b nests no deeper than max. It
// only counts brackets outside strings and checks nothing else: the
// decoder that runs after it judges the syntax. The json packages take no
// lower limit than their own 10 000 levels, hence this separate pass.
func depthExceeded(b []byte, max int) int {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return i
			}
		case '}', ']':
			depth--
		}
	}
	return -1
}

// decodeError turns an error of the json packages about input into an
// INVALID_ARGUMENT *Error naming the place of the fault. It never repeats
// values from the input, which may be secret.
func decodeError(err error, input []byte, what string) *Error {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &syn):
		path := pointerPath(syn.JSONPointer)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			return Errorf(CodeInvalidArgument, "duplicate field %q", path)
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			return Errorf(CodeInvalidArgument, "%s is truncated JSON", what)
		case !utf8.Valid(input):
			if path == "" {
				return Errorf(CodeInvalidArgument, "%s contains invalid UTF-8", what)
			}
			return Errorf(CodeInvalidArgument, "field %q contains invalid UTF-8", path)
		}
		if path == "" {
			return Errorf(CodeInvalidArgument, "%s is not valid JSON (at byte %d)", what, syn.ByteOffset)
		}
		return Errorf(CodeInvalidArgument, "%s is not valid JSON in field %q (at byte %d)", what, path, syn.ByteOffset)
	case errors.As(err, &sem):
		return semanticError(sem, what)
	case errors.Is(err, io.EOF):
		return Errorf(CodeInvalidArgument, "%s is empty", what)
	}
	return Errorf(CodeInvalidArgument, "%s is not valid JSON", what)
}

func semanticError(sem *json.SemanticError, what string) *Error {
	path := pointerPath(sem.JSONPointer)
	if errors.Is(sem.Err, json.ErrUnknownName) {
		return Errorf(CodeInvalidArgument, "unknown field %q", path)
	}
	subject := what
	if path != "" {
		subject = fmt.Sprintf("field %q", path)
	}
	var e *Error
	switch {
	case errors.Is(sem.Err, errNull):
		return Errorf(CodeInvalidArgument, "%s must not be null", subject)
	case errors.As(sem.Err, &e):
		return Errorf(CodeInvalidArgument, "%s %s", subject, e.Message)
	}
	want := goKind(sem.GoType)
	got := jsonKind(sem.JSONKind)
	if want == "integer" && got == "number" {
		return Errorf(CodeInvalidArgument, "%s must be an integer within range", subject)
	}
	if want == "" || got == "" || want == got {
		return Errorf(CodeInvalidArgument, "%s has an invalid value", subject)
	}
	return Errorf(CodeInvalidArgument, "%s must be %s, not %s", subject, article(want), got)
}

// pointerPath renders a JSON pointer for messages: the reference tokens
// joined by '.', such as "items.1.name". The root is "". Long paths are
// shortened.
func pointerPath(p jsontext.Pointer) string {
	var sb strings.Builder
	for tok := range p.Tokens() {
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(tok)
	}
	s := sb.String()
	const maxPath = 200
	if len(s) > maxPath {
		s = strings.ToValidUTF8(s[:maxPath], "") + "…"
	}
	return s
}

// goKind names the JSON type a Go type expects.
func goKind(t reflect.Type) string {
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case reflect.TypeFor[Uint64]():
		return "string"
	case reflect.TypeFor[jsontext.Value]():
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string"
		}
		return "array"
	case reflect.Array:
		return "array"
	}
	return ""
}

// jsonKind names a JSON kind.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return ""
}

func article(kind string) string {
	switch kind {
	case "integer", "object", "array":
		return "an " + kind
	}
	return "a " + kind
}

// Field names a required request field and says whether the request
// provided it. Path is the field's place in the body, in the form used by
// decoding errors ("name", "body.capacity").
type Field struct {
	Path    string
	Present bool
}

// Required returns a 400 INVALID_ARGUMENT *Error that names every field
// that is not present, or nil when all are. The JSON decoder has no notion of
// a required field, so a handler declares required fields as pointers,
// which stay nil when the field is absent or null, and checks them after
// DecodeJSON:
//
//	if err := httpx.Required(
//		httpx.Field{Path: "name", Present: req.Name != nil},
//		httpx.Field{Path: "queue_id", Present: req.QueueID != nil},
//	); err != nil {
//		return err
//	}
func Required(fields ...Field) error {
	var missing []string
	for _, f := range fields {
		if !f.Present {
			missing = append(missing, fmt.Sprintf("%q", f.Path))
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return Errorf(CodeInvalidArgument, "missing required field %s", missing[0])
	default:
		return Errorf(CodeInvalidArgument, "missing required fields %s", strings.Join(missing, ", "))
	}
}
