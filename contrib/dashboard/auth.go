package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
)

// Credentials are what BasicAuth accepts. Set Token, or User and
// Password, or all three.
type Credentials struct {
	// Token is accepted as "Authorization: Bearer <token>" and as the
	// password of HTTP basic auth under any user name.
	Token string
	// User and Password are accepted as HTTP basic auth.
	User, Password string
	// Realm is the realm of the WWW-Authenticate challenge. Defaults to
	// "conveyor".
	Realm string
}

// BasicAuth returns middleware that lets a request through only with one
// of c's credentials, compared in constant time, and answers any other
// with 401 and a WWW-Authenticate: Basic challenge, so that a browser
// asks for a user and password. It fails when c holds no credential.
func BasicAuth(c *Credentials) (func(http.Handler) http.Handler, error) {
	if c == nil || (c.Token == "" && (c.User == "" || c.Password == "")) {
		return nil, errors.New("dashboard: BasicAuth needs a token, or a user and a password")
	}
	realm := c.Realm
	if realm == "" {
		realm = "conveyor"
	}
	challenge := `Basic realm="` + strings.ReplaceAll(realm, `"`, "") + `", charset="UTF-8"`
	token, user, password := c.Token, c.User, c.Password
	allowed := func(r *http.Request) bool {
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			return token != "" && equal(bearer, token)
		}
		u, p, ok := r.BasicAuth()
		if !ok {
			return false
		}
		byToken := token != "" && equal(p, token)
		byUser := user != "" && equal(u, user) && equal(p, password)
		return byToken || byUser
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !allowed(r) {
				w.Header().Set("WWW-Authenticate", challenge)
				http.Error(w, "401 unauthorized: this dashboard needs credentials", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// equal compares a and b in time that depends on neither their contents
// nor their lengths: it compares their SHA-256 sums.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
