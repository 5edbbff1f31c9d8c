package postgres

// LockKey is lockKey, for the hold tests.
var LockKey = lockKey

// PageSQL is pageSQL, for the test that ListPage reads an index.
var PageSQL = pageSQL
