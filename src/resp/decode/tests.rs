use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Tokens as `Debug` text, each with its frame-end mark.
type Tokens = Vec<(String, bool)>;

/// Decodes `input` fed whole; returns the tokens, then the error if any.
fn whole(limits: Limits, input: &[u8]) -> (Tokens, Option<Error>) {
    let mut decoder = Decoder::with_limits(limits);
    let mut rest = input;
    let mut out = Vec::new();
    loop {
        match decoder.decode(rest) {
            Ok(Status::Complete(d)) => {
                out.push((format!("{:?}", d.token), d.frame_end));
                rest = &rest[d.len..];
            }
            Ok(Status::Partial) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Decodes `input` fed in pieces that end at each of `cuts` in turn.
fn pieces(limits: Limits, input: &[u8], cuts: &[usize]) -> (Tokens, Option<Error>) {
    let mut decoder = Decoder::with_limits(limits);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut fed = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        buf.extend_from_slice(&input[fed..cut]);
        fed = cut;
        loop {
            match decoder.decode(&buf) {
                Ok(Status::Complete(d)) => {
                    out.push((format!("{:?}", d.token), d.frame_end));
                    buf.drain(..d.len);
                }
                Ok(Status::Partial) => break,
                Err(e) => return (out, Some(e)),
            }
        }
    }
    (out, None)
}

fn tokens(input: &[u8]) -> Vec<String> {
    let (out, err) = whole(Limits::DEFAULT, input);
    assert_eq!(
        err,
        None,
        "unexpected error for {:?}",
        input.escape_ascii().to_string()
    );
    out.into_iter().map(|(t, _)| t).collect()
}

fn ends(input: &[u8]) -> Vec<bool> {
    whole(Limits::DEFAULT, input)
        .0
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

fn error(limits: Limits, input: &[u8]) -> Error {
    match whole(limits, input) {
        (_, Some(e)) => e,
        (out, None) => panic!(
            "no error for {:?}, got {out:?}",
            input.escape_ascii().to_string()
        ),
    }
}

fn err(input: &[u8]) -> Error {
    error(Limits::DEFAULT, input)
}

#[test]
fn resp2_types() {
    assert_eq!(tokens(b"+OK\r\n"), ["Simple(b\"OK\")"]);
    assert_eq!(tokens(b"+\r\n"), ["Simple(b\"\")"]);
    assert_eq!(tokens(b"-ERR no\r\n"), ["Error(b\"ERR no\")"]);
    assert_eq!(
        tokens(b":0\r\n:-5\r\n:0042\r\n"),
        ["Integer(0)", "Integer(-5)", "Integer(42)"]
    );
    assert_eq!(
        tokens(b":9223372036854775807\r\n:-9223372036854775808\r\n"),
        [
            "Integer(9223372036854775807)",
            "Integer(-9223372036854775808)"
        ]
    );
    assert_eq!(tokens(b"$3\r\nfoo\r\n"), ["Bulk(b\"foo\")"]);
    assert_eq!(tokens(b"$0\r\n\r\n"), ["Bulk(b\"\")"]);
    assert_eq!(
        tokens(b"$4\r\n\r\n\0\xff\r\n"),
        ["Bulk(b\"\\r\\n\\x00\\xff\")"]
    );
    assert_eq!(tokens(b"$-1\r\n"), ["Null(Bulk)"]);
    assert_eq!(tokens(b"*-1\r\n"), ["Null(Array)"]);
    assert_eq!(tokens(b"*0\r\n"), ["Array(0)"]);
    assert_eq!(
        tokens(b"*3\r\n:1\r\n$1\r\na\r\n*1\r\n+x\r\n"),
        [
            "Array(3)",
            "Integer(1)",
            "Bulk(b\"a\")",
            "Array(1)",
            "Simple(b\"x\")"
        ]
    );
}

#[test]
fn resp3_types() {
    assert_eq!(tokens(b"_\r\n"), ["Null(Null)"]);
    assert_eq!(tokens(b"#t\r\n#f\r\n"), ["Boolean(true)", "Boolean(false)"]);
    assert_eq!(
        tokens(b",3.14\r\n,-1\r\n,1e10\r\n,2.5E-3\r\n,inf\r\n,-inf\r\n,0.0\r\n"),
        [
            "Double(3.14)",
            "Double(-1.0)",
            "Double(10000000000.0)",
            "Double(0.0025)",
            "Double(inf)",
            "Double(-inf)",
            "Double(0.0)"
        ]
    );
    assert_eq!(
        tokens(b"(3492890328409238509324850943850943825024385\r\n(-1\r\n"),
        [
            "BigNumber(b\"3492890328409238509324850943850943825024385\")",
            "BigNumber(b\"-1\")"
        ]
    );
    assert_eq!(
        tokens(b"!21\r\nSYNTAX invalid syntax\r\n"),
        ["BulkError(b\"SYNTAX invalid syntax\")"]
    );
    assert_eq!(
        tokens(b"=15\r\ntxt:Some string\r\n=4\r\nmkd:\r\n"),
        [
            "Verbatim { format: b\"txt\", text: b\"Some string\" }",
            "Verbatim { format: b\"mkd\", text: b\"\" }"
        ]
    );
    assert_eq!(
        tokens(b"%2\r\n+a\r\n:1\r\n+b\r\n%0\r\n"),
        [
            "Map(2)",
            "Simple(b\"a\")",
            "Integer(1)",
            "Simple(b\"b\")",
            "Map(0)"
        ]
    );
    assert_eq!(
        tokens(b"~2\r\n:1\r\n:2\r\n"),
        ["Set(2)", "Integer(1)", "Integer(2)"]
    );
    assert_eq!(
        tokens(b">2\r\n$7\r\nmessage\r\n:1\r\n"),
        ["Push(2)", "Bulk(b\"message\")", "Integer(1)"]
    );
}

#[test]
fn frame_ends() {
    assert_eq!(ends(b"+OK\r\n:1\r\n"), [true, true]);
    assert_eq!(
        ends(b"*2\r\n:1\r\n*1\r\n:2\r\n:3\r\n"),
        [false, false, false, true, true]
    );
    assert_eq!(ends(b"*0\r\n%0\r\n~0\r\n>0\r\n"), [true, true, true, true]);
    assert_eq!(
        ends(b"%1\r\n*0\r\n*1\r\n_\r\n"),
        [false, false, false, true]
    );
}

#[test]
fn attributes_annotate_the_next_value() {
    // At top level: the attribute and the value form one reply.
    let input = b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.1923\r\n*1\r\n:2\r\n";
    let (out, error) = whole(Limits::DEFAULT, input);
    assert_eq!(error, None);
    let marks: Vec<bool> = out.iter().map(|t| t.1).collect();
    assert_eq!(marks, [false, false, false, false, false, false, true]);
    // Inside an array it is not an element: the array still needs two.
    assert_eq!(
        ends(b"*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n|0\r\n:2\r\n"),
        [false, false, false, false, false, false, true]
    );
    assert_eq!(ends(b"|0\r\n:1\r\n"), [false, true]);
}

#[test]
fn streamed_strings() {
    let input = b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n";
    assert_eq!(
        tokens(input),
        [
            "StreamedString",
            "Chunk(b\"Hell\")",
            "Chunk(b\"o wor\")",
            "Chunk(b\"d\")",
            "End"
        ]
    );
    assert_eq!(ends(input), [false, false, false, false, true]);
    assert_eq!(
        ends(b"*2\r\n$?\r\n;0\r\n:1\r\n"),
        [false, false, false, true]
    );
}

#[test]
fn streamed_aggregates() {
    assert_eq!(
        tokens(b"*?\r\n:1\r\n*1\r\n:2\r\n.\r\n"),
        [
            "StreamedArray",
            "Integer(1)",
            "Array(1)",
            "Integer(2)",
            "End"
        ]
    );
    assert_eq!(ends(b"*?\r\n:1\r\n.\r\n"), [false, false, true]);
    assert_eq!(ends(b"~?\r\n.\r\n"), [false, true]);
    assert_eq!(
        tokens(b"%?\r\n+a\r\n:1\r\n.\r\n"),
        ["StreamedMap", "Simple(b\"a\")", "Integer(1)", "End"]
    );
    assert_eq!(
        ends(b"*1\r\n~?\r\n+x\r\n.\r\n"),
        [false, false, false, true]
    );
}

#[test]
fn number_errors() {
    for bad in [
        &b":\r\n"[..],
        b":+1\r\n",
        b": 1\r\n",
        b":1 \r\n",
        b":-\r\n",
        b":--1\r\n",
        b":1-\r\n",
        b":0x10\r\n",
        b"$\r\n",
        b"$+3\r\nfoo\r\n",
        b"$3 \r\nfoo\r\n",
        b"* 1\r\n",
        b"$1?\r\n",
        b"$?1\r\n",
        b"$-?\r\n",
        b">?\r\n.\r\n",
        b"|?\r\n",
        b"!?\r\n",
        b"=-1\r\n",
        b"%-1\r\n",
        b"~-1\r\n",
        b">-1\r\n",
        b"!-1\r\n",
    ] {
        assert_eq!(err(bad), Error::InvalidNumber, "{}", bad.escape_ascii());
    }
    assert_eq!(err(b":9223372036854775808\r\n"), Error::IntegerOverflow);
    assert_eq!(err(b":-9223372036854775809\r\n"), Error::IntegerOverflow);
    assert_eq!(err(b":99999999999999999999999\r\n"), Error::IntegerOverflow);
    for bad in [
        &b"$-2\r\n"[..],
        b"$-0\r\n",
        b"*-2\r\n",
        b"*-10\r\n",
        b"$-1000\r\n",
    ] {
        assert_eq!(err(bad), Error::InvalidLength, "{}", bad.escape_ascii());
    }
}

#[test]
fn terminator_errors() {
    for bad in [
        &b"+OK\n"[..],
        b"+O\rK\r\n",
        b"+OK\r\r\n",
        b"-ERR\rx\r\n",
        b":1\n",
        b":1\rx",
        b"$3\r\nfoo\n\n",
        b"$3\r\nfooo\r\n",
        b"$3\r\nfo\r\n\r\n",
        b"*1\r:1\r\n",
        b"=5\r\ntxt:ab\r\n",
    ] {
        assert_eq!(err(bad), Error::MissingCrlf, "{}", bad.escape_ascii());
    }
}

#[test]
fn value_errors() {
    assert_eq!(err(b"@\r\n"), Error::UnknownType(b'@'));
    assert_eq!(err(b"\r\n"), Error::UnknownType(b'\r'));
    assert_eq!(err(b"PONG\r\n"), Error::UnknownType(b'P'));
    for bad in [
        &b",nan\r\n"[..],
        b",-nan\r\n",
        b",NaN\r\n",
        b",Inf\r\n",
        b",+1\r\n",
        b",1.\r\n",
        b",.5\r\n",
        b",1e\r\n",
        b",1e+\r\n",
        b",\r\n",
        b", 1\r\n",
        b",1.5x\r\n",
        b",infinity\r\n",
    ] {
        assert_eq!(err(bad), Error::InvalidDouble, "{}", bad.escape_ascii());
    }
    for bad in [&b"#\r\n"[..], b"#T\r\n", b"#true\r\n", b"#tt\r\n"] {
        assert_eq!(err(bad), Error::InvalidBoolean, "{}", bad.escape_ascii());
    }
    for bad in [
        &b"(\r\n"[..],
        b"(-\r\n",
        b"(+1\r\n",
        b"(12a\r\n",
        b"(1.0\r\n",
    ] {
        assert_eq!(err(bad), Error::InvalidBigNumber, "{}", bad.escape_ascii());
    }
    for bad in [
        &b"=3\r\ntxt\r\n"[..],
        b"=0\r\n\r\n",
        b"=4\r\ntxtx\r\n",
        b"=5\r\ntx:ab\r\n",
    ] {
        assert_eq!(err(bad), Error::InvalidVerbatim, "{}", bad.escape_ascii());
    }
    assert_eq!(err(b"_x\r\n"), Error::InvalidNull);
    assert_eq!(err(b"*?\r\n.x\r\n"), Error::InvalidNull);
}

#[test]
fn streaming_errors() {
    assert_eq!(err(b";3\r\nabc\r\n"), Error::UnexpectedChunk);
    assert_eq!(err(b"*1\r\n;0\r\n"), Error::UnexpectedChunk);
    assert_eq!(err(b"$?\r\n:1\r\n"), Error::ExpectedChunk);
    assert_eq!(err(b"$?\r\n;1\r\na\r\n.\r\n"), Error::ExpectedChunk);
    assert_eq!(err(b".\r\n"), Error::UnexpectedEnd);
    assert_eq!(err(b"*1\r\n.\r\n"), Error::UnexpectedEnd);
    assert_eq!(err(b"%?\r\n+k\r\n.\r\n"), Error::UnexpectedEnd);
    assert_eq!(err(b";-1\r\n"), Error::UnexpectedChunk);
    assert_eq!(err(b"$?\r\n;-1\r\n"), Error::InvalidNumber);
    assert_eq!(err(b"$?\r\n;?\r\n"), Error::InvalidNumber);
}

#[test]
fn depth_limit() {
    let limits = Limits::DEFAULT.with_max_depth(3);
    let (out, e) = whole(limits, b"*1\r\n*1\r\n*1\r\n:1\r\n");
    assert_eq!((out.len(), e), (4, None));
    assert_eq!(
        error(limits, b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"),
        Error::TooDeep { limit: 3 }
    );
    assert_eq!(
        error(limits, b"*1\r\n*1\r\n*1\r\n|1\r\n"),
        Error::TooDeep { limit: 3 }
    );
    assert_eq!(
        error(limits, b"*1\r\n~?\r\n*?\r\n$?\r\n"),
        Error::TooDeep { limit: 3 }
    );
    // Empty aggregates open nothing, so they never count.
    let (_, e) = whole(limits, b"*1\r\n*1\r\n*1\r\n*0\r\n");
    assert_eq!(e, None);
    // The default allows 128 and refuses 129, without recursion.
    let deep = |n: usize| {
        let mut input = b"*1\r\n".repeat(n);
        input.extend_from_slice(b":1\r\n");
        input
    };
    assert_eq!(whole(Limits::DEFAULT, &deep(128)).1, None);
    assert_eq!(err(&deep(129)), Error::TooDeep { limit: 128 });
    assert_eq!(err(&deep(1_000_000)), Error::TooDeep { limit: 128 });
    assert_eq!(Limits::DEFAULT.with_max_depth(0).max_depth(), 1);
}

#[test]
fn element_limit() {
    let limits = Limits::DEFAULT.with_max_elements(2);
    assert_eq!(whole(limits, b"*2\r\n:1\r\n:2\r\n").1, None);
    assert_eq!(whole(limits, b"%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n").1, None);
    for bad in [
        &b"*3\r\n"[..],
        b"%3\r\n",
        b"~3\r\n",
        b">3\r\n",
        b"|3\r\n",
        b"*30\r\n",
    ] {
        assert_eq!(
            error(limits, bad),
            Error::TooManyElements { limit: 2 },
            "{}",
            bad.escape_ascii()
        );
    }
    assert_eq!(whole(limits, b"*?\r\n:1\r\n:2\r\n.\r\n").1, None);
    assert_eq!(
        error(limits, b"*?\r\n:1\r\n:2\r\n:3\r\n"),
        Error::TooManyElements { limit: 2 }
    );
    assert_eq!(
        whole(limits, b"%?\r\n:1\r\n:2\r\n:3\r\n:4\r\n.\r\n").1,
        None
    );
    assert_eq!(
        error(limits, b"%?\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n"),
        Error::TooManyElements { limit: 2 }
    );
    // A hostile count is refused from its digits, before anything else.
    let limit = u64::from(u32::MAX);
    assert_eq!(err(b"*4294967296\r\n"), Error::TooManyElements { limit });
    assert_eq!(
        whole(Limits::DEFAULT, b"*4294967295\r\n"),
        (vec![("Array(4294967295)".into(), false)], None)
    );
    let max = Limits::DEFAULT.with_max_elements(u64::MAX);
    assert_eq!(
        error(max, b"%9223372036854775808\r\n"),
        Error::TooManyElements { limit: u64::MAX }
    );
    assert_eq!(
        error(max, b"*99999999999999999999\r\n"),
        Error::TooManyElements { limit: u64::MAX }
    );
}

#[test]
fn bulk_limit() {
    let limits = Limits::DEFAULT.with_max_bulk_len(4);
    assert_eq!(whole(limits, b"$4\r\nabcd\r\n").1, None);
    for bad in [&b"$5\r\n"[..], b"!5\r\n", b"=5\r\n", b"$?\r\n;5\r\n"] {
        assert_eq!(
            error(limits, bad),
            Error::BulkTooLong { limit: 4 },
            "{}",
            bad.escape_ascii()
        );
    }
    assert_eq!(
        error(limits, b"$?\r\n;3\r\nabc\r\n;2\r\n"),
        Error::BulkTooLong { limit: 4 }
    );
    let limit = 512 * 1024 * 1024;
    assert_eq!(err(b"$536870913\r\n"), Error::BulkTooLong { limit });
    assert_eq!(
        err(b"$4611686018427387904\r\n"),
        Error::BulkTooLong { limit }
    );
    // 512 MiB itself is allowed: the decoder just waits for it.
    let (out, e) = whole(Limits::DEFAULT, b"$536870912\r\nabc");
    assert_eq!((out.len(), e), (0, None));
}

#[test]
fn line_limit() {
    let limits = Limits::DEFAULT.with_max_line_len(4);
    assert_eq!(whole(limits, b"+abcd\r\n").1, None);
    assert_eq!(
        error(limits, b"+abcde\r\n"),
        Error::LineTooLong { limit: 4 }
    );
    // Refused before the CRLF arrives: an endless line cannot grow a buffer.
    assert_eq!(error(limits, b"-abcde"), Error::LineTooLong { limit: 4 });
    assert_eq!(
        pieces(limits, b"+abcdefgh", &[1, 2, 3, 4, 5, 6]).1,
        Some(Error::LineTooLong { limit: 4 })
    );
    // Number lines too: leading zeros never overflow, so only the length
    // bounds them.
    assert_eq!(whole(limits, b":0001\r\n").1, None);
    assert_eq!(
        error(limits, b":00001\r\n"),
        Error::LineTooLong { limit: 4 }
    );
    assert_eq!(error(limits, b"$00000"), Error::LineTooLong { limit: 4 });
    let zeros = [&b":"[..], &[b'0'; 70_000][..]].concat();
    assert_eq!(err(&zeros), Error::LineTooLong { limit: 64 * 1024 });
    let endless = vec![b'x'; 64 * 1024 + 2];
    let mut input = b"+".to_vec();
    input.extend_from_slice(&endless);
    assert_eq!(err(&input), Error::LineTooLong { limit: 64 * 1024 });
}

#[test]
fn failure_is_sticky_and_reset_clears_it() {
    let mut decoder = Decoder::new();
    assert_eq!(decoder.decode(b"?\r\n"), Err(Error::UnknownType(b'?')));
    assert_eq!(decoder.failure(), Some(Error::UnknownType(b'?')));
    assert!(!decoder.is_idle());
    // Valid input does not revive it.
    assert_eq!(decoder.decode(b"+OK\r\n"), Err(Error::UnknownType(b'?')));
    decoder.reset();
    assert!(decoder.is_idle());
    let ok = decoder.decode(b"+OK\r\n");
    assert!(matches!(
        ok,
        Ok(Status::Complete(Decoded {
            token: Token::Simple(b"OK"),
            len: 5,
            frame_end: true
        }))
    ));
}

#[test]
fn partial_is_not_an_error_and_consumes_nothing() {
    let mut decoder = Decoder::new();
    for prefix in [
        &b""[..],
        b"$",
        b"$3",
        b"$3\r",
        b"$3\r\n",
        b"$3\r\nfo",
        b"$3\r\nfoo\r",
    ] {
        assert_eq!(
            decoder.decode(prefix),
            Ok(Status::Partial),
            "{}",
            prefix.escape_ascii()
        );
    }
    assert!(
        decoder
            .decode(b"$3\r\nfoo\r\n")
            .is_ok_and(|s| s.is_complete())
    );
    assert_eq!(decoder.depth(), 0);
    assert!(decoder.decode(b"*2\r\n").is_ok_and(|s| s.is_complete()));
    assert_eq!(decoder.depth(), 1);
    assert!(!decoder.is_idle());
}

#[test]
fn a_shrunk_buffer_restarts_the_token() {
    // Contract violation: the caller passes fewer bytes than before. The
    // decoder re-reads the token instead of trusting stale offsets.
    let mut decoder = Decoder::new();
    assert_eq!(decoder.decode(b":12"), Ok(Status::Partial));
    assert_eq!(decoder.decode(b":"), Ok(Status::Partial));
    let done = decoder.decode(b":7\r\n");
    assert!(matches!(
        done,
        Ok(Status::Complete(Decoded {
            token: Token::Integer(7),
            ..
        }))
    ));
}

/// Feeds `input` in reads that end at each of `cuts` (and at its end) and
/// returns the bytes examined.
fn examined_in_reads(input: &[u8], cuts: impl IntoIterator<Item = usize>) -> usize {
    let mut decoder = Decoder::new();
    let mut buf = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([input.len()]) {
        buf.extend_from_slice(&input[from..cut]);
        from = cut;
        while let Ok(Status::Complete(d)) = decoder.decode(&buf) {
            buf.drain(..d.len);
        }
    }
    assert!(buf.is_empty() && decoder.is_idle());
    decoder.examined
}

/// Feeds `input` one byte at a time and returns the bytes examined.
fn examined_bytewise(input: &[u8]) -> usize {
    examined_in_reads(input, 1..input.len())
}

#[test]
fn bytewise_feeding_examines_each_byte_once() {
    let mut line = b"+".to_vec();
    line.extend(std::iter::repeat_n(b'x', 10_000));
    line.extend_from_slice(b"\r\n");
    // Each byte once; the CR again when the LF was not there yet.
    assert!(examined_bytewise(&line) <= line.len() + 1);

    let mut bulk = b"$100000\r\n".to_vec();
    bulk.extend(std::iter::repeat_n(b'y', 100_000));
    bulk.extend_from_slice(b"\r\n");
    // The payload is never scanned; only the header is.
    assert!(examined_bytewise(&bulk) <= 8);

    let number = b":-1234567890123456789\r\n";
    assert!(examined_bytewise(number) <= number.len());
}

#[test]
fn the_fast_path_hands_over_without_rescanning() {
    // A token cut anywhere is begun by the fast path, which hands what it
    // read to the resumable path: nothing is examined twice (a CR that
    // arrived without its LF excepted).
    let inputs: [&[u8]; 5] = [
        b":-1234567890123456\r\n",
        b"$10\r\n0123456789\r\n",
        b"*1\r\n$3\r\nabc\r\n",
        b"+a simple line that is longer than eight bytes\r\n",
        b"-ERR and an error line\r\n",
    ];
    for input in inputs {
        for cut in 1..input.len() {
            let examined = examined_in_reads(input, [cut]);
            assert!(
                examined <= input.len(),
                "{} cut at {cut}: {examined} bytes examined",
                input.escape_ascii()
            );
        }
    }
}

#[test]
fn token_debug_is_readable() {
    assert_eq!(
        format!("{:?}", Token::Bulk(b"a\r\n\x00")),
        "Bulk(b\"a\\r\\n\\x00\")"
    );
    let verbatim = Token::Verbatim {
        format: *b"txt",
        text: b"hi",
    };
    assert_eq!(
        format!("{verbatim:?}"),
        "Verbatim { format: b\"txt\", text: b\"hi\" }"
    );
    assert_eq!(
        Error::BulkTooLong { limit: 4 }.to_string(),
        "RESP bulk string longer than the limit of 4 bytes"
    );
}

/// Writes a random valid RESP value into `out`, with the tokens it decodes
/// to into `expect` (frame ends are checked by comparison with whole-input
/// decoding, which the other tests pin down).
fn gen_value(rng: &mut StdRng, depth: usize, out: &mut Vec<u8>, expect: &mut Vec<String>) {
    let leaf = depth >= 4 || rng.random_bool(0.6);
    let choice = if leaf {
        rng.random_range(0..12)
    } else {
        rng.random_range(12..20)
    };
    let bytes = |rng: &mut StdRng| -> Vec<u8> {
        let n = rng.random_range(0..12);
        (0..n).map(|_| rng.random()).collect()
    };
    let text = |rng: &mut StdRng| -> Vec<u8> {
        let n = rng.random_range(0..8);
        (0..n).map(|_| rng.random_range(b' '..=b'~')).collect()
    };
    match choice {
        0 => {
            let t = text(rng);
            out.extend_from_slice(&[b"+", &t[..], b"\r\n"].concat());
            expect.push(format!("{:?}", Token::Simple(&t)));
        }
        1 => {
            let t = text(rng);
            out.extend_from_slice(&[b"-", &t[..], b"\r\n"].concat());
            expect.push(format!("{:?}", Token::Error(&t)));
        }
        2 => {
            let n: i64 = rng.random();
            out.extend_from_slice(format!(":{n}\r\n").as_bytes());
            expect.push(format!("{:?}", Token::Integer(n)));
        }
        3 => {
            let b = bytes(rng);
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(&b);
            out.extend_from_slice(b"\r\n");
            expect.push(format!("{:?}", Token::Bulk(&b)));
        }
        4 => {
            let (wire, kind): (&[u8], _) = match rng.random_range(0..3) {
                0 => (b"_\r\n", NullKind::Null),
                1 => (b"$-1\r\n", NullKind::Bulk),
                _ => (b"*-1\r\n", NullKind::Array),
            };
            out.extend_from_slice(wire);
            expect.push(format!("{:?}", Token::Null(kind)));
        }
        5 => {
            let x: f64 = rng.random_range(-1e6..1e6);
            out.extend_from_slice(format!(",{x:?}\r\n").as_bytes());
            expect.push(format!("{:?}", Token::Double(x)));
        }
        6 => {
            let b = rng.random_bool(0.5);
            out.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" });
            expect.push(format!("{:?}", Token::Boolean(b)));
        }
        7 => {
            let digits: String = (0..rng.random_range(1..40))
                .map(|_| char::from(rng.random_range(b'0'..=b'9')))
                .collect();
            out.extend_from_slice(format!("({digits}\r\n").as_bytes());
            expect.push(format!("{:?}", Token::BigNumber(digits.as_bytes())));
        }
        8 => {
            let b = bytes(rng);
            out.extend_from_slice(format!("!{}\r\n", b.len()).as_bytes());
            out.extend_from_slice(&b);
            out.extend_from_slice(b"\r\n");
            expect.push(format!("{:?}", Token::BulkError(&b)));
        }
        9 => {
            let b = bytes(rng);
            out.extend_from_slice(format!("={}\r\ntxt:", b.len() + 4).as_bytes());
            out.extend_from_slice(&b);
            out.extend_from_slice(b"\r\n");
            expect.push(format!(
                "{:?}",
                Token::Verbatim {
                    format: *b"txt",
                    text: &b
                }
            ));
        }
        10 => {
            out.extend_from_slice(b"$?\r\n");
            expect.push("StreamedString".into());
            for _ in 0..rng.random_range(0..3) {
                let mut b = bytes(rng);
                b.push(b'!');
                out.extend_from_slice(format!(";{}\r\n", b.len()).as_bytes());
                out.extend_from_slice(&b);
                out.extend_from_slice(b"\r\n");
                expect.push(format!("{:?}", Token::Chunk(&b)));
            }
            out.extend_from_slice(b";0\r\n");
            expect.push("End".into());
        }
        11 => {
            // An attribute, then the value it annotates.
            out.extend_from_slice(b"|1\r\n+ttl\r\n:3\r\n");
            expect.extend([
                "Attribute(1)".into(),
                "Simple(b\"ttl\")".into(),
                "Integer(3)".into(),
            ]);
            gen_value(rng, depth + 1, out, expect);
        }
        12..=15 => {
            let n = rng.random_range(0..4);
            let (prefix, token, values) = match choice {
                12 => ('*', Token::Array(n), n),
                13 => ('~', Token::Set(n), n),
                14 => ('>', Token::Push(n), n),
                _ => ('%', Token::Map(n), 2 * n),
            };
            out.extend_from_slice(format!("{prefix}{n}\r\n").as_bytes());
            expect.push(format!("{token:?}"));
            for _ in 0..values {
                gen_value(rng, depth + 1, out, expect);
            }
        }
        _ => {
            let (wire, name, values): (&[u8], _, _) = match rng.random_range(0..3) {
                0 => (b"*?\r\n", "StreamedArray", rng.random_range(0..4)),
                1 => (b"~?\r\n", "StreamedSet", rng.random_range(0..4)),
                _ => (b"%?\r\n", "StreamedMap", 2 * rng.random_range(0..3)),
            };
            out.extend_from_slice(wire);
            expect.push(name.into());
            for _ in 0..values {
                gen_value(rng, depth + 1, out, expect);
            }
            out.extend_from_slice(b".\r\n");
            expect.push("End".into());
        }
    }
}

#[test]
fn any_split_gives_the_same_tokens_as_whole() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0001);
    for case in 0..400 {
        let mut input = Vec::new();
        let mut expect = Vec::new();
        for _ in 0..rng.random_range(1..4) {
            gen_value(&mut rng, 0, &mut input, &mut expect);
        }
        let (reference, error) = whole(Limits::DEFAULT, &input);
        assert_eq!(error, None, "case {case}: {}", input.escape_ascii());
        let names: Vec<&String> = reference.iter().map(|(t, _)| t).collect();
        let expect: Vec<&String> = expect.iter().collect();
        assert_eq!(names, expect, "case {case}: {}", input.escape_ascii());
        assert_eq!(reference.last().map(|t| t.1), Some(true), "case {case}");
        for at in 0..=input.len() {
            assert_eq!(
                pieces(Limits::DEFAULT, &input, &[at]),
                (reference.clone(), None),
                "case {case} split at {at}"
            );
        }
        let every: Vec<usize> = (1..input.len()).collect();
        assert_eq!(
            pieces(Limits::DEFAULT, &input, &every),
            (reference.clone(), None),
            "case {case} bytewise"
        );
        let random: Vec<usize> = {
            let mut cuts: Vec<usize> = (0..rng.random_range(0..6))
                .map(|_| rng.random_range(0..=input.len()))
                .collect();
            cuts.sort_unstable();
            cuts
        };
        assert_eq!(
            pieces(Limits::DEFAULT, &input, &random),
            (reference, None),
            "case {case} cuts {random:?}"
        );
    }
}

#[test]
fn any_split_gives_the_same_error_as_whole() {
    // Errors, too, do not depend on how the input is split.
    for bad in [
        &b"*2\r\n:1\r\n:x\r\n"[..],
        b"$3\r\nfooX\r\n",
        b"*1\r\n*1\r\n%?\r\n+k\r\n.\r\n",
        b"+ok\r\n@",
        b"$?\r\n;2\r\nab\r\n+x\r\n",
        b":99999999999999999999\r\n",
    ] {
        let reference = whole(Limits::DEFAULT, bad);
        assert!(reference.1.is_some());
        for at in 0..=bad.len() {
            assert_eq!(
                pieces(Limits::DEFAULT, bad, &[at]),
                reference,
                "{} at {at}",
                bad.escape_ascii()
            );
        }
    }
}

#[test]
fn line_search_agrees_with_a_byte_loop() {
    // Control bytes around CR and LF (a tab, NUL, 0x0c, 0x0e) at every
    // position of lines of every length up to 40, whole and followed by
    // more bytes, so that the line end falls in the sixteen-byte steps, in
    // the overlapping tail and in the byte loop of short buffers.
    for len in 0..40 {
        for at in 0..len {
            for control in [b'\t', 0, 0x0c, 0x0e, b'\n', b'\r'] {
                let mut content = vec![b'x'; len];
                content[at] = control;
                let mut input = vec![b'+'];
                input.extend_from_slice(&content);
                input.extend_from_slice(b"\r\n");
                // A CR not followed by LF, or a bare LF, ends nothing.
                let expect = match control {
                    b'\n' | b'\r' => Err(Error::MissingCrlf),
                    _ => Ok(format!("{:?}", Token::Simple(&content))),
                };
                for tail in [&b""[..], b":1\r\n", b"+0123456789abcdef\r\n"] {
                    let mut buf = input.clone();
                    buf.extend_from_slice(tail);
                    let got = match Decoder::new().decode(&buf) {
                        Ok(Status::Complete(d)) => Ok(format!("{:?}", d.token)),
                        Ok(Status::Partial) => panic!("partial: {:?}", buf.escape_ascii()),
                        Err(e) => Err(e),
                    };
                    assert_eq!(got, expect, "{:?}", buf.escape_ascii().to_string());
                }
            }
        }
    }
}
