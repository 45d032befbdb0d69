package console_test

// The test databases hold the schema of every module linked into the test
// binary (internal/testkit/testdb), so link them all.
import _ "github.com/orbitrun/orbit/modules/all"
