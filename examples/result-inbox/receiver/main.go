package receiver

import (
	"context"
	"errors"
	"io"
	"log/slog"
)

// ErrUsage is returned by Main for an unknown command.
var ErrUsage = errors.New("unknown command; use init, demo, consume or prune")

// Main runs one receiver command with configuration from the environment.
func Main(ctx context.Context, command string, out io.Writer, logger *slog.Logger) error {
	switch command {
	case "init":
		cfg, err := LoadConfig(false)
		if err != nil {
			return err
		}
		return Init(ctx, cfg, out)
	case "demo":
		cfg, err := LoadConfig(true)
		if err != nil {
			return err
		}
		return Demo(ctx, cfg, out, logger)
	case "consume":
		cfg, err := LoadConfig(true)
		if err != nil {
			return err
		}
		return Consume(ctx, cfg, out, logger)
	case "prune":
		cfg, err := LoadConfig(true)
		if err != nil {
			return err
		}
		return Prune(ctx, cfg, out)
	}
	return ErrUsage
}
