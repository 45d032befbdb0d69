package mysqld

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// isInitialised reports whether dir holds a server data directory. Both
// MariaDB and MySQL keep their system schema in the subdirectory "mysql".
func isInitialised(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "mysql"))
	return err == nil && fi.IsDir()
}

// ensureDataDir initialises dir unless it already holds a data directory.
// The data directory is built in a temporary sibling and renamed into place,
// so an interrupted initialisation never leaves a half-made directory behind
// that a later Start would reuse.
func ensureDataDir(ctx context.Context, bin string, fl flavor, dir, user string) error {
	if isInitialised(dir) {
		return nil
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("mysqld: data dir: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("mysqld: data dir %s is not empty and holds no database; remove it or choose another", dir)
	}

	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("mysqld: data dir: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".init-")
	if err != nil {
		return fmt.Errorf("mysqld: data dir: %w", err)
	}
	defer os.RemoveAll(tmp)

	// Concurrent bootstraps sharing /tmp collide on temporary table names,
	// so each gets its own tmpdir.
	scratch, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".scratch-")
	if err != nil {
		return fmt.Errorf("mysqld: data dir: %w", err)
	}
	defer os.RemoveAll(scratch)
	if err := chownTo(user, tmp, scratch); err != nil {
		return err
	}

	cmd, err := initCommand(ctx, bin, fl, tmp, scratch, user)
	if err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mysqld: initialise data dir with %s: %w\n%s", cmd.Path, err, tail(out, tailLines))
	}

	// Rename only replaces an empty directory; a concurrent Start that won
	// the race has already put its data directory in place.
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !isInitialised(dir) {
		return fmt.Errorf("mysqld: data dir: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if isInitialised(dir) {
			return nil
		}
		return fmt.Errorf("mysqld: data dir: %w", err)
	}
	return nil
}

// initCommand returns the command that creates the system tables in dir.
// MariaDB uses mariadb-install-db, which leaves root@localhost and
// root@127.0.0.1 without a password; MySQL uses mysqld --initialize-insecure,
// which creates root@localhost only (Start adds root@127.0.0.1).
func initCommand(ctx context.Context, bin string, fl flavor, dir, tmpDir, user string) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	switch fl {
	case flavorMariaDB:
		script, err := findInstallDB(bin)
		if err != nil {
			return nil, err
		}
		args := []string{
			"--no-defaults",
			"--basedir=" + filepath.Dir(filepath.Dir(bin)),
			"--datadir=" + dir,
			"--tmpdir=" + tmpDir,
			"--auth-root-authentication-method=normal",
			"--skip-test-db",
			"--innodb-log-file-size=" + innodbLogFileSize,
		}
		if user != "" {
			args = append(args, "--user="+user)
		}
		cmd = exec.CommandContext(ctx, script, args...)
	default:
		args := []string{
			"--no-defaults",
			"--initialize-insecure",
			"--datadir=" + dir,
			"--tmpdir=" + tmpDir,
			"--innodb-redo-log-capacity=" + innodbRedoLogCapacity,
			"--secure-file-priv=NULL",
			"--mysqlx=OFF",
		}
		if user != "" {
			args = append(args, "--user="+user)
		}
		cmd = exec.CommandContext(ctx, bin, args...)
	}
	cmd.SysProcAttr = sysProcAttr()
	// The script runs the server in bootstrap mode as its child: on
	// cancellation, kill the whole process group.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd, nil
}

// tailLines is how many lines of a log an error message quotes.
const tailLines = 30

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
