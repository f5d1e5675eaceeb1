//! The [`oracle`] check: a differential test of the first frame against the
//! independent `redis-protocol` crate, with its documented differences.

use super::theirs::{Theirs, resp2, resp3};
use super::tree::{Builder, Features, Node, Value};
use redlock_mio::resp::{Decoder, Error, Limits, Status};

// The first frame of the input is decoded by our decoder (into a tree built
// from its tokens) and by `redis-protocol` 6, an independent nom-based
// parser: its RESP2 decoder and its RESP3 decoder (through its streaming
// API, so that a top-level streamed string or aggregate is collected from
// its parts). Both results become a normalised owned tree, [`Node`], and
// are compared.
//
// - Both decode a frame: same tree and same length.
// - We decode a frame, the oracle does not: a bug, unless the frame uses
//   something the oracle is stricter about (STRICTER below).
// - The oracle decodes a frame, we fail: a bug, unless our error is one of
//   the documented leniencies of the oracle (LENIENT below), checked on the
//   bytes of the token that failed.
// - The oracle decodes a frame, we need more bytes: a bug.
// - We need more bytes, the oracle fails: a bug unless STRICTER applies to
//   the part we have seen, or the oracle fails on the token we have not
//   finished (it needs more bytes when given only the bytes before it).
// - Both fail or need more bytes: no check (the oracle does not check
//   payload terminators, so it may wait where we already failed).
//
// LENIENT: redis-protocol accepts, we refuse (by design: our grammar is the
// one the module docs state).
//
// 1. Numbers are read with Rust's `FromStr`: a leading `+` is accepted in
//    integers and lengths (`:+1`, `$+3`).
// 2. Lengths of `-0` are read as 0, and `%-1` / `~-1` as the streamed
//    marker `?` (its RESP3 decoder maps `-1` to `?` for `$ * % ~`).
// 3. A simple line is read up to the first CRLF, so a bare CR or LF inside
//    it is accepted (for strings, errors, big numbers, nulls, end markers).
// 4. The two bytes after a bulk, bulk error, verbatim or chunk payload are
//    skipped without checking they are CRLF.
// 5. Doubles are read with `f64::from_str`: `nan`, `NaN`, `+1`, `.5`, `1.`,
//    `infinity`, `+inf`, ... We take `-?(inf|digits(.digits)?([eE][+-]?digits)?)`.
// 6. `_` and `.` lines may have content; it is ignored.
// 7. Big numbers are not validated (`(abc` is accepted).
// 8. A verbatim string's 4th byte need not be `:`.
// 9. `HELLO ...` lines (a client command) are a frame type.
// 10. Its decoder has no streaming context: `.` and `;` are frames of their
//     own, accepted anywhere, and either one ends any streamed type (where
//     we report `UnexpectedEnd`, `UnexpectedChunk` or `ExpectedChunk`).
//     For the same reason our aggregation of a top-level stream accepts
//     whole bulk strings inside a streamed string, as its `StreamedFrame`
//     does.
//
// STRICTER: redis-protocol refuses (or cannot represent), we accept; such
// frames are skipped.
//
// a. Verbatim formats other than `txt` and `mkd`.
// b. Aggregates as map keys, set members or attribute keys (not hashable).
// c. Attributes on a null (any null).
// d. An attribute annotating an attribute.
// e. RESP2 nulls (`$-1`, `*-1`) in the RESP3 decoder: it reads `-1` as the
//    streamed marker (RESP2 frames are compared with its RESP2 decoder).
// f. Streamed strings or aggregates inside an aggregate: its decoder only
//    returns streamed frames at the top level.
//
// NORMALISED: maps, sets and attributes are `HashMap`s / `HashSet`s there,
// so they are compared sorted. Keys that compare equal by value (integers,
// booleans, nulls, doubles; other keys carry their byte range and never
// collide) collapse in a `HashMap`: when our frame has such duplicates, only
// the frame's type and length are compared. RESP2 null bulk and null array
// are the same `Null` there.
//
// LIMITS: our decoder runs with a depth limit of 1100 and a line limit of
// usize::MAX, which no input of the fuzzer's 4096 bytes reaches; the other
// limits stay at their defaults (a declared length beyond them is refused
// by us and never completes in the oracle, which allocates nothing for a
// declared length: nom's `count` preallocates at most 64 KiB). But
// redis-protocol recurses several calls deep per level of nesting (over
// 16 KiB of stack per level in a debug build), so the oracles only run when
// the nesting they could reach is at most `MAX_ORACLE_DEPTH`: the deepest
// level we saw, plus one per aggregate type byte after the point where we
// stopped (up to there, the oracle nests as we do).

/// How our decoder ended on the first frame.
#[derive(Debug)]
enum Ours {
    /// A complete frame of this many bytes.
    Frame(usize),
    /// The input ended inside the frame, in a token starting at this
    /// offset.
    Partial(usize),
    /// Failed in the token starting at this offset.
    Failed(Error, usize),
}

/// Our limits for the comparison; see LIMITS above.
const ORACLE_LIMITS: Limits = Limits::new()
    .with_max_depth(1100)
    .with_max_line_len(usize::MAX);

/// The deepest nesting the oracles are run on; see LIMITS above.
const MAX_ORACLE_DEPTH: usize = 64;

/// Our result on the first frame, our tree for it, what it uses, and a
/// bound on the nesting the oracles may reach on the input.
fn ours(data: &[u8]) -> (Ours, Node, Features, usize) {
    let mut decoder = Decoder::with_limits(ORACLE_LIMITS);
    let mut tokens = Vec::new();
    let mut at = 0;
    let mut deepest = 0;
    let end = loop {
        match decoder.decode(&data[at..]) {
            Ok(Status::Complete(decoded)) => {
                tokens.push(decoded.token);
                at += decoded.len;
                deepest = deepest.max(decoder.depth());
                if decoded.frame_end {
                    break Ours::Frame(at);
                }
            }
            Ok(Status::Partial) => break Ours::Partial(at),
            Err(error) => break Ours::Failed(error, at),
        }
    };
    let after = data[at..].iter().filter(|b| b"*%~>|".contains(b)).count();
    let mut builder = Builder {
        tokens: tokens.iter(),
        features: Features::default(),
    };
    let node = builder.node(0);
    if let Ours::Frame(_) = end {
        assert!(
            builder.tokens.next().is_none(),
            "tokens after the frame's end"
        );
        assert!(
            !contains_missing(&node),
            "complete frame with a hole: {node:?}"
        );
    }
    (end, node, builder.features, deepest + after)
}

fn contains_missing(node: &Node) -> bool {
    let pairs = |pairs: &[(Node, Node)]| {
        pairs
            .iter()
            .any(|(k, v)| contains_missing(k) || contains_missing(v))
    };
    node.attrs.iter().any(|a| pairs(a))
        || match &node.value {
            Value::Missing => true,
            Value::Array(items) | Value::Set(items) | Value::Push(items) => {
                items.iter().any(contains_missing)
            }
            Value::Map(items) => pairs(items),
            _ => false,
        }
}

/// The line of a token: its bytes after the type byte, up to the first CRLF
/// (or the end of the input).
fn first_line(token: &[u8]) -> &[u8] {
    let body = token.get(1..).unwrap_or_default();
    let end = body
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(body.len());
    &body[..end]
}

/// Our documented double grammar: `-?(inf|D+(.D+)?([eE][+-]?D+)?)`.
fn strict_double(text: &[u8]) -> bool {
    let text = text.strip_prefix(b"-").unwrap_or(text);
    if text == b"inf" {
        return true;
    }
    fn digits(s: &[u8]) -> Option<&[u8]> {
        let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
        (n > 0).then(|| &s[n..])
    }
    let Some(mut rest) = digits(text) else {
        return false;
    };
    if let Some(fraction) = rest.strip_prefix(b".") {
        match digits(fraction) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    if let [b'e' | b'E', exponent @ ..] = rest {
        let exponent = match exponent {
            [b'+' | b'-', e @ ..] => e,
            e => e,
        };
        match digits(exponent) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

/// Which LENIENT case explains our `error` on the token at the start of
/// `token`, when the oracle decoded a frame; `None` if none does.
fn lenient(error: Error, token: &[u8]) -> Option<&'static str> {
    let kind = *token.first()?;
    let line = first_line(token);
    match error {
        Error::InvalidNumber | Error::InvalidLength => match line {
            [b'+', ..] => Some("1: '+' in a number"),
            // The value is 0 or 1: zeros, then a last 0 or 1.
            [b'-', zeros @ .., b'0' | b'1'] if zeros.iter().all(|&d| d == b'0') => {
                Some("2: length -0 or -1")
            }
            _ => None,
        },
        Error::MissingCrlf => match kind {
            b'+' | b'-' | b'(' | b'_' | b'.' if line.contains(&b'\r') || line.contains(&b'\n') => {
                Some("3: bare CR or LF in a line")
            }
            b'$' | b'!' | b'=' | b';' => {
                let len: usize = std::str::from_utf8(line).ok()?.parse().ok()?;
                let start = 1 + line.len() + 2;
                let tail = token.get(start + len..start + len + 2)?;
                (tail != b"\r\n").then_some("4: payload terminator not checked")
            }
            _ => None,
        },
        Error::InvalidDouble => (!strict_double(line)).then_some("5: f64::from_str syntax"),
        Error::InvalidNull => {
            (matches!(kind, b'_' | b'.') && !line.is_empty()).then_some("6: content in _ or .")
        }
        Error::InvalidBigNumber => (kind == b'(').then_some("7: big number not validated"),
        Error::InvalidVerbatim => {
            let len: usize = std::str::from_utf8(line).ok()?.parse().ok()?;
            let payload = token.get(1 + line.len() + 2..)?;
            (kind == b'=' && len >= 4 && payload.get(3) != Some(&b':'))
                .then_some("8: verbatim separator not checked")
        }
        Error::UnknownType(b'H') => Some("9: HELLO"),
        Error::UnexpectedEnd | Error::UnexpectedChunk | Error::ExpectedChunk => {
            Some("10: no streaming context")
        }
        _ => None,
    }
}

/// Compares one oracle with our result. `applies` says whether the oracle
/// can represent our frame (RESP2 only for the RESP2 decoder; nothing of
/// STRICTER for the RESP3 one).
fn compare(
    name: &str,
    data: &[u8],
    ours: &Ours,
    node: &Node,
    features: &Features,
    applies: bool,
    decode: fn(&[u8]) -> Theirs,
) {
    let context = || {
        format!(
            "{name}: ours {ours:?} {node:?}\ninput {:?}",
            data.escape_ascii().to_string()
        )
    };
    match (ours, decode(data)) {
        (Ours::Frame(len), Theirs::Frame(their_node, their_len)) => {
            if !applies {
                return;
            }
            assert_eq!(*len, their_len, "frame length differs\n{}", context());
            if features.collision {
                assert_eq!(
                    std::mem::discriminant(&node.value),
                    std::mem::discriminant(&their_node.value),
                    "frame type differs\n{}",
                    context()
                );
                return;
            }
            let (a, b) = (node.clone().canonical(), their_node.canonical());
            assert!(a == b, "frames differ\ntheirs {b:?}\n{}", context());
        }
        (Ours::Frame(_), theirs) => {
            assert!(
                !applies,
                "oracle does not decode our frame: {theirs:?}\n{}",
                context()
            );
        }
        (Ours::Partial(_), Theirs::Frame(their_node, their_len)) => {
            if applies {
                panic!(
                    "oracle decodes a frame ({their_len} bytes, {their_node:?}) where we need more bytes\n{}",
                    context()
                );
            }
        }
        (Ours::Partial(at), Theirs::Failed(e)) => {
            // It may fail on the token we have not finished (an attribute
            // on an attribute, say): it must not fail before it.
            let before = decode(&data[..*at]);
            assert!(
                !applies || matches!(before, Theirs::Partial),
                "oracle fails ({e}), and on the {at} bytes before our pending token ({before:?}), \
                 where we need more bytes\n{}",
                context()
            );
        }
        (Ours::Failed(error, at), Theirs::Frame(their_node, their_len)) => {
            let why = lenient(*error, &data[*at..]);
            assert!(
                why.is_some(),
                "oracle decodes a frame ({their_len} bytes, {their_node:?}) where we fail with {error:?} at {at}\n{}",
                context()
            );
            assert!(
                their_len > *at,
                "oracle's frame ({their_len} bytes) ends before our error at {at}\n{}",
                context()
            );
        }
        (Ours::Partial(_) | Ours::Failed(..), Theirs::Partial)
        | (Ours::Failed(..), Theirs::Failed(_)) => {}
    }
}

/// Differential check of the first frame against `redis-protocol` 6; see
/// the comment above for what is compared and the documented differences.
///
/// # Panics
///
/// When the two disagree outside those differences.
pub fn oracle(data: &[u8]) {
    let (end, node, features, depth) = ours(data);
    if depth > MAX_ORACLE_DEPTH {
        return;
    }
    let applies2 = !features.resp3;
    compare("resp2", data, &end, &node, &features, applies2, resp2);
    let applies3 = features.stricter.is_none() && !features.resp2_null;
    compare("resp3", data, &end, &node, &features, applies3, resp3);
}
