//! Seed rules of issue 16 over the real binary: attempt checkpoint references, the history
//! document, loop-status details, handoff revalidation, caller-chosen branches, variants,
//! aborted turns, busy sessions and the paths nothing else exercised.

mod common;
mod loop_support;

use common::{assert_contains, git};
use loop_support::*;
use serde_json::{json, Value};

/// Every attempt records a snapshot commit kept by a ref, the previous checkpoint of its
/// scope (base commit, then the previous section's checkpoint, then the previous attempt's
/// snapshot) and a diff summary with +/- counts; review-read attempts returns them; the
/// branch itself gets no snapshot commits.
#[test]
fn attempts_carry_snapshot_refs_previous_checkpoint_and_diff_summary() {
    let t = LoopTest::start("finding", "");
    let name = t.execute("Two halves", TWO_SECTIONS);
    let end = t.wait_end(&name);
    assert_eq!(end["status"], json!("completed"), "{end}{}", t.report());
    let out = t.client.tool_ok("review-read", json!({ "attempts": true, "loopName": name, "limit": 100 }));
    let attempts: Vec<Value> = out.data["attempts"].as_array().expect("attempts").clone();
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    let base = t.strings("SELECT base_commit FROM loops WHERE loop_name = ?1", &name)[0].clone();
    let cp0 = t.strings("SELECT checkpoint_commit FROM section_plans WHERE loop_name = ?1 AND section_index = 0", &name)
        [0]
    .clone();
    let expected_prev = [base.clone(), cp0, attempts[1]["snapshotCommit"].as_str().unwrap_or("?").to_string()];
    let expected_ref = [
        format!("refs/forge/{name}/attempts/section-0-1"),
        format!("refs/forge/{name}/attempts/section-1-1"),
        format!("refs/forge/{name}/attempts/section-1-2"),
    ];
    for (i, a) in attempts.iter().enumerate() {
        let commit = a["snapshotCommit"].as_str().unwrap_or_else(|| panic!("snapshotCommit of {a}"));
        assert_eq!(a["snapshotRef"], json!(expected_ref[i]), "{a}");
        assert_eq!(git(&t.repo.path, &["rev-parse", &expected_ref[i]]).trim(), commit, "the ref keeps the snapshot");
        assert_eq!(a["previousCommit"], json!(expected_prev[i]), "attempt {i}: {a}");
        let diff = a["diffSummary"].as_str().unwrap_or_else(|| panic!("diffSummary of {a}"));
        let line = if i == 0 { "A work.txt +1 -0" } else { "M work.txt +1 -0" };
        assert_eq!(diff, format!("1 file changed, +1 -0\n{line}"), "attempt {i}");
        // The snapshot holds what the coder wrote, on top of the worktree's HEAD.
        let text = git(&t.repo.path, &["show", &format!("{commit}:work.txt")]);
        assert_eq!(text.lines().count(), i + 1, "{text}");
    }
    assert_contains(&out.text, "\"snapshotRef\"");
    let log = t.log(&format!("forge/{name}")).join("\n");
    assert!(!log.contains("forge attempt"), "snapshots never land on the branch: {log}");
}
