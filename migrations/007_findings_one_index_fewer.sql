-- One index fewer to update per review-write (issue 17). idx_findings_loop (project, loop,
-- section) served only section-filtered reads of one loop bucket; the id index now carries
-- the section as a trailing column, so a section-filtered page filters on the index alone
-- (no table row read for a finding of another section) while walking the bucket in id
-- order, and section-filtered reads that are not paged go through the unique index.
-- Trade-off (docs/performance.md, issue 17, seventh round): a section-filtered read that
-- matches few of a very large bucket's findings walks the bucket's index entries.
DROP INDEX idx_findings_loop;
DROP INDEX idx_findings_loop_id;
CREATE INDEX idx_findings_loop_id ON review_findings (project_id, loop_name, id, section_index);
