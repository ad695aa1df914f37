//! `loop.permissions.deny`: user deny rules for loop sessions (FORGE-REFERENCE §2.14).
//!
//! An entry is a permission name (`"review-write"`) or a `{ permission, pattern }` table.
//! Permission names are forge-lsp tool names, except `bash`, which is `shell` (forge.shell
//! commands); `shell` is accepted as well. A rule without a pattern (or with the pattern
//! `*`) denies the whole tool; a pattern is matched against forge.shell commands.
//!
//! [`compile`] drops, with a warning naming the entry: entries of the wrong shape, `*`,
//! `external_directory`, the Forge-managed handoff tools (`loop-handoff`, `loop-complete`),
//! blanket denies of the tools a loop cannot work without (`review-read`, `plan-read`,
//! `section-read`, `plan-adjust`, `bash`/`shell`, `read`) and duplicates. Scoped denies
//! are kept.

use std::fmt;

use serde_json::Value;

/// One compiled deny rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyRule {
    /// The permission name as written (`bash`, `review-write`).
    pub permission: String,
    /// A glob over forge.shell commands; `None` denies the whole tool.
    pub pattern: Option<String>,
}

impl DenyRule {
    /// The forge-lsp tool the rule is about (`bash` → `shell`).
    pub fn tool(&self) -> &str {
        tool_of(&self.permission)
    }
}

impl fmt::Display for DenyRule {
    /// `{ permission = "bash", pattern = "git push *" }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{ permission = {}", Value::from(self.permission.as_str()))?;
        if let Some(p) = &self.pattern {
            write!(f, ", pattern = {}", Value::from(p.as_str()))?;
        }
        f.write_str(" }")
    }
}

/// Forge-managed tools a loop session can never be denied.
pub const STRUCTURAL: &[&str] = &["loop-handoff", "loop-complete"];

/// Tools that may only be denied with a pattern (a blanket deny is dropped).
pub const NO_BLANKET: &[&str] = &["review-read", "plan-read", "section-read", "plan-adjust", "bash", "shell", "read"];

/// The forge-lsp tool of a permission name.
fn tool_of(permission: &str) -> &str {
    if permission == "bash" {
        "shell"
    } else {
        permission
    }
}

/// The entry as shown in warnings (compact JSON, cut to 80 characters).
fn show(v: &Value) -> String {
    let s = toml_inline(v);
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(77).collect::<String>())
    } else {
        s
    }
}

/// `v` written as in a TOML file, as the rules and the advice in the warnings are
/// (`{ permission = "bash" }`; JSON's `{"permission":"bash"}` beside them read as two
/// languages: a review). Strings are quoted with JSON's escapes, which TOML's basic strings
/// share; `null`, which TOML lacks, stays `null`.
fn toml_inline(v: &Value) -> String {
    match v {
        Value::Object(o) if o.is_empty() => "{}".to_string(),
        Value::Object(o) => {
            let bare = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            let fields: Vec<String> = o
                .iter()
                .map(|(k, v)| {
                    let key = if bare(k) { k.clone() } else { Value::from(k.as_str()).to_string() };
                    format!("{key} = {}", toml_inline(v))
                })
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(toml_inline).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// `(permission, pattern)` of a well-formed entry.
fn parse(v: &Value) -> Option<(String, Option<String>)> {
    let (permission, pattern) = match v {
        Value::String(s) => (s.clone(), None),
        Value::Object(o) => {
            if o.keys().any(|k| k != "permission" && k != "pattern") {
                return None;
            }
            let permission = o.get("permission")?.as_str()?.to_string();
            let pattern = match o.get("pattern") {
                None | Some(Value::Null) => None,
                Some(Value::String(p)) => Some(p.clone()),
                Some(_) => return None,
            };
            (permission, pattern)
        }
        _ => return None,
    };
    if permission.trim().is_empty() || permission.trim() != permission {
        return None;
    }
    let pattern = match pattern {
        None => None,
        Some(p) => {
            let p = normalize(&p);
            if p.is_empty() {
                return None;
            }
            // `*` alone is the blanket pattern.
            (!p.chars().all(|c| c == '*')).then_some(p)
        }
    };
    Some((permission, pattern))
}

/// Compiles the configured entries into rules; the warnings name every dropped entry.
pub fn compile(entries: &[Value]) -> (Vec<DenyRule>, Vec<String>) {
    let mut rules: Vec<DenyRule> = vec![];
    let mut warnings = vec![];
    for e in entries {
        let shown = show(e);
        let mut warn = |why: String| warnings.push(format!("loop.permissions.deny entry {shown} ignored: {why}"));
        let Some((permission, pattern)) = parse(e) else {
            warn("an entry is a permission name (a string) or a { permission, pattern } table with string values (pattern optional, not empty)".into());
            continue;
        };
        if permission == "*" {
            warn("`*` would deny every tool; name the tools to deny".into());
            continue;
        }
        if permission == "external_directory" {
            warn(
                "`external_directory` is structural: directory access is decided by the loop's worktree and sandbox"
                    .into(),
            );
            continue;
        }
        if STRUCTURAL.contains(&permission.as_str()) {
            warn(format!(
                "`{permission}` is Forge-managed (accepted only from the loop's current phase session) and cannot be denied through loop.permissions"
            ));
            continue;
        }
        if pattern.is_none() && NO_BLANKET.contains(&permission.as_str()) {
            // Only forge.shell's commands can be denied in part: for the others the advice
            // to add a pattern led to a rule that never matches (found by a review).
            let instead = if matches!(permission.as_str(), "bash" | "shell") {
                "deny some commands with a pattern instead (for example { permission = \"bash\", pattern = \"git push *\" })"
            } else {
                "it cannot be denied (patterns apply to forge.shell commands only)"
            };
            warn(format!("a blanket deny of `{permission}` would leave loop sessions unable to work; {instead}"));
            continue;
        }
        let rule = DenyRule { permission, pattern };
        if rules.iter().any(|r| r.tool() == rule.tool() && r.pattern == rule.pattern) {
            warn("duplicate of an earlier entry".into());
            continue;
        }
        if rule.pattern.is_some() && rule.tool() != "shell" {
            // Kept (a scoped deny), but only forge.shell calls have a subject to match.
            warnings.push(format!(
                "loop.permissions.deny entry {shown} has no effect: patterns are matched against forge.shell commands (permission `bash`) only"
            ));
        }
        rules.push(rule);
    }
    (rules, warnings)
}

/// The first rule that denies `tool` (a forge-lsp tool name; `bash` is read as `shell`),
/// called with `shell_command` when it is forge.shell.
pub fn denied<'a>(rules: &'a [DenyRule], tool: &str, shell_command: Option<&str>) -> Option<&'a DenyRule> {
    let tool = tool_of(tool);
    rules.iter().find(|r| {
        r.tool() == tool
            && match (&r.pattern, shell_command) {
                (None, _) => true,
                (Some(p), Some(cmd)) => command_matches(p, cmd),
                (Some(_), None) => false,
            }
    })
}

/// Whitespace runs become one space; the ends are trimmed.
fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a shell command matches a pattern: the whole command, or one of its parts
/// separated by `;`, `&`, `|`, newlines, parentheses or backticks outside quotes (so
/// `true && git push` is caught by `git push *`). A pattern ending in ` *` also matches its
/// prefix alone (`git push *` matches `git push`).
///
/// Each part is also matched without what may stand before its command and leaves the
/// command itself unchanged (review YI: `FOO=1 rm a.txt`, `if true; then rm a.txt; fi`,
/// `{ rm a.txt; }`, `! rm a.txt`, `command rm`, `\rm` all ran past `rm *`): reserved words
/// (`then`, `do`, `else`, `if`, `while`, `until`, `elif`, `!`, `{`, `}`), variable
/// assignments (`NAME=value`, a quoted value too), redirections, the wrappers `builtin`,
/// `nohup`, and `env`, `time`, `command`, `exec` with their options; the command's name is
/// taken unquoted and without its folder ([`bare_command`]). Not a sandbox: `sh -c 'rm …'`,
/// `eval`, other wrappers (`nice`, `timeout`, `xargs`), aliases and functions still get
/// past a rule.
pub fn command_matches(pattern: &str, command: &str) -> bool {
    let pattern = normalize(pattern);
    let whole = normalize(command);
    let found = parts(command);
    let mut parts: Vec<String> = found.parts.iter().map(|p| normalize(p)).collect();
    if found.untrusted {
        // Each line on its own too: a quote the scanner misread stays within its line.
        for line in command.lines() {
            parts.extend(self::parts(line).parts.iter().map(|p| normalize(p)));
        }
    }
    let bare: Vec<String> = parts.iter().map(|p| bare_command(p)).filter(|b| !parts.contains(b)).collect();
    std::iter::once(whole).chain(parts).chain(bare).any(|c| {
        !c.is_empty() && (glob(&pattern, &c) || pattern.strip_suffix(" *").is_some_and(|prefix| glob(prefix, &c)))
    })
}

/// `part` (normalized) without the words before its command that leave the command
/// unchanged ([`command_matches`]), its command's name unquoted, unescaped and without its
/// folder (`"rm"`, `r\m`, `/bin/rm` are `rm`). Words are split as the shell splits them,
/// outside quotes (review YL: `MSG="please rm it" echo` was denied by `rm *`, and
/// `A="x y" rm` was not).
fn bare_command(part: &str) -> String {
    let words = words_of(part);
    let mut i = 0;
    // After a wrapper (`env`, `time`, `command`, `exec`, `nohup`): its options; the next
    // word is an option's argument (`env -u NAME`, `exec -a NAME`).
    let mut wrapper: Option<String> = None;
    let mut argument = false;
    while i < words.len() {
        let w = &part[words[i].0..words[i].1];
        i += 1;
        if std::mem::take(&mut argument) {
            continue;
        }
        // `env -` (an empty environment) is an option too (review YN).
        if let Some(wrapper) = wrapper.as_deref().filter(|wr| w.starts_with('-') && (w.len() > 1 || *wr == "env")) {
            // `command -v rm` (or `-pv`) names `rm`, it does not run it.
            if wrapper == "command" && !w.starts_with("--") && w[1..].contains(['v', 'V']) {
                return String::new();
            }
            // `time -o FILE` too (GNU time).
            argument = matches!(w, "-u" | "--unset" | "-C" | "--chdir" | "-a" | "-o" | "--output");
            continue;
        }
        // `NAME=value`, and `NAME+=value` (review YN).
        let assignment =
            w.split_once('=').map(|(name, v)| (name.strip_suffix('+').unwrap_or(name), v)).is_some_and(|(name, _)| {
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            });
        // A redirection before the command (`2>/dev/null`, `>out`, `<in`); a bare operator
        // (`2>`, `>`) takes the next word.
        let digits = w.trim_start_matches(|c: char| c.is_ascii_digit());
        if digits.starts_with(['>', '<']) {
            argument = digits.trim_start_matches(['>', '<', '&', '|']).is_empty();
            continue;
        }
        // A wrapper however its name is written (review YN: `/usr/bin/env rm`, `\command rm`).
        let name = unquoted(w);
        let name = name.rsplit('/').next().unwrap_or(&name);
        if matches!(name, "env" | "time" | "command" | "exec" | "nohup") {
            wrapper = Some(name.to_string());
            continue;
        }
        if assignment
            || name == "builtin"
            || matches!(w, "then" | "do" | "else" | "if" | "elif" | "while" | "until" | "!" | "{" | "}")
        {
            continue;
        }
        // The command.
        let (start, end) = words[i - 1];
        let name = unquoted(&part[start..end]);
        let name = name.rsplit('/').next().unwrap_or(&name).to_string();
        return format!("{name}{}", &part[end..]);
    }
    String::new()
}

/// What a character of a command is to the shell ([`Quoting::read`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// A quote or an escaping backslash: syntax the shell takes away.
    Syntax,
    /// Inside quotes or escaped: only itself.
    Quoted,
    /// Outside quotes, not escaped: white space and separators count here.
    Plain,
}

/// The shell's quoting, read a character at a time: the one scanner of [`parts`],
/// [`words_of`] and [`unquoted`].
#[derive(Default)]
struct Quoting {
    single: bool,
    double: bool,
    escaped: bool,
    /// The single quotes are `$'…'` (ANSI-C quoting), in which a backslash escapes, `\'`
    /// too (review YV: `$'\''` was taken for an open quote that hid the rest).
    ansi: bool,
    /// The last character was an unquoted `$`.
    dollar: bool,
}

impl Quoting {
    fn read(&mut self, c: char) -> Read {
        let dollar = std::mem::take(&mut self.dollar);
        if std::mem::take(&mut self.escaped) {
            return Read::Quoted;
        }
        match c {
            '\\' if !self.single || self.ansi => {
                self.escaped = true;
                Read::Syntax
            }
            '\'' if !self.double => {
                self.single = !self.single;
                self.ansi = self.single && dollar;
                Read::Syntax
            }
            '"' if !self.single => {
                self.double = !self.double;
                Read::Syntax
            }
            _ if self.single || self.double => Read::Quoted,
            _ => {
                self.dollar = c == '$';
                Read::Plain
            }
        }
    }
}

/// The byte ranges of `s`'s words: runs of characters between white space outside quotes.
fn words_of(s: &str) -> Vec<(usize, usize)> {
    let mut out = vec![];
    let mut quoting = Quoting::default();
    let mut start: Option<usize> = None;
    for (i, c) in s.char_indices() {
        if quoting.read(c) == Read::Plain && c.is_whitespace() {
            if let Some(b) = start.take() {
                out.push((b, i));
            }
        } else {
            start.get_or_insert(i);
        }
    }
    if let Some(b) = start {
        out.push((b, s.len()));
    }
    out
}

/// A word with its quotes and escapes taken away, as the shell reads it.
fn unquoted(w: &str) -> String {
    let mut quoting = Quoting::default();
    w.chars().filter(|&c| quoting.read(c) != Read::Syntax).collect()
}

/// The parts of a command between unquoted separators. A comment (an unquoted `#` starting
/// a word) runs to the end of its line, and is no part: a quote in it opens nothing (review
/// YN: `# don't` hid the next line's `rm` from `rm *`). A here-document's body is data, not
/// commands: its lines, up to the delimiter's, are left out (they were each matched as a
/// command, so a script written with `cat <<EOF` was denied for a line in it), but only when
/// the scanner reads the body as bash does ([`Parts::untrusted`] otherwise). `<<` in
/// arithmetic (`$((1 << 2))`, `(( x << 1 ))`) starts none. `$(…)` and backquotes inside
/// double quotes start a part too (review YW: `echo "$(git push)"` ran past `git push *`).
fn parts(command: &str) -> Parts {
    let mut out = vec![];
    let mut cur = String::new();
    let mut quoting = Quoting::default();
    // Here-documents started on this line: (delimiter, `<<-`: leading tabs stripped).
    let mut pending: Vec<(String, bool)> = vec![];
    let mut untrusted = false;
    // Open `${` (parameter expansions) and `$[` (bash's old arithmetic); plain parentheses
    // open, and the depths at which an arithmetic `((` began (it ends when they close).
    // Inside any of them neither `#` nor `<<` starts anything (review YR: `${x:- #}` hid
    // the rest of its line, and `$(( (1+(2)) << 3 ))` the lines after it).
    let (mut braces, mut brackets, mut parens) = (0usize, 0usize, 0usize);
    let mut arithmetic: Vec<usize> = vec![];
    // A `(` or backquote was seen (unquoted, or a substitution inside double quotes).
    let mut nested = false;
    // Open `$(` and backquotes inside double quotes.
    let mut in_quoted_substitution = 0usize;
    let mut in_quoted_backquotes = false;
    let mut comment = false;
    let mut prev_plain: Option<char> = None;
    let mut prev: Option<char> = None;
    // A word starts here: at the start, or after an unquoted space, tab or newline (only
    // these are blanks to the shell, not a carriage return or a no-break space) or
    // separator; not after an escaped blank (`a\ #`) or a line continuation (review YR).
    let mut word_start = true;
    let mut chars = command.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if comment && c != '\n' {
            continue;
        }
        comment = false;
        let before = prev.replace(c);
        let read = quoting.read(c);
        let plain = read == Read::Plain;
        let inside = braces > 0 || brackets > 0 || !arithmetic.is_empty();
        if plain && c == '#' && word_start && !inside {
            comment = true;
            prev_plain = None;
            continue;
        }
        if plain {
            match c {
                '{' if prev_plain == Some('$') => braces += 1,
                '}' if braces > 0 => braces -= 1,
                // Nested brackets inside `$[…]` (`$[ a[1] << 2 ]`) count too (review YV).
                '[' if prev_plain == Some('$') || brackets > 0 => brackets += 1,
                ']' if brackets > 0 => brackets -= 1,
                '(' => {
                    nested = true;
                    parens += 1;
                    if prev_plain == Some('(') {
                        arithmetic.push(parens - 2);
                    }
                }
                ')' => {
                    parens = parens.saturating_sub(1);
                    while arithmetic.last().is_some_and(|&floor| floor >= parens) {
                        arithmetic.pop();
                    }
                }
                '`' => nested = true,
                _ => {}
            }
        }
        if plain && c == '<' && !inside && prev_plain != Some('<') && command[i..].starts_with("<<") {
            match heredoc_delimiter(&command[i + 2..]) {
                // Not after any `(` or backquote: a `case` pattern's `)` can make `$(…)` look
                // closed (review YX).
                Some(Delimiter::Plain(d, tabs)) if !nested => pending.push((d, tabs)),
                // A here-string (`<<<`).
                Some(Delimiter::HereString) => {}
                // Inside `$(…)`, a subshell or backquotes bash may end the body at `EOF)`;
                // and a delimiter with expansions, escapes or quotes inside it is not read
                // here as bash reads it (review YW: `<<$'E\x4fF'`, `<<'a$'"b"`).
                _ => untrusted = true,
            }
        }
        prev_plain = plain.then_some(c);
        if plain && c == '\n' && !pending.is_empty() && !untrusted {
            // Each body ends at the first line that is its delimiter (after tabs for `<<-`),
            // as bash ends it. One never found: nothing is left out, and every line is
            // matched on its own too (review YW: a quote in a body line, read as shell,
            // hid the lines after it).
            let mut at = i + 1;
            for (delimiter, tabs) in pending.drain(..) {
                let mut ended = false;
                while at < command.len() {
                    let end = command[at..].find('\n').map_or(command.len(), |e| at + e);
                    let line = &command[at..end];
                    at = end + 1;
                    if (if tabs { line.trim_start_matches('\t') } else { line }) == delimiter {
                        ended = true;
                        break;
                    }
                }
                untrusted |= !ended;
            }
            if !untrusted {
                out.push(std::mem::take(&mut cur));
                while chars.next_if(|&(j, _)| j < at).is_some() {}
                word_start = true;
                continue;
            }
        }
        // `>&`, `<&` and `>|` are redirections, not separators (review YN: `2>&1 rm` was
        // split into `2>` and `1 rm`).
        let redirection = matches!(c, '&' | '|') && (cur.ends_with('>') || (c == '&' && cur.ends_with('<')));
        let separator = plain && !redirection && matches!(c, ';' | '&' | '|' | '\n' | '(' | ')' | '`');
        // A command substitution inside double quotes runs its command too: its start and
        // its end end a part.
        let opens = c == '(' && before == Some('$');
        let closes = c == ')' && in_quoted_substitution > 0;
        let substitution = quoting.double && read == Read::Quoted && (c == '`' || opens || closes);
        if substitution && opens {
            in_quoted_substitution += 1;
        } else if substitution && closes {
            in_quoted_substitution -= 1;
        }
        if substitution && c == '`' {
            in_quoted_backquotes = !in_quoted_backquotes;
        }
        nested |= substitution;
        // Inside it, a command list as anywhere (review YX: `"$(true; git push)"`).
        let listed = (in_quoted_substitution > 0 || in_quoted_backquotes)
            && read == Read::Quoted
            && matches!(c, ';' | '&' | '|' | '\n');
        // Not after `(`, `)` or a backquote: `$(…)#`, `` `…`# `` and `$((1))#` are one word
        // to bash, whose `#` starts nothing (review YV); a `#` there is matched on.
        word_start = plain && !redirection && matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|');
        if separator || substitution || listed {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    Parts { parts: out, untrusted }
}

/// What [`parts`] found.
struct Parts {
    parts: Vec<String>,
    /// A here-document the scanner may not read as bash does (its delimiter has quotes or
    /// escapes inside, expansions, or it is never found; or it starts inside `$(…)`,
    /// parentheses or backquotes): nothing was left out, and [`command_matches`] also
    /// matches every line on its own, so that a quote in the body cannot hide a command.
    untrusted: bool,
}

/// How a here-document's delimiter word reads.
enum Delimiter {
    /// A word of letters, digits and `_.-+/@%:,` (each part bare, quoted whole in `'…'` or
    /// `"…"`, or escaped with `\`): bash's delimiter is that text. `bool`: `<<-`.
    Plain(String, bool),
    /// Anything else: the scanner does not read it for sure.
    Unsure,
    /// A here-string (`<<<`), no here-document.
    HereString,
}

/// The delimiter of a here-document whose `<<` `rest` follows.
fn heredoc_delimiter(rest: &str) -> Option<Delimiter> {
    if rest.starts_with('<') {
        return Some(Delimiter::HereString);
    }
    let (tabs, rest) = match rest.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    // The word: up to unquoted space, tab, newline or an operator, as bash reads it.
    let mut quoting = Quoting::default();
    let end = rest
        .char_indices()
        .find(|&(_, c)| {
            quoting.read(c) == Read::Plain && matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')')
        })
        .map_or(rest.len(), |(e, _)| e);
    let raw = &rest[..end];
    if raw.is_empty() {
        return None;
    }
    let simple = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-+/@%:,".contains(c));
    let word = if let Some(inner) = raw.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        inner
    } else if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        inner
    } else {
        raw.strip_prefix('\\').unwrap_or(raw)
    };
    Some(if simple(word) { Delimiter::Plain(word.to_string(), tabs) } else { Delimiter::Unsure })
}

/// Whole-string glob: `*` is any run of characters, `?` one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Position of the last `*` and the text position it currently covers up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(permission: &str, pattern: Option<&str>) -> DenyRule {
        DenyRule { permission: permission.into(), pattern: pattern.map(Into::into) }
    }

    fn one_warning(entries: Value, needle: &str) {
        let (rules, warnings) = compile(entries.as_array().unwrap());
        assert!(rules.is_empty(), "{rules:?}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(needle), "{warnings:?}");
    }

    /// Dropped entries are shown as TOML, as the rules and the advice are.
    #[test]
    fn entries_are_shown_as_toml() {
        for (entry, shown) in [
            (json!("*"), "\"*\""),
            (json!({ "permission": "bash" }), "{ permission = \"bash\" }"),
            (json!({ "permission": 3, "my key": [1, null] }), "{ \"my key\" = [1, null], permission = 3 }"),
            (json!({}), "{}"),
            (json!(["a", "b\"c"]), "[\"a\", \"b\\\"c\"]"),
        ] {
            assert_eq!(show(&entry), shown, "{entry}");
        }
        one_warning(json!([{ "permission": "bash" }]), "entry { permission = \"bash\" } ignored: a blanket deny");
    }

    #[test]
    fn strings_and_tables_compile() {
        let (rules, warnings) = compile(
            json!(["review-write", { "permission": "bash", "pattern": "git push *" }, { "permission": "execute-plan" }])
                .as_array()
                .unwrap(),
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            rules,
            vec![rule("review-write", None), rule("bash", Some("git push *")), rule("execute-plan", None)]
        );
        assert_eq!(rules[1].tool(), "shell");
        assert_eq!(rules[1].to_string(), r#"{ permission = "bash", pattern = "git push *" }"#);
        assert_eq!(rules[0].to_string(), r#"{ permission = "review-write" }"#);
    }

    #[test]
    fn star_and_external_directory_are_dropped() {
        one_warning(json!(["*"]), "`*` would deny every tool");
        one_warning(json!([{ "permission": "*", "pattern": "rm *" }]), "`*` would deny every tool");
        one_warning(json!(["external_directory"]), "`external_directory` is structural");
        one_warning(json!([{ "permission": "external_directory", "pattern": "/etc/*" }]), "external_directory");
    }

    #[test]
    fn handoff_tools_are_dropped() {
        one_warning(json!(["loop-handoff"]), "entry \"loop-handoff\" ignored: `loop-handoff` is Forge-managed");
        one_warning(json!([{ "permission": "loop-complete", "pattern": "x" }]), "`loop-complete` is Forge-managed");
    }

    #[test]
    fn blanket_denies_of_essential_tools_are_dropped_scoped_kept() {
        for name in NO_BLANKET {
            one_warning(json!([name]), &format!("a blanket deny of `{name}`"));
            // The advice fits the tool: only forge.shell's commands can be denied in part.
            let advice =
                if matches!(*name, "bash" | "shell") { "with a pattern instead" } else { "it cannot be denied" };
            one_warning(json!([name]), advice);
            one_warning(json!([{ "permission": name, "pattern": "*" }]), "blanket deny");
            one_warning(json!([{ "permission": name }]), "blanket deny");
        }
        let (rules, warnings) = compile(json!([{ "permission": "bash", "pattern": "rm -rf *" }]).as_array().unwrap());
        assert_eq!(rules, vec![rule("bash", Some("rm -rf *"))]);
        assert!(warnings.is_empty());
        // A scoped deny of another tool is kept, with a warning that it cannot match.
        let (rules, warnings) = compile(json!([{ "permission": "plan-read", "pattern": "x*" }]).as_array().unwrap());
        assert_eq!(rules, vec![rule("plan-read", Some("x*"))]);
        assert!(warnings[0].contains("has no effect"), "{warnings:?}");
        assert_eq!(denied(&rules, "plan-read", None), None);
    }

    #[test]
    fn duplicates_are_dropped() {
        let (rules, warnings) = compile(
            json!([
                "review-write",
                { "permission": "review-write" },
                { "permission": "bash", "pattern": "git push *" },
                { "permission": "shell", "pattern": "  git   push * " },
                { "permission": "bash", "pattern": "git push --force*" }
            ])
            .as_array()
            .unwrap(),
        );
        assert_eq!(
            rules,
            vec![rule("review-write", None), rule("bash", Some("git push *")), rule("bash", Some("git push --force*"))]
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().all(|w| w.contains("duplicate of an earlier entry")));
        assert!(warnings[1].contains("\"shell\""), "{warnings:?}");
    }

    #[test]
    fn wrong_shapes_are_dropped() {
        for bad in [
            json!(3),
            json!(null),
            json!(["bash"]),
            json!({ "pattern": "x" }),
            json!({ "permission": 1 }),
            json!({ "permission": "bash", "pattern": 2 }),
            json!({ "permission": "bash", "pattern": "  " }),
            json!({ "permission": "bash", "patern": "git push *" }),
            json!(""),
            json!(" review-write"),
        ] {
            let shown = toml_inline(&bad);
            one_warning(json!([bad]), &format!("entry {shown} ignored: an entry is a permission name"));
        }
        let (rules, warnings) = compile(&[json!({ "permission": "x".repeat(200) })]);
        assert_eq!(rules.len(), 1);
        assert!(warnings.is_empty());
        let (_, warnings) = compile(&[json!({ "permission": 1, "pattern": "y".repeat(200) })]);
        assert!(warnings[0].contains("...") && warnings[0].len() < 300, "{warnings:?}");
    }

    #[test]
    fn denied_whole_tool_and_patterns() {
        let rules = vec![rule("review-write", None), rule("bash", Some("git push *")), rule("bash", Some("rm -?f *"))];
        assert_eq!(denied(&rules, "review-write", None), Some(&rules[0]));
        assert_eq!(denied(&rules, "review-delete", None), None);
        assert_eq!(denied(&rules, "shell", Some("git push origin main")), Some(&rules[1]));
        assert_eq!(denied(&rules, "bash", Some("git push origin main")), Some(&rules[1]));
        assert_eq!(denied(&rules, "shell", Some("  git push origin main\n")), Some(&rules[1]));
        assert_eq!(denied(&rules, "shell", Some("git  push\torigin")), Some(&rules[1]));
        assert_eq!(denied(&rules, "shell", Some("git push")), Some(&rules[1]));
        assert_eq!(denied(&rules, "shell", Some("git pushy")), None);
        assert_eq!(denied(&rules, "shell", Some("git status")), None);
        assert_eq!(denied(&rules, "shell", Some("echo git push origin")), None);
        assert_eq!(denied(&rules, "shell", Some("rm -rf /tmp/x")), Some(&rules[2]));
        assert_eq!(denied(&rules, "shell", Some("rm -r /tmp/x")), None);
        assert_eq!(denied(&rules, "shell", None), None);
        // A pattern rule never denies another tool.
        assert_eq!(denied(&[rule("bash", Some("*x*"))], "plan-read", Some("x")), None);
    }

    #[test]
    fn compound_commands_are_matched_part_by_part() {
        let rules = vec![rule("bash", Some("git push *"))];
        for cmd in [
            "cargo test && git push origin main",
            "true; git push",
            "false || git push -f",
            "echo ok | git push origin",
            "(git push origin main)",
            "echo $(git push origin)",
            "echo `git push`",
            "cd x\ngit push origin HEAD",
        ] {
            assert!(denied(&rules, "shell", Some(cmd)).is_some(), "{cmd}");
        }
        for cmd in ["echo 'a; git push origin'", "echo \"x && git push y\"", "echo \\; git push"] {
            assert!(denied(&rules, "shell", Some(cmd)).is_none(), "{cmd}");
        }
    }

    /// Review YN: a quote in a comment opens nothing; a here-document's body is no command.
    #[test]
    fn comments_and_here_documents() {
        let rules = vec![rule("bash", Some("git push *"))];
        for cmd in [
            "echo hi # don't\ngit push",
            "echo hi #\"\ngit push origin",
            "cat <<EOF > notes.txt\ngit push\nEOF\ngit push origin",
            "cat <<-'END'\n\tgit push\n\tEND\ngit push",
            "cat <<< 'x'\ngit push",
            "echo $((1 << 2))\ngit push",
            "(( x <<= 1 ))\ngit push",
            "cat <<A <<B\nx\nA\ny\nB\ngit push",
            "a#b; git push",
            // Review YR: none of these `#` starts a comment, nor `<<` a here-document.
            "echo a\\ #; git push",
            "echo a\\\n#; git push",
            "echo a\r#; git push",
            "echo ${x:- #}; git push",
            "echo ${x:-a;#}; git push",
            "echo $(( (1+(2)) << 3 ))\ngit push",
            "echo $[1<<2]\ngit push",
            "echo a\u{a0}#; git push",
            "echo $((1<<2)) <<EOF\nx\nEOF\ngit push",
            // Review YV: these too.
            "echo $(echo a)#; git push",
            "echo `echo a`#; git push",
            "echo $((1))#; git push",
            "cat <(echo a)#; git push",
            "cat <<EOF\r\nx\r\nEOF\r\ngit push",
            "cat <<EOF\u{a0}\nx\nEOF\u{a0}\ngit push",
            "cat <<$'EOF'\nx\nEOF\ngit push",
            "cat <<E\\\nOF\nx\nEOF\ngit push",
            "x=$(cat <<EOF\nbody\nEOF)\ngit push",
            "x=$(cat <<EOF\nbody\nEOF)\ngit push\nEOF",
            "echo $[ a[1] << 2 ]\ngit push",
            "echo $'\\''#; git push",
            "cat <<$'EOF'\nx\nEOF\ngit push\n$EOF",
            // Review YW: a body line's quote, delimiters read otherwise than bash, and
            // substitutions inside double quotes.
            "cat <<M\nMy notes\nDon't panic\nM\ngit push",
            "cat <<EOF\nEOFX\nit's\nEOF\ngit push",
            "cat <<E\\\nOF\nit's\nEOF\ngit push",
            "cat <<$'E\\x4fF'\nit's\nEOF\ngit push",
            "cat <<'a$'\"b\"\nx\na$b\ngit push\nab=1",
            "cat <<a\\$'b'\nx\na$b\ngit push\na'b'",
            "echo \"$(git push)\"",
            "echo \"`git push`\"",
            "x=\"$(git push origin)\"",
            // Review YX.
            "echo \"$(true; git push)\"",
            "echo \"$(true && git push)\"",
            "echo \"`true; git push`\"",
            "echo \"$(echo 'x'; git push)\"",
            "echo \"$(echo \"x\"; git push)\"",
            "x=$(case a in a) ;; esac; cat <<EOF\nits\nEOF)\ngit push\nEOF",
        ] {
            assert!(denied(&rules, "shell", Some(cmd)).is_some(), "{cmd:?}");
        }
        for cmd in [
            "cat <<EOF > deploy.sh\ngit push origin main\nEOF",
            "cat <<'EOF'\ngit push \"$1\"\nEOF\necho done",
            "cat <<-EOF\n\tgit push\n\tEOF",
            "echo ok # git push",
            "# git push\necho ok",
        ] {
            assert!(denied(&rules, "shell", Some(cmd)).is_none(), "{cmd:?}");
        }
    }

    /// Review YI: what may stand before a command, and leaves it the same command, does
    /// not get it past a rule.
    #[test]
    fn words_before_a_command_do_not_hide_it() {
        let rules = vec![rule("bash", Some("rm *"))];
        for cmd in [
            "FOO=1 rm a.txt",
            "A=1 B=\"x\" rm -rf .",
            "command rm a.txt",
            "\\rm a.txt",
            "if true; then rm a.txt; fi",
            "for f in a; do rm $f; done",
            "{ rm a.txt; }",
            "! rm a.txt",
            "time rm a.txt",
            "env -i PATH=/bin rm a.txt",
            "nohup rm a.txt",
            "exec rm a.txt",
            "while false; do :; done; until true; do rm x; done",
            // Review YL: quoted values, the wrappers' options, redirections, the name.
            "A=\"x y\" rm -f zz",
            "time -p rm x",
            "command -p rm x",
            "exec -a foo rm x",
            "2>/dev/null rm -f zz",
            "2> /dev/null rm -f zz",
            "\"rm\" -f zz",
            "r\\m -f zz",
            "/bin/rm -f zz",
            // Review YN: a wrapper named by its path, quoted or escaped.
            "/usr/bin/env rm -f zz",
            "\\command rm x",
            "\"env\" rm x",
            "'exec' rm x",
            "\\nohup rm x",
            "nohup -- rm x",
            "2>&1 rm -f zz",
            ">&2 rm x",
            ">|out rm x",
            "env - rm x",
            "time -o log rm x",
            "A+=x rm x",
        ] {
            assert!(denied(&rules, "shell", Some(cmd)).is_some(), "{cmd}");
        }
        for cmd in [
            "echo rm a.txt",
            "FOO=rm ls",
            "cat rm.txt",
            "env",
            "trim x",
            "if_rm x",
            // Review YL: a quoted value is one word.
            "MSG=\"please rm the old files\" echo hi",
            "A=\"1 rm -f x\" true",
            "NOTE=\"x; rm -f zz\" true",
            "command -v rm",
            "command -pv rm",
        ] {
            assert!(denied(&rules, "shell", Some(cmd)).is_none(), "{cmd}");
        }
        // Table of what is taken off.
        for (part, bare) in [
            ("FOO=1 rm a", "rm a"),
            ("env -u X Y=2 git push", "git push"),
            ("\\git push", "git push"),
            ("then git push", "git push"),
            ("1X=2 rm", "1X=2 rm"),
            ("GIT_SSH_COMMAND='ssh -i k' git push", "git push"),
            ("'/usr/bin/git' push", "git push"),
            ("rm", "rm"),
            ("", ""),
        ] {
            assert_eq!(bare_command(part), bare, "{part:?}");
        }
    }

    #[test]
    fn glob_semantics() {
        assert!(glob("git push *", "git push origin main"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(glob("a*b*c", "abc"));
        assert!(!glob("a*b*c", "abca"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*.rs", "main.rs"));
        assert!(!glob("*.rs", "main.rsx"));
        assert!(glob("ü?*", "üßx"));
        assert!(!glob("abc", "ab"));
        assert!(glob("**a", "bba"));
        assert!(command_matches("npm publish", " npm   publish "));
        assert!(!command_matches("npm publish", "npm publish --dry-run"));
    }
}
