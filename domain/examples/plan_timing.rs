//! Times the plan-domain steps of a plan-write on a 2,000-line, 24-section plan
//! (`cargo run --release -p forge-domain --example plan_timing`).

use std::time::Instant;

use forge_domain::plan::{normalize, sanitize, structure};

fn main() {
    let mut plan = String::from("# Plan\n\n## Objective\nShip it.\n\nLoop Name: big-plan\n\n");
    for k in 1..=24 {
        plan.push_str(&format!("<!-- forge-section -->\n## Phase {k}: step\n### Files\n- src/f{k}.rs\n### Edits\n"));
        for i in 0..70 {
            plan.push_str(&format!("- edit {i} of phase {k}: change `fn handler_{i}` to validate its input\n"));
        }
        plan.push_str("### Acceptance Criteria\n- works\n### Verification\n- cargo test\n\n");
    }
    plan.push_str("## Decisions\n- d\n## Conventions\n- c\n## Key Context\n- k\n");
    println!("{} lines", plan.lines().count());
    let n = 50;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(normalize::normalize_plan(&plan).unwrap());
    }
    println!("normalize  {:?}", t.elapsed() / n);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(sanitize::sanitize_paths(&plan, "/work/project", Some("/root")));
    }
    println!("sanitize   {:?}", t.elapsed() / n);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(structure::report(&plan, structure::Outline::Full));
    }
    println!("report     {:?}", t.elapsed() / n);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(forge_domain::plan::decompose::decompose(&plan));
    }
    println!("decompose  {:?}", t.elapsed() / n);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(forge_domain::plan::loop_name::detect(&plan));
    }
    println!("loop name  {:?}", t.elapsed() / n);
}
