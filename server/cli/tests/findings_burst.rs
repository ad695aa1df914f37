//! Coalescing of findings diagnostics (PROTOCOL.md §6): a burst of 1,000 writes to 50
//! files publishes each file about once per 5 s of burst (the publisher waits for 50 ms
//! of quiet and holds a continuous burst at most 5 s), and ends with every file's full set.
//!
//! Alone in its own test binary, so other tests do not compete with the burst.

mod common;
mod findings_support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use findings_support::*;

const FILES: usize = 50;
const PER_FILE: usize = 20;

#[test]
fn a_burst_of_writes_is_coalesced_and_ends_exact() {
    let (sb, repo) = setup();
    for f in 0..FILES {
        let text: String = (1..=PER_FILE + 5).map(|l| format!("line {l} of file {f}\n")).collect();
        repo.write(&format!("burst/f{f:02}.rs"), &text);
    }
    let mut c = connect(&sb, Init::new(&repo.path));
    let uris: Vec<String> = (0..FILES).map(|f| uri_in(&repo.path, &format!("burst/f{f:02}.rs"))).collect();
    // Let the (empty) initial publication pass before measuring.
    settle();

    let mark = c.mark();
    let mut ids: HashMap<String, HashSet<i64>> = HashMap::new();
    let mut slow = 0usize;
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for k in 0..FILES * PER_FILE {
        // Round robin: every file is written throughout the burst.
        let (f, line) = (k % FILES, (k / FILES + 1) as i64);
        let sent = Instant::now();
        let file = format!("burst/f{f:02}.rs");
        let id = write_bug(&c, &file, line)["id"].as_i64().expect("id");
        let took = sent.elapsed();
        slowest = slowest.max(took);
        if took >= Duration::from_millis(50) {
            // A pause long enough to end a burst may legitimately start a new batch.
            slow += 1;
        }
        ids.entry(uris[f].clone()).or_default().insert(id);
    }
    let burst = started.elapsed();
    let window_end = Instant::now() + Duration::from_secs(1);
    std::thread::sleep(Duration::from_secs(1));

    // Publications per file during the burst and one second after it.
    let counts: BTreeMap<String, usize> = c.with_recorded(|r| {
        let mut m = BTreeMap::new();
        for n in &r.notifications[mark.notifications..] {
            if n.method() == PUBLISH && n.at <= window_end {
                if let Some(u) = n.params()["uri"].as_str() {
                    *m.entry(u.to_string()).or_insert(0) += 1;
                }
            }
        }
        m
    });
    // A batch ends after a 50 ms quiet period (a slow write may cause one) or after the
    // 5 s hold; each batch publishes a file at most once. The bound follows from those
    // two rules only, not from how long the burst took.
    let windows = (burst.as_secs_f64() / 5.0).ceil().max(1.0) as usize;
    let bound = windows + 1 + slow;
    let max = counts.values().copied().max().unwrap_or(0);
    // Histogram: publications → number of files published that often.
    let mut histogram: BTreeMap<usize, usize> = BTreeMap::new();
    for u in &uris {
        *histogram.entry(counts.get(u).copied().unwrap_or(0)).or_insert(0) += 1;
    }
    println!(
        "burst of {} writes took {burst:?} ({windows} five-second holds); slowest write {slowest:?}, \
         {slow} writes of 50 ms or more; publications per file: max {max}, bound {bound}; \
         files by publication count: {histogram:?}",
        FILES * PER_FILE
    );
    for u in &uris {
        let n = counts.get(u).copied().unwrap_or(0);
        assert!(n <= bound, "{u} was published {n} times during a {burst:?} burst (bound {bound})");
    }

    // The final state is exact: every file ends with exactly its 20 findings.
    for u in &uris {
        let want = &ids[u];
        let got = expect_diags(&c, mark, u, "its 20 findings", |d| {
            d.len() == PER_FILE && d.iter().all(|x| x["code"].as_i64().is_some_and(|id| want.contains(&id)))
        });
        let lines: HashSet<u64> = got.iter().map(|d| range(d).0).collect();
        assert_eq!(lines.len(), PER_FILE, "{u}: {got:?}");
    }
    // And stays so: the latest publication of every file is the full set.
    settle();
    for u in &uris {
        assert_eq!(c.latest_diagnostics(u).map(|d| d.len()), Some(PER_FILE), "{u}");
    }
    assert!(c.is_alive(), "the server died{}", c.diagnostics());
}
