// Package secretfile reads files that hold secrets (tokens, webhook
// secrets, passwords) the way ssh reads its keys: a file that another user
// could change is refused, and one that any user could read is reported.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrWritable is returned (wrapped) for a group- or world-writable file:
// another local user could plant a token or a webhook in it.
var ErrWritable = errors.New("is writable by group or others; chmod go-w it")

// maxBytes bounds what Read accepts (1 MiB): a secrets file is small, and
// a device or a huge file must not be read into memory whole.
const maxBytes = 1 << 20

// Read returns the contents of the named file. It refuses, with an error
// wrapping ErrWritable, a file whose mode lets its group or others write
// it (mode & 0o022), and a file larger than 1 MiB. worldReadable reports a
// file others may read (mode & 0o004), which the caller should warn about
// without refusing (a Kubernetes Secret mounts 0644 unless told
// otherwise). The mode is checked on the opened file, after symlinks are
// followed, so what is checked is what is read.
func Read(name string) (b []byte, worldReadable bool, err error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s: is not a regular file", name)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, false, fmt.Errorf("%s: mode %04o %w", name, fi.Mode().Perm(), ErrWritable)
	}
	b, err = io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, false, err
	}
	if len(b) > maxBytes {
		return nil, false, fmt.Errorf("%s: larger than %d bytes", name, maxBytes)
	}
	return b, fi.Mode().Perm()&0o004 != 0, nil
}

// ReadPassword reads a one-line secret (a Redis password) with Read,
// without its trailing newline. An empty secret is an error.
func ReadPassword(name string) (pw string, worldReadable bool, err error) {
	b, worldReadable, err := Read(name)
	if err != nil {
		return "", false, err
	}
	pw = strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", false, fmt.Errorf("%s: is empty", name)
	}
	return pw, worldReadable, nil
}
