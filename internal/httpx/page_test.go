package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestC8_ReadOptionalJSON(t *testing.T) {
	t.Parallel()
	type reason struct {
		Reason *string `json:"reason"`
	}
	request := func(body, contentType string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/tasks/x:cancel", strings.NewReader(body))
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		return r
	}

	t.Run("EmptyBodyWithoutContentTypeIsAnEmptyObject", func(t *testing.T) {
		t.Parallel()
		var dst reason
		raw, err := ReadOptionalJSON(request("", ""), &dst)
		if err != nil || string(raw) != "{}" || dst.Reason != nil {
			t.Fatalf("raw %q, reason %v, err %v; want {}, nil, nil", raw, dst.Reason, err)
		}
	})
	t.Run("EmptyBodyWithJSONContentType", func(t *testing.T) {
		t.Parallel()
		raw, err := ReadOptionalJSON(request("", "application/json"), &reason{})
		if err != nil || string(raw) != "{}" {
			t.Fatalf("raw %q, err %v; want {} and nil", raw, err)
		}
	})
	t.Run("EmptyBodyWithOtherContentType", func(t *testing.T) {
		t.Parallel()
		_, err := ReadOptionalJSON(request("", "text/plain"), &reason{})
		wantInvalid(t, err, "Content-Type must be application/json")
	})
	t.Run("BodyIsReadAsByReadJSON", func(t *testing.T) {
		t.Parallel()
		var dst reason
		raw, err := ReadOptionalJSON(request(`{"reason":"r"}`, "application/json"), &dst)
		if err != nil || string(raw) != `{"reason":"r"}` || dst.Reason == nil || *dst.Reason != "r" {
			t.Fatalf("raw %q, err %v; want the body and reason r", raw, err)
		}
		_, err = ReadOptionalJSON(request(`{"reason":"r"}`, ""), &reason{})
		wantInvalid(t, err, "Content-Type must be application/json")
	})
	t.Run("EmptyBodyStillRejectsAQuery", func(t *testing.T) {
		t.Parallel()
		r := httptest.NewRequest(http.MethodPost, "/v1/tasks/x:cancel?a=1", nil)
		if _, err := ReadOptionalJSON(r, &reason{}); err == nil {
			t.Fatal("a query parameter was accepted")
		}
	})
	t.Run("ReadJSONStillRequiresABody", func(t *testing.T) {
		t.Parallel()
		if _, err := ReadJSON(request("", ""), &reason{}); err == nil {
			t.Fatal("ReadJSON accepted an empty body")
		}
	})
}
