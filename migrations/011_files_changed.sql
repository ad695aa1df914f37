-- What a loop's worktree changed since the loop's start commit, as the runner counted it at
-- its last turn's end, for loop-status's `Files changed:` (FORGE-REFERENCE §6): JSON
-- {"files", "added", "deleted", "at"}, or {"error", "at"} when it could not be counted.
-- (Since this migration, `recent_replies` entries are {"role", "text"}; the plain strings
-- of 010 are still read, with no role.)
ALTER TABLE loop_large_fields ADD COLUMN files_changed TEXT;
