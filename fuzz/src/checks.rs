//! Checks for the RESP codec of `redlock-mio`, shared by the fuzz targets and
//! the main crate's tests.
//!
//! Every check is a plain function taking the fuzzer's bytes and panicking
//! when it finds a bug. The file uses nothing but `std`, `redlock_mio`,
//! `arbitrary`, `bytes` and `redis_protocol`, and no libfuzzer, so that the
//! main crate's `tests/fuzz_corpus.rs` can include it with
//! `#[path = "../fuzz/src/checks.rs"] mod checks;` and replay the seed
//! corpus and the regressions on a stable toolchain.
//!
//! - [`decode`]: the decoder never panics and keeps its invariants, with
//!   default, small, the largest and fuzzer-chosen limits.
//! - [`chunked`]: feeding the input in pieces gives exactly the tokens and
//!   the error of feeding it whole.
//! - [`roundtrip`]: an encoded command has the announced length, the
//!   canonical bytes, and decodes back to its arguments.
//! - [`oracle`]: differential test of the first frame against the
//!   independent `redis-protocol` crate, RESP2 and RESP3 parsers.

use arbitrary::{Arbitrary, Unstructured};
use redlock_mio::resp::{
    Arg, Decoded, Decoder, Error, Limits, NullKind, Status, Token, command_len, encode_command,
};

// ---------------------------------------------------------------------------
// decode
// ---------------------------------------------------------------------------

/// Small limits, so that short inputs reach every limit.
const SMALL: Limits = Limits::new()
    .with_max_depth(4)
    .with_max_elements(8)
    .with_max_bulk_len(64)
    .with_max_line_len(64);

/// The largest limits the API allows.
const HUGE: Limits = Limits::new()
    .with_max_depth(1 << 16)
    .with_max_elements(u64::MAX)
    .with_max_bulk_len(u64::MAX)
    .with_max_line_len(usize::MAX);

/// Limits chosen by one byte: depth 1..=4 (bits 0-1), elements 0..=7
/// (bits 2-4), bulk and line length 0..=56 in steps of 8 (bits 5-7).
fn limits_from(byte: u8) -> Limits {
    Limits::new()
        .with_max_depth(usize::from(byte & 0x03) + 1)
        .with_max_elements(u64::from((byte >> 2) & 0x07))
        .with_max_bulk_len(u64::from(byte >> 5) * 8)
        .with_max_line_len(usize::from(byte >> 5) * 8)
}

/// One decoded token, as compared between runs: its `Debug` text, its
/// length and whether it ends a frame.
type Record = (String, usize, bool);

/// What decoding an input whole produced: every token until the decoder
/// asked for more bytes or failed, and the error if it failed.
#[derive(Debug, PartialEq)]
struct Trace {
    tokens: Vec<Record>,
    error: Option<Error>,
}

fn record(decoded: &Decoded<'_>) -> Record {
    (
        format!("{:?}", decoded.token),
        decoded.len,
        decoded.frame_end,
    )
}

/// Decodes `data` whole with `limits` and returns the tokens and the final
/// error (none when the input simply ran out).
///
/// # Panics
///
/// On any broken invariant, see [`decode`].
fn whole(data: &[u8], limits: Limits) -> Trace {
    let mut decoder = Decoder::with_limits(limits);
    assert_eq!(decoder.limits(), &limits);
    assert!(decoder.is_idle(), "a new decoder is idle");
    let mut rest = data;
    let mut tokens = Vec::new();
    loop {
        assert!(
            decoder.depth() <= limits.max_depth(),
            "depth {} over the limit {}",
            decoder.depth(),
            limits.max_depth()
        );
        match decoder.decode(rest) {
            Ok(Status::Complete(decoded)) => {
                assert!(decoded.len > 0, "empty token {decoded:?}");
                assert!(
                    decoded.len <= rest.len(),
                    "token {decoded:?} longer than the {} bytes left",
                    rest.len()
                );
                check_token(&decoded, &rest[..decoded.len], &limits);
                if decoded.frame_end {
                    assert_eq!(decoder.depth(), 0, "frame ended inside an aggregate");
                    assert!(decoder.is_idle(), "not idle after a frame");
                } else {
                    assert!(!decoder.is_idle(), "idle inside a frame after {decoded:?}");
                }
                tokens.push(record(&decoded));
                rest = &rest[decoded.len..];
            }
            Ok(Status::Partial) => {
                assert!(decoder.failure().is_none());
                // Asking again with nothing new changes nothing.
                assert_eq!(decoder.decode(rest), Ok(Status::Partial));
                return Trace {
                    tokens,
                    error: None,
                };
            }
            Err(error) => {
                assert_eq!(decoder.failure(), Some(error), "failure() forgot the error");
                assert!(!decoder.is_idle(), "a failed decoder is not idle");
                assert!(!error.to_string().is_empty());
                // Sticky: the same error whatever comes next.
                assert_eq!(decoder.decode(rest), Err(error));
                assert_eq!(decoder.decode(b""), Err(error));
                assert_eq!(decoder.decode(b"+OK\r\n"), Err(error));
                let mut copy = decoder.clone();
                assert_eq!(copy.decode(rest), Err(error), "a clone forgot the error");
                decoder.reset();
                assert!(decoder.is_idle() && decoder.failure().is_none() && decoder.depth() == 0);
                return Trace {
                    tokens,
                    error: Some(error),
                };
            }
        }
    }
}

/// Checks what a token may hold: borrowed bytes lie inside the token's own
/// bytes, and every limit is kept.
fn check_token(decoded: &Decoded<'_>, own: &[u8], limits: &Limits) {
    let inside = |part: &[u8]| {
        let (start, end) = (own.as_ptr() as usize, own.as_ptr() as usize + own.len());
        let (p, q) = (part.as_ptr() as usize, part.as_ptr() as usize + part.len());
        assert!(
            part.is_empty() || (start <= p && q <= end),
            "{decoded:?} borrows bytes outside its own"
        );
    };
    let line = |content: &[u8]| {
        inside(content);
        assert!(
            content.len() <= limits.max_line_len(),
            "{decoded:?} over the line limit"
        );
        assert!(
            !content.contains(&b'\r') && !content.contains(&b'\n'),
            "{decoded:?} holds a CR or LF"
        );
        assert_eq!(own.len(), content.len() + 3, "{decoded:?}: line length");
    };
    let bulk = |content: &[u8]| {
        inside(content);
        assert!(
            content.len() as u64 <= limits.max_bulk_len(),
            "{decoded:?} over the bulk limit"
        );
        assert!(own.ends_with(b"\r\n"), "{decoded:?} does not end in CRLF");
    };
    let count = |n: usize| {
        assert!(
            n as u64 <= limits.max_elements(),
            "{decoded:?} over the element limit"
        );
    };
    assert_eq!(own.last(), Some(&b'\n'), "{decoded:?} does not end in LF");
    match decoded.token {
        Token::Simple(s) | Token::Error(s) => line(s),
        Token::BigNumber(s) => {
            line(s);
            let digits = s.strip_prefix(b"-").unwrap_or(s);
            assert!(!digits.is_empty() && digits.iter().all(u8::is_ascii_digit));
        }
        Token::Bulk(s) | Token::BulkError(s) | Token::Chunk(s) => bulk(s),
        Token::Verbatim { format, text } => {
            bulk(text);
            assert!(text.len() as u64 + 4 <= limits.max_bulk_len());
            let at = own.len() - text.len() - 6;
            assert_eq!(&own[at..at + 4], [&format[..], b":"].concat().as_slice());
        }
        Token::Double(x) => assert!(!x.is_nan(), "NaN double"),
        Token::Array(n) | Token::Set(n) | Token::Push(n) | Token::Map(n) | Token::Attribute(n) => {
            count(n)
        }
        Token::Integer(_)
        | Token::Null(_)
        | Token::Boolean(_)
        | Token::StreamedString
        | Token::StreamedArray
        | Token::StreamedSet
        | Token::StreamedMap
        | Token::End => {}
    }
}

/// Decodes `data` whole, token by token, until the decoder asks for more
/// bytes or fails. It must never panic, and:
///
/// - every token has `0 < len <= remaining` and borrows only its own bytes;
/// - every token keeps the limits, lines hold no CR or LF;
/// - `depth() <= max_depth` at every step, `depth() == 0` after a frame;
/// - once failed, the decoder returns the same error whatever it is fed,
///   and so does a clone of it;
/// - decoding is deterministic: a reset decoder gives the same trace.
///
/// It runs with the default limits, with [`Limits`] of 4 levels, 8
/// elements, 64-byte bulks and lines, with the largest limits the API
/// allows, and on `data[1..]` with limits chosen
/// by `data[0]` (see [`limits_from`]) so that the fuzzer reaches every limit
/// and its edge.
pub fn decode(data: &[u8]) {
    let first = whole(data, Limits::DEFAULT);
    assert_eq!(
        whole(data, Limits::DEFAULT),
        first,
        "decoding is not deterministic"
    );
    whole(data, SMALL);
    whole(data, HUGE);
    if let Some((&byte, rest)) = data.split_first() {
        whole(rest, limits_from(byte));
    }
}

// ---------------------------------------------------------------------------
// chunked
// ---------------------------------------------------------------------------

/// Decodes the RESP input in pieces and compares with decoding it whole:
/// the same tokens (`Debug` text, `len`, `frame_end`) and the same final
/// error, or none.
///
/// Input layout:
///
/// - byte 0, flags: bits 0-3 are the number `k` of chunk sizes; bit 4
///   calls the decoder once more, with nothing new, after each chunk; bit 5
///   uses small limits (depth 4, 8 elements, 64-byte bulks and lines);
///   bit 6 continues with a clone of the decoder after each chunk;
/// - bytes 1..=k: chunk sizes, each byte `s` meaning `s + 1` bytes, used in
///   turn; with `k = 0` the input is fed one byte at a time;
/// - the rest: the RESP input.
///
/// Each chunk is appended to a buffer, tokens are decoded until the decoder
/// reports [`Status::Partial`] or fails, and the consumed bytes drained.
pub fn chunked(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let k = usize::from(flags & 0x0f).min(rest.len());
    let (sizes, input) = rest.split_at(k);
    let again = flags & 0x10 != 0;
    let limits = if flags & 0x20 != 0 {
        SMALL
    } else {
        Limits::DEFAULT
    };
    let clone = flags & 0x40 != 0;

    let expected = whole(input, limits);

    let mut decoder = Decoder::with_limits(limits);
    let mut buf = Vec::new();
    let mut tokens = Vec::new();
    let mut error = None;
    let mut at = 0;
    let mut turn = 0;
    'feed: while at < input.len() {
        let size = match sizes {
            [] => 1,
            _ => usize::from(sizes[turn % sizes.len()]) + 1,
        };
        turn += 1;
        let end = input.len().min(at + size);
        buf.extend_from_slice(&input[at..end]);
        at = end;
        loop {
            match decoder.decode(&buf) {
                Ok(Status::Complete(decoded)) => {
                    assert!(decoded.len > 0 && decoded.len <= buf.len());
                    tokens.push(record(&decoded));
                    buf.drain(..decoded.len);
                }
                Ok(Status::Partial) => break,
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
        }
        if again {
            assert_eq!(
                decoder.decode(&buf),
                Ok(Status::Partial),
                "a repeated call changed"
            );
        }
        if clone {
            decoder = decoder.clone();
        }
    }
    let got = Trace { tokens, error };
    if got != expected {
        let first = got
            .tokens
            .iter()
            .zip(&expected.tokens)
            .position(|(a, b)| a != b);
        panic!(
            "chunked decoding differs from whole decoding (first differing token: {first:?})\n\
             chunked: {got:?}\nwhole:   {expected:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// roundtrip
// ---------------------------------------------------------------------------

/// A command argument, as the fuzzer builds it.
#[derive(Debug, Arbitrary)]
enum FuzzArg {
    /// Bytes, sent as they are.
    Bytes(Vec<u8>),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
}

/// A command, as the fuzzer builds it.
#[derive(Debug, Arbitrary)]
struct Command {
    args: Vec<FuzzArg>,
}

/// Builds a [`Command`] from the bytes with [`Arbitrary`], encodes it with
/// [`encode_command`] into a `Vec` (empty, and after existing bytes) and a
/// `BytesMut`, and checks:
///
/// - [`command_len`] is the number of bytes written;
/// - the bytes are the canonical encoding (`*N`, then `$len` and the
///   payload for each argument, integers in decimal), built here
///   independently, identical for both buffers;
/// - decoding them gives `Array(N)` then `N` `Bulk` tokens holding the
///   arguments, the last token ends the frame, nothing is left over.
pub fn roundtrip(data: &[u8]) {
    let Ok(command) = Command::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let texts: Vec<Vec<u8>> = command
        .args
        .iter()
        .map(|arg| match arg {
            FuzzArg::Bytes(bytes) => bytes.clone(),
            FuzzArg::Int(n) => n.to_string().into_bytes(),
            FuzzArg::Uint(n) => n.to_string().into_bytes(),
        })
        .collect();
    let args: Vec<Arg<'_>> = command
        .args
        .iter()
        .map(|arg| match arg {
            FuzzArg::Bytes(bytes) => Arg::Bytes(bytes),
            FuzzArg::Int(n) => Arg::Int(*n),
            FuzzArg::Uint(n) => Arg::Uint(*n),
        })
        .collect();

    let mut canonical = format!("*{}\r\n", texts.len()).into_bytes();
    for text in &texts {
        canonical.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
        canonical.extend_from_slice(text);
        canonical.extend_from_slice(b"\r\n");
    }

    let mut vec = Vec::new();
    encode_command(&mut vec, &args);
    assert_eq!(
        command_len(&args),
        vec.len(),
        "command_len disagrees with the output"
    );
    assert!(
        vec == canonical,
        "not the canonical encoding of {command:?}"
    );

    let mut appended = b"prefix".to_vec();
    encode_command(&mut appended, &args);
    assert_eq!(&appended[..6], b"prefix");
    assert!(
        appended[6..] == canonical[..],
        "encoding after existing bytes differs"
    );

    let mut bytes_mut = bytes::BytesMut::new();
    encode_command(&mut bytes_mut, &args);
    assert!(
        bytes_mut[..] == vec[..],
        "BytesMut and Vec encodings differ"
    );

    let mut decoder = Decoder::new();
    let mut rest = &vec[..];
    let mut next = || match decoder.decode(rest) {
        Ok(Status::Complete(decoded)) => {
            rest = &rest[decoded.len..];
            decoded
        }
        other => panic!("encoded command does not decode: {other:?} for {command:?}"),
    };
    let header = next();
    assert_eq!(header.token, Token::Array(texts.len()));
    assert_eq!(header.frame_end, texts.is_empty());
    for (i, text) in texts.iter().enumerate() {
        let decoded = next();
        assert_eq!(decoded.token, Token::Bulk(text), "argument {i}");
        assert_eq!(
            decoded.frame_end,
            i + 1 == texts.len(),
            "argument {i}: frame_end"
        );
    }
    assert!(rest.is_empty(), "{} bytes left over", rest.len());
    assert!(decoder.is_idle());
}

// ---------------------------------------------------------------------------
// oracle
// ---------------------------------------------------------------------------
//
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

use redis_protocol::resp2::decode::decode_range as resp2_decode_range;
use redis_protocol::resp2::types::RangeFrame as Resp2Frame;
use redis_protocol::resp3::decode::streaming::decode_range as resp3_decode_range;
use redis_protocol::resp3::types::{
    DecodedRangeFrame, FrameKind, RangeFrame as Resp3Frame, VerbatimStringFormat,
};

/// A normalised value: what both decoders' results are compared as.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    BulkError(Vec<u8>),
    Verbatim([u8; 3], Vec<u8>),
    Null,
    /// The bits of the `f64`.
    Double(u64),
    Boolean(bool),
    BigNumber(Vec<u8>),
    Array(Vec<Node>),
    Set(Vec<Node>),
    Push(Vec<Node>),
    Map(Vec<(Node, Node)>),
    /// redis-protocol only: a `HELLO` command.
    Hello,
    /// redis-protocol only: a chunk as a frame of its own.
    Chunk(Vec<u8>),
    /// redis-protocol only: an end marker as a frame of its own.
    End,
    /// Ours only: the input ended here.
    Missing,
}

/// A normalised value with the attributes annotating it, outermost first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    attrs: Vec<Vec<(Node, Node)>>,
    value: Value,
}

impl Node {
    fn plain(value: Value) -> Node {
        Node {
            attrs: Vec::new(),
            value,
        }
    }

    /// Sorts maps, sets and attributes, recursively.
    fn canonical(mut self) -> Node {
        fn pairs(pairs: Vec<(Node, Node)>) -> Vec<(Node, Node)> {
            let mut pairs: Vec<_> = pairs
                .into_iter()
                .map(|(k, v)| (k.canonical(), v.canonical()))
                .collect();
            pairs.sort();
            pairs
        }
        fn nodes(nodes: Vec<Node>) -> Vec<Node> {
            nodes.into_iter().map(Node::canonical).collect()
        }
        self.attrs = self.attrs.into_iter().map(pairs).collect();
        self.value = match self.value {
            Value::Array(items) => Value::Array(nodes(items)),
            Value::Push(items) => Value::Push(nodes(items)),
            Value::Set(items) => {
                let mut items = nodes(items);
                items.sort();
                Value::Set(items)
            }
            Value::Map(items) => Value::Map(pairs(items)),
            other => other,
        };
        self
    }
}

/// What a frame of ours uses that matters to the comparison.
#[derive(Debug, Default)]
struct Features {
    /// Anything beyond RESP2.
    resp3: bool,
    /// A RESP2 null (`$-1`, `*-1`).
    resp2_null: bool,
    /// Keys equal by value in one map, set or attribute.
    collision: bool,
    /// The first reason the oracle is stricter (STRICTER a-f), if any.
    stricter: Option<&'static str>,
}

impl Features {
    fn stricter(&mut self, why: &'static str) {
        self.stricter.get_or_insert(why);
    }
}

/// Builds our tree from our tokens.
struct Builder<'t, 'a> {
    tokens: core::slice::Iter<'t, Token<'a>>,
    features: Features,
}

impl Builder<'_, '_> {
    fn node(&mut self, depth: usize) -> Node {
        let mut attrs = Vec::new();
        let token = loop {
            match self.tokens.next() {
                None => {
                    return Node {
                        attrs,
                        value: Value::Missing,
                    };
                }
                Some(Token::Attribute(n)) => {
                    self.features.resp3 = true;
                    if !attrs.is_empty() {
                        self.features.stricter("d: attribute on an attribute");
                    }
                    let pairs = self.pairs(*n, depth);
                    attrs.push(pairs);
                }
                Some(token) => break *token,
            }
        };
        let value = self.value(token, depth);
        if value == Value::Null && !attrs.is_empty() {
            self.features.stricter("c: attributes on a null");
        }
        Node { attrs, value }
    }

    fn value(&mut self, token: Token<'_>, depth: usize) -> Value {
        if !matches!(
            token,
            Token::Simple(_)
                | Token::Error(_)
                | Token::Integer(_)
                | Token::Bulk(_)
                | Token::Null(NullKind::Bulk | NullKind::Array)
                | Token::Array(_)
        ) {
            self.features.resp3 = true;
        }
        let streamed = matches!(
            token,
            Token::StreamedString | Token::StreamedArray | Token::StreamedSet | Token::StreamedMap
        );
        if streamed && depth > 0 {
            self.features.stricter("f: nested streamed type");
        }
        match token {
            Token::Simple(s) => Value::Simple(s.to_vec()),
            Token::Error(s) => Value::Error(s.to_vec()),
            Token::Integer(n) => Value::Integer(n),
            Token::Bulk(s) => Value::Bulk(s.to_vec()),
            Token::BulkError(s) => Value::BulkError(s.to_vec()),
            Token::Verbatim { format, text } => {
                if &format != b"txt" && &format != b"mkd" {
                    self.features.stricter("a: verbatim format");
                }
                Value::Verbatim(format, text.to_vec())
            }
            Token::Null(kind) => {
                if kind != NullKind::Null {
                    self.features.resp2_null = true;
                }
                Value::Null
            }
            Token::Double(x) => Value::Double(x.to_bits()),
            Token::Boolean(b) => Value::Boolean(b),
            Token::BigNumber(s) => Value::BigNumber(s.to_vec()),
            Token::Array(n) => Value::Array(self.nodes(n, depth)),
            Token::Push(n) => Value::Push(self.nodes(n, depth)),
            Token::Set(n) => {
                let items = self.nodes(n, depth);
                self.keys(items.iter());
                Value::Set(items)
            }
            Token::Map(n) => Value::Map(self.pairs(n, depth)),
            Token::StreamedString => {
                let mut text = Vec::new();
                loop {
                    match self.tokens.next() {
                        None => break Value::Missing,
                        Some(Token::Chunk(part)) => text.extend_from_slice(part),
                        Some(Token::End) => break Value::Bulk(text),
                        Some(other) => panic!("{other:?} inside a streamed string"),
                    }
                }
            }
            Token::StreamedArray => Value::Array(self.streamed(depth)),
            Token::StreamedSet => {
                let items = self.streamed(depth);
                self.keys(items.iter());
                Value::Set(items)
            }
            Token::StreamedMap => {
                let mut items = self.streamed(depth).into_iter();
                let mut pairs = Vec::new();
                while let Some(key) = items.next() {
                    let value = items.next().unwrap_or_else(|| Node::plain(Value::Missing));
                    pairs.push((key, value));
                }
                self.keys(pairs.iter().map(|(k, _)| k));
                Value::Map(pairs)
            }
            Token::Attribute(_) | Token::Chunk(_) | Token::End => {
                panic!("{token:?} where a value must stand")
            }
        }
    }

    fn nodes(&mut self, n: usize, depth: usize) -> Vec<Node> {
        let mut items = Vec::new();
        for _ in 0..n {
            let node = self.node(depth + 1);
            let missing = node.value == Value::Missing;
            items.push(node);
            if missing {
                break;
            }
        }
        items
    }

    fn pairs(&mut self, n: usize, depth: usize) -> Vec<(Node, Node)> {
        let mut items = self.nodes(n.saturating_mul(2), depth).into_iter();
        let mut pairs = Vec::new();
        while let Some(key) = items.next() {
            let value = items.next().unwrap_or_else(|| Node::plain(Value::Missing));
            pairs.push((key, value));
        }
        self.keys(pairs.iter().map(|(k, _)| k));
        pairs
    }

    /// The elements of a streamed aggregate, through its end marker.
    fn streamed(&mut self, depth: usize) -> Vec<Node> {
        let mut items = Vec::new();
        loop {
            if self.tokens.as_slice().first() == Some(&Token::End) {
                self.tokens.next();
                return items;
            }
            let node = self.node(depth + 1);
            let missing = node.value == Value::Missing;
            items.push(node);
            if missing {
                return items;
            }
        }
    }

    /// Checks keys (or set members) for STRICTER b and for collisions.
    fn keys<'n>(&mut self, keys: impl Iterator<Item = &'n Node>) {
        let mut scalars: Vec<(u8, i128)> = Vec::new();
        for key in keys {
            let scalar = match key.value {
                Value::Array(_) | Value::Set(_) | Value::Push(_) | Value::Map(_) => {
                    self.features.stricter("b: aggregate as a key");
                    continue;
                }
                Value::Integer(n) => (0, i128::from(n)),
                Value::Boolean(b) => (1, i128::from(b)),
                Value::Null => (2, 0),
                Value::Double(bits) => {
                    // Compared with `==`: 0.0 and -0.0 are equal.
                    let x = f64::from_bits(bits);
                    (3, i128::from(if x == 0.0 { 0 } else { bits }))
                }
                _ => continue,
            };
            if scalars.contains(&scalar) {
                self.features.collision = true;
            }
            scalars.push(scalar);
        }
    }
}

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

/// How an oracle ended on the first frame.
#[derive(Debug)]
enum Theirs {
    Frame(Node, usize),
    Partial,
    Failed(String),
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

fn resp2_node(buf: &[u8], frame: &Resp2Frame) -> Node {
    Node::plain(match frame {
        Resp2Frame::SimpleString((s, e)) => Value::Simple(buf[*s..*e].to_vec()),
        Resp2Frame::Error((s, e)) => Value::Error(buf[*s..*e].to_vec()),
        Resp2Frame::Integer(n) => Value::Integer(*n),
        Resp2Frame::BulkString((s, e)) => Value::Bulk(buf[*s..*e].to_vec()),
        Resp2Frame::Array(items) => {
            Value::Array(items.iter().map(|f| resp2_node(buf, f)).collect())
        }
        Resp2Frame::Null => Value::Null,
    })
}

fn resp2(data: &[u8]) -> Theirs {
    match resp2_decode_range(data) {
        Ok(Some((frame, len))) => Theirs::Frame(resp2_node(data, &frame), len),
        Ok(None) => Theirs::Partial,
        Err(e) => Theirs::Failed(format!("{e:?}")),
    }
}

type Resp3Attrs = std::collections::HashMap<Resp3Frame, Resp3Frame>;

fn resp3_pairs<'m>(
    buf: &[u8],
    pairs: impl Iterator<Item = (&'m Resp3Frame, &'m Resp3Frame)>,
) -> Vec<(Node, Node)> {
    pairs
        .map(|(k, v)| (resp3_node(buf, k), resp3_node(buf, v)))
        .collect()
}

fn resp3_attrs(buf: &[u8], attrs: Option<&Resp3Attrs>) -> Vec<Vec<(Node, Node)>> {
    attrs
        .map(|a| resp3_pairs(buf, a.iter()))
        .into_iter()
        .collect()
}

fn resp3_node(buf: &[u8], frame: &Resp3Frame) -> Node {
    let bytes = |(s, e): &(usize, usize)| buf[*s..*e].to_vec();
    let nodes = |items: &[Resp3Frame]| items.iter().map(|f| resp3_node(buf, f)).collect();
    let (value, attrs) = match frame {
        Resp3Frame::BlobString { data, attributes } => (Value::Bulk(bytes(data)), attributes),
        Resp3Frame::BlobError { data, attributes } => (Value::BulkError(bytes(data)), attributes),
        Resp3Frame::SimpleString { data, attributes } => (Value::Simple(bytes(data)), attributes),
        Resp3Frame::SimpleError { data, attributes } => (Value::Error(bytes(data)), attributes),
        Resp3Frame::Boolean { data, attributes } => (Value::Boolean(*data), attributes),
        Resp3Frame::Null => (Value::Null, &None),
        Resp3Frame::Number { data, attributes } => (Value::Integer(*data), attributes),
        Resp3Frame::Double { data, attributes } => (Value::Double(data.to_bits()), attributes),
        Resp3Frame::BigNumber { data, attributes } => (Value::BigNumber(bytes(data)), attributes),
        Resp3Frame::VerbatimString {
            data,
            format,
            attributes,
        } => {
            let format = match format {
                VerbatimStringFormat::Text => *b"txt",
                VerbatimStringFormat::Markdown => *b"mkd",
            };
            (Value::Verbatim(format, bytes(data)), attributes)
        }
        Resp3Frame::Array { data, attributes } => (Value::Array(nodes(data)), attributes),
        Resp3Frame::Push { data, attributes } => (Value::Push(nodes(data)), attributes),
        Resp3Frame::Set { data, attributes } => (
            Value::Set(data.iter().map(|f| resp3_node(buf, f)).collect()),
            attributes,
        ),
        Resp3Frame::Map { data, attributes } => {
            (Value::Map(resp3_pairs(buf, data.iter())), attributes)
        }
        Resp3Frame::Hello { .. } => (Value::Hello, &None),
        Resp3Frame::ChunkedString(range) => {
            if frame.kind() == FrameKind::EndStream {
                (Value::End, &None)
            } else {
                (Value::Chunk(bytes(range)), &None)
            }
        }
    };
    Node {
        attrs: resp3_attrs(buf, attrs.as_ref()),
        value,
    }
}

/// redis-protocol's RESP3 decoder on the first frame; a top-level streamed
/// frame is collected from its parts the way its `StreamedFrame` does.
fn resp3(data: &[u8]) -> Theirs {
    let (header, mut at) = match resp3_decode_range(data) {
        Ok(Some((DecodedRangeFrame::Complete(frame), len))) => {
            return Theirs::Frame(resp3_node(data, &frame), len);
        }
        Ok(Some((DecodedRangeFrame::Streaming(header), len))) => (header, len),
        Ok(None) => return Theirs::Partial,
        Err(e) => return Theirs::Failed(format!("{e:?}")),
    };
    let mut parts = Vec::new();
    loop {
        let rest = &data[at..];
        match resp3_decode_range(rest) {
            Ok(Some((DecodedRangeFrame::Complete(frame), len))) => {
                at += len;
                if frame.kind() == FrameKind::EndStream {
                    break;
                }
                parts.push(resp3_node(rest, &frame));
            }
            Ok(Some((DecodedRangeFrame::Streaming(_), _))) => {
                return Theirs::Failed("stream inside a stream".into());
            }
            Ok(None) => return Theirs::Partial,
            Err(e) => return Theirs::Failed(format!("{e:?}")),
        }
    }
    let hashable = |node: &Node| {
        !matches!(
            node.value,
            Value::Array(_) | Value::Set(_) | Value::Push(_) | Value::Map(_)
        )
    };
    let value = match header.kind {
        FrameKind::BlobString => {
            let mut text = Vec::new();
            for part in parts {
                match part.value {
                    Value::Chunk(bytes) | Value::Bulk(bytes) => text.extend(bytes),
                    other => return Theirs::Failed(format!("{other:?} in a streamed string")),
                }
            }
            Value::Bulk(text)
        }
        FrameKind::Array => Value::Array(parts),
        FrameKind::Set => {
            if !parts.iter().all(hashable) {
                return Theirs::Failed("unhashable set member".into());
            }
            Value::Set(parts)
        }
        FrameKind::Map => {
            if parts.len() % 2 != 0 {
                return Theirs::Failed("odd streamed map".into());
            }
            let mut pairs = Vec::new();
            let mut parts = parts.into_iter();
            while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
                if !hashable(&k) {
                    return Theirs::Failed("unhashable map key".into());
                }
                pairs.push((k, v));
            }
            Value::Map(pairs)
        }
        other => return Theirs::Failed(format!("streamed {other:?}")),
    };
    Theirs::Frame(
        Node {
            attrs: resp3_attrs(data, header.attributes.as_ref()),
            value,
        },
        at,
    )
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
