package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/breakerd/breakerd/internal/secretfile"
)

func TestReadRefusesFilesOthersCanWrite(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode          os.FileMode
		refused, warn bool
	}{
		{0o600, false, false},
		{0o400, false, false},
		{0o640, false, false},
		{0o644, false, true},
		{0o620, true, false},
		{0o602, true, false},
		{0o666, true, false},
	} {
		name := filepath.Join(dir, c.mode.String())
		if err := os.WriteFile(name, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(name, c.mode); err != nil {
			t.Fatal(err)
		}
		b, readable, err := secretfile.Read(name)
		if c.refused {
			if !errors.Is(err, secretfile.ErrWritable) || b != nil {
				t.Errorf("Read(mode %04o) = %q, %v; want ErrWritable and no content", c.mode, b, err)
			}
			continue
		}
		if err != nil || string(b) != "s3cret\n" || readable != c.warn {
			t.Errorf("Read(mode %04o) = %q, world-readable %v, %v; want the content, world-readable %v", c.mode, b, readable, err, c.warn)
		}
	}
	// A symlink is judged by the file it points to.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, os.FileMode(0o666).String()), link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := secretfile.Read(link); !errors.Is(err, secretfile.ErrWritable) {
		t.Errorf("Read(a link to a 0666 file) = %v, want ErrWritable", err)
	}
	if _, _, err := secretfile.Read(dir); err == nil {
		t.Errorf("Read(a directory) succeeded")
	}
}

func TestReadPassword(t *testing.T) {
	name := filepath.Join(t.TempDir(), "pw")
	for content, want := range map[string]string{"hunter2\n": "hunter2", "hunter2": "hunter2", "a b\r\n": "a b", "\n": ""} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		pw, _, err := secretfile.ReadPassword(name)
		if want == "" {
			if err == nil {
				t.Errorf("ReadPassword(%q) = %q, want an error (empty)", content, pw)
			}
			continue
		}
		if err != nil || pw != want {
			t.Errorf("ReadPassword(%q) = %q, %v; want %q", content, pw, err, want)
		}
	}
}
