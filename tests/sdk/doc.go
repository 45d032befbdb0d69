// Package sdk holds the tests of the Go SDK (sdk/go) against a real
// Orbit server: every management method of the SDK over HTTP, on a fresh
// database per test, with the server's own replies. The SDK module cannot
// import the platform, so these tests live here; the package has no code
// of its own.
package sdk
