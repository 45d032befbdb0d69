package httpx

import (
	"testing"
)

func TestC14_CanonicalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "SortedKeys", in: `{"b":1,"a":2}`, want: `{"a":2,"b":1}`},
		{name: "NestedSortedKeys", in: `{"z":{"y":1,"x":[{"d":1,"c":2}]},"a":null}`, want: `{"a":null,"z":{"x":[{"c":2,"d":1}],"y":1}}`},
		{name: "Whitespace", in: " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\" : { } }\n", want: `{"a":[1,2],"b":{}}`},
		{name: "ArrayOrderKept", in: `[3,1,2]`, want: `[3,1,2]`},
		{name: "Scalar", in: `"x"`, want: `"x"`},
		{name: "NumbersKeepTheirText", in: `{"a":1.0,"b":1e3,"c":-0,"d":100000000000000000000001,"e":0.1000,"f":1E+2}`, want: `{"a":1.0,"b":1e3,"c":-0,"d":100000000000000000000001,"e":0.1000,"f":1E+2}`},
		{name: "BigIntegerNotRounded", in: `{"n":9007199254740993}`, want: `{"n":9007199254740993}`},
		{name: "UnnecessaryEscapesRemoved", in: `{"\u0061":"\u00e9\/\u0041"}`, want: `{"a":"é/A"}`},
		{name: "ShortEscapes", in: `{"a":"\u000a\u0009\u0008\u000c\u000d\u0022\u005c"}`, want: `{"a":"\n\t\b\f\r\"\\"}`},
		{name: "ControlCharacterEscaped", in: `{"a":"\u001f"}`, want: `{"a":"\u001f"}`},
		{name: "HTMLNotEscaped", in: `{"a":"<&>\u2028"}`, want: "{\"a\":\"<&>\u2028\"}"},
		{name: "KeysInUTF16Order", in: "{\"\U0001F600\":1,\"\uFB33\":2,\"b\":3}", want: "{\"b\":3,\"\U0001F600\":1,\"\uFB33\":2}"},
		{name: "EscapedKeySortedByValue", in: `{"b":1,"\u0061":2}`, want: `{"a":2,"b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := CanonicalJSON([]byte(tt.in))
			if err != nil {
				t.Fatalf("CanonicalJSON: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("CanonicalJSON = %s, want %s", got, tt.want)
			}
			again, err := CanonicalJSON(got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("CanonicalJSON is not idempotent: %s, %v", again, err)
			}
		})
	}

	t.Run("SameContentSameBytes", func(t *testing.T) {
		t.Parallel()
		a, errA := CanonicalJSON([]byte(`{"name":"object-results","types":["task.failed"],"max_pending":100}`))
		b, errB := CanonicalJSON([]byte("{ \"max_pending\": 100,\n \"types\": [\"task.failed\"], \"n\\u0061me\": \"object-results\" }"))
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Fatalf("canonical forms differ: %s (%v) and %s (%v)", a, errA, b, errB)
		}
	})

	invalid := []struct {
		name    string
		in      string
		message string
	}{
		{name: "DuplicateKey", in: `{"a":1,"a":2}`, message: `duplicate field "a"`},
		{name: "DuplicateNestedKey", in: `{"a":{"b":1,"b":2}}`, message: `duplicate field "a.b"`},
		{name: "DuplicateAfterUnescaping", in: `{"a":1,"\u0061":2}`, message: `duplicate field "a"`},
		{name: "InvalidUTF8", in: "{\"a\":\"\xff\"}", message: `field "a" contains invalid UTF-8`},
		{name: "TrailingValue", in: `{} {}`, message: `input has data after the JSON value`},
		{name: "TrailingGarbage", in: `1 x`, message: `input has data after the JSON value`},
		{name: "Truncated", in: `{"a":`, message: `input is truncated JSON`},
		{name: "Malformed", in: `{"a" 1}`, message: `input is not valid JSON in field "a" (at byte 5)`},
		{name: "Empty", in: ``, message: `input is empty`},
		{name: "OnlyWhitespace", in: " \n", message: `input is empty`},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := CanonicalJSON([]byte(tt.in))
			wantInvalid(t, err, tt.message)
		})
	}
}
