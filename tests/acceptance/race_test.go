//go:build race

package acceptance_test

// raceEnabled reports whether the tests run with the race detector; the orbit
// binary a test builds is then built with it too, which reuses the packages
// already compiled for the test and checks the server for races as well.
const raceEnabled = true
