//! rsync's basic include/exclude rules, for `stripeguard send --include`, `--exclude`,
//! `--include-from`, `--exclude-from` and `--filter`, with the same results as rsync
//! (rsync(1) "INCLUDE/EXCLUDE PATTERN RULES"). The code follows rsync's own: `rule_matches`
//! and `parse_rule_tok` in `exclude.c`, `dowild` in `lib/wildmatch.c`.
//!
//! # What a rule list decides
//! The rules are tried in order and the first that matches a path decides: an include rule
//! keeps it, an exclude rule drops it; a path no rule matches is kept. The path is relative to
//! the transfer root, as rsync names it: `src/a/b` for `send src`, `a/b` for `send src/`. The
//! caller walks the tree and does not descend into an excluded directory, so
//! [`Filters::excluded`] decides one entry; `dir/x` is dropped with `dir` because nobody asks.
//!
//! # What a pattern matches
//! - A trailing `/` makes the rule match directories only (the slash itself is then removed;
//!   a pattern that is only `/` keeps it, and matches nothing).
//! - A leading `/` anchors it at the transfer root: it must match the whole path.
//! - Otherwise a pattern with no `/` and no `**` is matched against the final component only;
//!   one with N inner slashes and no `**` against the path's last N + 1 components; one with
//!   `**` at the start of the path or just after any `/` in it.
//! - `*` matches any run of bytes but `/`, `?` one byte but `/`, `**` any run including `/`,
//!   `[...]` one byte of a class (`!` or `^` first negates it; ranges `a-z`; `[:alpha:]` and
//!   the other POSIX classes, ASCII only; a class never matches `/`); `\` makes the next byte
//!   literal. A pattern with none of `*`, `?`, `[` is compared byte for byte, a backslash
//!   included — rsync does the same.
//! - A leading `**/` also matches at the root (`**/z*` matches `zeta`), and a trailing `/***`
//!   also matches the directory itself (`x/***` is `x` and everything below it).
//!
//! Paths and patterns are bytes: a name need not be UTF-8.
//!
//! # Syntax
//! `--include PAT` / `--exclude PAT` and each line of `--include-from` / `--exclude-from` take
//! rsync's old prefixes: `+ ` makes the rule an include and `- ` an exclude whatever the option,
//! and a lone `!` clears the list so far. `--filter` takes `+ PAT`, `- PAT`, `include PAT`,
//! `exclude PAT` (one space or `_` before the pattern) and `!` or `clear`. In a file, lines end
//! at LF, CR or CRLF; empty lines and lines starting with `;` or `#` are skipped; any other
//! whitespace belongs to the pattern, as in rsync (`*.log ` does not match `a.log`). An empty
//! argument adds no rule, as in rsync. A pattern of 4096 bytes or more (rsync's `MAXPATHLEN`,
//! beyond which it discards the rule) or holding a NUL byte is refused.
//!
//! # Why a port of rsync's matcher rather than `globset`
//! The project prefers a well-kept crate, but `globset` matches a different language: `x/**/y`
//! matches `x/y` there and not in rsync; its `**` crosses a `/` only as a whole component
//! (`x**` cannot, in rsync it does); its classes can match `/` and it has no `[:alpha:]`; it
//! reads `{a,b}` as alternatives where rsync sees literal bytes; it takes patterns as `&str`,
//! and a line of an exclude file need not be UTF-8. Nor does it have rsync's placement rules
//! (final component, last N components, after any slash), the literal comparison of a
//! pattern without `*?[` (backslashes included) or `/***`. Rewriting rsync patterns into globs
//! would be a second, subtler translation to get right, so this is a port of rsync's own
//! matcher (~150 lines), and the tests hold it against the rsync binary on a real tree.

use std::path::Path;

/// rsync's `MAXPATHLEN` on Linux: rsync discards a pattern this long or longer.
const PATTERN_LEN_MAX: usize = 4096;

/// What each syntax accepts, for the error messages.
const FILTER_SYNTAX: &str = "supported: \"+ PATTERN\", \"- PATTERN\", \"include PATTERN\", \
     \"exclude PATTERN\" (a space or '_' before the pattern), \"!\" or \"clear\"";

/// One rule list, first match wins, as rsync.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    rules: Vec<Rule>,
}

/// One include or exclude rule, parsed as rsync's `add_rule` does.
#[derive(Clone, Debug)]
struct Rule {
    include: bool,
    /// The pattern without its leading `/` (when `anchored`) or trailing `/` (when `dir_only`).
    pattern: Vec<u8>,
    /// The pattern started with `/`: matched against the whole path.
    anchored: bool,
    /// The pattern ended with `/`: matches directories only.
    dir_only: bool,
    /// Slashes in the pattern as given, the leading one counted, the trailing one not.
    slash_count: usize,
    /// Holds `*`, `?` or `[`: matched by `dowild`, otherwise compared literally.
    wild: bool,
    /// Holds `**`, which can match a `/`.
    wild2: bool,
    /// Starts with `**` (not `/**`): may also match at the start of the path.
    wild2_prefix: bool,
    /// Ends with `***`: `dir/***` also matches `dir` itself.
    wild3_suffix: bool,
}

impl Filters {
    /// An empty list, which excludes nothing.
    pub fn new() -> Filters {
        Filters::default()
    }

    /// Whether the list holds no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// `--include PATTERN` (an old-style `- ` prefix makes it an exclude, as in rsync).
    pub fn include(&mut self, pattern: &str) -> Result<(), String> {
        self.old_style(pattern.as_bytes(), true)
            .map_err(|e| format!("--include {pattern:?}: {e}"))
    }

    /// `--exclude PATTERN` (an old-style `+ ` prefix makes it an include, as in rsync).
    pub fn exclude(&mut self, pattern: &str) -> Result<(), String> {
        self.old_style(pattern.as_bytes(), false)
            .map_err(|e| format!("--exclude {pattern:?}: {e}"))
    }

    /// --filter RULE: "+ PAT", "- PAT", "include PAT", "exclude PAT" ("+"/"-" followed by one
    /// space or underscore), and "!" (clear the list so far; "clear" too). Anything else: Err
    /// naming the rule and what is supported.
    pub fn rule(&mut self, rule: &str) -> Result<(), String> {
        self.filter_rule(rule.as_bytes())
            .map_err(|e| format!("--filter {rule:?}: {e}"))
    }

    /// --include-from / --exclude-from FILE: one pattern per line; blank lines and lines
    /// starting with ';' or '#' ignored. Err names the file and line.
    pub fn from_file(&mut self, path: &Path, include: bool) -> Result<(), String> {
        let option = if include {
            "--include-from"
        } else {
            "--exclude-from"
        };
        let text = std::fs::read(path)
            .map_err(|e| format!("{option} {}: cannot read: {e}", path.display()))?;
        let mut rest = &text[..];
        let mut line_no = 0u64;
        while !rest.is_empty() {
            line_no += 1;
            let end = rest
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
                .unwrap_or(rest.len());
            let line = &rest[..end];
            // CRLF ends one line, not two (rsync would skip the empty second one anyway, but
            // the line numbers in our messages should agree with an editor's).
            let next = match rest.get(end..end + 2) {
                Some(b"\r\n") => end + 2,
                _ => (end + 1).min(rest.len()),
            };
            rest = &rest[next..];
            if line.is_empty() || line[0] == b';' || line[0] == b'#' {
                continue;
            }
            self.old_style(line, include)
                .map_err(|e| format!("{option} {}, line {line_no}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Whether `rel` (a path relative to the transfer root, components separated by '/',
    /// bytes) is excluded. `is_dir`: the entry is a directory. A leading '/' is taken as the
    /// root itself (the path argument `/` is named so), never a reason to fail.
    pub fn excluded(&self, rel: &[u8], is_dir: bool) -> bool {
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        self.rules
            .iter()
            .find(|r| r.matches(rel, is_dir))
            .is_some_and(|r| !r.include)
    }

    /// rsync's `XFLG_OLD_PREFIXES` parsing (--include, --exclude, their -from files).
    fn old_style(&mut self, text: &[u8], include: bool) -> Result<(), String> {
        match text {
            b"" => Ok(()),
            b"!" => {
                self.rules.clear();
                Ok(())
            }
            [b'+', b' ', pattern @ ..] => self.push(true, pattern),
            [b'-', b' ', pattern @ ..] => self.push(false, pattern),
            pattern => self.push(include, pattern),
        }
    }

    /// rsync's `parse_rule_tok` without modifiers and without merge, hide/show, protect/risk.
    fn filter_rule(&mut self, text: &[u8]) -> Result<(), String> {
        if text.is_empty() {
            return Ok(());
        }
        // The rule's name: a keyword followed by whitespace, '_', ',' or the end, or one byte
        // (optionally followed by ','). rsync does not fall back from a keyword to one letter.
        let keyword = move |word: &[u8]| {
            let rest = text.strip_prefix(word)?;
            match rest.first() {
                None | Some(b'_' | b',') => Some(rest),
                Some(&b) if is_c_space(b) => Some(rest),
                Some(_) => None,
            }
        };
        let (kind, rest) = if let Some(rest) = keyword(b"include") {
            (b'+', rest)
        } else if let Some(rest) = keyword(b"exclude") {
            (b'-', rest)
        } else if let Some(rest) = keyword(b"clear") {
            (b'!', rest)
        } else if text[0].is_ascii_lowercase() {
            return Err(format!(
                "unknown or unsupported filter rule; {FILTER_SYNTAX}"
            ));
        } else {
            (text[0], &text[1..])
        };
        let rest = rest.strip_prefix(b",").unwrap_or(rest);
        match kind {
            b'!' if rest.is_empty() => {
                self.rules.clear();
                Ok(())
            }
            b'!' => Err(format!("'!' rule has trailing characters; {FILTER_SYNTAX}")),
            b'+' | b'-' => {
                let end = rest
                    .iter()
                    .position(|&b| b == b' ' || b == b'_')
                    .unwrap_or(rest.len());
                if end > 0 {
                    return Err(format!(
                        "rule modifiers ({:?}) are not supported; {FILTER_SYNTAX}",
                        String::from_utf8_lossy(&rest[..end])
                    ));
                }
                let pattern = rest.get(1..).unwrap_or_default();
                self.push(kind == b'+', pattern)
            }
            _ => Err(format!(
                "unknown or unsupported filter rule; {FILTER_SYNTAX}"
            )),
        }
    }

    /// rsync's `add_rule` for a plain include or exclude.
    fn push(&mut self, include: bool, given: &[u8]) -> Result<(), String> {
        if given.is_empty() {
            return Err("no pattern after the rule's prefix".to_string());
        }
        if given.len() >= PATTERN_LEN_MAX {
            return Err(format!(
                "the pattern is {} bytes; at most {} are allowed",
                given.len(),
                PATTERN_LEN_MAX - 1
            ));
        }
        if given.contains(&0) {
            return Err("the pattern holds a NUL byte".to_string());
        }
        let (whole, dir_only) = match given {
            [head @ .., b'/'] if !head.is_empty() => (head, true),
            _ => (given, false),
        };
        let slash_count = whole.iter().filter(|&&b| b == b'/').count();
        let wild = whole.iter().any(|&b| matches!(b, b'*' | b'?' | b'['));
        let wild2 = wild && whole.windows(2).any(|w| w == b"**");
        let rule = Rule {
            include,
            pattern: whole.strip_prefix(b"/").unwrap_or(whole).to_vec(),
            anchored: whole[0] == b'/',
            dir_only,
            slash_count,
            wild,
            wild2,
            wild2_prefix: wild2 && whole.starts_with(b"**"),
            wild3_suffix: wild2 && whole.ends_with(b"***"),
        };
        self.rules.push(rule);
        Ok(())
    }
}

/// Where a pattern may start matching in the path (`wildmatch_array`'s `where`).
#[derive(Clone, Copy, Debug)]
enum Place {
    /// At the start of the text.
    Start,
    /// At the start of the text's last N slash-separated components.
    LastComponents(usize),
    /// At the start of the text or just after any '/' in it.
    AnySlash,
}

impl Rule {
    /// rsync's `rule_matches`.
    fn matches(&self, rel: &[u8], is_dir: bool) -> bool {
        if rel.is_empty() || (self.dir_only && !is_dir) {
            return false;
        }
        let mut name = rel;
        if self.slash_count == 0 && !self.wild2 {
            if let Some(slash) = rel.iter().rposition(|&b| b == b'/') {
                name = &rel[slash + 1..];
            }
        }
        if !self.wild {
            return if self.anchored {
                name == self.pattern
            } else {
                name.ends_with(&self.pattern)
                    && (name.len() == self.pattern.len()
                        || name[name.len() - self.pattern.len() - 1] == b'/')
            };
        }
        // rsync matches "/" + name when the pattern starts with "**" (so "**/foo" matches
        // "foo"), and name + "/" for a directory when it ends with "***" ("dir/***" matches
        // "dir").
        let prefix: &[u8] = if self.wild2_prefix { b"/" } else { b"" };
        let suffix: &[u8] = if is_dir && self.wild3_suffix {
            b"/"
        } else {
            b""
        };
        let joined;
        let text = if prefix.is_empty() && suffix.is_empty() {
            name
        } else {
            joined = [prefix, name, suffix].concat();
            &joined[..]
        };
        let place = if !self.anchored && self.slash_count > 0 && !self.wild2 {
            Place::LastComponents(self.slash_count + 1)
        } else if !self.anchored && !self.wild2_prefix && self.wild2 {
            Place::AnySlash
        } else {
            Place::Start
        };
        wildmatch_at(&self.pattern, text, place)
    }
}

/// `dowild`'s answers. The two aborts prune the search: `AbortAll` — the text ran out, no later
/// start can match; `AbortToStarStar` — a single `*` would have to cross a '/', only an
/// enclosing `**` may go on trying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wild {
    Match,
    NoMatch,
    AbortAll,
    AbortToStarStar,
}

/// rsync's `wildmatch_array` over one text.
fn wildmatch_at(pattern: &[u8], text: &[u8], place: Place) -> bool {
    let text = match place {
        Place::LastComponents(n) => match last_components(text, n) {
            Some(start) => &text[start..],
            None => return false,
        },
        Place::Start | Place::AnySlash => text,
    };
    let mut answer = dowild(pattern, text);
    if answer != Wild::Match && matches!(place, Place::AnySlash) && answer != Wild::AbortAll {
        let mut i = 0;
        loop {
            let Some(&b) = text.get(i) else {
                return false;
            };
            i += 1;
            if b == b'/' {
                answer = dowild(pattern, &text[i..]);
                if answer != Wild::NoMatch && answer != Wild::AbortToStarStar {
                    break;
                }
            }
        }
    }
    answer == Wild::Match
}

/// Where the last `n` slash-separated components of `text` start (rsync's
/// `trailing_N_elements`); `None` when it has fewer.
fn last_components(text: &[u8], mut n: usize) -> Option<usize> {
    for (i, &b) in text.iter().enumerate().rev() {
        if b == b'/' {
            n -= 1;
            if n == 0 {
                return Some(i + 1);
            }
        }
    }
    (n == 1).then_some(0)
}

/// C's `isspace` in the C locale (Rust's `is_ascii_whitespace` leaves out '\v').
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// rsync's `dowild`: match `p` against the whole of `text`. Recursion happens only at a `*`
/// run, so its depth is at most half the pattern's length (< 4096 bytes).
fn dowild(p: &[u8], text: &[u8]) -> Wild {
    // The pattern holds no NUL (`push` refuses one), so 0 marks its end, as in C.
    let at = |i: usize| p.get(i).copied().unwrap_or(0);
    let mut pi = 0;
    let mut ti = 0;
    while pi < p.len() {
        let p_ch = p[pi];
        if p_ch == b'*' {
            pi += 1;
            let star_star = at(pi) == b'*';
            while at(pi) == b'*' {
                pi += 1;
            }
            if pi == p.len() {
                // A trailing "**" matches everything; a trailing "*" only what holds no '/'.
                return if star_star || !text[ti..].contains(&b'/') {
                    Wild::Match
                } else {
                    Wild::NoMatch
                };
            }
            while let Some(&t_ch) = text.get(ti) {
                let answer = dowild(&p[pi..], &text[ti..]);
                if answer != Wild::NoMatch {
                    if !star_star || answer != Wild::AbortToStarStar {
                        return answer;
                    }
                } else if !star_star && t_ch == b'/' {
                    return Wild::AbortToStarStar;
                }
                ti += 1;
            }
            return Wild::AbortAll;
        }
        let Some(&t_ch) = text.get(ti) else {
            return Wild::AbortAll;
        };
        match p_ch {
            b'?' => {
                if t_ch == b'/' {
                    return Wild::NoMatch;
                }
            }
            b'[' => {
                pi += 1;
                let mut c = at(pi);
                if c == b'^' {
                    c = b'!';
                }
                let negated = c == b'!';
                if negated {
                    pi += 1;
                    c = at(pi);
                }
                let mut prev: u8 = 0;
                let mut matched = false;
                // C's do { ... } while (prev_ch = p_ch, (p_ch = *++p) != ']'): a ']' first in
                // the class is a member.
                loop {
                    if c == 0 {
                        return Wild::AbortAll;
                    }
                    if c == b'\\' {
                        pi += 1;
                        c = at(pi);
                        if c == 0 {
                            return Wild::AbortAll;
                        }
                        matched |= t_ch == c;
                    } else if c == b'-' && prev != 0 && at(pi + 1) != 0 && at(pi + 1) != b']' {
                        pi += 1;
                        c = at(pi);
                        if c == b'\\' {
                            pi += 1;
                            c = at(pi);
                            if c == 0 {
                                return Wild::AbortAll;
                            }
                        }
                        matched |= prev <= t_ch && t_ch <= c;
                        c = 0; // a range cannot start another range
                    } else if c == b'[' && at(pi + 1) == b':' {
                        pi += 2;
                        let start = pi;
                        while at(pi) != 0 && at(pi) != b']' {
                            pi += 1;
                        }
                        if at(pi) == 0 {
                            return Wild::AbortAll;
                        }
                        if pi == start || p[pi - 1] != b':' {
                            // No ":]": the '[' is an ordinary member.
                            pi = start - 2;
                            c = b'[';
                            matched |= t_ch == c;
                        } else {
                            match posix_class(&p[start..pi - 1], t_ch) {
                                Some(hit) => matched |= hit,
                                None => return Wild::AbortAll,
                            }
                            c = 0;
                        }
                    } else {
                        matched |= t_ch == c;
                    }
                    prev = c;
                    pi += 1;
                    c = at(pi);
                    if c == b']' {
                        break;
                    }
                }
                if matched == negated || t_ch == b'/' {
                    return Wild::NoMatch;
                }
            }
            _ => {
                let literal = if p_ch == b'\\' {
                    pi += 1;
                    at(pi) // past the end: 0, which no path byte equals
                } else {
                    p_ch
                };
                if t_ch != literal {
                    return Wild::NoMatch;
                }
            }
        }
        pi += 1;
        ti += 1;
    }
    if ti == text.len() {
        Wild::Match
    } else {
        Wild::NoMatch
    }
}

/// Whether `b` is in the POSIX class `name` (ASCII, as in the C locale); `None` for an unknown
/// name, which makes rsync's whole pattern fail.
fn posix_class(name: &[u8], b: u8) -> Option<bool> {
    Some(match name {
        b"alnum" => b.is_ascii_alphanumeric(),
        b"alpha" => b.is_ascii_alphabetic(),
        b"blank" => b == b' ' || b == b'\t',
        b"cntrl" => b.is_ascii_control(),
        b"digit" => b.is_ascii_digit(),
        b"graph" => b.is_ascii_graphic(),
        b"lower" => b.is_ascii_lowercase(),
        b"print" => b.is_ascii_graphic() || b == b' ',
        b"punct" => b.is_ascii_punctuation(),
        b"space" => is_c_space(b),
        b"upper" => b.is_ascii_uppercase(),
        b"xdigit" => b.is_ascii_hexdigit(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::process::Command;

    /// A list of `--exclude` patterns.
    fn excluding(patterns: &[&str]) -> Filters {
        let mut f = Filters::new();
        for p in patterns {
            f.exclude(p).unwrap();
        }
        f
    }

    /// Whether one `--exclude pattern` excludes the file (`false`) or directory (`true`) `rel`.
    fn ex(pattern: &str, rel: &str, is_dir: bool) -> bool {
        excluding(&[pattern]).excluded(rel.as_bytes(), is_dir)
    }

    #[test]
    fn empty_list_excludes_nothing() {
        let f = Filters::new();
        assert!(f.is_empty());
        assert!(!f.excluded(b"a", false));
        assert!(!f.excluded(b"a/b", true));
        let mut f = Filters::new();
        f.exclude("").unwrap(); // rsync: an empty argument adds no rule
        f.rule("").unwrap();
        assert!(f.is_empty());
        f.exclude("x").unwrap();
        assert!(!f.is_empty());
    }

    #[test]
    fn first_match_wins() {
        let mut f = Filters::new();
        f.include("keep.log").unwrap();
        f.exclude("*.log").unwrap();
        assert!(!f.excluded(b"d/keep.log", false));
        assert!(f.excluded(b"d/other.log", false));
        assert!(!f.excluded(b"d/other.txt", false)); // no rule matches: kept
        let mut g = Filters::new();
        g.exclude("*.log").unwrap();
        g.include("keep.log").unwrap(); // too late
        assert!(g.excluded(b"keep.log", false));
    }

    #[test]
    fn without_a_slash_the_final_component_is_matched() {
        assert!(ex("b.txt", "b.txt", false));
        assert!(ex("b.txt", "a/b/b.txt", false));
        assert!(!ex("b.txt", "ab.txt", false));
        assert!(!ex("b.txt", "b.txt/c", false));
        assert!(ex("*.log", "x/y/z.log", false));
        assert!(!ex("*.log", "x.log/y", false));
    }

    #[test]
    fn a_leading_slash_anchors_at_the_root() {
        assert!(ex("/a.log", "a.log", false));
        assert!(!ex("/a.log", "d/a.log", false));
        assert!(ex("/src/x", "src/x", true));
        assert!(!ex("/x", "src/x", true));
        assert!(ex("/*.log", "a.log", false));
        assert!(!ex("/*.log", "d/a.log", false));
        // "/" alone (and "//", directories only) names nothing.
        assert!(!ex("/", "a", false));
        assert!(!ex("//", "a", true));
    }

    #[test]
    fn an_inner_slash_matches_the_last_components() {
        assert!(ex("x/y", "x/y", true));
        assert!(ex("x/y", "deep/x/y", false));
        assert!(!ex("x/y", "xx/y", false));
        assert!(!ex("x/y", "x/y/z", false));
        assert!(ex("x/*", "src/x/z.txt", false));
        assert!(!ex("x/*", "x", true));
        assert!(!ex("x/*", "x/y/z", false));
        assert!(ex("y/*.log", "x/y/z.log", false));
        assert!(!ex("y/*.log", "y.log", false));
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        assert!(ex("dir/", "dir", true));
        assert!(ex("dir/", "a/dir", true));
        assert!(!ex("dir/", "dir", false));
        assert!(!ex("b.txt/", "b.txt", false));
        assert!(ex("/x/", "x", true));
        assert!(!ex("/x/", "x", false));
        assert!(ex("x/y/", "a/x/y", true));
        assert!(!ex("x/y/", "a/x/y", false));
    }

    #[test]
    fn star_and_question_mark_stop_at_a_slash() {
        assert!(ex("d?r", "dir", true));
        assert!(ex("d?r", "a/dar", false));
        assert!(!ex("d?r", "dr", false));
        assert!(!ex("/d?r", "d/r", false));
        assert!(!ex("/d*r", "d/r", false));
        assert!(ex("/d*r", "dxyzr", false));
        assert!(ex("*", "anything", false));
        assert!(ex("/*", "top", false));
        assert!(!ex("/*", "top/below", false));
    }

    #[test]
    fn double_star_crosses_slashes() {
        assert!(ex("**/z*", "z.log", false)); // a leading "**/" matches at the root too
        assert!(ex("**/z*", "x/y/z.log", false));
        assert!(!ex("**/z*", "x/az", false));
        assert!(ex("/x/**", "x/y", true));
        assert!(ex("/x/**", "x/y/z.log", false));
        assert!(!ex("/x/**", "x", true));
        assert!(ex("x/**/*.log", "x/y/z.log", false));
        assert!(ex("x/**/*.log", "src/x/y/z.log", false)); // unanchored "**": after any '/'
        assert!(!ex("x/**/*.log", "x/z.log", false)); // "/**/" needs two slashes
        assert!(ex("x**", "x", true));
        assert!(ex("x**", "src/xx/b", false));
        assert!(!ex("x**", "ax", false));
        assert!(ex("/a**b", "a/c/b", false));
        assert!(ex("**", "a/b", false));
    }

    #[test]
    fn triple_star_matches_the_directory_and_below() {
        assert!(ex("x/***", "x", true));
        assert!(ex("x/***", "x/y", true));
        assert!(ex("x/***", "x/y/z.log", false));
        assert!(ex("x/***", "src/x", true));
        assert!(!ex("x/***", "x", false)); // a file named x is not the directory
        assert!(!ex("x/***", "xx", true));
        assert!(ex("/x/***", "x", true));
        assert!(!ex("/x/***", "src/x", true));
    }

    #[test]
    fn classes() {
        assert!(ex("[ab].*", "a.log", false));
        assert!(ex("[ab].*", "b.txt", false));
        assert!(!ex("[ab].*", "c.tmp", false));
        assert!(!ex("[ab].*", "ab.txt", false));
        assert!(ex("[!ab]*", "c", false));
        assert!(!ex("[!ab]*", "a", false));
        assert!(ex("[^ab]*", "c", false));
        assert!(!ex("[^ab]*", "b", false));
        assert!(ex("[a-c]x", "bx", false));
        assert!(!ex("[a-c]x", "dx", false));
        assert!(ex("[]]", "]", false)); // ']' first is a member
        assert!(ex("[!]]", "a", false));
        assert!(!ex("[!]]", "]", false));
        assert!(ex("[a-]", "-", false)); // '-' last is a member
        assert!(ex("[[:digit:]]*", "7days", false));
        assert!(!ex("[[:digit:]]*", "days", false));
        assert!(ex("[[:upper:][:space:]]", " ", false));
        assert!(ex("[[:alpha:]]", "Q", false));
        assert!(!excluding(&["[[:alpha:]]"]).excluded(b"\xe9", false)); // ASCII only
        assert!(!ex("/a[/]b", "a/b", false)); // a class never matches '/'
        assert!(!ex("/a[!x]b", "a/b", false));
        // An unknown class or an unterminated '[' matches nothing.
        assert!(!ex("[[:nope:]]", "a", false));
        assert!(!ex("a[b", "a[b", false));
        assert!(!ex("a[b", "ab", false));
    }

    #[test]
    fn backslash_escapes_a_wildcard() {
        assert!(ex("q\\*", "q*", false));
        assert!(!ex("q\\*", "qq", false));
        assert!(ex("q*", "qq", false));
        assert!(ex("\\[x]?", "[x]y", false));
        assert!(!ex("\\[x]?", "x", false));
        // Without a wildcard rsync compares literally: the backslash is a byte of the name.
        assert!(ex("a\\b", "a\\b", false));
        // Braces are bytes like any other (globset would read alternatives).
        assert!(ex("br{a,c}e", "br{a,c}e", false));
        assert!(!ex("br{a,c}?", "brae", false));
        assert!(!ex("a\\b", "ab", false));
        // A trailing backslash matches nothing.
        assert!(!ex("a*\\", "ab", false));
    }

    #[test]
    fn names_are_bytes() {
        let mut f = Filters::new();
        f.exclude("caf?.log").unwrap();
        assert!(f.excluded(b"d/caf\xe9.log", false));
        assert!(!f.excluded(b"d/caf\xc3\xa9.log", false)); // '?' is one byte
        let mut g = Filters::new();
        g.exclude("caf??.log").unwrap();
        assert!(g.excluded(b"caf\xc3\xa9.log", false));
        assert!(ex("name with spaces.txt", "d/name with spaces.txt", false));
        assert!(ex("* *", "d/a b", false));
    }

    #[test]
    fn old_prefixes_in_include_and_exclude() {
        let mut f = Filters::new();
        f.exclude("+ keep.log").unwrap(); // an include after all, as in rsync
        f.include("- *.log").unwrap(); // an exclude
        assert!(!f.excluded(b"keep.log", false));
        assert!(f.excluded(b"a.log", false));
        // "!" clears; "!x" is a pattern; "+x" and "-x" are patterns.
        f.exclude("!").unwrap();
        assert!(f.is_empty());
        f.exclude("!x").unwrap();
        assert!(f.excluded(b"!x", false));
        f.include("+x").unwrap();
        assert!(!f.excluded(b"+x", false));
        assert!(f.exclude("- ").unwrap_err().contains("--exclude \"- \""));
        assert!(f.include("+ ").is_err());
    }

    #[test]
    fn filter_rules() {
        let mut f = Filters::new();
        f.rule("- *.tmp").unwrap();
        f.rule("+_keep.txt").unwrap();
        f.rule("exclude *.txt").unwrap();
        f.rule("include_*.log").unwrap();
        f.rule("-, *.bak").unwrap(); // an empty modifier list, as rsync allows
        assert!(f.excluded(b"a.tmp", false));
        assert!(!f.excluded(b"d/keep.txt", false));
        assert!(f.excluded(b"d/b.txt", false));
        assert!(!f.excluded(b"a.log", false));
        assert!(f.excluded(b"a.bak", false));
        // The pattern is everything after the one separator.
        f.rule("-  x").unwrap();
        assert!(f.excluded(b" x", false));
        assert!(!f.excluded(b"x", false));
        f.rule("!").unwrap();
        assert!(f.is_empty());
        f.rule("- a").unwrap();
        f.rule("clear").unwrap();
        assert!(f.is_empty());
    }

    #[test]
    fn filter_errors_name_the_rule_and_the_syntax() {
        let mut f = Filters::new();
        for bad in [
            "merge rules.txt",
            ". rules.txt",
            ": .rsync-filter",
            "dir-merge .rsync-filter",
            "hide x",
            "show x",
            "protect x",
            "risk x",
            "P x",
            "H x",
            "-/ x",
            "+! x",
            "-p x",
            "-C",
            "*.log",
            "x",
            "includex y",
            "include\tx",
            "+",
            "- ",
            "include",
            "exclude ",
            "! ",
            "!x",
            "clear x",
        ] {
            let e = f.rule(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
            if !matches!(bad, "+" | "- " | "include" | "exclude ") {
                assert!(e.contains("supported:"), "{bad:?}: {e}");
            }
        }
        assert!(f.is_empty());
    }

    #[test]
    fn patterns_too_long_or_with_nul_are_refused() {
        let mut f = Filters::new();
        f.exclude(&"a".repeat(PATTERN_LEN_MAX - 1)).unwrap();
        assert!(f.exclude(&"a".repeat(PATTERN_LEN_MAX)).is_err());
        assert!(f.exclude("a\0b").is_err());
        assert!(f.rule("- a\0b").is_err());
        // A long pattern of stars fails in reasonable time and within the stack.
        let mut g = Filters::new();
        g.exclude(&"*a".repeat(2000)).unwrap();
        assert!(!g.excluded("a".repeat(300).as_bytes(), false));
    }

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn rule_files() {
        let d = scratch();
        let path = d.path().join("rules");
        std::fs::write(
            &path,
            b"# comment\n; comment\n\n*.log\r\n+ keep.txt\r- *.txt\n \nlast\xe9",
        )
        .unwrap();
        let mut f = Filters::new();
        f.from_file(&path, false).unwrap();
        assert!(f.excluded(b"a.log", false));
        assert!(!f.excluded(b"keep.txt", false));
        assert!(f.excluded(b"b.txt", false));
        assert!(f.excluded(b" ", false)); // whitespace is a pattern, as in rsync
        assert!(f.excluded(b"d/last\xe9", false));
        assert!(!f.excluded(b"# comment", false));
        let mut g = Filters::new();
        g.from_file(&path, true).unwrap();
        assert!(!g.excluded(b"a.log", false));
        assert!(g.excluded(b"b.txt", false)); // "- " wins over --include-from

        // Errors name the option, the file and the line (CRLF is one line break).
        std::fs::write(&path, b"a\r\nb\n- \n").unwrap();
        let e = f.from_file(&path, false).unwrap_err();
        assert!(e.contains("--exclude-from"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("line 3"), "{e}");
        let missing = d.path().join("missing");
        let e = f.from_file(&missing, true).unwrap_err();
        assert!(e.contains("--include-from"), "{e}");
        assert!(e.contains("missing"), "{e}");
        // "!" in a file clears what came before, the rules of other options included.
        std::fs::write(&path, b"!\nx\n").unwrap();
        let mut h = excluding(&["*.log"]);
        h.from_file(&path, false).unwrap();
        assert!(!h.excluded(b"a.log", false));
        assert!(h.excluded(b"x", false));
    }

    // ---- Against the rsync binary --------------------------------------------------------

    const RSYNC: &str = "/usr/bin/rsync";

    /// One filter option, given to both rsync and [`Filters`].
    #[derive(Clone, Copy, Debug)]
    enum Opt {
        Include(&'static str),
        Exclude(&'static str),
        Filter(&'static str),
        /// `--include-from` a file holding these bytes.
        IncludeFrom(&'static [u8]),
        /// `--exclude-from` a file holding these bytes.
        ExcludeFrom(&'static [u8]),
    }

    /// The tree: nested directories, spaces, dotfiles, a symlink to a directory (not a
    /// directory to the filter), a non-UTF-8 name, a name holding '*' and a '\'.
    fn make_tree(src: &Path) {
        let files: &[&[u8]] = &[
            b"a.log",
            b"b.txt",
            b"c.tmp",
            b"ab.txt",
            b"zeta.txt",
            b"7days.txt",
            b"name with spaces.txt",
            b".hidden",
            b".dotdir/inner.log",
            b".dotdir/keep.txt",
            b"dir/file.txt",
            b"dir/a.log",
            b"dar/keep.txt",
            b"sub dir/a.log",
            b"sub dir/notes.txt",
            b"sub dir/deeper/x/y",
            b"x/z.txt",
            b"x/top.log",
            b"x/y/z.log",
            b"x/y/keep.txt",
            b"x/y/w/v.tmp",
            b"xx/b.txt",
            b"deep/x/y",
            b"deep/x/y.txt",
            b"q*",
            b"qq",
            b"back\\slash",
            b"caf\xe9.log",
            b"y/in-top-y.txt",
            b"br{a,c}e",
            b"brae",
        ];
        for f in files {
            let p = src.join(OsStr::from_bytes(f));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        std::fs::create_dir_all(src.join("empty dir")).unwrap();
        std::os::unix::fs::symlink("x", src.join("lnk")).unwrap();
    }

    /// What [`Filters`] keeps when walking `dir` as rsync does: each entry decided on its own,
    /// no descent into an excluded directory, a symlink never a directory.
    fn walk(f: &Filters, dir: &Path, rel: &[u8], out: &mut BTreeSet<Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let mut child = rel.to_vec();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(entry.file_name().as_bytes());
            let is_dir = entry.file_type().unwrap().is_dir();
            if f.excluded(&child, is_dir) {
                continue;
            }
            out.insert(child.clone());
            if is_dir {
                walk(f, &entry.path(), &child, out);
            }
        }
    }

    /// What rsync would copy: `rsync -a -n -8 --out-format=%n OPTS SRC[/] DST/`, one name a
    /// line, directories with a trailing '/', the root as "./" (left out).
    fn rsync_list(
        args: &[std::ffi::OsString],
        src: &Path,
        slash: bool,
        dst: &Path,
    ) -> BTreeSet<Vec<u8>> {
        let mut src_arg = src.as_os_str().as_bytes().to_vec();
        if slash {
            src_arg.push(b'/');
        }
        let mut dst_arg = dst.as_os_str().as_bytes().to_vec();
        dst_arg.push(b'/');
        let out = Command::new(RSYNC)
            .args(["-a", "-n", "-8", "--out-format=%n"])
            .args(args)
            .arg(OsStr::from_bytes(&src_arg))
            .arg(OsStr::from_bytes(&dst_arg))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rsync {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"/").unwrap_or(l))
            .filter(|l| !l.is_empty() && *l != b".")
            .map(<[u8]>::to_vec)
            .collect()
    }

    fn show(set: &BTreeSet<Vec<u8>>) -> Vec<String> {
        set.iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    #[test]
    fn same_as_rsync_on_a_real_tree() {
        if !Path::new(RSYNC).exists() {
            eprintln!("{RSYNC} is not installed: the comparison with rsync was skipped");
            return;
        }
        use Opt::*;
        let cases: &[&[Opt]] = &[
            &[Exclude("*.log")],
            &[Exclude("/src/x/")],
            &[Exclude("/x/")],
            &[Include("*/"), Include("*.txt"), Exclude("*")],
            &[Exclude("x/y")],
            &[Exclude("**/z*")],
            &[Exclude("d?r")],
            &[Exclude("[ab].*")],
            &[Filter("- *.tmp")],
            &[Exclude("x/***")],
            &[Exclude("/src/x/***")],
            &[Exclude("a.log")],
            &[Exclude("/a.log")],
            &[Exclude("/src/a.log")],
            &[Exclude("b.txt/")],
            &[Exclude("y/")],
            &[Exclude("lnk/")],
            &[Exclude("lnk")],
            &[Exclude(".*")],
            &[Exclude("name with spaces.txt")],
            &[Exclude("sub*/")],
            &[Exclude("x/*")],
            &[Exclude("x/**")],
            &[Exclude("x**")],
            &[Exclude("x/**/*.log")],
            &[Exclude("y**txt")],
            &[Exclude("br{a,c}e")],
            &[Exclude("br{a,c}?")],
            &[Exclude("/x[/]y")],
            &[Exclude("**/x[!a]y")],
            &[Exclude("x?y")],
            &[Exclude("**/x/y")],
            &[Exclude("/**/y")],
            &[Exclude("**")],
            &[Exclude("*")],
            &[Exclude("src")],
            &[Exclude("src/")],
            &[Exclude("/src")],
            &[Exclude("q\\*")],
            &[Exclude("q*")],
            &[Exclude("back\\slash")],
            &[Exclude("back\\sla?h")],
            &[Exclude("caf?.log")],
            &[Exclude("[!a-c]*.log")],
            &[Exclude("[^.]*")],
            &[Exclude("[[:digit:]]*")],
            &[Exclude("[[:alpha:]][[:alpha:]].txt")],
            &[Exclude("[]")],
            &[Exclude("*[")],
            &[Exclude("empty dir/")],
            &[Exclude("y/*.log")],
            &[Exclude("deep/x/")],
            &[Include("keep.txt"), Exclude("*.txt")],
            &[Exclude("*.txt"), Include("keep.txt")],
            &[Filter("+ keep.txt"), Filter("exclude *.txt")],
            &[Filter("include_x/"), Filter("include_x/y/"), Filter("-_*")],
            &[
                Include("/x/"),
                Include("/x/y/"),
                Include("/x/y/**"),
                Exclude("*"),
            ],
            &[Exclude("+ *.log"), Exclude("*")],
            &[Include("- *.log")],
            &[Exclude("*"), Filter("!"), Exclude("*.txt")],
            &[Exclude("*"), Exclude("!"), Exclude("*.tmp")],
            &[Exclude("*"), Filter("clear"), Exclude("x")],
            &[ExcludeFrom(
                b"# tmp files\n*.tmp\r\n; and logs\r\n\n*.log\n+ b.txt\r*.txt",
            )],
            &[IncludeFrom(b"*/\n*.log\n- *\n")],
            &[IncludeFrom(b"*/\n*.txt\n"), Exclude("*")],
        ];
        let d = scratch();
        let src = d.path().join("src");
        let dst = d.path().join("dst");
        std::fs::create_dir_all(&dst).unwrap();
        make_tree(&src);
        let mut passed = 0;
        for (n, case) in cases.iter().enumerate() {
            let mut args = Vec::new();
            let mut f = Filters::new();
            for (i, opt) in case.iter().enumerate() {
                let file = |bytes: &[u8]| -> PathBuf {
                    let p = d.path().join(format!("rules-{n}-{i}"));
                    std::fs::write(&p, bytes).unwrap();
                    p
                };
                match *opt {
                    Include(p) => {
                        args.push(format!("--include={p}").into());
                        f.include(p).unwrap();
                    }
                    Exclude(p) => {
                        args.push(format!("--exclude={p}").into());
                        f.exclude(p).unwrap();
                    }
                    Filter(r) => {
                        args.push(format!("--filter={r}").into());
                        f.rule(r).unwrap();
                    }
                    IncludeFrom(b) => {
                        let p = file(b);
                        args.push(format!("--include-from={}", p.display()).into());
                        f.from_file(&p, true).unwrap();
                    }
                    ExcludeFrom(b) => {
                        let p = file(b);
                        args.push(format!("--exclude-from={}", p.display()).into());
                        f.from_file(&p, false).unwrap();
                    }
                }
            }
            // src/: paths are relative to src.
            let want = rsync_list(&args, &src, true, &dst);
            let mut got = BTreeSet::new();
            walk(&f, &src, b"", &mut got);
            assert_eq!(show(&got), show(&want), "{case:?} with src/");
            // src: paths start with "src", which the rules see too.
            let want = rsync_list(&args, &src, false, &dst);
            let mut got = BTreeSet::new();
            if !f.excluded(b"src", true) {
                got.insert(b"src".to_vec());
                walk(&f, &src, b"src", &mut got);
            }
            assert_eq!(show(&got), show(&want), "{case:?} with src");
            passed += 1;
        }
        assert_eq!(passed, cases.len());
    }
}
