package console

import (
	"errors"
	"io/fs"
	"net/http"
	"path"

	"github.com/gorilla/mux"

	"github.com/orbitrun/orbit/internal/db"
	"github.com/orbitrun/orbit/internal/httpx"
)

// maxFormBytes bounds a console form.
const maxFormBytes = 64 << 10

// handler serves a page for a signed-in session.
type handler func(w http.ResponseWriter, r *http.Request, s *session)

func (m *Module) routes(r *mux.Router) {
	get := func(p string, h http.Handler) { r.Handle(p, h).Methods(http.MethodGet) }
	post := func(p string, h http.Handler) { r.Handle(p, h).Methods(http.MethodPost) }

	get("/console/", http.HandlerFunc(m.home))
	get("/console/static/{file}", http.HandlerFunc(m.static))
	get("/console/signin", http.HandlerFunc(m.signinPage))
	post("/console/signin", http.HandlerFunc(m.signin))
	post("/console/signout", m.signedIn(m.signout))

	get("/console/queues", m.signedIn(m.queuesPage))
	get("/console/live/queues", m.signedIn(m.queuesLive))

	get("/console/tasks", m.signedIn(m.tasksPage))
	get("/console/tasks/{id}", m.signedIn(m.taskPage))
	post("/console/tasks/{id}/cancel", m.signedIn(m.taskCancel))
	post("/console/tasks/{id}/review", m.signedIn(m.taskReview))

	get("/console/subscriptions", m.signedIn(m.subscriptionsPage))
	get("/console/subscriptions/{id}", m.signedIn(m.subscriptionPage))
	get("/console/live/subscriptions/{id}", m.signedIn(m.subscriptionLive))
	post("/console/subscriptions/{id}/pause", m.signedIn(m.subscriptionPause))
	post("/console/subscriptions/{id}/resume", m.signedIn(m.subscriptionResume))
	post("/console/subscriptions/{id}/retry", m.signedIn(m.subscriptionRetry))
	post("/console/subscriptions/{id}/replay", m.signedIn(m.subscriptionReplay))
	post("/console/subscriptions/{id}/skip", m.signedIn(m.subscriptionSkip))
	get("/console/subscriptions/{id}/deliveries", m.signedIn(m.deliveriesPage))
	get("/console/subscriptions/{id}/deliveries/{delivery_id}", m.signedIn(m.deliveryPage))
	post("/console/subscriptions/{id}/deliveries/{delivery_id}/retry", m.signedIn(m.deliveryRetry))
}

// securityHeaders are sent with every console response: no framing, no
// inline or foreign script, no referrer, no caching of pages.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// signedIn wraps h so that it runs only for a valid session: the cookie's
// session and its credential are resolved on every request (a revoked
// credential is signed out at once), a GET without one is sent to the
// sign-in page, and a POST also needs the session's CSRF token in the
// form (403 otherwise, whatever the cookie).
func (m *Module) signedIn(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w)
		var s *session
		c, err := r.Cookie(sessionCookie)
		if err == nil {
			s, err = m.sessionGet(r.Context(), c.Value)
		}
		if err != nil && !errors.Is(err, http.ErrNoCookie) && !errors.Is(err, errNoSession) {
			m.fail(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if perr := r.ParseForm(); perr != nil {
				m.render(w, r, http.StatusBadRequest, "error", nil, errorPage{Title: "Bad request", Message: "The form could not be read."})
				return
			}
			if s == nil || !equal(r.PostForm.Get("csrf"), s.CSRF()) {
				m.render(w, r, http.StatusForbidden, "error", s, errorPage{Title: "Refused", Message: "This form is not from your current session. Reload the page and try again."})
				return
			}
		}
		if s == nil {
			if c != nil {
				setCookie(w, r, sessionCookie, "", -1)
			}
			http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
			return
		}
		httpx.SetCredential(r, s.Principal.CredentialID)
		h(w, r, s)
	})
}

func (m *Module) home(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	http.Redirect(w, r, "/console/queues", http.StatusSeeOther)
}

// static serves the embedded stylesheet and script.
func (m *Module) static(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	name := mux.Vars(r)["file"]
	b, err := fs.ReadFile(staticFiles, path.Join("static", path.Base(name)))
	if err != nil {
		m.render(w, r, http.StatusNotFound, "error", nil, errorPage{Title: "Not found", Message: "No such file."})
		return
	}
	switch path.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
}

// fail renders err: an API refusal with its status and message, anything
// else as a 500 whose cause is logged, never shown.
func (m *Module) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var he *httpx.Error
	if errors.As(err, &he) {
		title := map[httpx.Code]string{
			httpx.CodeNotFound: "Not found", httpx.CodePermissionDenied: "Not allowed",
			httpx.CodeStateConflict: "Changed meanwhile", httpx.CodeInvalidArgument: "Not accepted",
		}[he.Code]
		if title == "" {
			title = string(he.Code)
		}
		if he.Code == httpx.CodeUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		m.render(w, r, he.Code.Status(), "error", s, errorPage{Title: title, Code: string(he.Code), Message: he.Message})
		return
	}
	if db.IsUnavailable(err) {
		m.logger.Warn("console request: database unavailable", "path", r.URL.Path, "request_id", httpx.RequestID(r.Context()), "err", err)
		w.Header().Set("Retry-After", "1")
		m.render(w, r, http.StatusServiceUnavailable, "error", s, errorPage{Title: "Unavailable", Code: string(httpx.CodeUnavailable), Message: "The database is unavailable; retry later."})
		return
	}
	m.logger.Error("console request", "path", r.URL.Path, "request_id", httpx.RequestID(r.Context()), "err", err)
	m.render(w, r, http.StatusInternalServerError, "error", s, errorPage{Title: "Something went wrong", Message: "The request failed; it has been logged."})
}

// errorPage is the data of the error template.
type errorPage struct {
	Title, Code, Message string
}
