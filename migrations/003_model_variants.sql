-- Model variants (seeds "Model Configuration"): the execution and auditor variants a loop
-- runs with, chosen at start (override → matching config value → last-used loop value;
-- the auditor variant never inherits the execution variant) and kept across restarts.
ALTER TABLE loops ADD COLUMN execution_variant TEXT;
ALTER TABLE loops ADD COLUMN auditor_variant TEXT;
