//go:build !unix

package limits

// fileLimit reports no file limit where the platform has none to read.
func fileLimit() (int, bool) { return 0, false }
