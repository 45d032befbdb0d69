// Package console holds the end-to-end tests of the web console (O-10): a
// real server, a real SDK consumer and a real headless Chromium driven with
// chromedp. One browser serves the whole test binary; each test gets its
// own browser context (cookies included).
package console
