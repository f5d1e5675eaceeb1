//! Unit tests of the RESP decoder, and the helpers they share: decoding an
//! input whole or in pieces, and reading back its tokens or its error.
//!
//! The tests themselves are grouped by theme: `types` (the grammar of every
//! type, frame ends, attributes, streams), `errors` (malformed input, the
//! limits, sticky failures) and `feeding` (partial input, splits, bytes
//! examined, the line search).

use super::*;

mod errors;
mod feeding;
mod types;

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
