//! `forge.grep`: a gitignore-aware regex search of the caller's root on ripgrep's crates
//! (`ignore` for the walk, `grep-regex` + `grep-searcher` for matching, `globset` for
//! `include`), confined to the root, with the path guard of [`crate::files::search_path`].
//! Runs off the store thread ([`ToolCtx::after`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use forge_protocol::{CommandResult, ToolError};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{Searcher, Sink, SinkMatch};
use grep_searcher::{BinaryDetection, SearcherBuilder};
use serde_json::json;

use super::ToolCtx;
use crate::files::{caller_root, search_path};

pub const NEEDS_SERVER: bool = false;

/// Only reads the store: runs on a read connection, beside writes (crate docs).
pub const READ_ONLY: bool = true;

pub const WHEN_ABANDONED: crate::Abandoned = crate::Abandoned::Finish;

pub const DESCRIPTION: &str = "Search file contents under your root (the project, or your loop's worktree) with a regular expression, respecting .gitignore. pattern is required; path narrows the search to a directory or file (it must exist: a missing or non-directory component is an error naming it); include keeps files whose root-relative path matches a glob (e.g. *.rs); caseSensitive defaults to true; limit (default 200, at most 5000) caps the lines returned. Output: one `path:line: text` line per match, then a count.";

pub type Input = forge_protocol::inputs::GrepInput;

const DEFAULT_LIMIT: u32 = 200;
const MAX_LIMIT: u32 = 5000;

pub fn execute(input: Input, ctx: &mut ToolCtx) -> Result<CommandResult, ToolError> {
    if input.pattern.is_empty() {
        return Err(ToolError::invalid_params("invalid argument `pattern`: must not be empty"));
    }
    let limit = input.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ToolError::invalid_params(format!(
            "invalid argument `limit`: must be between 1 and {MAX_LIMIT}, got {limit}"
        )));
    }
    let root = caller_root(ctx)?;
    let start = search_path(&root, input.path.as_deref())?;
    crate::files::outside_git(&root, &start, input.path.as_deref())?;
    // Compiled off the caller's thread, with the search: a large pattern can take seconds
    // to compile, and a read-only tool's own part runs on the server's async workers.
    let cancel = ctx.cancel_flag();
    ctx.after = Some(Box::new(move || {
        // Lines are searched one at a time, so no match spans a line break. A pattern with
        // a line break in it (`a\nb`, `a\n?`) cannot be built with `\n` as the line
        // terminator (grep-regex refuses every literal `\n`, also an optional one): it is
        // built without, as before, matches what it can within a line, and an empty result
        // says why (it answered a bare "No matches found" for text that is there).
        let case_insensitive = !input.case_sensitive.unwrap_or(true);
        let build = |line_terminated: bool| {
            let mut b = RegexMatcherBuilder::new();
            b.case_insensitive(case_insensitive);
            // `$` matches before `\r\n` too, as before `\n` (review YB: never at the end
            // of a CRLF line). `crlf` sets the terminator to `\r\n`: set again after it.
            // `multi_line`, as ripgrep sets it: the anchors are a line's, and CRLF mode only
            // applies to them so.
            b.multi_line(true).crlf(true);
            b.line_terminator(line_terminated.then_some(b'\n'));
            b.build(&input.pattern)
        };
        let invalid = |e: grep_regex::Error| {
            // The builder reports the pattern as it wrapped it (`(?:(` for `(`); an
            // error found by parsing and translating the caller's pattern alone (a
            // syntax error, an unknown class such as `\p{Nope}`) names it and its
            // column. Anything else (a size limit) is the builder's own error.
            let own = regex_syntax::ParserBuilder::new()
                .utf8(false) // as grep-regex translates (a `(?-u:\xFF)` is a pattern)
                .case_insensitive(case_insensitive)
                .build()
                .parse(&input.pattern);
            let e = match own {
                Err(own) => forge_domain::text::cut_error(own),
                Ok(_) => forge_domain::text::cut_error(e),
            };
            let p = forge_domain::text::echo(&input.pattern);
            ToolError::invalid(format!("grep failed: invalid regex {p}: {e}"))
        };
        let (matcher, holds_line_break) = match build(true) {
            Ok(m) => (m, false),
            Err(e) if matches!(e.kind(), grep_regex::ErrorKind::NotAllowed(_)) => (build(false).map_err(invalid)?, true),
            Err(e) => return Err(invalid(e)),
        };
        let include = match input.include.as_deref().filter(|g| !g.is_empty()) {
            Some(g) => Some(
                globset::Glob::new(g)
                    .and_then(|g| globset::GlobSetBuilder::new().add(g).build())
                    .map_err(|e| super::glob::invalid_glob("grep failed: invalid glob `include`", g, e))?,
            ),
            None => None,
        };
        search(&root, &start, &matcher, include.as_ref(), limit as usize, holds_line_break, &cancel)
    }));
    Ok(CommandResult { text: String::new(), data: forge_protocol::Data::default() })
}

/// Files handed to a worker at once, consecutive in the walk's order: one hand-over per
/// file cost more than reading a small file (the bench's tree took 20–40% longer).
const BATCH: usize = 64;

/// Batches a search may hand out before the first of them unanswered is in, per worker:
/// the matches of at most this many batches wait to be put in order.
const WINDOW_PER_WORKER: usize = 4;

/// The most threads a search reads files on.
const MAX_WORKERS: usize = 4;

/// What searching one file gave.
enum Searched {
    /// Searched to its end, or to one match more than its room (`full`); a binary file's
    /// matches are dropped.
    Done { hits: Vec<(u64, String)>, full: bool, binary: bool },
    /// Failed: not opened, not read, a line over [`MAX_LINE_BUFFER`]; `hits` found before
    /// that (a worker searches with more room than the answer may have left, so it can read
    /// further than a search one file after another, which stopped at its limit before
    /// the failure: review YH), with `binary` telling whether the file holds a NUL byte.
    Failed { error: std::io::Error, hits: Vec<(u64, String)>, binary: bool },
    /// The search of this file panicked (a bug): the call fails.
    Panicked,
}

/// Walks on one thread and reads the files on up to [`MAX_WORKERS`] others, [`BATCH`]
/// files at a time (ripgrep's second thread almost halves its time on the bench's tree,
/// where reading the files is about 80% of the work), and takes their answers in the
/// walk's order: the reply is the one a search of one file after another gives (the same
/// matches, the same `limit` cut, the same count of files), and the search still stops
/// early at the limit. At most [`WINDOW_PER_WORKER`] batches a worker are ahead of the
/// first unanswered one, and a batch holds at most the matches the reply has room for.
fn search(
    root: &Path,
    start: &Path,
    matcher: &grep_regex::RegexMatcher,
    include: Option<&globset::GlobSet>,
    limit: usize,
    holds_line_break: bool,
    cancel: &AtomicBool,
) -> Result<CommandResult, ToolError> {
    let mut answer = Answer::new(limit);
    // Each file is opened relative to the root without following a link (as the other
    // file tools read): the walk follows none, so a walked path is the start's real place
    // (its links resolved once, inside the root) and the rest as listed; a directory or
    // file swapped for a link since it was listed is refused, never read through.
    let start_rel = crate::files::real_rel(root, start).map_err(ToolError::invalid_params)?;
    // Hidden files are searched, git's own directories (the root's and nested ones) never.
    let walk = crate::files::walk(root, start);
    // Tests hold the search here to cancel it mid-walk.
    forge_engine::pause::at_blocking("grep.walk");
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_WORKERS);
    let window = workers * WINDOW_PER_WORKER;
    // Set when the answer is complete (the limit, a failure): the walk and the workers stop.
    let stop = AtomicBool::new(false);
    // How many more matches the reply may take: a worker keeps no more of one batch.
    let room = AtomicUsize::new(limit);
    let (job_tx, job_rx) = mpsc::sync_channel::<(usize, Vec<std::path::PathBuf>)>(window);
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = mpsc::channel::<(usize, Vec<(String, Searched)>)>();
    // A ticket per batch that may be handed out; one comes back as each is put in order.
    let (ticket_tx, ticket_rx) = mpsc::sync_channel::<()>(window);
    for _ in 0..window {
        let _ = ticket_tx.send(());
    }
    let taken = std::thread::scope(|scope| -> Result<(), ToolError> {
        let (stop, room, job_rx) = (&stop, &room, &job_rx);
        scope.spawn(move || {
            let mut seq = 0;
            let mut batch = Vec::with_capacity(BATCH);
            let mut hand_over = |batch: &mut Vec<std::path::PathBuf>| {
                let ok = ticket_rx.recv().is_ok() && job_tx.send((seq, std::mem::take(batch))).is_ok();
                seq += 1;
                ok
            };
            for entry in walk {
                if stop.load(Ordering::Acquire) || crate::files::gave_up(cancel) {
                    return;
                }
                let Ok(entry) = entry else { continue };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
                if include.is_some_and(|g| !g.is_match(rel)) {
                    continue;
                }
                batch.push(entry.into_path());
                if batch.len() == BATCH && !hand_over(&mut batch) {
                    return;
                }
            }
            if !batch.is_empty() {
                hand_over(&mut batch);
            }
        });
        for _ in 0..workers {
            let done_tx = done_tx.clone();
            let start_rel = &start_rel;
            scope.spawn(move || {
                let mut searcher = SearcherBuilder::new()
                    .binary_detection(BinaryDetection::quit(0))
                    .line_number(true)
                    .heap_limit(Some(MAX_LINE_BUFFER))
                    .build();
                let mut reader = forge_core::beneath::Reader::new(root);
                // The answer is complete, or its caller gave up: the file being read is
                // left at its next read, the batch's other files are not opened (review
                // YH: a cancelled search read on through up to 64 files).
                let halted = || stop.load(Ordering::Acquire) || crate::files::gave_up(cancel);
                loop {
                    let job = job_rx.lock().map_err(|_| ()).and_then(|rx| rx.recv().map_err(|_| ()));
                    let Ok((seq, paths)) = job else { break };
                    // What the batch's files searched so far keep: the room of the next one
                    // is the reply's, less that (the files of batches before it may keep
                    // more, which the answer's order settles).
                    let mut kept = 0;
                    let mut out = Vec::with_capacity(paths.len());
                    let mut panicked = false;
                    for path in paths {
                        if halted() {
                            break;
                        }
                        let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
                        let left = room.load(Ordering::Acquire).saturating_sub(kept);
                        let searched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            search_file(&mut searcher, &mut reader, matcher, left, start, start_rel, &path, &halted)
                        }))
                        .unwrap_or(Searched::Panicked);
                        // A file with more matches than room ends the answer at the latest
                        // there: the batch's later files are not needed.
                        let over = match &searched {
                            Searched::Done { hits, full, binary: false } => {
                                kept += hits.len();
                                *full
                            }
                            Searched::Failed { hits, .. } => hits.len() > left,
                            Searched::Panicked => {
                                panicked = true;
                                true
                            }
                            Searched::Done { .. } => false,
                        };
                        out.push((shown, searched));
                        if over {
                            break;
                        }
                    }
                    // After a panic this thread's searcher and reader are in no known state:
                    // it ends (its batch is sent, and the call fails at that file).
                    if done_tx.send((seq, out)).is_err() || panicked {
                        break;
                    }
                }
            });
        }
        drop(done_tx);
        // The answers in the walk's order, then the end for the walk and the workers.
        let taken = (|| {
            let mut ticket_tx = Some(ticket_tx);
            let mut waiting = std::collections::BTreeMap::new();
            let mut next = 0;
            for (seq, batch) in done_rx.iter() {
                waiting.insert(seq, batch);
                while let Some(batch) = waiting.remove(&next) {
                    next += 1;
                    for (shown, searched) in batch {
                        if crate::files::gave_up(cancel) || !answer.take(shown, searched)? {
                            return Ok(());
                        }
                        room.store(answer.room(), Ordering::Release);
                    }
                    if ticket_tx.as_ref().is_some_and(|t| t.send(()).is_err()) {
                        ticket_tx = None;
                    }
                }
            }
            Ok(())
        })();
        stop.store(true, Ordering::Release);
        taken
    });
    taken?;
    if crate::files::gave_up(cancel) {
        return Err(crate::files::search_cancelled("grep"));
    }
    Ok(answer.reply(holds_line_break))
}

/// The reply of a search, made of its files' answers taken in the walk's order.
struct Answer {
    limit: usize,
    lines: Vec<String>,
    hits: Vec<serde_json::Value>,
    truncated: bool,
    files: usize,
    unreadable: Vec<String>,
    long_lines: Vec<String>,
}

impl Answer {
    fn new(limit: usize) -> Answer {
        Answer {
            limit,
            lines: vec![],
            hits: vec![],
            truncated: false,
            files: 0,
            unreadable: vec![],
            long_lines: vec![],
        }
    }

    /// How many more matches the reply may take.
    fn room(&self) -> usize {
        self.limit - self.lines.len()
    }

    /// Takes the next file's answer; `false` once the reply is full (`truncated`). Running
    /// out of file descriptors, or a panic, fails the whole search.
    fn take(&mut self, shown: String, searched: Searched) -> Result<bool, ToolError> {
        self.files += 1;
        let left = self.room();
        let (found, full, binary) = match searched {
            Searched::Done { hits, full, binary } => (hits, full, binary),
            // A search of one file after another stopped at its limit before the failure,
            // as full.
            Searched::Failed { hits, binary, .. } if hits.len() > left => (hits, true, binary),
            Searched::Panicked => {
                return Err(ToolError::internal(format!(
                    "grep failed while searching {shown} (an internal error; the server's log has it)"
                )));
            }
            Searched::Failed { error: e, .. } => {
                // Out of descriptors is the server's state, not the file's: the whole search
                // fails, rather than answering with files silently left out.
                if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) {
                    return Err(ToolError::internal(format!(
                        "grep stopped at {shown}: the server is out of file descriptors ({e}); try again when fewer searches run"
                    )));
                }
                tracing::debug!("grep: cannot search {shown}: {e}");
                // The searcher's buffer limit (a line over MAX_LINE_BUFFER) is its only error
                // that is not the file's I/O.
                if e.to_string().contains("allocation limit") {
                    self.long_lines.push(shown);
                } else {
                    self.unreadable.push(shown);
                }
                return Ok(true);
            }
        };
        // A binary file (a NUL byte anywhere it was read) gives no matches, also none found
        // before the NUL byte.
        if binary {
            return Ok(true);
        }
        for (line, text) in found.iter().take(left) {
            // The name on one line: a file name may hold a line break, which split the
            // match's line in two (the data keeps the name as it is).
            self.lines.push(format!("{}:{line}: {text}", forge_domain::text::on_one_line(&shown)));
            self.hits.push(json!({ "path": shown, "line": line, "text": text }));
        }
        // More matches than the reply has room for: this file's first ones, and the end.
        self.truncated = full || found.len() > left;
        Ok(!self.truncated)
    }

    fn reply(self, holds_line_break: bool) -> CommandResult {
        let Answer { limit, lines, hits, truncated, files, unreadable, long_lines } = self;
    let mut text = lines.join("\n");
    if lines.is_empty() {
        text = "No matches found.".to_string();
        if holds_line_break {
            text.push_str(
                " The pattern holds a line break (\\n), and grep searches one line at a time: no match spans two lines. Search for each line's text on its own.",
            );
        }
    }
    text.push_str(&format!(
        "\n\n{} match{} in {files} file{} searched{}",
        hits.len(),
        if hits.len() == 1 { "" } else { "es" },
        if files == 1 { "" } else { "s" },
        if truncated { format!(" (stopped at the limit of {limit}; narrow the search or raise limit)") } else { String::new() }
    ));
    for (names, what) in [(&unreadable, "could not be read"), (&long_lines, "not searched past a line over 16 MiB")] {
        if !names.is_empty() {
            let n = names.len();
            text.push_str(&format!("\n{n} file{} {what}: {}", if n == 1 { "" } else { "s" }, crate::files::some_of(names)));
        }
    }
    CommandResult {
        text,
        data: json!({ "matches": hits, "truncated": truncated, "filesSearched": files,
            "unreadable": crate::files::listed(&unreadable), "unreadableTotal": unreadable.len(),
            "longLines": crate::files::listed(&long_lines), "longLinesTotal": long_lines.len() })
            .into(),
    }
    }
}

/// Searches the file at `path` (below `start`, whose real place below `root` is
/// `start_rel`), keeping at most `room` matches: with more, `full` is set. Every read
/// fails once `halted` says so.
#[allow(clippy::too_many_arguments)]
fn search_file(
    searcher: &mut Searcher,
    reader: &mut forge_core::beneath::Reader,
    matcher: &grep_regex::RegexMatcher,
    room: usize,
    start: &Path,
    start_rel: &Path,
    path: &Path,
    halted: &dyn Fn() -> bool,
) -> Searched {
    let mut found = FileHits { matcher, room, hits: vec![], binary: false, full: false };
    let opened = match path.strip_prefix(start) {
        Ok(below) => reader.open(&start_rel.join(below)),
        Err(_) => Err(std::io::Error::other("not below the search's start")),
    };
    let f = match opened {
        Ok(f) => f,
        Err(error) => return Searched::Failed { error, hits: vec![], binary: false },
    };
    let searched = searcher.search_reader(matcher, Halting { f: &f, halted }, &mut found).and_then(|()| {
        // Stopped at the limit before the end: the rest may still hold a NUL byte, which
        // makes the whole file binary (no matches from it).
        if found.full && !found.binary {
            found.binary = holds_nul(&f, halted)?;
        }
        Ok(())
    });
    match searched {
        Ok(()) => {
            // Dropped here, not kept until the answer takes the file (review YH: a batch of
            // binary files held up to `limit` matches each).
            if found.binary {
                found.hits = vec![];
            }
            Searched::Done { hits: found.hits, full: found.full, binary: found.binary }
        }
        Err(error) if found.hits.is_empty() => Searched::Failed { error, hits: vec![], binary: false },
        Err(error) => {
            // What was read before the failure held no NUL byte (the search would have
            // ended there, as binary); the rest may.
            use std::io::Seek;
            match (&f).seek(std::io::SeekFrom::Start(0)).and_then(|_| holds_nul(&f, halted)) {
                Ok(true) => Searched::Failed { error, hits: vec![], binary: true },
                Ok(false) => Searched::Failed { error, hits: found.hits, binary: false },
                Err(error) => Searched::Failed { error, hits: vec![], binary: false },
            }
        }
    }
}

/// A file read that fails once `halted` says so.
struct Halting<'a> {
    f: &'a std::fs::File,
    halted: &'a dyn Fn() -> bool,
}

impl std::io::Read for Halting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if (self.halted)() {
            return Err(std::io::Error::other("the search ended"));
        }
        (&mut &*self.f).read(buf)
    }
}

/// The most a search holds of one file at a time: a line longer than this (16 MiB) ends
/// that file's search, which the answer names. Without it a 300 MB line took 600 MB.
const MAX_LINE_BUFFER: usize = 16 << 20;

/// Whether the rest of `f`, from where the search stopped reading it, holds a NUL byte.
/// What the searcher read was checked as it was read (`BinaryDetection::quit` looks at
/// every byte it reads, before any line of it reaches the sink), so it is not read again.
///
/// A file that starts with a UTF-16 byte order mark is text the searcher transcodes (its
/// raw bytes are full of NULs): never binary.
fn holds_nul(mut f: &std::fs::File, halted: &dyn Fn() -> bool) -> std::io::Result<bool> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let mut bom = [0u8; 2];
    if f.read_at(&mut bom, 0)? == 2 && matches!(bom, [0xFF, 0xFE] | [0xFE, 0xFF]) {
        return Ok(false);
    }
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if halted() {
            return Err(std::io::Error::other("the search ended"));
        }
        match f.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) if memchr::memchr(0, &chunk[..n]).is_some() => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The matches of one file, kept until its search ends: a file found to be binary part way
/// gives none. A matching line that is not UTF-8 is kept with replacement characters; a
/// long one (minified code) is cut around its first match ([`around`]).
struct FileHits<'a> {
    matcher: &'a grep_regex::RegexMatcher,
    /// Matches that may still be kept (the call's `limit` minus those kept so far).
    room: usize,
    hits: Vec<(u64, String)>,
    binary: bool,
    /// There were more matches than room.
    full: bool,
}

/// Longest line kept whole, in bytes; a longer one is cut to about this much around its
/// first match, so one minified file cannot make a reply of megabytes.
const LINE_BYTES: usize = 500;

/// `line`, or when it is longer than [`LINE_BYTES`] the part around the match starting at
/// byte `at` (200 bytes before it, the rest after, on character boundaries), with `…`
/// where it was cut.
fn around(line: &str, at: usize) -> String {
    if line.len() <= LINE_BYTES {
        return line.to_string();
    }
    let mut start = at.min(line.len()).saturating_sub(200);
    while !line.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + LINE_BYTES).min(line.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}{}{}",
        if start > 0 { "…" } else { "" },
        &line[start..end],
        if end < line.len() { "…" } else { "" }
    )
}

impl Sink for FileHits<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        if self.hits.len() >= self.room {
            self.full = true;
            return Ok(false);
        }
        let text = String::from_utf8_lossy(mat.bytes());
        let text = text.trim_end_matches(['\n', '\r']);
        let shown = if text.len() > LINE_BYTES {
            use grep_matcher::Matcher;
            let at = self.matcher.find(text.as_bytes()).ok().flatten().map_or(0, |m| m.start());
            around(text, at)
        } else {
            text.to_string()
        };
        self.hits.push((mat.line_number().unwrap_or(0), shown));
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_cut_around_the_match() {
        assert_eq!(around("short line", 3), "short line");
        let long = format!("{}NEEDLE{}", "a".repeat(1000), "b".repeat(1000));
        let cut = around(&long, 1000);
        assert!(cut.starts_with('…') && cut.ends_with('…') && cut.contains("NEEDLE"), "{cut}");
        assert_eq!(cut.len(), LINE_BYTES + 2 * '…'.len_utf8());
        // At the start: no leading mark; multi-byte characters are never split.
        let wide = "é".repeat(600);
        let cut = around(&wide, 0);
        assert!(!cut.starts_with('…') && cut.ends_with('…'));
        assert!(around(&wide, 501).chars().all(|c| c == 'é' || c == '…'));
        let tail = format!("{}x", "é".repeat(600));
        assert!(around(&tail, tail.len() - 1).ends_with('x'));
    }
}
