//go:build !race

package sdktest_test

// raceDetector reports whether the tests run with the race detector.
const raceDetector = false
