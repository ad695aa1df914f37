-- Loop starts in progress: a row is written before `execute-plan` creates a loop's branch
-- and worktree, and deleted in the transaction that writes the loop's rows (or after a
-- failed start is rolled back). A row whose process is gone is a start that was killed in
-- between: the next loop start removes its worktree and branch (docs/reliability.md).
CREATE TABLE loop_starts (
    worktree_dir TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    loop_name TEXT NOT NULL,
    repo_dir TEXT NOT NULL,
    branch TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    -- The commit the branch was made at, once the worktree exists (null before).
    base_commit TEXT
);
