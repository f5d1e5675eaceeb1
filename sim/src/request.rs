//! Requests out of a connection's byte stream: RESP arrays of bulk
//! strings, pipelined and split anywhere, decoded by the crate's own
//! incremental decoder.

use redlock_mio::resp::{Decoder, NullKind, Status, Token};

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

    /// The next command, if its bytes are all there.
    pub(crate) fn next(&mut self) -> Next {
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
