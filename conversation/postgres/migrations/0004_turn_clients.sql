-- The peer that started a turn ("token:NAME", "uid:N"; '' for an
-- operator without tokens): outpost serve's tenancy (docs/serve.md), so
-- that every replica shows a turn only to its client and operators.
ALTER TABLE outpost_turns ADD COLUMN client text NOT NULL DEFAULT '';
