package orbit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const credentialsJSON = `{
  "url": "http://127.0.0.1:8080",
  "token": "` + testToken + `",
  "credential_id": "c1",
  "namespace": "acme",
  "namespace_id": "n1",
  "application": "shop",
  "application_id": "a1",
  "environment": "dev",
  "environment_id": "e1",
  "queue": "orders",
  "queue_id": "` + testQueueID + `",
  "permissions": ["tasks:submit", "tasks:work"]
}
`

// writeFile writes content to a file in a fresh directory and returns its
// path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// env returns a getenv over vars.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestLoadCredentialsReadsEveryKey(t *testing.T) {
	t.Parallel()
	c, err := loadCredentials(writeFile(t, credentialsJSON), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Credentials{
		URL: "http://127.0.0.1:8080", Token: testToken, CredentialID: "c1", Namespace: "acme", NamespaceID: "n1",
		Application: "shop", ApplicationID: "a1", Environment: "dev", EnvironmentID: "e1", Queue: "orders",
		QueueID: testQueueID, Permissions: []string{"tasks:submit", "tasks:work"},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("credentials = %+v", *c)
	}
	if _, err := c.NewClient(); err != nil {
		t.Errorf("NewClient: %v", err)
	}
}

func TestLoadCredentialsEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	c, err := loadCredentials(writeFile(t, credentialsJSON), env(map[string]string{
		EnvURL: "https://orbit.example.com", EnvToken: "orbit_other", EnvQueueID: idOf("9"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.URL != "https://orbit.example.com" || c.Token != "orbit_other" || c.QueueID != idOf("9") || c.Namespace != "acme" {
		t.Errorf("credentials = %+v", *c)
	}
}

func TestLoadCredentialsFromEnv(t *testing.T) {
	t.Parallel()
	path := writeFile(t, credentialsJSON)
	c, err := loadCredentialsFromEnv(env(map[string]string{EnvCredentialsFile: path, EnvQueueID: idOf("9")}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != testToken || c.QueueID != idOf("9") {
		t.Errorf("credentials = %+v", *c)
	}

	c, err = loadCredentialsFromEnv(env(map[string]string{EnvURL: "http://localhost:8080", EnvToken: "orbit_env"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.URL != "http://localhost:8080" || c.Token != "orbit_env" {
		t.Errorf("credentials = %+v", *c)
	}

	_, err = loadCredentialsFromEnv(env(map[string]string{EnvURL: "http://localhost:8080"}))
	if err == nil || !strings.Contains(err.Error(), EnvToken) || !strings.Contains(err.Error(), EnvCredentialsFile) {
		t.Errorf("err = %v; want it to name %s and %s", err, EnvToken, EnvCredentialsFile)
	}
}

func TestLoadCredentialsFromProcessEnvironment(t *testing.T) {
	path := writeFile(t, credentialsJSON)
	t.Setenv(EnvCredentialsFile, path)
	t.Setenv(EnvToken, "orbit_from_env")
	t.Setenv(EnvURL, "")
	t.Setenv(EnvQueueID, "")
	c, err := LoadCredentialsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.Token != "orbit_from_env" || c.URL != "http://127.0.0.1:8080" {
		t.Errorf("credentials = %+v", *c)
	}
	if c, err := LoadCredentials(path); err != nil || c.Token != "orbit_from_env" {
		t.Errorf("LoadCredentials = %v, %v", c, err)
	}
}

func TestLoadCredentialsErrorsNameTheFileAndKey(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.json")
	for name, tc := range map[string]struct {
		path  string
		wants []string
	}{
		"MissingFile":  {missing, []string{missing, "no such file"}},
		"NoToken":      {writeFile(t, `{"url":"http://127.0.0.1:8080"}`), []string{"credentials.json", `"token"`, EnvToken}},
		"NoURL":        {writeFile(t, `{"token":"`+testToken+`"}`), []string{"credentials.json", `"url"`}},
		"BadURL":       {writeFile(t, `{"url":"http://u:p@host","token":"`+testToken+`"}`), []string{`"url"`, "user information"}},
		"Syntax":       {writeFile(t, `{"url":"http://h","token":"`+testToken+`",}`), []string{"credentials.json", "invalid JSON"}},
		"WrongType":    {writeFile(t, `{"url":"http://h","token":12345}`), []string{`"token"`, "wrong JSON type"}},
		"Trailing":     {writeFile(t, credentialsJSON+`{}`), []string{"after the JSON object"}},
		"NotAnObject":  {writeFile(t, `["`+testToken+`"]`), []string{"JSON object"}},
		"TokenInQuery": {writeFile(t, `{"url":"http://h/?x=1","token":"`+testToken+`"}`), []string{`"url"`, "query"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := loadCredentials(tc.path, env(nil))
			if err == nil {
				t.Fatal("loadCredentials succeeded")
			}
			for _, want := range tc.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if strings.Contains(err.Error(), testToken) {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
}

func TestCredentialsNeverPrintTheToken(t *testing.T) {
	t.Parallel()
	c, err := loadCredentials(writeFile(t, credentialsJSON), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("loaded", "credentials", c, "value", *c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("loaded", "credentials", c, "value", *c)
	for _, s := range []string{
		fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c),
		fmt.Sprintf("%v %+v %#v %s", *c, *c, *c, *c), logged.String(),
	} {
		if strings.Contains(s, testToken) {
			t.Errorf("output contains the token: %s", s)
		}
		if !strings.Contains(s, "acme") {
			t.Errorf("output lacks the namespace: %s", s)
		}
	}
}

func TestCredentialsJSONIsTheFileFormat(t *testing.T) {
	t.Parallel()
	c, err := loadCredentials(writeFile(t, credentialsJSON), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(encoded) + "\n"; got != strings.ReplaceAll(credentialsJSON, `["tasks:submit", "tasks:work"]`, "[\n    \"tasks:submit\",\n    \"tasks:work\"\n  ]") {
		t.Errorf("encoded:\n%s\nwant the credentials file:\n%s", got, credentialsJSON)
	}
	var decoded Credentials
	if err := json.Unmarshal(encoded, &decoded); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&decoded, c) {
		t.Errorf("decoded %#v; want %#v", decoded, *c)
	}
	if again, err := loadCredentials(writeFile(t, string(encoded)), env(nil)); err != nil || !reflect.DeepEqual(again, c) {
		t.Errorf("LoadCredentials of the encoded file = %#v, %v; want %#v", again, err, *c)
	}
}

// TestF6_CredentialsFileReadableByOthersIsRefused: a credentials file with
// any group or other permission is refused before it is read, naming the
// file and the chmod that fixes it, and never the token.
func TestF6_CredentialsFileReadableByOthersIsRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o606} {
		path := writeFile(t, credentialsJSON)
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCredentials(path)
		if err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) || strings.Contains(err.Error(), testToken) {
			t.Errorf("mode %04o: %v, want a refusal naming chmod 600 %s", mode, err, path)
		}
	}
	path := writeFile(t, credentialsJSON)
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCredentials(path); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}
