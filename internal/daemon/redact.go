package daemon

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// userinfo matches the user:password@ of a URL that url.Parse may have
// refused: the scheme, then everything up to the last @ before the path.
var userinfo = regexp.MustCompile(`(://)[^/?#]*@`)

// passwordParam matches a password=... query parameter.
var passwordParam = regexp.MustCompile(`(?i)(password=)([^&#\s"]*)`)

// RedactURL returns raw with its password (and any password= query
// parameter) replaced by "xxxxx", for logs and errors. It works on URLs
// url.Parse refuses too: a malformed URL is what gets echoed.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			raw = u.Redacted()
		}
	} else if err != nil {
		raw = userinfo.ReplaceAllString(raw, "${1}xxxxx@")
	}
	return passwordParam.ReplaceAllString(raw, "${1}xxxxx")
}

// rawPassword finds the password of a URL url.Parse may have refused.
var rawPassword = regexp.MustCompile(`://[^:/?#@]*:([^/?#]*)@`)

// redactErr returns err with every copy of the URL raw, and of its
// password, replaced by the redacted URL: parse errors quote the URL
// whole. The error's text is all that is kept.
func redactErr(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), raw, RedactURL(raw))
	if m := rawPassword.FindStringSubmatch(raw); m != nil && m[1] != "" {
		msg = strings.ReplaceAll(msg, m[1], "xxxxx")
		if pw, uerr := url.PathUnescape(m[1]); uerr == nil && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	if m := passwordParam.FindStringSubmatch(raw); m != nil && m[2] != "" {
		msg = strings.ReplaceAll(msg, m[2], "xxxxx")
	}
	return errors.New(msg)
}
