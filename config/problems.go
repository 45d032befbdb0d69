package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
)

// Problems gathers every problem of one config section for a Validate
// method, each message led by the key at fault (section.key), so that a
// bad file is reported whole rather than one error at a time.
type Problems struct {
	section string
	errs    *multierror.Error
	// positions holds the file:line of keys set by the file; a problem of
	// such a key starts with it.
	positions map[string]string
}

// NewProblems returns an empty list for section; with section "" keys are
// reported as given.
func NewProblems(section string) *Problems { return &Problems{section: section} }

// Add records a problem of key.
func (p *Problems) Add(key, format string, args ...any) {
	if p.section != "" {
		key = p.section + "." + key
	}
	pos := p.positions[key]
	if base, _, ok := strings.Cut(key, "["); ok && pos == "" {
		// An entry of a list is reported at the line of the list's key.
		pos = p.positions[base]
	}
	if pos != "" {
		key = pos + ": " + key
	}
	p.errs = multierror.Append(p.errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

// Positive records a problem unless d is above zero.
func (p *Problems) Positive(key string, d time.Duration) {
	if d <= 0 {
		p.Add(key, "must be positive, got %s", d)
	}
}

// AtLeastOne records a problem unless n is 1 or more.
func (p *Problems) AtLeastOne(key string, n int) {
	if n < 1 {
		p.Add(key, "must be at least 1, got %d", n)
	}
}

// Err returns the problems as one error, or nil when there are none.
func (p *Problems) Err() error { return p.errs.ErrorOrNil() }
