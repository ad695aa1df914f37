//! Where a hunk's old lines are in a file: tolerant matching, strictest level first.
//!
//! 1. [`MatchLevel::Exact`]: byte-equal lines (line endings aside).
//! 2. [`MatchLevel::TrailingWhitespace`]: equal after trailing blanks are removed.
//! 3. [`MatchLevel::Indentation`]: equal after leading and trailing blanks are removed.
//! 4. [`MatchLevel::Unicode`]: equal after [`fold`]: typographic quotes, dashes,
//!    ellipses and exotic spaces are mapped to ASCII and zero-width characters dropped.
//! 5. [`MatchLevel::Fuzzy`]: the stale-context fallback, a longest-common-subsequence
//!    alignment of the hunk against a bounded window of the file (see `fuzzy`).
//!
//! A level is only tried when every stricter one found nothing. Candidates are counted
//! per level, so an exact match is never beaten by a looser one elsewhere.

use serde::Serialize;
use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::HashMap;

/// How a hunk (or anchor) was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "level")]
pub enum MatchLevel {
    Exact,
    TrailingWhitespace,
    Indentation,
    Unicode,
    /// The stale-context fallback: `matched` of the hunk's `total` non-blank old lines
    /// were found in order.
    Fuzzy {
        matched: usize,
        total: usize,
    },
}

impl std::fmt::Display for MatchLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MatchLevel::Exact => write!(f, "exact"),
            MatchLevel::TrailingWhitespace => write!(f, "ignoring trailing whitespace"),
            MatchLevel::Indentation => write!(f, "ignoring indentation"),
            MatchLevel::Unicode => write!(f, "ignoring unicode punctuation and space variants"),
            MatchLevel::Fuzzy { matched, total } => {
                write!(f, "stale context: {matched} of {total} lines found, the others skipped")
            }
        }
    }
}

/// The line-exact levels, strictest first.
const LEVELS: [MatchLevel; 4] =
    [MatchLevel::Exact, MatchLevel::TrailingWhitespace, MatchLevel::Indentation, MatchLevel::Unicode];

/// Map typographic look-alikes to ASCII: curly and angle quotes, primes, dashes and
/// minus signs, the ellipsis, non-breaking and other exotic spaces; drop zero-width
/// characters and the byte-order mark. Borrowed when nothing changes.
pub fn fold(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut changed = false;
    for c in s.chars() {
        let mapped: Option<&str> =
            match c {
                '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{2039}' | '\u{203A}'
                | '\u{FF07}' => Some("'"),
                '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{00AB}' | '\u{00BB}'
                | '\u{FF02}' => Some("\""),
                '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}' | '\u{2212}'
                | '\u{FE58}' | '\u{FE63}' | '\u{FF0D}' => Some("-"),
                '\u{2026}' => Some("..."),
                '\u{00A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => Some(" "),
                '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}' => Some(""),
                _ => None,
            };
        match mapped {
            Some(m) => {
                changed = true;
                out.push_str(m);
            }
            None => out.push(c),
        }
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(s)
    }
}

/// The comparison key of a line at a level.
fn key(level: MatchLevel, s: &str) -> Cow<'_, str> {
    match level {
        MatchLevel::Exact => Cow::Borrowed(s),
        MatchLevel::TrailingWhitespace => Cow::Borrowed(s.trim_end()),
        MatchLevel::Indentation => Cow::Borrowed(s.trim()),
        MatchLevel::Unicode | MatchLevel::Fuzzy { .. } => match fold(s) {
            Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
            Cow::Owned(o) => Cow::Owned(o.trim().to_string()),
        },
    }
}

fn level_index(level: MatchLevel) -> usize {
    match level {
        MatchLevel::Exact => 0,
        MatchLevel::TrailingWhitespace => 1,
        MatchLevel::Indentation => 2,
        MatchLevel::Unicode | MatchLevel::Fuzzy { .. } => 3,
    }
}

/// The lines of one file version with their comparison keys, computed once per level
/// on first use.
pub(crate) struct Haystack<'a> {
    lines: &'a [&'a str],
    keys: [OnceCell<Vec<Cow<'a, str>>>; 4],
}

/// The outcome of a search that must be unique.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    One(usize, MatchLevel),
    /// 0-based starts of the candidates at the first level that had any (or, from
    /// [`Haystack::nearest`], a loose place and a stricter one after it).
    Many(Vec<usize>),
    None,
}

/// How many candidates an ambiguity error lists at most.
const MAX_CANDIDATES: usize = 10;

impl<'a> Haystack<'a> {
    pub(crate) fn new(lines: &'a [&'a str]) -> Self {
        Haystack { lines, keys: Default::default() }
    }

    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    fn keys(&self, level: MatchLevel) -> &[Cow<'a, str>] {
        self.keys[level_index(level)].get_or_init(|| self.lines.iter().map(|l| key(level, l)).collect())
    }

    /// Starts `p` in `lo..` with `p + needle.len() <= hi` where the needle matches at
    /// `level`, in order, at most `limit`.
    fn starts(&self, level: MatchLevel, needle: &[&str], lo: usize, hi: usize, limit: usize) -> Vec<usize> {
        let m = needle.len();
        let mut found = Vec::new();
        if m == 0 || hi < m || lo > hi - m {
            return found;
        }
        let keys = self.keys(level);
        let needle: Vec<Cow<'_, str>> = needle.iter().map(|l| key(level, l)).collect();
        // Knuth-Morris-Pratt over lines: every start, overlapping ones included, in
        // O(n + m) line comparisons. (Comparing at every start was O(n * m): a hunk of
        // 20,000 equal lines against a file of 40,000 took seconds.)
        let fail = crate::text::kmp_failure(&needle);
        let mut k = 0;
        for (p, line) in keys.iter().enumerate().take(hi).skip(lo) {
            while k > 0 && *line != needle[k] {
                k = fail[k - 1];
            }
            if *line == needle[k] {
                k += 1;
            }
            if k == m {
                found.push(p + 1 - m);
                if found.len() >= limit {
                    break;
                }
                k = fail[k - 1];
            }
        }
        found
    }

    /// The only place in `lo..hi` where `needle` fits, at the strictest level with any.
    pub(crate) fn unique(&self, needle: &[&str], lo: usize, hi: usize) -> Found {
        for level in LEVELS {
            let starts = self.starts(level, needle, lo, hi, MAX_CANDIDATES);
            match starts.len() {
                0 => continue,
                1 => return Found::One(starts[0], level),
                _ => return Found::Many(starts),
            }
        }
        Found::None
    }

    /// The first place in `lo..hi` where `needle` fits at any level, with the strictest
    /// level that fits there. (Each level's matches include the stricter levels' ones,
    /// so the loosest level finds the nearest place.)
    pub(crate) fn first(&self, needle: &[&str], lo: usize, hi: usize) -> Option<(usize, MatchLevel)> {
        let p = *self.starts(MatchLevel::Unicode, needle, lo, hi, 1).first()?;
        self.at(needle, p).map(|level| (p, level))
    }

    /// What an anchored hunk takes (not an anchor: `@@` lines are trimmed, so an indented
    /// line is their usual match): the nearest place in `lo..hi` where `needle` fits
    /// ([`Haystack::first`]), unless it fits there only ignoring indentation or Unicode
    /// variants while it fits with its indentation further on in `lo..scope_end` (the
    /// anchor's block): then both places ([`Found::Many`]). Either would be a guess: the
    /// nearer one may be a nested line the hunk's indentation does not name (it was edited,
    /// and re-indented, in place of the exact line below it). An exact line past the
    /// anchor's block (another function's) does not count.
    pub(crate) fn nearest(&self, needle: &[&str], lo: usize, hi: usize, scope_end: usize) -> Found {
        let Some((p, level)) = self.first(needle, lo, hi) else { return Found::None };
        if matches!(level, MatchLevel::Indentation | MatchLevel::Unicode) {
            for strict in [MatchLevel::Exact, MatchLevel::TrailingWhitespace] {
                if let Some(&q) = self.starts(strict, needle, p + 1, scope_end.min(hi), 1).first() {
                    return Found::Many(vec![p, q]);
                }
            }
        }
        Found::One(p, level)
    }

    /// The end of the block an anchor at line `at` opens: the first non-blank line after
    /// it indented no deeper than it (a closing `}` at its level, the next definition), or
    /// the end of the file.
    pub(crate) fn block_end(&self, at: usize) -> usize {
        let indent = |l: &str| l.len() - l.trim_start_matches([' ', '\t']).len();
        let own = self.lines.get(at).map_or(0, |l| indent(l));
        (at + 1..self.lines.len())
            .find(|&j| !self.lines[j].trim().is_empty() && indent(self.lines[j]) <= own)
            .unwrap_or(self.lines.len())
    }

    /// Whether `needle` fits exactly at `p` at some level: the strictest one.
    pub(crate) fn at(&self, needle: &[&str], p: usize) -> Option<MatchLevel> {
        LEVELS.into_iter().find(|&level| !self.starts(level, needle, p, p + needle.len(), 1).is_empty())
    }
}

/// A stale-context match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FuzzyMatch {
    /// For each old line of the hunk, the file line it was aligned with.
    pub alignment: Vec<Option<usize>>,
    /// The file lines from the first to the last aligned one (`start..end`).
    pub start: usize,
    pub end: usize,
    /// Non-blank old lines found, and their total.
    pub matched: usize,
    pub total: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fuzzy {
    Found(FuzzyMatch),
    /// 0-based starts of equally good, disjoint candidates.
    Ambiguous(Vec<usize>),
    /// Refused: why, in words.
    Weak(String),
}

/// Hunks longer than this (old lines) get no fallback.
pub(crate) const FUZZY_MAX_LINES: usize = 200;
/// The alignment tables of one fallback hold at most about this many cells in total
/// (each window is aligned up to three times) ...
const FUZZY_MAX_CELLS: usize = 1_500_000;
/// ... but at least this many windows are always allowed, and never more than this.
const FUZZY_MIN_WINDOWS: usize = 16;
const FUZZY_MAX_WINDOWS: usize = 512;
/// A line occurring more often than this in the searched range is not used to seed windows.
const FUZZY_MAX_SEED_HITS: usize = 64;

/// Whether enough of the hunk was found: every removed line, at least two thirds of
/// the non-blank old lines and at least two of them (one when the hunk has one).
fn strong_enough(m: &FuzzyMatch, removed: &[bool]) -> Result<(), String> {
    if let Some(j) = removed.iter().zip(&m.alignment).position(|(&r, a)| r && a.is_none()) {
        return Err(format!("line {} of the hunk, which it removes, is not there", j + 1));
    }
    if m.matched * 3 < m.total * 2 || m.matched < m.total.min(2) {
        return Err(format!("only {} of its {} lines are there (two thirds needed)", m.matched, m.total));
    }
    Ok(())
}

/// The stale-context fallback. The old lines of a hunk (`old`, with `removed` telling
/// the `-` ones) are aligned, line by line after [`fold`] and trimming, with windows of
/// the file in `lo..hi`. Windows are seeded where the hunk's less common lines occur and
/// are a little larger than the hunk; each alignment is a weighted longest common
/// subsequence (non-blank lines outweigh all blank ones together). The best candidate
/// must be strong enough (see [`strong_enough`]) and unique: another valid candidate as
/// good that does not overlap it makes the hunk ambiguous. With `at_eof`, only blank
/// lines may follow the match.
pub(crate) fn fuzzy(hay: &Haystack<'_>, old: &[&str], removed: &[bool], lo: usize, hi: usize, at_eof: bool) -> Fuzzy {
    let m = old.len();
    if m > FUZZY_MAX_LINES {
        return Fuzzy::Weak(format!("the hunk has {m} old lines, too many for the stale-context fallback"));
    }
    if lo >= hi {
        return Fuzzy::Weak("no lines are left to search".to_string());
    }
    let needle: Vec<Cow<'_, str>> = old.iter().map(|l| key(MatchLevel::Unicode, l)).collect();
    let total = needle.iter().filter(|k| !k.is_empty()).count();
    if total == 0 {
        return Fuzzy::Weak("the hunk has only blank old lines".to_string());
    }
    // Intern the hunk's keys; file lines get the id of an equal hunk key, or none.
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let needle_ids: Vec<u32> = needle
        .iter()
        .map(|k| {
            let next = ids.len() as u32;
            *ids.entry(k.as_ref()).or_insert(next)
        })
        .collect();
    let keys = hay.keys(MatchLevel::Unicode);
    let file_ids: Vec<Option<u32>> = keys[lo..hi].iter().map(|k| ids.get(k.as_ref()).copied()).collect();
    let is_blank: Vec<bool> = needle.iter().map(|k| k.is_empty()).collect();

    // Seed windows: each occurrence of a non-blank, not too common hunk line votes for
    // the start its position implies.
    let mut hits: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, id) in file_ids.iter().enumerate() {
        if let Some(id) = id {
            hits.entry(*id).or_default().push(lo + i);
        }
    }
    let mut votes: HashMap<isize, usize> = HashMap::new();
    let mut too_common = false;
    for (j, id) in needle_ids.iter().enumerate() {
        if is_blank[j] {
            continue;
        }
        let Some(at) = hits.get(id) else { continue };
        if at.len() > FUZZY_MAX_SEED_HITS {
            too_common = true;
            continue;
        }
        for &i in at {
            *votes.entry(i as isize - j as isize).or_default() += 1;
        }
    }
    if votes.is_empty() {
        let why = if too_common { "its lines are too common to place it" } else { "none of its lines are in it" };
        return Fuzzy::Weak(why.to_string());
    }
    let mut seeds: Vec<(isize, usize)> = votes.into_iter().collect();
    seeds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let slack = (4 + m / 4).min(32) as isize;
    let mut windows: Vec<(usize, usize)> = if at_eof {
        // One window: the end of the file.
        vec![(hi.saturating_sub(m + 2 * slack as usize).max(lo), hi)]
    } else {
        seeds
            .iter()
            .map(|&(s, _)| {
                let a = (s - slack).max(lo as isize) as usize;
                let b = ((s + m as isize + slack).min(hi as isize) as usize).max(a);
                (a, b)
            })
            .collect()
    };
    // Drop windows that cannot hold enough of the hunk whatever the order: the count of
    // hunk lines present (as a multiset) bounds the alignment from above.
    let need = (total * 2).div_ceil(3).max(total.min(2));
    let mut wanted = vec![0usize; ids.len()];
    for (j, id) in needle_ids.iter().enumerate() {
        if !is_blank[j] {
            wanted[*id as usize] += 1;
        }
    }
    let mut seen = vec![0usize; ids.len()];
    windows.retain(|&(a, b)| {
        seen.iter_mut().for_each(|c| *c = 0);
        let mut bound = 0;
        for id in file_ids[a - lo..b - lo].iter().flatten() {
            let id = *id as usize;
            if seen[id] < wanted[id] {
                seen[id] += 1;
                bound += 1;
            }
        }
        bound >= need
    });
    // The alignment work is bounded: too many plausible places is a refusal, never a
    // partial search that could miss a rival.
    let cells_per_window = (m + 1) * (m + 2 * slack as usize + 1);
    let max_windows = (FUZZY_MAX_CELLS / cells_per_window).clamp(FUZZY_MIN_WINDOWS, FUZZY_MAX_WINDOWS);
    if windows.len() > max_windows {
        return Fuzzy::Weak(format!("its lines fit {} places, too many for the stale-context fallback", windows.len()));
    }
    if windows.is_empty() {
        let (s, v) = seeds[0];
        return Fuzzy::Weak(format!(
            "no place has two thirds of its {total} lines (the closest, near line {}, has {v})",
            s.max(lo as isize) + 1
        ));
    }

    let mut aligner =
        Aligner { needle_ids: &needle_ids, is_blank: &is_blank, file_ids: &file_ids, lo, table: Vec::new() };
    let tail_blank = |end: usize| keys[end..hi].iter().all(|k| k.is_empty());
    let valid = |fm: &FuzzyMatch| strong_enough(fm, removed).is_ok() && (!at_eof || tail_blank(fm.end));

    let mut best: Option<FuzzyMatch> = None;
    let mut closest: Option<FuzzyMatch> = None;
    for &(a, b) in &windows {
        let Some(fm) = aligner.align(a, b, total) else { continue };
        if valid(&fm) {
            if best.as_ref().is_none_or(|x| fm.matched > x.matched) {
                best = Some(fm);
            }
        } else if closest.as_ref().is_none_or(|x| fm.matched > x.matched) {
            closest = Some(fm);
        }
    }
    let Some(best) = best else {
        let Some(c) = closest else {
            return Fuzzy::Weak("none of its lines are in it".to_string());
        };
        let why = strong_enough(&c, removed).err().unwrap_or_else(|| "it does not end the file".to_string());
        return Fuzzy::Weak(format!("at the closest place (line {}) {why}", c.start + 1));
    };
    // Uniqueness: realign every window with the best region cut out.
    let mut rivals: Vec<usize> = Vec::new();
    for &(a, b) in &windows {
        let pieces = [(a, b.min(best.start)), (a.max(best.end), b)];
        for (pa, pb) in pieces {
            if pa >= pb {
                continue;
            }
            if let Some(fm) = aligner.align(pa, pb, total) {
                if valid(&fm) && fm.matched >= best.matched && !rivals.contains(&fm.start) {
                    rivals.push(fm.start);
                }
            }
        }
    }
    if rivals.is_empty() {
        Fuzzy::Found(best)
    } else {
        rivals.push(best.start);
        rivals.sort_unstable();
        rivals.truncate(MAX_CANDIDATES);
        Fuzzy::Ambiguous(rivals)
    }
}

struct Aligner<'s> {
    needle_ids: &'s [u32],
    is_blank: &'s [bool],
    /// Ids of the file lines from `lo` on.
    file_ids: &'s [Option<u32>],
    lo: usize,
    table: Vec<u32>,
}

impl Aligner<'_> {
    /// Weighted LCS of the hunk against file lines `a..b`; `None` when nothing aligns.
    fn align(&mut self, a: usize, b: usize, total: usize) -> Option<FuzzyMatch> {
        let m = self.needle_ids.len();
        let w = b - a;
        let heavy = m as u32 + 1;
        let weight = |j: usize| if self.is_blank[j] { 1 } else { heavy };
        let cols = w + 1;
        self.table.clear();
        self.table.resize((m + 1) * cols, 0);
        let file = &self.file_ids[a - self.lo..b - self.lo];
        for j in 1..=m {
            let id = self.needle_ids[j - 1];
            let wt = weight(j - 1);
            for i in 1..=w {
                let up = self.table[(j - 1) * cols + i];
                let left = self.table[j * cols + i - 1];
                let mut v = up.max(left);
                if file[i - 1] == Some(id) {
                    v = v.max(self.table[(j - 1) * cols + i - 1] + wt);
                }
                self.table[j * cols + i] = v;
            }
        }
        if self.table[m * cols + w] == 0 {
            return None;
        }
        let mut alignment = vec![None; m];
        let (mut j, mut i) = (m, w);
        while j > 0 && i > 0 {
            let here = self.table[j * cols + i];
            if file[i - 1] == Some(self.needle_ids[j - 1]) && here == self.table[(j - 1) * cols + i - 1] + weight(j - 1)
            {
                alignment[j - 1] = Some(a + i - 1);
                j -= 1;
                i -= 1;
            } else if self.table[(j - 1) * cols + i] >= self.table[j * cols + i - 1] {
                j -= 1;
            } else {
                i -= 1;
            }
        }
        let start = alignment.iter().flatten().next().copied()?;
        let end = alignment.iter().flatten().last().copied()? + 1;
        let matched = alignment.iter().zip(self.is_blank).filter(|(x, &blank)| x.is_some() && !blank).count();
        Some(FuzzyMatch { alignment, start, end, matched, total })
    }
}
