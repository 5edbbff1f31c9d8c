package postgres

// LockKey is lockKey, for the hold tests.
var LockKey = lockKey
