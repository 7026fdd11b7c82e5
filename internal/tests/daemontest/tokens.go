package daemontest

import (
	"os"
	"testing"
)

// The tokens WriteTokens writes: the operator alice's, and the worker
// w1's (allowed worker id w1).
const (
	OperatorToken = "sec-operator-token-0123456789"
	WorkerToken   = "sec-worker-token-0123456789ab"
)

// WriteTokens writes a --tokens file to path naming the operator alice
// (OperatorToken) and, when worker is set, the worker w1 (WorkerToken).
// Writing it again without the worker revokes w1's token.
func WriteTokens(t testing.TB, path string, worker bool) {
	t.Helper()
	body := "tokens:\n  - {name: alice, role: operator, token: " + OperatorToken + "}\n"
	if worker {
		body += "  - {name: w1, role: worker, token: " + WorkerToken + ", workers: [w1]}\n"
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
