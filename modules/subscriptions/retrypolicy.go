package subscriptions

import (
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/orbitrun/orbit/internal/httpx"
)

// Bounds and defaults of a retry policy (K-4).
const (
	DefaultRetryInitialDelayMS = 1_000
	DefaultRetryMaxDelayMS     = 600_000
	DefaultRetryMultiplier     = 2.0
	maxRetryDelayMS            = 86_400_000
	minRetryMultiplier         = 1.0
	maxRetryMultiplier         = 10.0
)

// RetryPolicy is how long a delivery waits before it is claimable again
// after a NACK without delay_ms or after its lease ran out (K-4): the
// delay before the redelivery that follows attempt n is
// min(max, initial × multiplier^(n−1)), with full jitter.
type RetryPolicy struct {
	InitialDelayMS int64   `json:"initial_delay_ms"`
	MaxDelayMS     int64   `json:"max_delay_ms"`
	Multiplier     float64 `json:"multiplier"`
}

// DefaultRetryPolicy is the policy of a subscription created without one.
var DefaultRetryPolicy = RetryPolicy{
	InitialDelayMS: DefaultRetryInitialDelayMS, MaxDelayMS: DefaultRetryMaxDelayMS, Multiplier: DefaultRetryMultiplier,
}

// Delay returns the delay after attempt attempts (1 for the first lease)
// with full jitter: a uniformly random duration from zero to the policy's
// delay.
func (p RetryPolicy) Delay(attempts int) time.Duration {
	ceiling := p.ceiling(attempts)
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(ceiling.Milliseconds()+1)) * time.Millisecond
}

// ceiling is the delay before jitter: min(max, initial × multiplier^(attempts−1)).
func (p RetryPolicy) ceiling(attempts int) time.Duration {
	ms := float64(p.InitialDelayMS) * math.Pow(p.Multiplier, float64(max(attempts-1, 0)))
	if ms > float64(p.MaxDelayMS) || math.IsInf(ms, 0) || math.IsNaN(ms) {
		ms = float64(p.MaxDelayMS)
	}
	return time.Duration(ms) * time.Millisecond
}

// retryPolicyRequest is the retry_policy of a create or configure request:
// all three members are required.
type retryPolicyRequest struct {
	InitialDelayMS *delayMS `json:"initial_delay_ms"`
	MaxDelayMS     *delayMS `json:"max_delay_ms"`
	Multiplier     *float64 `json:"multiplier"`
}

// policy checks the request and returns the policy it asks for.
func (r *retryPolicyRequest) policy() (RetryPolicy, error) {
	if err := httpx.Required(
		httpx.Field{Path: "retry_policy.initial_delay_ms", Present: r.InitialDelayMS != nil},
		httpx.Field{Path: "retry_policy.max_delay_ms", Present: r.MaxDelayMS != nil},
		httpx.Field{Path: "retry_policy.multiplier", Present: r.Multiplier != nil},
	); err != nil {
		return RetryPolicy{}, err
	}
	p := RetryPolicy{InitialDelayMS: int64(*r.InitialDelayMS), MaxDelayMS: int64(*r.MaxDelayMS), Multiplier: *r.Multiplier}
	switch {
	case p.InitialDelayMS > p.MaxDelayMS:
		return RetryPolicy{}, httpx.Errorf(httpx.CodeInvalidArgument, "retry_policy.initial_delay_ms must not exceed retry_policy.max_delay_ms")
	case !(p.Multiplier >= minRetryMultiplier && p.Multiplier <= maxRetryMultiplier):
		return RetryPolicy{}, httpx.Errorf(httpx.CodeInvalidArgument, "retry_policy.multiplier must be %.1f to %.1f", minRetryMultiplier, maxRetryMultiplier)
	}
	return p, nil
}

// delayMS is a retry delay in milliseconds, 0 to 86,400,000, given as a
// JSON integer or as a canonical decimal string (C-10).
type delayMS int64

// errDelay completes a sentence that starts with the field's name.
var errDelay = &httpx.Error{Code: httpx.CodeInvalidArgument,
	Message: "must be an integer from 0 to 86400000 (milliseconds), as a JSON number or a canonical decimal string"}

// UnmarshalJSON accepts a JSON integer or a canonical decimal string.
func (d *delayMS) UnmarshalJSON(b []byte) error {
	var n uint64
	switch jsontext.Value(b).Kind() {
	case '"':
		s, err := jsontext.AppendUnquote(nil, b)
		if err != nil {
			return errDelay
		}
		if n, err = httpx.ParseUint64(string(s)); err != nil {
			return errDelay
		}
	case '0':
		var err error
		if n, err = strconv.ParseUint(string(b), 10, 64); err != nil {
			return errDelay
		}
	default:
		return errDelay
	}
	if n > maxRetryDelayMS {
		return errDelay
	}
	*d = delayMS(n)
	return nil
}

var _ json.Unmarshaler = (*delayMS)(nil)
