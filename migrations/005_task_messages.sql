-- Task control (forge.task-message): messages queued by a loop's owner into a loop
-- session's next turn. The runner prepends the undelivered ones to the next prompt of that
-- session and stamps delivered_at in the same step.
CREATE TABLE task_messages (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id    TEXT    NOT NULL,
    loop_name     TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    sender        TEXT    NOT NULL,
    message       TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    delivered_at  INTEGER,
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);
CREATE INDEX idx_task_messages_inbox ON task_messages (session_id, delivered_at);
