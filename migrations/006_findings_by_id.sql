-- Review-read pages (newest first): walk a loop bucket's findings in id order through an
-- index instead of sorting the whole bucket for every page (issue 17).
CREATE INDEX idx_findings_loop_id ON review_findings (project_id, loop_name, id);
