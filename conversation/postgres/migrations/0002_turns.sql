-- The turns of an `outpost serve` fleet (server/turnstore): one row per
-- turn, its events, the commands other replicas forward to its owner,
-- and each replica's heartbeat (docs/serve.md, "A fleet").
CREATE TABLE outpost_replicas (
	id        text PRIMARY KEY,
	heartbeat timestamptz NOT NULL
);

CREATE TABLE outpost_turns (
	id       text PRIMARY KEY,
	owner    text NOT NULL,
	agent    text NOT NULL,
	sandbox  text NOT NULL,
	state    text NOT NULL,
	created  timestamptz NOT NULL,
	started  timestamptz,
	finished timestamptz,
	result   bytea,
	last     bigint NOT NULL DEFAULT 0,
	first    bigint NOT NULL DEFAULT 1,
	bytes    bigint NOT NULL DEFAULT 0,
	dropped  bigint NOT NULL DEFAULT 0
);
CREATE INDEX outpost_turns_live ON outpost_turns (owner) WHERE state <> 'finished';
CREATE INDEX outpost_turns_finished ON outpost_turns (finished) WHERE state = 'finished';

CREATE TABLE outpost_turn_events (
	turn text NOT NULL REFERENCES outpost_turns (id) ON DELETE CASCADE,
	seq  bigint NOT NULL,
	data bytea NOT NULL,
	PRIMARY KEY (turn, seq)
);

CREATE TABLE outpost_turn_commands (
	id    bigserial PRIMARY KEY,
	owner text NOT NULL,
	turn  text NOT NULL REFERENCES outpost_turns (id) ON DELETE CASCADE,
	kind  text NOT NULL,
	text  text NOT NULL DEFAULT ''
);
CREATE INDEX outpost_turn_commands_owner ON outpost_turn_commands (owner, id);
