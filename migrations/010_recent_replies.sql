-- The last replies of a loop's agent turns (a JSON array of strings, oldest first, at most
-- forge_store::loop_db::RECENT_REPLIES of them, each cut to REPLY_CHARS characters), for
-- the `Session Output:` block of loop-status (FORGE-REFERENCE §6: `Recent Activity:`).
ALTER TABLE loop_large_fields ADD COLUMN recent_replies TEXT;
