package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/orbitrun/orbit/internal/auth"
)

// signinForm is the data of the sign-in page.
type signinForm struct {
	CSRF    string
	Message string
}

func (signinForm) title() string { return "Sign in" }

// signinPage shows the sign-in form with a fresh CSRF token, which it also
// sets as a cookie: the POST must carry both, equal (there is no session
// yet to bind the token to).
func (m *Module) signinPage(w http.ResponseWriter, r *http.Request) {
	m.signinForm(w, r, http.StatusOK, "")
}

func (m *Module) signinForm(w http.ResponseWriter, r *http.Request, status int, message string) {
	token := randomHex(32)
	setCookie(w, r, signinCookie, token, 600)
	m.render(w, r, status, "signin", nil, signinForm{CSRF: token, Message: message})
}

// signin checks the form's CSRF token against its cookie, then the
// credential token with the admin module, as a bearer token would be, and
// starts a session bound to the credential. The token itself is neither
// stored nor logged, and a wrong token is told apart from nothing else.
func (m *Module) signin(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		m.signinForm(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	c, err := r.Cookie(signinCookie)
	if err != nil || len(c.Value) != 64 || !equal(c.Value, r.PostForm.Get("csrf")) {
		m.render(w, r, http.StatusForbidden, "error", nil, errorPage{Title: "Refused", Message: "This sign-in form has expired or is not from this site. Open the sign-in page again."})
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	p, err := m.auth.Authenticate(r.Context(), "Bearer "+token)
	if errors.Is(err, auth.ErrUnauthenticated) || token == "" {
		m.signinForm(w, r, http.StatusUnauthorized, "That token is not a valid credential.")
		return
	}
	if err != nil {
		m.fail(w, r, nil, err)
		return
	}
	id, secret, err := m.sessionCreate(r.Context(), p.CredentialID)
	if err != nil {
		m.fail(w, r, nil, err)
		return
	}
	setCookie(w, r, signinCookie, "", -1)
	setCookie(w, r, sessionCookie, id+"."+secret, int(sessionTTL.Seconds()))
	m.logger.Info("console sign-in", "credential_id", p.CredentialID, "session_id", id)
	http.Redirect(w, r, "/console/queues", http.StatusSeeOther)
}

// signout ends the session.
func (m *Module) signout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := m.sessionDelete(r.Context(), s.ID); !errors.Is(err, errNoSession) {
		m.fail(w, r, s, err)
		return
	}
	setCookie(w, r, sessionCookie, "", -1)
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
}
