package workers

import (
	"testing"

	"github.com/orbitrun/orbit/internal/testkit/wstest"
)

// clientBodies returns a fresh body of every frame a worker may send, by
// frame type: what the session decodes.
func clientBodies() map[string]any {
	return map[string]any{
		typeHello:    new(helloBody),
		typeComplete: new(completeBody),
		typeRelease:  new(releaseBody),
		typePing:     new(struct{}),
	}
}

// FuzzWorkersFrame (F-3): any text a worker sends is either a frame with a
// body of its type or a 400 INVALID_ARGUMENT, never a panic.
func FuzzWorkersFrame(f *testing.F) {
	wstest.FuzzClientFrames(f, []string{
		`{"protocol_version":"1","type":"worker.hello","message_id":"0123456789abcdef0123456789abcdef","body":{"queue_id":"0123456789abcdef0123456789abcdef","capacity":2,"worker_name":"w","resume":[]}}`,
		`{"protocol_version":"1","type":"task.complete","message_id":"0123456789abcdef0123456789abcdef","body":{"task_id":"0123456789abcdef0123456789abcdef","attempt_id":"0123456789abcdef0123456789abcdef","epoch":"1","lease_secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","outcome":"SUCCEEDED","result":{"ok":true}}}`,
		`{"protocol_version":"1","type":"task.complete","message_id":"0123456789abcdef0123456789abcdef","body":{"outcome":"FAILED","error":{"code":"X","message":"m","retryable":false}}}`,
		`{"protocol_version":"1","type":"task.release","message_id":"0123456789abcdef0123456789abcdef","body":{"reason":"shutdown","epoch":"01"}}`,
		`{"protocol_version":"1","type":"worker.ping","message_id":"0123456789abcdef0123456789abcdef","body":{}}`,
	}, clientBodies)
}
