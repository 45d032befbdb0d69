package mysqld

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// installHint tells the user how to get a server binary.
const installHint = "install mariadb-server (Debian/Ubuntu: apt-get install -y mariadb-server) or set ORBIT_TEST_MYSQL_DSN"

// serverNames are the server binaries FindServer looks for, in order.
var serverNames = []string{"mariadbd", "mysqld"}

// serverDirs are searched after PATH; distributions put the server in sbin,
// which is often not in PATH for ordinary users.
var serverDirs = []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"}

// FindServer returns the path of the MariaDB or MySQL server binary. It looks
// for mariadbd, then mysqld, first in PATH and then in /usr/sbin,
// /usr/local/sbin and /usr/local/mysql/bin. When none exists, the error says
// what to install.
func FindServer() (string, error) {
	return findServer(serverDirs)
}

func findServer(dirs []string) (string, error) {
	for _, name := range serverNames {
		if p, err := exec.LookPath(name); err == nil {
			return filepath.Abs(p)
		}
		for _, dir := range dirs {
			p := filepath.Join(dir, name)
			if isExecutable(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("mysqld: no mariadbd or mysqld found in PATH or %s: %s",
		strings.Join(dirs, ", "), installHint)
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// flavor is the server family; the two differ in how a data directory is
// initialised and in a few options.
type flavor int

const (
	flavorMariaDB flavor = iota
	flavorMySQL
)

// detectFlavor runs the server with --version. MariaDB says so in its version
// string; anything else is taken to be MySQL. On Debian, mysqld is a link to
// mariadbd, so the name alone does not tell.
func detectFlavor(bin string) (flavor, error) {
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("mysqld: %s --version: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	if strings.Contains(string(out), "MariaDB") {
		return flavorMariaDB, nil
	}
	return flavorMySQL, nil
}

// findInstallDB returns the MariaDB script that creates the system tables.
// It is looked for beside the server first, so that a server and its script
// come from the same installation.
func findInstallDB(bin string) (string, error) {
	base := filepath.Dir(filepath.Dir(bin))
	dirs := []string{filepath.Dir(bin), filepath.Join(base, "bin"), filepath.Join(base, "scripts")}
	for _, name := range []string{"mariadb-install-db", "mysql_install_db"} {
		for _, dir := range dirs {
			p := filepath.Join(dir, name)
			if isExecutable(p) {
				return p, nil
			}
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("mysqld: mariadb-install-db not found beside " + bin + " or in PATH: " + installHint)
}
