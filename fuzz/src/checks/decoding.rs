//! The [`decode`] check, and decoding an input whole while checking every
//! invariant of the decoder, which the other checks compare with.

use redlock_mio::resp::{Decoded, Decoder, Error, Limits, Status, Token};

/// Small limits, so that short inputs reach every limit.
pub(super) const SMALL: Limits = Limits::new()
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
pub(super) type Record = (String, usize, bool);

/// What decoding an input whole produced: every token until the decoder
/// asked for more bytes or failed, and the error if it failed.
#[derive(Debug, PartialEq)]
pub(super) struct Trace {
    pub(super) tokens: Vec<Record>,
    pub(super) error: Option<Error>,
}

pub(super) fn record(decoded: &Decoded<'_>) -> Record {
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
pub(super) fn whole(data: &[u8], limits: Limits) -> Trace {
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
