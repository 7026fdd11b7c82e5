//go:build linux

package mcpgw

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// minLandlockABI is the oldest Landlock the sandbox runs on: ABI 2
// (Linux 5.19) is the first that lets a file be renamed or linked into
// another directory only where the rules say so, which keeps a denied
// file from being moved out of its directory.
const minLandlockABI = 2

// LandlockABI is the kernel's Landlock ABI version, or why it has none
// the upstream sandbox can use.
func LandlockABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case errno == unix.ENOSYS:
		return 0, errors.New("this kernel has no Landlock (Linux 5.13 or later, built with CONFIG_SECURITY_LANDLOCK)")
	case errno == unix.EOPNOTSUPP:
		return 0, errors.New("the kernel has Landlock disabled at boot (add landlock to its lsm= parameter)")
	case errno != 0:
		return 0, fmt.Errorf("landlock_create_ruleset: %w", errno)
	case int(v) < minLandlockABI:
		return 0, fmt.Errorf("this kernel's Landlock is ABI %d; the sandbox needs %d (Linux 5.19 or later)", v, minLandlockABI)
	}
	return int(v), nil
}

// handled are the rights the sandbox takes away outside its grants:
// reading, writing, truncating and removing files, and moving or linking
// them between directories. Listing, creating and executing are left to
// the user's own permissions.
func handled(abi int) landlock.AccessFSSet {
	a := landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSRemoveFile |
		ll.AccessFSRemoveDir | ll.AccessFSRefer)
	if abi >= 3 {
		a |= landlock.AccessFSSet(ll.AccessFSTruncate)
	}
	return a
}

// fileRights are the handled rights that apply to a file (the others
// apply to directories only).
const fileRights = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate

// ExecSandboxed is the sandbox launcher, run by the gateway's binary when
// its first argument is SandboxArg (args are the rest): it restricts
// itself with Landlock to grants, then execs the command, which keeps
// the restriction, as does everything it starts. It returns only on an
// error, before the command runs: the command never runs unconfined.
func ExecSandboxed(args []string) error {
	l, err := parseLaunch(args)
	if err != nil {
		return err
	}
	abi, err := LandlockABI()
	if err != nil {
		return fmt.Errorf("sandbox launcher: %w", err)
	}
	path, err := exec.LookPath(l.command[0])
	if err != nil {
		return fmt.Errorf("sandbox launcher: %w", err)
	}
	a := handled(abi)
	dirs, files := grants(l.deny, "/proc/"+strconv.Itoa(os.Getpid()))
	rules := []landlock.Rule{
		landlock.PathAccess(a, dirs...).IgnoreIfMissing(),
		landlock.PathAccess(a&landlock.AccessFSSet(fileRights), files...).IgnoreIfMissing(),
	}
	if err := (landlock.Config{HandledAccessFS: a}).RestrictPaths(rules...); err != nil {
		return fmt.Errorf("sandbox launcher: landlock: %w", err)
	}
	if err := syscall.Exec(path, l.command, os.Environ()); err != nil {
		return fmt.Errorf("sandbox launcher: exec %s: %w", path, err)
	}
	return nil
}

// runAs makes cmd start as uid and gid, without supplementary groups.
func runAs(cmd *exec.Cmd, uid, gid uint32) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	return nil
}
