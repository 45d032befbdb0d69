package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/orbitrun/orbit/internal/auth"
)

// pages holds one template set per page: the layout and the page's
// content.
type pages struct {
	sets map[string]*template.Template
}

var funcs = template.FuncMap{
	"pretty": pretty,
	"join":   strings.Join,
	"short": func(id string) string {
		if len(id) > 8 {
			return id[:8]
		}
		return id
	},
}

func parsePages() (*pages, error) {
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{sets: map[string]*template.Template{}}
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		p.sets[base] = t
	}
	return p, nil
}

// view is what every page template gets.
type view struct {
	Title string
	// Nav names the section highlighted in the navigation.
	Nav     string
	Session *session
	// Signed is false on the sign-in page and on pages for no session.
	Signed bool
	Notice string
	Data   any
	// Perm names the permissions templates test with .Can.
	Perm permNames
}

// Can reports whether the page's session holds perm.
func (v view) Can(perm string) bool { return v.Session != nil && v.Session.Can(perm) }

type permNames struct{ TasksRead, TasksCancel, TasksReview, EventsRead, EventsManage string }

var perms = permNames{
	TasksRead: auth.PermTasksRead, TasksCancel: auth.PermTasksCancel, TasksReview: auth.PermTasksReview,
	EventsRead: auth.PermEventsRead, EventsManage: auth.PermEventsManage,
}

// titled is implemented by page data that names its page.
type titled interface{ title() string }

func (e errorPage) title() string { return e.Title }

// render writes page name with data, status and the security headers.
func (m *Module) render(w http.ResponseWriter, r *http.Request, status int, name string, s *session, data any) {
	securityHeaders(w)
	t := m.pages.sets[name]
	v := view{Session: s, Signed: s != nil, Data: data, Perm: perms, Nav: name, Notice: notices[r.URL.Query().Get("notice")]}
	if td, ok := data.(titled); ok {
		v.Title = td.title()
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		m.logger.Error("render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// notices are the messages a redirect after a change may show, by key:
// a fixed set, so that a link cannot put words on a page.
var notices = map[string]string{
	"paused":    "The subscription is paused.",
	"resumed":   "The subscription is resumed.",
	"retried":   "The dead letters are pending again.",
	"replayed":  "The acknowledged events are pending again.",
	"skipped":   "The subscription skipped ahead.",
	"cancelled": "The cancel was recorded.",
	"reviewed":  "The review was recorded.",
	"delivery":  "The delivery is pending again.",
}
