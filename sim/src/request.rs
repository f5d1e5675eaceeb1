//! Requests out of a connection's byte stream: RESP arrays of bulk
//! strings, pipelined and split anywhere, decoded by the crate's own
//! incremental decoder.
//!
//! A connection that has not logged in may send no command of more than
//! [`UNAUTHENTICATED_WORDS`] words, nor a word of more than
//! [`UNAUTHENTICATED_BYTES`] bytes: a server refuses them as a protocol
//! error (and closes the connection), so that a stranger cannot make it
//! hold much. A server refuses the word as soon as its length arrives; the
//! model once the word has.

use redlock_mio::resp::{Decoder, NullKind, Status, Token};

/// The most words a command may have before the connection logs in.
const UNAUTHENTICATED_WORDS: usize = 10;

/// The most bytes a word may have before the connection logs in.
const UNAUTHENTICATED_BYTES: usize = 16 * 1024;

/// What the bytes received so far hold next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// A whole command: its words.
    Command(Vec<Vec<u8>>),
    /// Not a whole command yet.
    Partial,
    /// Bytes a server would refuse (`-ERR Protocol error`), after which it
    /// closes the connection: the reason.
    Invalid(String),
}

/// The request stream of one connection.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    /// Bytes received and not yet consumed start at `start`.
    buf: Vec<u8>,
    start: usize,
    decoder: Decoder,
    /// The command being read: the words still to come, and those read.
    open: Option<(usize, Vec<Vec<u8>>)>,
}

impl Requests {
    /// Appends bytes received.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        // The bytes consumed go, so that a connection that always has a
        // command half-received keeps only that half.
        self.buf.drain(..self.start);
        self.start = 0;
        self.buf.extend_from_slice(bytes);
    }

    /// The next command, if its bytes are all there; `authenticated`:
    /// whether the connection has logged in (see the module docs).
    pub(crate) fn next(&mut self, authenticated: bool) -> Next {
        loop {
            let token = match self.decoder.decode(&self.buf[self.start..]) {
                Ok(Status::Complete(item)) => {
                    self.start += item.len;
                    item.token
                }
                Ok(Status::Partial) => return Next::Partial,
                Err(error) => return Next::Invalid(format!("Protocol error: {error}")),
            };
            match (&mut self.open, token) {
                (None, Token::Array(0) | Token::Null(NullKind::Array)) => {}
                (None, Token::Array(count)) if !authenticated && count > UNAUTHENTICATED_WORDS => {
                    return Next::Invalid(
                        "Protocol error: unauthenticated multibulk length".into(),
                    );
                }
                (Some(_), Token::Bulk(word))
                    if !authenticated && word.len() > UNAUTHENTICATED_BYTES =>
                {
                    return Next::Invalid("Protocol error: unauthenticated bulk length".into());
                }
                (None, Token::Array(count)) => {
                    self.open = Some((count, Vec::with_capacity(count.min(64))))
                }
                (None, _) => {
                    return Next::Invalid(
                        "Protocol error: inline commands are not modelled".to_owned(),
                    );
                }
                (Some((left, words)), Token::Bulk(word)) => {
                    words.push(word.to_vec());
                    *left -= 1;
                    if *left == 0 {
                        let words = std::mem::take(words);
                        self.open = None;
                        return Next::Command(words);
                    }
                }
                (Some(_), other) => {
                    return Next::Invalid(format!("Protocol error: expected '$', got {other:?}"));
                }
            }
        }
    }
}
