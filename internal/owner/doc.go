// Package owner identifies the process that owns a sandbox (a container,
// a lease directory on a remote host) and tells whether it still runs, so
// that providers can sweep what dead processes left behind.
package owner
