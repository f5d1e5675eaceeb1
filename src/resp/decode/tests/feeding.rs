//! Decoder tests of incremental feeding: partial input, any split giving
//! the same result as the whole, the bytes examined, and the line search.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
