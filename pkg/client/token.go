package client

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithToken sends token on every call as the metadata
// "authorization: Bearer <token>", for a breakerd started with --tokens.
// It applies to clients made by Dial (New uses the caller's connection:
// give that connection grpc.WithPerRPCCredentials instead).
//
// The token goes only over TLS (WithDialOptions with transport
// credentials) or to a loopback address (localhost, 127.0.0.0/8, ::1);
// over plaintext to any other host each call fails with an error before
// anything is sent, so a token never crosses a network in the clear.
// WithToken("") sends none, and keeps Dial from reading EnvToken.
func WithToken(token string) Option {
	return func(o *options) {
		o.tokenGiven = true
		if token != "" {
			o.dial = append(o.dial, grpc.WithPerRPCCredentials(bearerToken(token)))
		}
	}
}

type bearerToken string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t bearerToken) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity) != nil {
		host := ""
		if len(uri) > 0 {
			if u, err := url.Parse(uri[0]); err == nil {
				host = u.Hostname()
			}
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("client: refusing to send the bearer token over plaintext to %q: dial with TLS (WithDialOptions(grpc.WithTransportCredentials(...)))", host)
		}
	}
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials. It is
// false so that loopback plaintext works; GetRequestMetadata refuses any
// other plaintext destination itself.
func (bearerToken) RequireTransportSecurity() bool { return false }

// TokenCredentials returns the per-call credentials WithToken installs,
// for a connection the caller dials itself and hands to New:
// grpc.WithPerRPCCredentials(client.TokenCredentials(token)). The same
// rule holds: over plaintext the token goes only to a loopback address.
func TokenCredentials(token string) credentials.PerRPCCredentials { return bearerToken(token) }
