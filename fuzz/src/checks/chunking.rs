//! The [`chunked`] check: decoding an input in pieces gives exactly what
//! decoding it whole gives.

use super::decoding::{SMALL, Trace, record, whole};
use redlock_mio::resp::{Decoder, Limits, Status};

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
