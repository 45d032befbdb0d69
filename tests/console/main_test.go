package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orbitrun/orbit/internal/testkit/testdb"
)

// browser is the one headless Chromium of the test binary.
var browser context.Context

// browserNames are the executables tried, in order.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}

func TestMain(m *testing.M) {
	path := ""
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		fmt.Fprintln(os.Stderr, "tests/console: no Chromium found: install it (Debian/Ubuntu: sudo apt-get install -y chromium; `make test` does so as root) — the console's end-to-end tests need a real browser")
		os.Exit(1)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests may run as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "tests/console: start %s: %v\n", path, err)
		cancelBrowser()
		cancelAlloc()
		os.Exit(1)
	}
	browser = ctx
	code := testdb.Run(m)
	cancelBrowser()
	cancelAlloc()
	os.Exit(testdb.CheckLeaks(code))
}
