package httpx

import (
	"net/http"
	"testing"
)

func TestC7_CodeStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code Code
		want int
	}{
		{CodeInvalidArgument, http.StatusBadRequest},
		{CodeUnauthenticated, http.StatusUnauthorized},
		{CodePermissionDenied, http.StatusForbidden},
		{CodeNotFound, http.StatusNotFound},
		{CodeMethodNotAllowed, http.StatusMethodNotAllowed},
		{CodeStateConflict, http.StatusConflict},
		{CodeIdempotencyConflict, http.StatusConflict},
		{CodeSubscriptionLimit, http.StatusConflict},
		{CodeEventHistoryExpired, http.StatusGone},
		{CodeProtocolRequired, http.StatusUpgradeRequired},
		{CodeCapacityExceeded, http.StatusTooManyRequests},
		{CodeUnavailable, http.StatusServiceUnavailable},
		{CodeInternal, http.StatusInternalServerError},
		{Code("SOMETHING_ELSE"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(string(tt.code), func(t *testing.T) {
			t.Parallel()
			if got := tt.code.Status(); got != tt.want {
				t.Fatalf("%s.Status() = %d, want %d", tt.code, got, tt.want)
			}
		})
	}
}

func TestC7_Errorf(t *testing.T) {
	t.Parallel()
	e := Errorf(CodeStateConflict, "revision %q is not current", "3")
	if e.Code != CodeStateConflict || e.Message != `revision "3" is not current` {
		t.Fatalf("Errorf = %+v", e)
	}
	if got, want := e.Error(), `STATE_CONFLICT: revision "3" is not current`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
