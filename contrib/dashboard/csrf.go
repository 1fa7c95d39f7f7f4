package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
)

// csrfCookie names the cookie holding the browser's random CSRF secret.
const csrfCookie = "conveyor_dash_csrf"

// csrfField names the form field carrying the token.
const csrfField = "csrf"

// csrf issues and checks the tokens of the dashboard's forms: a signed
// double-submit cookie. The browser holds a random secret in an HttpOnly,
// SameSite=Strict cookie; a form carries HMAC(key, secret, Authorization
// header), key being the handler's own. A POST is accepted when its token
// matches the secret it sends and its Origin (or, without one, its
// Referer) names the request's own host.
type csrf struct {
	key []byte
}

// token returns the token for r's forms, setting the secret cookie when r
// carries none.
func (c csrf) token(w http.ResponseWriter, r *http.Request) string {
	secret := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		secret = ck.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		secret = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: secret, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	return c.sign(secret, r)
}

// sign binds secret to the credential r was authenticated with, when it
// came in the Authorization header: a token leaked from one user's page
// is worth nothing with another's credential.
func (c csrf) sign(secret string, r *http.Request) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(secret))
	m.Write([]byte{0})
	m.Write([]byte(r.Header.Get("Authorization")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check reports why the POST r must be refused, "" when it may go on. It
// reads the form.
func (c csrf) check(r *http.Request) string {
	if !sameOrigin(r) {
		return "cross-origin request: its Origin or Referer is not this dashboard's host"
	}
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return "no CSRF cookie: reload the page and send the form again"
	}
	got := r.PostFormValue(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(c.sign(ck.Value, r))) {
		return "missing or wrong CSRF token: reload the page and send the form again"
	}
	return ""
}

// sameOrigin reports whether r's Origin header, or its Referer when it has
// none, names r's own host. A request with neither is refused: every
// browser sends one of them with a form's POST under the dashboard's
// Referrer-Policy. The scheme is not compared, so the check holds behind
// a proxy that ends TLS.
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" {
		from = r.Header.Get("Referer")
	}
	if from == "" || from == "null" {
		return false
	}
	u, err := url.Parse(from)
	return err == nil && u.Host != "" && u.Host == r.Host
}
