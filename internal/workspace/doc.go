// Package workspace is the copy mode of a sandbox's working directory,
// shared by the providers whose sandboxes do not see the caller's
// filesystem (docker, ssh): the caller's directory is written into a tar
// stream (Write) that the provider extracts in the sandbox, recording a
// Manifest of what was copied; when the lease ends, the provider streams
// the sandbox's workspace back as tar and Sync applies to the caller's
// directory only what the sandbox changed, keeping the host's version of
// anything changed on both sides (the sandbox's is written beside it,
// with ConflictSuffix).
//
// PrivateDir (.outpost, whose .env holds secrets an agent gets only by
// name) is never copied in and never written back. Writes to the host go
// through an os.Root of the directory: nothing outside it is touched,
// whatever the sandbox's archive says.
//
// Spool holds an archive in memory, then in an unlinked temporary file,
// for providers that must read an archive whole before sending it.
package workspace
