package tasks

import "context"

// The names below expose the package's internals to its external tests.

const MaxReasonChars = maxReasonChars

type Snapshot = taskSnapshot

// AttemptRecover exposes attemptRecover to the tests.
func (s *Store) AttemptRecover(ctx context.Context, batch int) ([]Event, error) {
	return s.attemptRecover(ctx, batch)
}
