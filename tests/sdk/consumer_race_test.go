//go:build race

package sdk_test

// raceDetector reports whether the tests run with the race detector; the
// orbit binary a test builds is then built with it too, which reuses the
// packages already compiled for the test and checks the server as well.
const raceDetector = true
