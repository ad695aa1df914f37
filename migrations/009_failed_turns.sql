-- Turns of each phase that failed in a row (forge_domain::loop_machine::FailedTurns):
-- three failed audits, or three failed coding turns, end the loop even when the other
-- phase's passes clear the error budget in between.
ALTER TABLE loops ADD COLUMN failed_coding_turns INTEGER NOT NULL DEFAULT 0;
ALTER TABLE loops ADD COLUMN failed_audit_turns INTEGER NOT NULL DEFAULT 0;
