-- Checkpoints' git objects (docs/stores.md, "Checkpoints in the store"):
-- content-addressed, shared by every conversation of the database, so a
-- blob two turns, conversations or forks share is stored once. hash is
-- the object's SHA-1 id (20 bytes), type git's object type (1 commit,
-- 2 tree, 3 blob, 4 tag), data the content without git's header. Rows
-- are only ever inserted (ON CONFLICT DO NOTHING): deleting a
-- conversation leaves its objects, and nothing collects them yet.
CREATE TABLE outpost_objects (
	hash bytea PRIMARY KEY CHECK (octet_length(hash) = 20),
	type smallint NOT NULL CHECK (type BETWEEN 1 AND 4),
	data bytea NOT NULL
);
