-- GET /v1/conversations by pages (conversation.Pager): the order of
-- pages (updated, then created, then id, newest first) and the owner as
-- columns, so that a page is read from an index instead of every row's
-- metadata. Put keeps them; the rows stored before are filled here.
ALTER TABLE outpost_conversations
	ADD COLUMN updated timestamptz NOT NULL DEFAULT '-infinity',
	ADD COLUMN created timestamptz NOT NULL DEFAULT '-infinity',
	ADD COLUMN owner   text NOT NULL DEFAULT '';
UPDATE outpost_conversations SET
	updated = (meta->>'updated')::timestamptz,
	created = (meta->>'created')::timestamptz,
	owner = coalesce(meta->>'owner', '');
CREATE INDEX outpost_conversations_page ON outpost_conversations (updated DESC, created DESC, id DESC);
CREATE INDEX outpost_conversations_owner_page ON outpost_conversations (owner, updated DESC, created DESC, id DESC);
