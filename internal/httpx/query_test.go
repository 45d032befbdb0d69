package httpx

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestC9_Query(t *testing.T) {
	t.Parallel()
	list := []string{"queue_id", "limit", "cursor"}
	tests := []struct {
		name    string
		query   string
		allowed []string
		want    map[string]string
		message string
	}{
		{name: "None", query: "", allowed: list, want: map[string]string{}},
		{name: "AllAllowed", query: "queue_id=q&limit=5&cursor=c", allowed: list, want: map[string]string{"queue_id": "q", "limit": "5", "cursor": "c"}},
		{name: "Escaped", query: "cursor=a%2Bb", allowed: list, want: map[string]string{"cursor": "a+b"}},
		{name: "NoneAllowedNoneGiven", query: "", want: map[string]string{}},
		{name: "NoneAllowed", query: "limit=5", message: `unknown query parameter "limit"`},
		{name: "Unknown", query: "queue_id=q&state=PENDING", allowed: list, message: `unknown query parameter "state"`},
		{name: "OtherCase", query: "Limit=5", allowed: list, message: `unknown query parameter "Limit"`},
		{name: "UnknownFirstInOrder", query: "zz=1&aa=1", allowed: list, message: `unknown query parameter "aa"`},
		{name: "LongUnknownNotRepeated", query: "0123456789abcdef0123456789abcdef0=1", allowed: list, message: "unknown query parameter"},
		{name: "OddUnknownNotRepeated", query: "a%20b=1", allowed: list, message: "unknown query parameter"},
		{name: "EmptyName", query: "=1", allowed: list, message: "unknown query parameter"},
		{name: "Repeated", query: "limit=5&limit=5", allowed: list, message: `query parameter "limit" must be given at most once`},
		{name: "EmptyValue", query: "cursor=", allowed: list, message: `query parameter "cursor" must not be empty`},
		{name: "NoValue", query: "cursor", allowed: list, message: `query parameter "cursor" must not be empty`},
		{name: "Semicolon", query: "limit=5;cursor=c", allowed: list, message: "malformed query string"},
		{name: "BadEscape", query: "limit=%zz", allowed: list, message: "malformed query string"},
		{name: "OnlyAmpersand", query: "&", allowed: list, message: "malformed query string"},
		{name: "TrailingAmpersand", query: "limit=5&", allowed: list, message: "malformed query string"},
		{name: "DoubleAmpersand", query: "limit=5&&cursor=c", allowed: list, message: "malformed query string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodGet, "/v1/subscriptions", nil)
			r.URL.RawQuery = tt.query
			got, err := Query(r, tt.allowed...)
			if tt.message != "" {
				wantInvalid(t, err, tt.message)
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("Query = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// A bare '?' carries no parameter but is not the absence of a query: it is
// refused like the other malformed queries, as on WebSocket upgrades.
func TestC9_BareQuestionMarkRefused(t *testing.T) {
	t.Parallel()
	for _, allowed := range [][]string{nil, {"limit"}} {
		r := httptest.NewRequest(http.MethodGet, "/v1/subscriptions?", nil)
		if !r.URL.ForceQuery || r.URL.RawQuery != "" {
			t.Fatalf("URL %#v does not end in a bare '?'", r.URL)
		}
		_, err := Query(r, allowed...)
		wantInvalid(t, err, "malformed query string")
	}
}

func TestC16_Limit(t *testing.T) {
	t.Parallel()
	const bad = `query parameter "limit" must be an integer from 1 to 100 without sign or leading zero`
	tests := []struct {
		name  string
		query map[string]string
		want  int
		ok    bool
	}{
		{name: "Default", query: map[string]string{}, want: 20, ok: true},
		{name: "DefaultWithOthers", query: map[string]string{"cursor": "c"}, want: 20, ok: true},
		{name: "One", query: map[string]string{"limit": "1"}, want: 1, ok: true},
		{name: "Hundred", query: map[string]string{"limit": "100"}, want: 100, ok: true},
		{name: "Zero", query: map[string]string{"limit": "0"}},
		{name: "OverMax", query: map[string]string{"limit": "101"}},
		{name: "Huge", query: map[string]string{"limit": "18446744073709551616"}},
		{name: "LeadingZero", query: map[string]string{"limit": "020"}},
		{name: "Sign", query: map[string]string{"limit": "+20"}},
		{name: "Negative", query: map[string]string{"limit": "-1"}},
		{name: "Fraction", query: map[string]string{"limit": "20.0"}},
		{name: "Word", query: map[string]string{"limit": "all"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Limit(tt.query)
			if !tt.ok {
				wantInvalid(t, err, bad)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Limit = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
