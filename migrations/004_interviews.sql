-- Interview state (forge.interview-submit-state): one row per session of a project, the
-- current spec, the turn's one-line status and its open questions (JSON list of strings).
CREATE TABLE interviews (
    project_id  TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    spec        TEXT    NOT NULL,
    questions   TEXT    NOT NULL DEFAULT '[]',
    turns       INTEGER NOT NULL DEFAULT 1,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (project_id, session_id)
);
CREATE INDEX idx_interviews_recent ON interviews (project_id, updated_at DESC);
