//! The text the masters run, made at compile time from the commented
//! files: their code lines, without indentation, comment lines or blank
//! lines.
//!
//! The comments are for the people who audit the scripts; the masters
//! have no use for them, and a script sent as `EVAL` (the release that
//! follows a refused acquire, which must not wait for a `NOSCRIPT` replay)
//! would carry them to every master and make each hash them. A line is
//! dropped only when its first character after the indentation starts a
//! comment (`--`); the scripts write no comment after code, so every code
//! line is kept whole (a unit test holds them to that).

/// The length of what [`code`] makes of `source`.
pub(super) const fn len(source: &str) -> usize {
    walk(source.as_bytes(), &mut [])
}

/// The code lines of `source`, each without its indentation and ended by
/// a newline; `N` is [`len`] of `source`.
pub(super) const fn code<const N: usize>(source: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let written = walk(source.as_bytes(), &mut out);
    assert!(written == N, "the length is the one `len` gives");
    out
}

/// `code` as text: the sources are UTF-8 and lines are cut at ASCII bytes
/// only.
pub(super) const fn text(code: &'static [u8]) -> &'static str {
    match core::str::from_utf8(code) {
        Ok(text) => text,
        Err(_) => panic!("a script's source is UTF-8 and is cut at newlines"),
    }
}

/// Writes the code lines of `source` to `out` (as far as it reaches) and
/// returns how many bytes they take.
const fn walk(source: &[u8], out: &mut [u8]) -> usize {
    let mut written = 0;
    let mut at = 0;
    while at < source.len() {
        let mut end = at;
        while end < source.len() && source[end] != b'\n' {
            end += 1;
        }
        let mut start = at;
        while start < end && (source[start] == b' ' || source[start] == b'\t') {
            start += 1;
        }
        let comment = end - start >= 2 && source[start] == b'-' && source[start + 1] == b'-';
        if start < end && !comment {
            let mut i = start;
            while i < end {
                if written < out.len() {
                    out[written] = source[i];
                }
                written += 1;
                i += 1;
            }
            if written < out.len() {
                out[written] = b'\n';
            }
            written += 1;
        }
        at = end + 1;
    }
    written
}

#[cfg(test)]
mod tests {
    use super::{code, len};

    #[test]
    fn keeps_code_lines_whole_and_drops_the_rest() {
        const SOURCE: &str =
            "-- a comment\n\nlocal a = 1\n  if a then\n    -- why\n\treturn \"x--y\"\n  end";
        const OUT: [u8; len(SOURCE)] = code(SOURCE);
        assert_eq!(
            core::str::from_utf8(&OUT),
            Ok("local a = 1\nif a then\nreturn \"x--y\"\nend\n")
        );
    }

    #[test]
    fn an_empty_or_comment_only_source_is_empty() {
        assert_eq!(len(""), 0);
        assert_eq!(len("-- only\n   \n\t-- this\n"), 0);
    }

    #[test]
    fn no_script_has_a_comment_after_code() {
        // A comment after code would be sent (lines are kept whole); the
        // scripts' Lua patterns escape a dash as `%-`, so `--` in a code
        // line can only start a comment.
        for script in crate::scripts::Script::ALL {
            for line in script.text().lines() {
                assert!(!line.contains("--"), "{script:?}: {line}");
                assert!(!line.starts_with([' ', '\t']), "{script:?}: {line}");
            }
        }
    }
}
