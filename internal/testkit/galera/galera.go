// Package galera starts a throwaway MariaDB Galera cluster on loopback, for
// the tests that must hold on a replicated database (N-6) and for fault
// tests that kill a node.
//
// Every node is a mariadbd started with internal/mysqld, with a data
// directory of its own under one temporary directory and free ports for SQL,
// group communication (gcomm), incremental state transfer (IST) and
// snapshot state transfer (SST). Node 0 bootstraps the cluster
// (--wsrep-new-cluster); the others join it and receive its data by rsync
// SST. It needs Debian's galera-4 (the provider library) and rsync; Start
// says what to install when either is missing. It runs as root too; the
// nodes then run as the system user mysql (or nobody where there is no
// mysql user), since the rsync daemon that receives a state transfer, when
// started by root, writes as nobody.
//
// Nodes are numbered from 0. Node 0 is the one to write through: the
// documented deployment writes through one node and keeps the others for
// failover and reads.
package galera

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orbitrun/orbit/internal/mysqld"
)

const (
	// DefaultNodes is the size of a cluster when Options.Nodes is 0.
	DefaultNodes = 3

	// syncTimeout bounds how long Start and Restart wait for the nodes to
	// be members of one primary component and synced.
	syncTimeout = 2 * time.Minute

	// gcacheSize keeps each node's write-set cache small; the default,
	// 128M, is preallocated on disk per node.
	gcacheSize = "64M"
)

// providerPaths are where distributions install the Galera 4 provider.
var providerPaths = []string{
	"/usr/lib/galera/libgalera_smm.so",
	"/usr/lib/libgalera_smm.so",
	"/usr/lib64/galera-4/libgalera_smm.so",
	"/usr/lib64/galera/libgalera_smm.so",
}

// installHint tells the user how to get what a cluster needs.
const installHint = "install galera-4 and rsync (Debian/Ubuntu: apt-get install -y galera-4 rsync), or run make test-galera as root"

// Options configures Start.
type Options struct {
	// Nodes is the number of nodes; zero means DefaultNodes.
	Nodes int

	// Dir holds the nodes' data directories and logs. Empty means a new
	// temporary directory, which Stop removes. A given Dir is left in place.
	Dir string
}

// Cluster is a running Galera cluster started by Start. Its methods are
// safe for concurrent use.
type Cluster struct {
	dir    string
	ownDir bool // dir was created by Start and is removed by Stop
	name   string
	user   string // system user of the nodes when running as root
	nodes  []*node
}

// node is one member of the cluster.
type node struct {
	index     int
	dataDir   string
	logFile   string
	sqlPort   int
	gcommPort int
	istPort   int
	sstPort   int

	mu  sync.Mutex     // serialises starting and stopping the node
	srv *mysqld.Server // nil while the node is not running
}

// Start starts a cluster of opts.Nodes nodes: node 0 bootstraps it, then
// the others join one after the other. It returns when every node is a
// synced member of a primary component of that size, or fails with the
// last lines of the log of the node at fault. On 2 cores, three nodes take
// about 20 seconds when the machine is idle, up to a minute under load (each
// joiner's rsync SST runs a slow shell script). The caller must call Stop.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	n := opts.Nodes
	if n == 0 {
		n = DefaultNodes
	}
	if n < 1 {
		return nil, fmt.Errorf("galera: Options.Nodes is %d; want at least 1", n)
	}
	provider, err := findProvider()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		return nil, fmt.Errorf("galera: no rsync in PATH, needed for state transfers: %s", installHint)
	}

	c := &Cluster{dir: opts.Dir, name: "orbit-test-" + randomHex(4)}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "orbit-galera-"); err != nil {
			return nil, fmt.Errorf("galera: %w", err)
		}
		c.ownDir = true
	} else if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("galera: %w", err)
	}
	if c.user, err = nodeUser(c.dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = c.Stop(ctx)
		}
	}()

	ports, err := freePorts(4 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		c.nodes = append(c.nodes, &node{
			index:     i,
			dataDir:   filepath.Join(c.dir, fmt.Sprintf("node%d", i)),
			logFile:   filepath.Join(c.dir, fmt.Sprintf("node%d.log", i)),
			sqlPort:   ports[4*i],
			gcommPort: ports[4*i+1],
			istPort:   ports[4*i+2],
			sstPort:   ports[4*i+3],
		})
	}
	if err := c.startNode(ctx, c.nodes[0], provider, startBootstrap); err != nil {
		return nil, err
	}
	if err := c.waitSynced(ctx, 1, c.nodes[0]); err != nil {
		return nil, err
	}
	// The joiners start together and receive node 0's data by rsync SST,
	// one after the other, since a donor serves one joiner at a time.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, nd := range c.nodes[1:] {
		wg.Go(func() { errs[i+1] = c.startNode(ctx, nd, provider, startJoin) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.waitSynced(ctx, n, c.nodes...); err != nil {
		return nil, err
	}
	return c, nil
}

// Size returns the number of nodes, running or not.
func (c *Cluster) Size() int { return len(c.nodes) }

// DSN returns a go-sql-driver/mysql DSN for root over TCP to database
// (which may be empty) on node i. internal/db.Open adds Orbit's session
// settings.
func (c *Cluster) DSN(i int, database string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true&loc=UTC", c.nodes[i].sqlPort, database)
}

// Addr returns node i's SQL address, host:port.
func (c *Cluster) Addr(i int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.nodes[i].sqlPort))
}

// Running reports whether node i runs: started and neither killed nor
// stopped since.
func (c *Cluster) Running(i int) bool {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.srv != nil
}

// LogFile returns the path of node i's error log.
func (c *Cluster) LogFile(i int) string { return c.nodes[i].logFile }

// Kill ends node i with SIGKILL, as a crash would, and waits until the
// process has exited. The other nodes stay a primary component as long as
// they are a majority. Restart brings the node back. Kill on a node that is
// not running does nothing.
func (c *Cluster) Kill(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv != nil {
		nd.srv.Kill()
		nd.srv = nil
	}
}

// StopNode shuts node i down cleanly (SIGTERM): it leaves the cluster, which
// shrinks by one. Restart brings it back.
func (c *Cluster) StopNode(ctx context.Context, i int) error {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv == nil {
		return nil
	}
	err := nd.srv.Stop(ctx)
	nd.srv = nil
	if err != nil {
		return fmt.Errorf("galera: node %d: %w", i, err)
	}
	return nil
}

// Restart starts node i again after Kill or StopNode, on the same data
// directory and ports, and waits until it has rejoined the running nodes
// and is synced. A node that was killed receives a full state transfer
// (SST) from a running node; one that was stopped cleanly catches up with
// IST when the donor still has the write sets. At least one other node must
// be running: Restart never bootstraps a new cluster. Restart on a running
// node does nothing.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	provider, err := findProvider()
	if err != nil {
		return err
	}
	running := c.running()
	for _, nd := range running {
		if nd.index == i {
			return nil
		}
	}
	if len(running) == 0 {
		return fmt.Errorf("galera: restart node %d: no node is running to join", i)
	}
	nd := c.nodes[i]
	if err := c.startNode(ctx, nd, provider, startJoin); err != nil {
		return err
	}
	return c.waitSynced(ctx, len(running)+1, append(running, nd)...)
}

// Stop shuts every running node down, all at once, and removes the
// cluster's directory if Start created it. It is idempotent.
func (c *Cluster) Stop(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range c.nodes {
		wg.Go(func() {
			if err := c.StopNode(ctx, i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("galera: %w", err))
		}
	}
	return errors.Join(errs...)
}

// WaitPrimary waits, for at most two minutes or until ctx ends, until every
// running node is a synced member of a primary component of size nodes.
// After Kill the survivors go on counting the dead node until they suspect
// it, about 5 seconds (evs.suspect_timeout); wait for size-1 before
// measuring anything that needs the smaller cluster.
func (c *Cluster) WaitPrimary(ctx context.Context, size int) error {
	return c.waitSynced(ctx, size, c.running()...)
}

// Status is what a node says about its membership.
type Status struct {
	ClusterSize  int    // wsrep_cluster_size
	ClusterState string // wsrep_cluster_status: Primary, non-Primary or Disconnected
	LocalState   string // wsrep_local_state_comment: Synced, Donor/Desynced, Joining, ...
	Ready        bool   // wsrep_ready: the node accepts queries
}

// NodeStatus asks node i for its wsrep status.
func (c *Cluster) NodeStatus(ctx context.Context, i int) (Status, error) {
	db := mysqld.QuietDB("tcp", c.Addr(i))
	defer db.Close()
	return status(ctx, db)
}

// running returns the nodes that run.
func (c *Cluster) running() []*node {
	var out []*node
	for _, nd := range c.nodes {
		nd.mu.Lock()
		if nd.srv != nil {
			out = append(out, nd)
		}
		nd.mu.Unlock()
	}
	return out
}

// startMode says how a node joins.
type startMode int

const (
	startBootstrap startMode = iota // found a new cluster
	startJoin                       // join the running nodes: IST, or SST by rsync
)

// startNode starts nd.
func (c *Cluster) startNode(ctx context.Context, nd *node, provider string, mode startMode) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.srv != nil {
		return nil
	}
	args := c.args(nd, provider)
	if mode == startBootstrap {
		args = append(args, "--wsrep-new-cluster")
	}
	srv, err := mysqld.Start(ctx, mysqld.Options{
		DataDir: nd.dataDir,
		Port:    nd.sqlPort,
		LogFile: nd.logFile,
		Args:    args,
		User:    c.user,
		// Joiners receive node 0's data by SST; a node restarted after a
		// kill or stop keeps its own directory.
		NoInit: mode != startBootstrap,
		// A joiner accepts connections once its SST is done, and a donor
		// serves one joiner at a time: the second joiner of Start waits
		// for both transfers, over a minute on 2 cores under load.
		StartTimeout: syncTimeout,
	})
	if err != nil {
		return fmt.Errorf("galera: start node %d: %w", nd.index, err)
	}
	nd.srv = srv
	return nil
}

// args returns the wsrep options of nd.
func (c *Cluster) args(nd *node, provider string) []string {
	var members []string
	for _, m := range c.nodes {
		members = append(members, fmt.Sprintf("127.0.0.1:%d", m.gcommPort))
	}
	providerOpts := strings.Join([]string{
		"base_host=127.0.0.1",
		fmt.Sprintf("base_port=%d", nd.gcommPort),
		fmt.Sprintf("gmcast.listen_addr=tcp://127.0.0.1:%d", nd.gcommPort),
		fmt.Sprintf("ist.recv_addr=127.0.0.1:%d", nd.istPort),
		"gcache.size=" + gcacheSize,
	}, ";")
	return []string{
		"--wsrep-on=ON",
		"--wsrep-provider=" + provider,
		"--wsrep-cluster-name=" + c.name,
		"--wsrep-cluster-address=gcomm://" + strings.Join(members, ","),
		fmt.Sprintf("--wsrep-node-name=node%d", nd.index),
		fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", nd.gcommPort),
		fmt.Sprintf("--wsrep-node-incoming-address=127.0.0.1:%d", nd.sqlPort),
		"--wsrep-sst-method=rsync",
		fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", nd.sstPort),
		"--wsrep-provider-options=" + providerOpts,
		"--binlog-format=ROW",
		"--default-storage-engine=InnoDB",
		"--innodb-autoinc-lock-mode=2",
		// Every DDL statement runs on every node in total order (TOI), and
		// each test database is some 25 CREATE TABLE statements: tables in
		// the system tablespace cost no file creation and no fsync.
		"--innodb-file-per-table=OFF",
	}
}

// waitSynced waits until each of nodes reports a primary component of size
// members and is synced and ready.
func (c *Cluster) waitSynced(ctx context.Context, size int, nodes ...*node) error {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	for _, nd := range nodes {
		db := mysqld.QuietDB("tcp", c.Addr(nd.index))
		var (
			st  Status
			err error
		)
		for {
			st, err = status(ctx, db)
			if err == nil && st.ClusterSize == size && st.ClusterState == "Primary" && st.LocalState == "Synced" && st.Ready {
				break
			}
			select {
			case <-ctx.Done():
				db.Close()
				return fmt.Errorf("galera: node %d not synced in a cluster of %d: %w (status %+v, last error: %v)\n--- last lines of %s ---\n%s",
					nd.index, size, ctx.Err(), st, err, nd.logFile, logTail(nd.logFile))
			case <-time.After(100 * time.Millisecond):
			}
		}
		db.Close()
	}
	return nil
}

// status reads the wsrep status variables.
func status(ctx context.Context, db *sql.DB) (Status, error) {
	rows, err := db.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
		('wsrep_cluster_size', 'wsrep_cluster_status', 'wsrep_local_state_comment', 'wsrep_ready')`)
	if err != nil {
		return Status{}, err
	}
	defer rows.Close()
	var st Status
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return Status{}, err
		}
		switch strings.ToLower(name) {
		case "wsrep_cluster_size":
			st.ClusterSize, _ = strconv.Atoi(value)
		case "wsrep_cluster_status":
			st.ClusterState = value
		case "wsrep_local_state_comment":
			st.LocalState = value
		case "wsrep_ready":
			st.Ready = value == "ON"
		}
	}
	return st, rows.Err()
}

// nodeUser returns the system user the nodes run as when this process runs
// as root, and gives it dir; it returns "" otherwise.
func nodeUser(dir string) (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return "", fmt.Errorf("galera: neither user mysql nor nobody exists to run the nodes as: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return "", fmt.Errorf("galera: %w", err)
	}
	return u.Username, nil
}

// findProvider returns the path of the Galera 4 provider library.
func findProvider() (string, error) {
	for _, p := range providerPaths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("galera: no provider library (%s): %s", strings.Join(providerPaths, ", "), installHint)
}

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago; all are held at once, so none repeats.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("galera: pick a port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logTail returns the last lines of a node's error log.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(cannot read error log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	const n = 30
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// randomHex returns n random bytes as lowercase hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
