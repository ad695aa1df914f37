-- forge-lsp schema v1: the whole store the seeds describe (FORGE-REFERENCE.md §3b adapted
-- to the seeds). Later issues fill tables that exist from here on.
-- Times are epoch milliseconds. project_id is the root-commit hash or 'global'.

-- Loops: one row per loop, updated in place (restart never delete+reinserts).
CREATE TABLE loops (
    project_id             TEXT    NOT NULL,
    loop_name              TEXT    NOT NULL,
    title                  TEXT    NOT NULL DEFAULT '',
    status                 TEXT    NOT NULL CHECK (status IN ('running','completed','cancelled','errored','stalled')),
    phase                  TEXT    NOT NULL CHECK (phase IN ('coding','auditing','post_action')),
    current_session_id     TEXT    NOT NULL,
    standby_session_id     TEXT,
    host_session_id        TEXT,
    project_dir            TEXT    NOT NULL,
    worktree_dir           TEXT    NOT NULL,
    worktree_branch        TEXT,
    base_commit            TEXT,
    max_iterations         INTEGER NOT NULL DEFAULT 0 CHECK (max_iterations >= 0),
    iteration              INTEGER NOT NULL DEFAULT 1,
    audit_count            INTEGER NOT NULL DEFAULT 0,
    error_count            INTEGER NOT NULL DEFAULT 0,
    nudge_count            INTEGER NOT NULL DEFAULT 0,
    stall_count            INTEGER NOT NULL DEFAULT 0,
    current_section_index  INTEGER NOT NULL DEFAULT 0,
    total_sections         INTEGER NOT NULL DEFAULT 0 CHECK (total_sections BETWEEN 0 AND 24),
    execution_model        TEXT,
    auditor_model          TEXT,
    model_failed           INTEGER NOT NULL DEFAULT 0,
    auditor_fallback_index INTEGER NOT NULL DEFAULT 0,
    sandbox                INTEGER NOT NULL DEFAULT 0,
    sandbox_network        INTEGER NOT NULL DEFAULT 0,
    sandbox_container      TEXT,
    owner_pid              INTEGER,
    started_at             INTEGER NOT NULL,
    last_activity_at       INTEGER,
    completed_at           INTEGER,
    termination_reason     TEXT,
    completion_summary     TEXT,
    PRIMARY KEY (project_id, loop_name)
);
CREATE INDEX idx_loops_status ON loops (project_id, status);
CREATE UNIQUE INDEX idx_loops_running_session ON loops (project_id, current_session_id) WHERE status = 'running';
CREATE INDEX idx_loops_terminal ON loops (status, completed_at) WHERE status != 'running';

-- Large display texts of a loop (never decision input).
CREATE TABLE loop_large_fields (
    project_id         TEXT NOT NULL,
    loop_name          TEXT NOT NULL,
    last_audit_result  TEXT,
    post_action_report TEXT,
    PRIMARY KEY (project_id, loop_name),
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);

-- Agent sessions a loop runs. The token is stored hashed (sha-256 hex); a connection that
-- claims session_id must present the token, and is then bound to this loop and role.
CREATE TABLE loop_sessions (
    session_id   TEXT    PRIMARY KEY,
    project_id   TEXT    NOT NULL,
    loop_name    TEXT    NOT NULL,
    role         TEXT    NOT NULL CHECK (role IN ('coder','auditor','post_action')),
    token_hash   TEXT    NOT NULL,
    agent_ref    TEXT,
    status       TEXT    NOT NULL DEFAULT 'idle' CHECK (status IN ('idle','busy','retry','deleted')),
    section_index INTEGER,
    context_tokens INTEGER,
    created_at   INTEGER NOT NULL,
    deleted_at   INTEGER,
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);
CREATE INDEX idx_loop_sessions_loop ON loop_sessions (project_id, loop_name);

-- Plans: exactly one of loop_name (loop-scoped master plan) or session_id (session plan).
CREATE TABLE plans (
    id          INTEGER PRIMARY KEY,
    project_id  TEXT    NOT NULL,
    loop_name   TEXT,
    session_id  TEXT,
    content     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    CHECK ((loop_name IS NULL) <> (session_id IS NULL))
);
CREATE UNIQUE INDEX idx_plans_loop ON plans (project_id, loop_name) WHERE loop_name IS NOT NULL;
CREATE UNIQUE INDEX idx_plans_session ON plans (project_id, session_id) WHERE session_id IS NOT NULL;
CREATE INDEX idx_plans_recent ON plans (project_id, updated_at DESC);

-- Review findings. Identity (write-once): project, loop bucket ('' = outside loops), file,
-- line, section (-1 = cross-section / none). id is a surrogate key for editors and history.
CREATE TABLE review_findings (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id    TEXT    NOT NULL,
    loop_name     TEXT    NOT NULL DEFAULT '',
    file          TEXT    NOT NULL,
    line          INTEGER NOT NULL CHECK (line >= 1),
    section_index INTEGER NOT NULL DEFAULT -1 CHECK (section_index >= -1),
    severity      TEXT    NOT NULL CHECK (severity IN ('bug','warning')),
    description   TEXT    NOT NULL,
    scenario      TEXT,
    created_at    INTEGER NOT NULL,
    UNIQUE (project_id, loop_name, file, line, section_index)
);
CREATE INDEX idx_findings_loop ON review_findings (project_id, loop_name, section_index);
CREATE INDEX idx_findings_file ON review_findings (project_id, file);

-- Milestones of a sectioned loop.
CREATE TABLE section_plans (
    project_id          TEXT    NOT NULL,
    loop_name           TEXT    NOT NULL,
    section_index       INTEGER NOT NULL CHECK (section_index BETWEEN 0 AND 23),
    title               TEXT    NOT NULL,
    content             TEXT    NOT NULL,
    status              TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','in_progress','completed','failed')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    summary_done        TEXT,
    summary_deviations  TEXT,
    summary_follow_ups  TEXT,
    checkpoint_commit   TEXT,
    created_at          INTEGER NOT NULL,
    started_at          INTEGER,
    completed_at        INTEGER,
    PRIMARY KEY (project_id, loop_name, section_index),
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);

-- Handoff records: at most one pending per loop; resolved rows are history.
CREATE TABLE loop_handoffs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id    TEXT    NOT NULL,
    loop_name     TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    role          TEXT    NOT NULL CHECK (role IN ('coder','auditor','post_action')),
    phase         TEXT    NOT NULL CHECK (phase IN ('coding','auditing','post_action')),
    section_index INTEGER,
    iteration     INTEGER NOT NULL,
    payload       TEXT    NOT NULL,
    status        TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','applied','discarded')),
    created_at    INTEGER NOT NULL,
    resolved_at   INTEGER,
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);
CREATE UNIQUE INDEX idx_loop_handoffs_pending ON loop_handoffs (project_id, loop_name) WHERE status = 'pending';
CREATE INDEX idx_loop_handoffs_loop ON loop_handoffs (project_id, loop_name, id);

-- Durable audit-attempt history (coder decisions, checkpoints, outcome, finding snapshots).
CREATE TABLE loop_attempts (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id         TEXT    NOT NULL,
    loop_name          TEXT    NOT NULL,
    scope              TEXT    NOT NULL,
    attempt_number     INTEGER NOT NULL,
    section_index      INTEGER,
    source_session_id  TEXT    NOT NULL,
    completion_key     TEXT    NOT NULL,
    auditor_session_id TEXT,
    iteration          INTEGER NOT NULL,
    worktree_dir       TEXT,
    plan_hash          TEXT,
    coder_decisions    TEXT,
    snapshot_commit    TEXT,
    snapshot_ref       TEXT,
    previous_commit    TEXT,
    diff_summary       TEXT,
    fallback_reason    TEXT,
    findings_before    TEXT    NOT NULL,
    findings_after     TEXT,
    outcome            TEXT    CHECK (outcome IN ('clean','dirty')),
    created_at         INTEGER NOT NULL,
    audited_at         INTEGER,
    UNIQUE (project_id, loop_name, scope, completion_key),
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);
CREATE INDEX idx_loop_attempts_loop ON loop_attempts (project_id, loop_name, id);

-- Token and cost usage per loop session and model.
CREATE TABLE loop_session_usage (
    project_id         TEXT    NOT NULL,
    loop_name          TEXT    NOT NULL,
    session_id         TEXT    NOT NULL,
    model              TEXT    NOT NULL,
    role               TEXT    NOT NULL CHECK (role IN ('code','auditor','unknown')),
    cost               REAL    NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    message_count      INTEGER NOT NULL DEFAULT 0,
    captured_at        INTEGER NOT NULL,
    PRIMARY KEY (project_id, loop_name, session_id, model),
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);

-- One row per persisted phase change; exactly one 'terminate' row per termination.
CREATE TABLE loop_transitions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id      TEXT    NOT NULL,
    loop_name       TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    transition_kind TEXT    NOT NULL,
    from_phase      TEXT    NOT NULL,
    to_phase        TEXT,
    status          TEXT,
    reason          TEXT,
    iteration       INTEGER NOT NULL,
    section_index   INTEGER,
    created_at      INTEGER NOT NULL,
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);
CREATE INDEX idx_loop_transitions_loop ON loop_transitions (project_id, loop_name, id);

-- plan-adjust amendments with before/after snapshots.
CREATE TABLE plan_amendments (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id         TEXT    NOT NULL,
    loop_name          TEXT    NOT NULL,
    source             TEXT    NOT NULL DEFAULT 'auditor',
    rationale          TEXT    NOT NULL,
    applied_at_section INTEGER NOT NULL,
    sections_before    TEXT    NOT NULL,
    sections_after     TEXT    NOT NULL,
    created_at         INTEGER NOT NULL,
    FOREIGN KEY (project_id, loop_name) REFERENCES loops (project_id, loop_name) ON DELETE CASCADE
);

-- Last-used model preferences (execution / auditor) per project.
CREATE TABLE model_preferences (
    project_id TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, key)
);

-- Running server processes, so `forge-lsp call` can find a project's server.
CREATE TABLE servers (
    pid          INTEGER NOT NULL,
    project_id   TEXT    NOT NULL,
    socket_path  TEXT    NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    PRIMARY KEY (pid, project_id)
);

-- Change feed: every write appends here in the same transaction. Each server process tails
-- it to announce changes made by any process (plans → refresh, findings → diagnostics,
-- loops → forge/loopStatus). Old rows are pruned.
CREATE TABLE changes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('plan','finding','loop')),
    key        TEXT    NOT NULL,
    at         INTEGER NOT NULL
);
