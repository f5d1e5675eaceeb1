//! Replies as trees, decoded with the crate's own decoder, and a
//! connection to a real server.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use redlock_mio::resp::{Arg, Decoder, NullKind, Status, Token, encode_command};

/// One whole reply.
#[derive(Clone, PartialEq)]
pub(crate) enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    Verbatim(Vec<u8>),
    Null(NullKind),
    Boolean(bool),
    Double(f64),
    BigNumber(Vec<u8>),
    Array(Vec<Value>),
    Set(Vec<Value>),
    Push(Vec<Value>),
    /// Keys and values, one after the other.
    Map(Vec<Value>),
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |bytes: &[u8]| format!("{:?}", bytes.escape_ascii().to_string());
        match self {
            Value::Simple(s) => write!(f, "+{}", text(s)),
            Value::Error(s) => write!(f, "-{}", text(s)),
            Value::Integer(n) => write!(f, ":{n}"),
            Value::Bulk(s) => write!(f, "${}", text(s)),
            Value::Verbatim(s) => write!(f, "={}", text(s)),
            Value::Null(kind) => write!(f, "null({kind:?})"),
            Value::Boolean(b) => write!(f, "#{b}"),
            Value::Double(x) => write!(f, ",{x}"),
            Value::BigNumber(s) => write!(f, "({}", text(s)),
            Value::Array(items) => write!(f, "*{items:?}"),
            Value::Set(items) => write!(f, "~{items:?}"),
            Value::Push(items) => write!(f, ">{items:?}"),
            Value::Map(items) => write!(f, "%{items:?}"),
        }
    }
}

/// An aggregate being read: its kind, elements still to come, and those
/// read.
struct Open {
    make: fn(Vec<Value>) -> Value,
    left: usize,
    items: Vec<Value>,
}

/// Whole replies out of a byte stream.
#[derive(Default)]
pub(crate) struct Replies {
    decoder: Decoder,
    buf: Vec<u8>,
    start: usize,
    open: Vec<Open>,
}

impl Replies {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whether bytes are left that make no whole reply.
    pub(crate) fn has_partial(&self) -> bool {
        self.start < self.buf.len() || !self.open.is_empty()
    }

    /// The next whole reply, if its bytes are all there.
    pub(crate) fn next(&mut self) -> Result<Option<Value>, String> {
        loop {
            let token = match self.decoder.decode(&self.buf[self.start..]) {
                Ok(Status::Complete(item)) => {
                    self.start += item.len;
                    item.token
                }
                Ok(Status::Partial) => return Ok(None),
                Err(e) => return Err(format!("undecodable reply: {e}")),
            };
            let value = match token {
                Token::Simple(s) => Some(Value::Simple(s.to_vec())),
                Token::Error(s) | Token::BulkError(s) => Some(Value::Error(s.to_vec())),
                Token::Integer(n) => Some(Value::Integer(n)),
                Token::Bulk(s) => Some(Value::Bulk(s.to_vec())),
                Token::Verbatim { text, .. } => Some(Value::Verbatim(text.to_vec())),
                Token::Null(kind) => Some(Value::Null(kind)),
                Token::Boolean(b) => Some(Value::Boolean(b)),
                Token::Double(x) => Some(Value::Double(x)),
                Token::BigNumber(s) => Some(Value::BigNumber(s.to_vec())),
                Token::Array(n) => self.open(Value::Array, n),
                Token::Set(n) => self.open(Value::Set, n),
                Token::Push(n) => self.open(Value::Push, n),
                Token::Map(n) => self.open(Value::Map, 2 * n),
                other => return Err(format!("a reply the test does not read: {other:?}")),
            };
            if let Some(done) = value.and_then(|value| self.attach(value)) {
                return Ok(Some(done));
            }
        }
    }

    /// An aggregate of `count` elements: itself if empty, else `None`
    /// until its elements have come.
    fn open(&mut self, make: fn(Vec<Value>) -> Value, count: usize) -> Option<Value> {
        if count == 0 {
            return Some(make(Vec::new()));
        }
        self.open.push(Open {
            make,
            left: count,
            items: Vec::new(),
        });
        None
    }

    /// Hands `value` to the aggregate being read; the whole reply if that
    /// completes it (and those it is in).
    fn attach(&mut self, mut value: Value) -> Option<Value> {
        loop {
            let Some(open) = self.open.last_mut() else {
                return Some(value);
            };
            open.items.push(value);
            open.left -= 1;
            if open.left > 0 {
                return None;
            }
            let done = self.open.pop()?;
            value = (done.make)(done.items);
        }
    }
}

/// Appends a command (its words) to `out`.
pub(crate) fn encode(words: &[Vec<u8>], out: &mut Vec<u8>) {
    let args: Vec<Arg<'_>> = words.iter().map(|w| Arg::Bytes(w)).collect();
    encode_command(out, &args);
}

/// A connection to a real server.
pub(crate) struct Wire {
    stream: UnixStream,
    replies: Replies,
}

impl Wire {
    pub(crate) fn new(stream: UnixStream) -> Wire {
        // A generous bound so that a lost reply fails the test instead of
        // hanging it; a busy machine answers within far less.
        let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
        Wire {
            stream,
            replies: Replies::default(),
        }
    }

    /// Sends `commands`, then `PING <sentinel>`, in one write, and reads
    /// every frame up to the reply to that `PING`: the commands' replies
    /// and the pushes among and after them, in order. The server answers
    /// the `PING` only once it has written everything before it, pushes
    /// published to this connection by then included, so nothing is left
    /// to race. A connection not logged in answers it with `NOAUTH`, taken
    /// for its reply once `expected` frames (the model's count) have come.
    /// Fewer frames if the server closes the connection.
    pub(crate) fn exchange(
        &mut self,
        commands: &[Vec<Vec<u8>>],
        sentinel: &[u8],
        expected: usize,
    ) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        for words in commands {
            encode(words, &mut out);
        }
        encode(&[b"PING".to_vec(), sentinel.to_vec()], &mut out);
        if self.stream.write_all(&out).is_err() {
            return Ok(Vec::new());
        }
        let mut frames = Vec::new();
        while let Some(frame) = self.next_frame()? {
            let noauth = matches!(&frame, Value::Error(e) if e.starts_with(b"NOAUTH"));
            if answers_ping(&frame, sentinel) || noauth && frames.len() == expected {
                break;
            }
            frames.push(frame);
        }
        Ok(frames)
    }

    /// One command, one reply; `None` if the server closed the connection.
    pub(crate) fn try_call(&mut self, words: &[Vec<u8>]) -> Option<Value> {
        let mut out = Vec::new();
        encode(words, &mut out);
        self.stream.write_all(&out).ok()?;
        self.next_frame().ok().flatten()
    }

    /// One command, one reply.
    pub(crate) fn call(&mut self, words: &[Vec<u8>]) -> Value {
        self.try_call(words)
            .unwrap_or_else(|| panic!("the server closed the connection"))
    }

    /// The next whole frame; `None` once the server has closed the
    /// connection.
    fn next_frame(&mut self) -> Result<Option<Value>, String> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            if let Some(value) = self.replies.next()? {
                return Ok(Some(value));
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Ok(None),
                Ok(n) => self.replies.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) => return Err(format!("reading from the server: {e}")),
            }
        }
    }
}

/// Whether `frame` is the reply to `PING <sentinel>`: the sentinel, or
/// `pong` and the sentinel on a RESP2 connection in subscribe mode.
fn answers_ping(frame: &Value, sentinel: &[u8]) -> bool {
    match frame {
        Value::Bulk(text) => text == sentinel,
        Value::Array(items) => {
            matches!(items.as_slice(), [Value::Bulk(pong), Value::Bulk(text)] if pong == b"pong" && text == sentinel)
        }
        _ => false,
    }
}
