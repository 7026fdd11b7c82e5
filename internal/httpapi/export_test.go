package httpapi

// SnapshotPart is snapshotPart, for the tests.
const SnapshotPart = snapshotPart
