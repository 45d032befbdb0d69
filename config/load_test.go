package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type testSection struct {
	LeaseDuration time.Duration `yaml:"lease_duration"`
	Capacity      int           `yaml:"capacity"`
	Nested        struct {
		Name string `yaml:"name"`
	} `yaml:"nested"`
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orbit.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func noEnv(string) (string, bool) { return "", false }

func TestLoadDefaultsWithoutFile(t *testing.T) {
	t.Parallel()
	core := Default()
	sec := &testSection{Capacity: 4}
	if _, err := Load(Source{File: "", LookupEnv: noEnv}, core, map[string]any{"tasks": sec}); err != nil {
		t.Fatal(err)
	}
	if core.Server.Listen != DefaultListen || sec.Capacity != 4 || core.Server.RequestDeadline != DefaultRequestDeadline {
		t.Fatalf("defaults lost: %+v %+v", core.Server, sec)
	}
}

func TestLoadFileValues(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "server:\n  listen: 127.0.0.1:9999\n  modules: [admin, tasks]\ntasks:\n  lease_duration: 2s\n  nested:\n    name: x\n")
	core := Default()
	sec := &testSection{}
	if _, err := Load(Source{File: path, LookupEnv: noEnv}, core, map[string]any{"tasks": sec}); err != nil {
		t.Fatal(err)
	}
	if core.Server.Listen != "127.0.0.1:9999" || sec.LeaseDuration != 2*time.Second || sec.Nested.Name != "x" {
		t.Fatalf("got %+v %+v", core.Server, sec)
	}
	if strings.Join(core.Server.Modules, ",") != "admin,tasks" {
		t.Fatalf("modules = %v", core.Server.Modules)
	}
}

func TestLoadReportsEveryUnknownKeyWithLine(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "server:\n  listne: x\n  Listen: y\nbogus: 1\ntasks:\n  nested:\n    nmae: z\n")
	_, err := Load(Source{File: path, LookupEnv: noEnv}, Default(), map[string]any{"tasks": &testSection{}})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{`:2: unknown key "server.listne"`, `:3: unknown key "server.Listen"`, `:4: unknown key "bogus"`, `:7: unknown key "tasks.nested.nmae"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestLoadReportsEveryTypeError(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "database:\n  max_open_conns: many\ntasks:\n  lease_duration: soon\n")
	_, err := Load(Source{File: path, LookupEnv: noEnv}, Default(), map[string]any{"tasks": &testSection{}})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"max_open_conns", "lease_duration"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestLoadPrecedenceFlagOverEnvOverFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "server:\n  listen: 127.0.0.1:1111\n  request_deadline: 3s\ndatabase:\n  dsn: file\n")
	env := map[string]string{
		"ORBIT_SERVER_LISTEN":           "127.0.0.1:2222",
		"ORBIT_SERVER_REQUEST_DEADLINE": "4s",
		"ORBIT_MYSQL_DSN":               "alias",
		"ORBIT_TASKS_NESTED_NAME":       "from-env",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.String("listen", "", "")
	if err := flags.Parse([]string{"--listen", "127.0.0.1:3333"}); err != nil {
		t.Fatal(err)
	}
	core := Default()
	sec := &testSection{}
	src := Source{File: path, Flags: flags, FlagKeys: map[string]string{"server.listen": "listen"}, LookupEnv: lookup}
	if _, err := Load(src, core, map[string]any{"tasks": sec}); err != nil {
		t.Fatal(err)
	}
	if core.Server.Listen != "127.0.0.1:3333" {
		t.Errorf("flag lost: listen = %s", core.Server.Listen)
	}
	if core.Server.RequestDeadline != 4*time.Second {
		t.Errorf("env lost: deadline = %s", core.Server.RequestDeadline)
	}
	if core.Database.DSN != "alias" {
		t.Errorf("ORBIT_MYSQL_DSN alias lost: dsn = %s", core.Database.DSN)
	}
	if sec.Nested.Name != "from-env" {
		t.Errorf("module env lost: %+v", sec)
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Server.Listen = ""
	c.Log.Level = "loud"
	c.Database.MaxOpenConns = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"server.listen", "log.level", "database.max_open_conns"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestLoadOneOverrideKeepsTheSectionsOtherFileKeys(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "server:\n  listen: 127.0.0.1:1111\n  request_deadline: 3s\ndatabase:\n  dsn: from-file\n")
	env := map[string]string{"ORBIT_SERVER_LISTEN": "127.0.0.1:2222", "ORBIT_DATABASE_MIGRATE": "true"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	core := Default()
	if _, err := Load(Source{File: path, LookupEnv: lookup}, core, nil); err != nil {
		t.Fatal(err)
	}
	if core.Server.Listen != "127.0.0.1:2222" || core.Server.RequestDeadline != 3*time.Second {
		t.Errorf("server = %+v, want listen from env and deadline from file", core.Server)
	}
	if core.Database.DSN != "from-file" || !core.Database.Migrate {
		t.Errorf("database = %+v, want dsn from file and migrate from env", core.Database)
	}
}

func TestValidate_MalformedDSNFromEnvironmentHasNoLine(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "database:\n  dsn: \"orbit:pw@tcp(127.0.0.1:3306)/orbit\"\n")
	env := func(name string) (string, bool) {
		if name == "ORBIT_MYSQL_DSN" {
			return "orbit:Secret99@tcp(127.0.0.1:3306)/", true
		}
		return "", false
	}
	core, positions := Default(), map[string]string{}
	if _, err := Load(Source{File: path, LookupEnv: env, Positions: positions}, core, nil); err != nil {
		t.Fatal(err)
	}
	err := core.ValidateAt(positions)
	if err == nil || !strings.Contains(err.Error(), "database.dsn: must name the database") {
		t.Fatalf("ValidateAt = %v, want a database.dsn problem", err)
	}
	if strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "Secret99") {
		t.Errorf("ValidateAt = %q: the file's line for a value from the environment, or the password", err)
	}
}

// A value that does not decode is reported with its line and quoted whole
// (mapstructure's own duration message cuts the value at its last space).
func TestLoad_BadValuesHaveTheirLineAndWholeValue(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "server:\n  request_deadline: \"eight seconds\"\ndatabase:\n  max_open_conns: many\n")
	_, err := Load(Source{File: path, LookupEnv: noEnv}, Default(), nil)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{
		path + `:2: server.request_deadline: must be a duration such as 8s, 1m30s or 250ms, got "eight seconds"`,
		path + `:4: database.max_open_conns: must be int, got "many"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// A file that is not YAML, or cannot be read, is one message that names
// the file once.
func TestLoad_UnreadableFileNamesItOnce(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "server:\n  listen: [\n")
	_, err := Load(Source{File: path, LookupEnv: noEnv}, Default(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), path+":") || strings.Count(err.Error(), path) != 1 {
		t.Errorf("syntax error = %v, want one message naming %s once", err, path)
	}
	missing := path + ".missing"
	_, err = Load(Source{File: missing, LookupEnv: noEnv}, Default(), nil)
	if err == nil || err.Error() != missing+": no such file or directory" {
		t.Errorf("missing file = %v", err)
	}
}

// server.listen must parse as host:port with a numeric port.
func TestValidate_RefusesAnUnparsableListenAddress(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"nope":            "must be host:port",
		"127.0.0.1":       "must be host:port",
		"127.0.0.1:99999": "must end in a port number from 0 to 65535",
		"localhost:http8": "must end in a port number from 0 to 65535",
		"":                "must not be empty",
	} {
		c := Default()
		c.Server.Listen = listen
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "server.listen: "+want) {
			t.Errorf("listen %q: %v, want %q", listen, err, want)
		}
	}
	for _, listen := range []string{"127.0.0.1:8080", ":0", "[::1]:443", "localhost:9000"} {
		c := Default()
		c.Server.Listen = listen
		if err := c.Validate(); err != nil {
			t.Errorf("listen %q refused: %v", listen, err)
		}
	}
}

// server.gc_percent is a GOGC value in a bounded range.
func TestValidate_GCPercentWithinItsRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, MinGCPercent - 1, MaxGCPercent + 1} {
		c := Default()
		c.Server.GCPercent = n
		want := fmt.Sprintf("server.gc_percent: must be between %d and %d, got %d", MinGCPercent, MaxGCPercent, n)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("gc_percent %d: %v, want %q", n, err, want)
		}
	}
	for _, n := range []int{MinGCPercent, 100, DefaultGCPercent, MaxGCPercent} {
		c := Default()
		c.Server.GCPercent = n
		if err := c.Validate(); err != nil {
			t.Errorf("gc_percent %d refused: %v", n, err)
		}
	}
}

func TestN8_FailoverDSNsFromFileAndEnvironment(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "database:\n  dsn: \"orbit:pw@tcp(db1:3306)/orbit\"\n  failover_dsns:\n    - \"orbit:pw@tcp(db2:3306)/orbit\"\n    - \"orbit:pw@tcp(db3:3306)/orbit\"\n")
	core := Default()
	if _, err := Load(Source{File: path, LookupEnv: noEnv}, core, nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"orbit:pw@tcp(db2:3306)/orbit", "orbit:pw@tcp(db3:3306)/orbit"}
	if !reflect.DeepEqual(core.Database.FailoverDSNs, want) {
		t.Errorf("from the file: %q, want %q", core.Database.FailoverDSNs, want)
	}
	if err := core.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	env := func(name string) (string, bool) {
		if name == "ORBIT_DATABASE_FAILOVER_DSNS" {
			return "orbit:pw@tcp(db4:3306)/orbit,orbit:pw@tcp(db5:3306)/orbit", true
		}
		return "", false
	}
	core = Default()
	if _, err := Load(Source{File: path, LookupEnv: env}, core, nil); err != nil {
		t.Fatal(err)
	}
	want = []string{"orbit:pw@tcp(db4:3306)/orbit", "orbit:pw@tcp(db5:3306)/orbit"}
	if !reflect.DeepEqual(core.Database.FailoverDSNs, want) {
		t.Errorf("from the environment: %q, want %q", core.Database.FailoverDSNs, want)
	}
}

func TestN8_FailoverDSNsValidatedByIndexWithoutPassword(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "database:\n  dsn: \"orbit:Secret99@tcp(db1:3306)/orbit\"\n  failover_dsns:\n"+
		"    - \"orbit:Secret99@tcp(db2:3306)/orbit\"\n"+
		"    - \"orbit:Secret99@tcp(db3:3306/orbit\"\n"+
		"    - \"orbit:Secret99@tcp(db4:3306)/\"\n"+
		"    - \"\"\n"+
		"    - \"orbit:Secret99@tcp(db1:3306)/orbit\"\n")
	core, positions := Default(), map[string]string{}
	if _, err := Load(Source{File: path, LookupEnv: noEnv, Positions: positions}, core, nil); err != nil {
		t.Fatal(err)
	}
	err := core.ValidateAt(positions)
	if err == nil {
		t.Fatal("ValidateAt accepted bad failover DSNs")
	}
	for _, want := range []string{
		path + ":3: database.failover_dsns[1]: is not a valid go-sql-driver/mysql DSN",
		path + ":3: database.failover_dsns[2]: must name the database",
		path + ":3: database.failover_dsns[3]: must not be empty",
		path + ":3: database.failover_dsns[4]: repeats database.dsn",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "failover_dsns[0]") || strings.Contains(err.Error(), "Secret99") {
		t.Errorf("error blames a good entry or shows the password: %v", err)
	}
}

func TestN8_FailoverDSNsNeedPrimary(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Database.FailoverDSNs = []string{"orbit:pw@tcp(db2:3306)/orbit"}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "database.failover_dsns: needs database.dsn") {
		t.Fatalf("Validate = %v, want a database.failover_dsns problem", err)
	}
}
