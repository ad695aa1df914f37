-- One index fewer to update per review-write (issue 17). idx_findings_loop (project, loop,
-- section) served only section-filtered pages; the id index now carries the section as a
-- trailing column, so those pages filter on the index alone (no table row read for a
-- finding of another section) while walking a bucket in id order. Section-filtered
-- queries that are not paged read the bucket through the unique index, in its order.
-- Trade-off (docs/performance.md, issue 17, seventh round): a page of a section that has
-- few of a very large bucket's findings walks the bucket's index entries.
DROP INDEX idx_findings_loop;
DROP INDEX idx_findings_loop_id;
CREATE INDEX idx_findings_loop_id ON review_findings (project_id, loop_name, id, section_index);
