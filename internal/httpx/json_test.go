package httpx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

type testInner struct {
	A int     `json:"a"`
	B *string `json:"b"`
}

type testRequest struct {
	Name     *string           `json:"name"`
	Count    int               `json:"count"`
	Enabled  bool              `json:"enabled"`
	Ratio    float64           `json:"ratio"`
	Revision Uint64            `json:"revision"`
	From     *Uint64           `json:"from"`
	Inner    testInner         `json:"inner"`
	Items    []testInner       `json:"items"`
	Tags     []string          `json:"tags"`
	Labels   map[string]string `json:"labels"`
	Input    jsontext.Value    `json:"input"`
}

// wantInvalid checks that err is a 400 INVALID_ARGUMENT *Error with message.
func wantInvalid(t *testing.T, err error, message string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error = %v (%T), want *Error", err, err)
	}
	if e.Code != CodeInvalidArgument || e.Message != message {
		t.Fatalf("error = %s %q, want %s %q", e.Code, e.Message, CodeInvalidArgument, message)
	}
}

func TestC8_StrictJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		message string // "" means the body is accepted
	}{
		{name: "Valid", body: `{"name":"a","count":2,"enabled":true,"ratio":0.5,"revision":"7","from":"0","inner":{"a":1},"items":[{"a":1,"b":"x"}],"tags":["t"],"labels":{"k":"v"},"input":{"x":[1,{"y":2}]}}`},
		{name: "EmptyObject", body: `{}`},
		{name: "WhitespaceAround", body: " \n{} \t\r\n"},
		{name: "NullForPointer", body: `{"name":null,"from":null,"inner":{"b":null}}`},
		{name: "NullForSliceMapAndRaw", body: `{"tags":null,"labels":null,"input":null}`},

		{name: "UnknownField", body: `{"nmae":"a"}`, message: `unknown field "nmae"`},
		{name: "FieldInOtherCase", body: `{"Name":"a"}`, message: `unknown field "Name"`},
		{name: "FieldInUpperCase", body: `{"COUNT":1}`, message: `unknown field "COUNT"`},
		{name: "UnknownNestedField", body: `{"inner":{"a":1,"c":2}}`, message: `unknown field "inner.c"`},
		{name: "NestedFieldInOtherCase", body: `{"inner":{"A":1}}`, message: `unknown field "inner.A"`},
		{name: "UnknownFieldInArray", body: `{"items":[{"a":1},{"x":2}]}`, message: `unknown field "items.1.x"`},

		{name: "DuplicateKey", body: `{"name":"a","name":"b"}`, message: `duplicate field "name"`},
		{name: "DuplicateKeyDifferentlyEscaped", body: `{"name":"a","n\u0061me":"b"}`, message: `duplicate field "name"`},
		{name: "DuplicateNestedKey", body: `{"inner":{"a":1,"a":2}}`, message: `duplicate field "inner.a"`},
		{name: "DuplicateKeyInArray", body: `{"items":[{"a":1},{"a":1,"a":2}]}`, message: `duplicate field "items.1.a"`},
		{name: "DuplicateKeyInMap", body: `{"labels":{"k":"v","k":"w"}}`, message: `duplicate field "labels.k"`},
		{name: "DuplicateKeyInRawField", body: `{"input":{"a":1,"a":2}}`, message: `duplicate field "input.a"`},
		{name: "DuplicateKeyDeepInRawField", body: `{"input":{"x":[0,{"y":{"z":1,"z":2}}]}}`, message: `duplicate field "input.x.1.y.z"`},
		{name: "DuplicateUnknownKey", body: `{"zz":1,"zz":2}`, message: `unknown field "zz"`},
		{name: "DuplicateBeforeUnknown", body: `{"name":"a","name":"b","zz":1}`, message: `duplicate field "name"`},

		{name: "TrailingObject", body: `{"name":"a"} {}`, message: `request body has data after the JSON object`},
		{name: "TrailingGarbage", body: `{"name":"a"}x`, message: `request body has data after the JSON object`},
		{name: "TrailingComma", body: `{"name":"a"},`, message: `request body has data after the JSON object`},
		{name: "Truncated", body: `{"name":"a"`, message: `request body is truncated JSON`},
		{name: "Malformed", body: `{"name" "a"}`, message: `request body is not valid JSON in field "name" (at byte 8)`},
		{name: "SingleQuotes", body: `{'name':"a"}`, message: `request body is not valid JSON (at byte 1)`},

		{name: "InvalidUTF8InValue", body: "{\"name\":\"a\xff\"}", message: `field "name" contains invalid UTF-8`},
		{name: "InvalidUTF8InKey", body: "{\"n\xffme\":\"a\"}", message: `request body contains invalid UTF-8`},
		{name: "InvalidUTF8InRawField", body: "{\"input\":{\"s\":\"\xc3\"}}", message: `field "input.s" contains invalid UTF-8`},
		{name: "LoneSurrogateEscape", body: `{"name":"\ud800"}`, message: `request body is not valid JSON in field "name" (at byte 9)`},

		{name: "StringForInteger", body: `{"count":"1"}`, message: `field "count" must be an integer, not string`},
		{name: "FractionForInteger", body: `{"count":1.5}`, message: `field "count" must be an integer within range`},
		{name: "ExponentForInteger", body: `{"count":1e400}`, message: `field "count" must be an integer within range`},
		{name: "IntegerOutOfRange", body: `{"count":99999999999999999999}`, message: `field "count" must be an integer within range`},
		{name: "NumberForString", body: `{"name":1}`, message: `field "name" must be a string, not number`},
		{name: "StringForBoolean", body: `{"enabled":"true"}`, message: `field "enabled" must be a boolean, not string`},
		{name: "NumberForBoolean", body: `{"enabled":1}`, message: `field "enabled" must be a boolean, not number`},
		{name: "ArrayForObject", body: `{"inner":[]}`, message: `field "inner" must be an object, not array`},
		{name: "ObjectForArray", body: `{"tags":{}}`, message: `field "tags" must be an array, not object`},
		{name: "WrongTypeInArray", body: `{"tags":["a",1]}`, message: `field "tags.1" must be a string, not number`},
		{name: "WrongTypeInMap", body: `{"labels":{"k":true}}`, message: `field "labels.k" must be a string, not boolean`},
		{name: "WrongNestedType", body: `{"items":[{"a":"1"}]}`, message: `field "items.0.a" must be an integer, not string`},
		{name: "NullForInteger", body: `{"count":null}`, message: `field "count" must not be null`},
		{name: "NullForBoolean", body: `{"enabled":null}`, message: `field "enabled" must not be null`},
		{name: "NullForStruct", body: `{"inner":null}`, message: `field "inner" must not be null`},
		{name: "NullNested", body: `{"items":[{"a":null}]}`, message: `field "items.0.a" must not be null`},
		{name: "NumberForUint64", body: `{"revision":7}`, message: `field "revision" ` + uint64Message},
		{name: "NonCanonicalUint64", body: `{"revision":"07"}`, message: `field "revision" ` + uint64Message},
		{name: "NullForUint64", body: `{"revision":null}`, message: `field "revision" must not be null`},
		{name: "Uint64OutOfRange", body: `{"from":"18446744073709551616"}`, message: `field "from" ` + uint64Message},

		{name: "Empty", body: ``, message: `request body is empty`},
		{name: "OnlyWhitespace", body: " \n\t", message: `request body is empty`},
		{name: "TopLevelNull", body: `null`, message: `request body must be a JSON object`},
		{name: "TopLevelArray", body: `[{}]`, message: `request body must be a JSON object`},
		{name: "TopLevelString", body: `"{}"`, message: `request body must be a JSON object`},
		{name: "TopLevelNumber", body: `1`, message: `request body must be a JSON object`},
		{name: "ByteOrderMark", body: "\ufeff{}", message: `request body must be a JSON object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader(tt.body))
			r.Header.Set("Content-Type", "application/json")
			var dst testRequest
			err := DecodeJSON(r, &dst)
			if tt.message == "" {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.message)

			// The same input as a WebSocket message gets the same verdict.
			err = DecodeJSONBytes([]byte(tt.body), &testRequest{})
			wantInvalid(t, err, strings.Replace(tt.message, "request body", "message", 1))
		})
	}
}

// nested returns `{"input":` followed by levels-1 nested arrays around 0,
// and `}`: a body that nests levels deep in all.
func nested(levels int) string {
	inner := levels - 1
	return `{"input":` + strings.Repeat("[", inner) + "0" + strings.Repeat("]", inner) + `}`
}

func TestC8_NestingPastTheDepthLimitIsRefused(t *testing.T) {
	t.Parallel()
	deepObjects := `{"input":` + strings.Repeat(`{"a":`, MaxJSONDepth) + "0" + strings.Repeat("}", MaxJSONDepth) + `}`
	tests := []struct {
		name    string
		body    string
		message string // "" means the body is accepted
	}{
		{name: "AtTheLimit", body: nested(MaxJSONDepth)},
		{name: "BracketsInStrings", body: `{"input":["` + strings.Repeat("[{", 100) + `"]}`},
		{name: "EscapedQuoteInString", body: `{"input":["\"` + strings.Repeat("[", 100) + `"]}`},
		{name: "OneLevelPast", body: nested(MaxJSONDepth + 1),
			message: fmt.Sprintf("request body nests objects and arrays deeper than %d levels (at byte %d)", MaxJSONDepth, len(`{"input":`)+MaxJSONDepth-1)},
		{name: "ObjectsPast", body: deepObjects,
			message: fmt.Sprintf("request body nests objects and arrays deeper than %d levels (at byte %d)", MaxJSONDepth, len(`{"input":`)+5*(MaxJSONDepth-1))},
		// The probe's body: accepted by the json packages, whose limit is
		// 10 000, but then never encodable inside a response.
		{name: "TenThousandLevels", body: nested(9999),
			message: fmt.Sprintf("request body nests objects and arrays deeper than %d levels (at byte %d)", MaxJSONDepth, len(`{"input":`)+MaxJSONDepth-1)},
		{name: "PastTheLimitAndTruncated", body: `{"input":` + strings.Repeat("[", 2*MaxJSONDepth),
			message: fmt.Sprintf("request body nests objects and arrays deeper than %d levels (at byte %d)", MaxJSONDepth, len(`{"input":`)+MaxJSONDepth-1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/v1/things", strings.NewReader(tt.body))
			r.Header.Set("Content-Type", "application/json")
			var dst testRequest
			err := DecodeJSON(r, &dst)
			if tt.message == "" {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				// What is accepted can be encoded again inside more levels.
				if _, err := json.Marshal(map[string]any{"data": map[string]any{"task": dst}}); err != nil {
					t.Fatalf("encode the accepted body: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.message)
			err = DecodeJSONBytes([]byte(tt.body), &testRequest{})
			wantInvalid(t, err, strings.Replace(tt.message, "request body", "message", 1))
		})
	}
}

func TestC8_DecodedValues(t *testing.T) {
	t.Parallel()
	body := `{"name":"a","count":-3,"revision":"18446744073709551615","from":"0","items":[{"a":1,"b":"x"}],"input":{"b": 1.50, "a":[true]}}`
	var dst testRequest
	if err := DecodeJSONBytes([]byte(body), &dst); err != nil {
		t.Fatalf("DecodeJSONBytes: %v", err)
	}
	if dst.Name == nil || *dst.Name != "a" || dst.Count != -3 || dst.Revision != 18446744073709551615 {
		t.Errorf("decoded %+v", dst)
	}
	if dst.From == nil || *dst.From != 0 {
		t.Errorf("From = %v, want pointer to 0", dst.From)
	}
	if len(dst.Items) != 1 || dst.Items[0].B == nil || *dst.Items[0].B != "x" {
		t.Errorf("Items = %+v", dst.Items)
	}
	if got, want := string(dst.Input), `{"b": 1.50, "a":[true]}`; got != want {
		t.Errorf("Input = %s, want %s", got, want)
	}
}

// TestC8_DecodesShareNothing: decoders are reused from one input to the
// next; an input refused halfway leaves nothing behind for the next, and
// inputs decoded at once do not see each other.
func TestC8_DecodesShareNothing(t *testing.T) {
	t.Parallel()
	inputs := []struct {
		body, message string
	}{
		{`{"name":"a","inner":{"a":1,"a":2}}`, `duplicate field "inner.a"`},
		{`{"name":"a","items":[{"a":1}`, `message is truncated JSON`},
		{`{"name":"a","unknown":1}`, `unknown field "unknown"`},
		{`{"name":"a"} {}`, `message has data after the JSON object`},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				in := inputs[(g+i)%len(inputs)]
				var bad testRequest
				var e *Error
				if err := DecodeJSONBytes([]byte(in.body), &bad); !errors.As(err, &e) || e.Message != in.message {
					errs <- fmt.Errorf("%s: error %v, want %q", in.body, err, in.message)
					return
				}
				name := fmt.Sprintf("n%d-%d", g, i)
				var good testRequest
				body := `{"name":"` + name + `","count":` + fmt.Sprint(i) + `,"input":{"g":` + fmt.Sprint(g) + `}}`
				if err := DecodeJSONBytes([]byte(body), &good); err != nil {
					errs <- fmt.Errorf("%s: %v", body, err)
					return
				}
				if good.Name == nil || *good.Name != name || good.Count != i || string(good.Input) != `{"g":`+fmt.Sprint(g)+`}` {
					errs <- fmt.Errorf("%s decoded as %+v", body, good)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestC8_ContentType(t *testing.T) {
	t.Parallel()
	const wrong = "Content-Type must be application/json"
	tests := []struct {
		name        string
		contentType []string
		message     string
	}{
		{name: "Plain", contentType: []string{"application/json"}},
		{name: "CharsetUTF8", contentType: []string{"application/json; charset=utf-8"}},
		{name: "CharsetUpperCase", contentType: []string{"Application/JSON; charset=UTF-8"}},
		{name: "Missing", message: wrong},
		{name: "Empty", contentType: []string{""}, message: wrong},
		{name: "TextPlain", contentType: []string{"text/plain"}, message: wrong},
		{name: "Form", contentType: []string{"application/x-www-form-urlencoded"}, message: wrong},
		{name: "JSONSuffix", contentType: []string{"application/merge-patch+json"}, message: wrong},
		{name: "Malformed", contentType: []string{"application/json; charset"}, message: wrong},
		{name: "Twice", contentType: []string{"application/json", "application/json"}, message: wrong},
		{name: "OtherCharset", contentType: []string{"application/json; charset=latin1"}, message: "Content-Type application/json takes no parameter other than charset=utf-8"},
		{name: "OtherParameter", contentType: []string{"application/json; x=y"}, message: "Content-Type application/json takes no parameter other than charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
			for _, v := range tt.contentType {
				r.Header.Add("Content-Type", v)
			}
			err := DecodeJSON(r, &testRequest{})
			if tt.message == "" {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.message)
		})
	}
}

func TestC8_BodySize(t *testing.T) {
	t.Parallel()
	// body returns a valid JSON object of exactly n bytes.
	body := func(n int) string {
		const prefix, suffix = `{"name":"`, `"}`
		return prefix + strings.Repeat("a", n-len(prefix)-len(suffix)) + suffix
	}
	const tooLarge = "request body exceeds 524288 bytes"
	tests := []struct {
		name          string
		body          string
		contentLength int64 // 0 means the length of body
		unknownLength bool
		message       string
	}{
		{name: "AtLimit", body: body(MaxBodyBytes)},
		{name: "OneOver", body: body(MaxBodyBytes + 1), message: tooLarge},
		{name: "FarOver", body: body(4 * MaxBodyBytes), message: tooLarge},
		{name: "OverWithoutContentLength", body: body(MaxBodyBytes + 1), unknownLength: true, message: tooLarge},
		{name: "AtLimitWithoutContentLength", body: body(MaxBodyBytes), unknownLength: true},
		{name: "DeclaredOver", body: `{}`, contentLength: MaxBodyBytes + 1, message: tooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tt.body))
			r.Header.Set("Content-Type", "application/json")
			switch {
			case tt.unknownLength:
				r.ContentLength = -1
				r.Body = io.NopCloser(io.MultiReader(strings.NewReader(tt.body)))
			case tt.contentLength != 0:
				r.ContentLength = tt.contentLength
			}
			err := DecodeJSON(r, &testRequest{})
			if tt.message == "" {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.message)
		})
	}

	t.Run("MaxBytesReader", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body(100)))
		r.Header.Set("Content-Type", "application/json")
		r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 50)
		wantInvalid(t, DecodeJSON(r, &testRequest{}), tooLarge)
	})
	t.Run("Bytes", func(t *testing.T) {
		t.Parallel()
		wantInvalid(t, DecodeJSONBytes([]byte(body(MaxBodyBytes+1)), &testRequest{}), "message exceeds 524288 bytes")
		if err := DecodeJSONBytes([]byte(body(MaxBodyBytes)), &testRequest{}); err != nil {
			t.Fatalf("DecodeJSONBytes at the limit: %v", err)
		}
	})
	t.Run("ReadError", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Content-Type", "application/json")
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader([]byte(`{"na`)), errReader{}))
		wantInvalid(t, DecodeJSON(r, &testRequest{}), "request body could not be read")
	})
}

func TestC8_DestinationBug(t *testing.T) {
	t.Parallel()
	for name, dst := range map[string]any{
		"NonPointer": testRequest{},
		"NilPointer": (*testRequest)(nil),
		"Nil":        nil,
	} {
		err := DecodeJSONBytes([]byte(`{}`), dst)
		var e *Error
		if err == nil || errors.As(err, &e) {
			t.Errorf("%s: error = %v, want a plain error for a server bug", name, err)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestC8_Required(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fields  []Field
		message string
	}{
		{name: "None"},
		{name: "AllPresent", fields: []Field{{Path: "name", Present: true}, {Path: "queue_id", Present: true}}},
		{name: "OneMissing", fields: []Field{{Path: "name", Present: true}, {Path: "queue_id"}}, message: `missing required field "queue_id"`},
		{name: "TwoMissing", fields: []Field{{Path: "name"}, {Path: "body.capacity"}, {Path: "x", Present: true}}, message: `missing required fields "name", "body.capacity"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Required(tt.fields...)
			if tt.message == "" {
				if err != nil {
					t.Fatalf("Required: %v", err)
				}
				return
			}
			wantInvalid(t, err, tt.message)
		})
	}

	t.Run("WithDecode", func(t *testing.T) {
		t.Parallel()
		for body, message := range map[string]string{
			`{}`:                       `missing required fields "name", "from"`,
			`{"name":null,"from":"1"}`: `missing required field "name"`,
			`{"name":"a","from":"0"}`:  "",
		} {
			var dst testRequest
			if err := DecodeJSONBytes([]byte(body), &dst); err != nil {
				t.Fatalf("DecodeJSONBytes(%s): %v", body, err)
			}
			err := Required(Field{Path: "name", Present: dst.Name != nil}, Field{Path: "from", Present: dst.From != nil})
			if message == "" {
				if err != nil {
					t.Errorf("Required after %s: %v", body, err)
				}
				continue
			}
			wantInvalid(t, err, message)
		}
	})
}
