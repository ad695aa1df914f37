-- The process that leads a session's running agent turn (`<pid> <boot id>`,
-- forge_engine::process::Leader), set while the turn runs. A server that dies leaves it
-- set: a restart or cancel from another server then ends what that turn left running.
ALTER TABLE loop_sessions ADD COLUMN agent_process TEXT;
