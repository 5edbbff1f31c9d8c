// Package postgres is a conversation.Store kept in PostgreSQL, for fleets:
// every outpost that opens the same database shares its conversations,
// their revisions and their holds. It uses github.com/jackc/pgx/v5.
//
// Metadata and revisions live in rows (outpost_conversations); files in
// outpost_files, their data as bytea in parts of at most 256 KiB
// (outpost_parts), every file's size and SHA-256 checked on Get. Put is
// one transaction that locks the conversation's row and compares its
// revision (compare-and-swap); Get reads in one REPEATABLE READ
// transaction, so a fork reads one consistent revision. Checkpoints' git
// objects are rows of outpost_objects (Store.Objects), shared by every
// conversation and every machine of the database.
//
// A hold is a session-level advisory lock taken on a connection of its
// own (from a second pool, kept for holds) for the whole turn: when the holder dies its connection closes and
// the server frees the lock at once (a killed process's kernel closes the
// socket). When the holder's machine vanishes without closing it, TCP
// keepalives set on the session (5s idle, 2s interval, 3 probes) end it
// within about 11 seconds. A row in outpost_holds names the holder.
//
// The schema is created and upgraded by embedded, versioned migrations
// (migrations/NNNN_*.sql) under an advisory lock when a Store is opened;
// a database whose schema is newer than this build knows is refused with
// ErrNewerSchema and left untouched.
package postgres
