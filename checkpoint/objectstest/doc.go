// Package objectstest is the conformance suite every checkpoint.Objects
// passes: checkpoint.Memory, checkpoint.Dir, and the object stores of the
// conversation stores (conversation.ObjectStorer: the filesystem store's
// bare repository, PostgreSQL's table, storetest.Memory's). Call
// RunConformanceTests from a test of the store's package.
//
// The suite writes real git objects (blobs, and trees and commits encoded
// by go-git's object package), reads them back verified, and checks
// Missing, idempotent and concurrent writes of the same objects, a large
// blob, unknown ids (checkpoint.ErrNotFound) and cancelled contexts.
package objectstest
