//! `forge.review-read` pages its findings (issue 17): newest first, `limit` and `beforeId`
//! as for attempts, a notice in the text when there are more, and the same with a pattern.

mod common;

use common::*;
use serde_json::{json, Value};

fn ids(v: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = v["findings"].as_array().unwrap().iter().map(|f| f["id"].as_i64().unwrap()).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

#[test]
fn review_read_pages_newest_first() {
    let sb = Sandbox::new();
    let repo = GitRepo::new();
    let mut c = sb.stdio();
    c.init(&Init::new(&repo.path));
    let written: Vec<i64> = (1..=7)
        .map(|l| {
            let d = if l % 2 == 0 { "even finding" } else { "odd finding" };
            c.tool_ok("review-write", json!({ "file": "a.rs", "line": l, "severity": "bug", "description": d })).data
                ["finding"]["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let newest: Vec<i64> = written.iter().rev().copied().collect();

    let first = c.tool_ok("review-read", json!({ "limit": 3 }));
    assert_eq!(ids(&first.data), newest[..3].to_vec());
    let next = first.data["nextBeforeId"].as_i64().expect("a next page");
    assert!(first.text.contains(&format!("beforeId: {next}")), "{}", first.text);
    let second = c.tool_ok("review-read", json!({ "limit": 3, "beforeId": next }));
    assert_eq!(ids(&second.data), newest[3..6].to_vec());
    let third = c.tool_ok("review-read", json!({ "limit": 3, "beforeId": second.data["nextBeforeId"] }));
    assert_eq!(ids(&third.data), newest[6..].to_vec());
    assert_eq!(third.data["nextBeforeId"], Value::Null, "the last page says so");
    assert!(!third.text.contains("beforeId"), "{}", third.text);

    // The default page holds all seven; a pattern pages its matches the same way.
    assert_eq!(ids(&c.tool_ok("review-read", json!({})).data), newest);
    let odd = c.tool_ok("review-read", json!({ "pattern": "odd", "limit": 2 }));
    assert_eq!(odd.data["findings"].as_array().unwrap().len(), 2);
    assert!(odd.data["nextBeforeId"].is_i64());

    for bad in [json!({ "limit": 0 }), json!({ "limit": 5001 }), json!({ "beforeId": -1 })] {
        let e = c.tool_err("review-read", bad.clone());
        assert_eq!(e.code, -32602, "{bad}: {e}");
    }
}
