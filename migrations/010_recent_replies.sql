-- What loop-status shows of a loop's session output (FORGE-REFERENCE §6, `Session Output:`):
-- `recent_replies`, its agent turns' last replies (a JSON array of {"role", "text"}, oldest
-- first, at most forge_store::loop_db::RECENT_REPLIES, each cut to REPLY_CHARS characters);
-- `files_changed`, what its worktree changed since the loop's start commit as counted at
-- its last turn's end (JSON {"files", "added", "deleted", "at"} or {"error", "at"}).
ALTER TABLE loop_large_fields ADD COLUMN recent_replies TEXT;
ALTER TABLE loop_large_fields ADD COLUMN files_changed TEXT;
