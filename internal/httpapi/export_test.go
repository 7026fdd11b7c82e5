package httpapi

// SnapshotPart and SnapshotPartBytes are snapshotPart and
// snapshotPartBytes, for the tests.
const (
	SnapshotPart      = snapshotPart
	SnapshotPartBytes = snapshotPartBytes
)
