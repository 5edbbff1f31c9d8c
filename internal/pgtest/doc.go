// Package pgtest starts a real PostgreSQL server for the tests of one
// package: Debian's postgresql (installed by scripts/postgres-up.sh),
// initialised with initdb in a private temporary directory and started with
// pg_ctl on a private Unix socket directory and port, with no TCP listener.
// Run as root, the server runs as the outpost-pg system user the script
// creates (or nobody). Tests never reach a server they did not start.
//
// The server starts on the first NewDB of a test binary and stops when
// the package's TestMain calls Stop (or returns through Run); each test
// gets its own database. When PostgreSQL is not installed the test fails
// under CI and is skipped loudly elsewhere (testenv.Missing).
//
// Private starts a private server of one test (socket only) that the test
// may stop and restart as an outage would (integration's chaos test).
// Listening starts a private server of one test that also listens on TCP
// at a given address, trusting only clients of a given CIDR: the pods of
// the test cluster reach it on the cluster bridge's host address.
package pgtest
