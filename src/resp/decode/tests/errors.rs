//! Decoder tests of malformed input and of the limits: each error, where
//! it is reported, and a failure that sticks until reset.

use super::*;

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
