-- Conversations: metadata and revision in one row per conversation.
CREATE TABLE outpost_conversations (
	id       text PRIMARY KEY,
	revision bigint NOT NULL CHECK (revision > 0),
	native   bytea NOT NULL,
	meta     json NOT NULL
);
CREATE INDEX outpost_conversations_native ON outpost_conversations (native);
-- Id prefixes (Resolve) whatever the database's collation.
CREATE INDEX outpost_conversations_prefix ON outpost_conversations (id text_pattern_ops);

-- The files of a conversation's current revision, in their order.
CREATE TABLE outpost_files (
	conversation text NOT NULL REFERENCES outpost_conversations (id) ON DELETE CASCADE,
	idx          integer NOT NULL,
	path         text NOT NULL,
	mode         integer NOT NULL,
	size         bigint NOT NULL,
	sha256       bytea NOT NULL,
	PRIMARY KEY (conversation, idx)
);

-- File data as bytea, in parts of at most 256 KiB (docs/stores.md says why).
CREATE TABLE outpost_parts (
	conversation text NOT NULL,
	idx          integer NOT NULL,
	part         integer NOT NULL,
	data         bytea NOT NULL,
	PRIMARY KEY (conversation, idx, part),
	FOREIGN KEY (conversation, idx) REFERENCES outpost_files (conversation, idx) ON DELETE CASCADE
);

-- Who holds a conversation: written by the holder after it takes the
-- advisory lock, read to name it in busy errors. backend is the holder's
-- server process: a row whose backend no longer holds the lock is stale.
-- Unlogged: holds do not outlive the server, so they cost no WAL.
CREATE UNLOGGED TABLE outpost_holds (
	id      text PRIMARY KEY,
	host    text NOT NULL,
	pid     integer NOT NULL,
	lease   text NOT NULL,
	since   timestamptz NOT NULL,
	backend integer NOT NULL
);
