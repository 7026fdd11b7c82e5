//go:build !linux

package mcpgw

import (
	"errors"
	"os/exec"
)

// errNoSandbox says why there is no sandbox off Linux.
var errNoSandbox = errors.New("the upstream sandbox (Landlock) exists on Linux only")

// LandlockABI reports that there is no Landlock here.
func LandlockABI() (int, error) { return 0, errNoSandbox }

// ExecSandboxed fails off Linux: the gateway never starts a launcher
// there (see SandboxOptions).
func ExecSandboxed([]string) error { return errNoSandbox }

// runAs is Linux only.
func runAs(*exec.Cmd, uint32, uint32) error { return errors.New("only on Linux") }
