package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	orbit "github.com/orbitrun/orbit/sdk/go"
)

// checkOutputPath reports why path cannot receive a credentials file: it
// exists already, its directory is missing, or others may read the
// directory. It is called before anything is created.
func checkOutputPath(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("--output: %s already exists; refusing to overwrite a credentials file", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--output: %w", err)
	}
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--output: directory %s: %w (create it with: mkdir -p %s && chmod 700 %s)", dir, err, dir, dir)
	}
	if !info.IsDir() {
		return fmt.Errorf("--output: %s is not a directory", dir)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("--output: directory %s is accessible to other users (mode %o); run: chmod 700 %s", dir, info.Mode().Perm(), dir)
	}
	return nil
}

// writeCredentialsFile writes f to path with mode 0600, failing if the file
// exists. The format is the SDK's (orbit.Credentials), which the SDK and the
// receiver read.
func writeCredentialsFile(path string, f *orbit.Credentials) error {
	body, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	if _, err := out.Write(append(body, '\n')); err != nil {
		out.Close()
		os.Remove(path)
		return fmt.Errorf("--output: %w", err)
	}
	if err := out.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("--output: %w", err)
	}
	return nil
}

// ReadCredentialsFile reads a credentials file as it is, without the
// environment overrides and checks of orbit.LoadCredentials.
func ReadCredentialsFile(path string) (*orbit.Credentials, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f orbit.Credentials
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}
