//! A reply of the model, and its encoding in RESP2 or RESP3.
//!
//! Commands and scripts build a [`Reply`]; the connection's protocol
//! (`HELLO`) decides only how it is written, as on a real server, where a
//! command says "a null" or "a map" and the protocol picks the bytes.

use std::borrow::Cow;

use crate::numbers::format_g;

/// The protocol a connection speaks, switched by `HELLO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, what every connection starts with.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// One reply, before its encoding.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// `+OK`, `+PONG`, `+string` (`TYPE`), a script's status reply
    /// (`+WAIT 250`).
    Simple(Cow<'static, str>),
    /// An error: its code (`ERR`, `WRONGTYPE`, `NOSCRIPT`, ...) then its
    /// message, without the leading `-`.
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    /// `$-1` in RESP2, `_` in RESP3.
    Null,
    Array(Vec<Reply>),
    /// A flat array of pairs in RESP2, `%` in RESP3 (`HELLO`).
    Map(Vec<(Reply, Reply)>),
    /// A bulk string in RESP2, a `txt` verbatim string in RESP3 (`INFO`).
    Verbatim(Vec<u8>),
    /// A double (`ZSCORE`): `,` in RESP3, a bulk string in RESP2, printed
    /// `%.17g` as Redis 7.0 prints it (`inf`, `-inf` for the infinities).
    Double(f64),
    /// A push (`>` in RESP3): what a subscribed connection receives
    /// (`message <channel> <payload>`) and how `SUBSCRIBE` and
    /// `UNSUBSCRIBE` confirm. A plain array in RESP2, where it is told
    /// apart by its first element only.
    Push(Vec<Reply>),
    /// Several frames in answer to one command, one after the other:
    /// `SUBSCRIBE` and `UNSUBSCRIBE` confirm each channel by a push of its
    /// own.
    Frames(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub(crate) const OK: Reply = Reply::Simple(Cow::Borrowed("OK"));

    /// An error reply; `text` starts with its code.
    pub(crate) fn error(text: impl AsRef<[u8]>) -> Reply {
        Reply::Error(text.as_ref().to_vec())
    }

    /// A bulk string of `text`.
    pub(crate) fn bulk(text: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(text.as_ref().to_vec())
    }

    /// Appends the reply's bytes in `protocol` to `out`.
    pub(crate) fn encode(&self, protocol: Protocol, out: &mut Vec<u8>) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Reply::Simple(text) => line(out, b'+', text.as_bytes()),
            Reply::Error(text) => line(out, b'-', &one_line(text)),
            Reply::Integer(n) => line(out, b':', n.to_string().as_bytes()),
            Reply::Bulk(bytes) => bulk(out, b'$', bytes),
            Reply::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Null => out.extend_from_slice(b"$-1\r\n"),
            Reply::Array(items) => aggregate(out, b'*', items, protocol),
            Reply::Map(pairs) => {
                if resp3 {
                    line(out, b'%', pairs.len().to_string().as_bytes());
                } else {
                    line(out, b'*', (2 * pairs.len()).to_string().as_bytes());
                }
                for (key, value) in pairs {
                    key.encode(protocol, out);
                    value.encode(protocol, out);
                }
            }
            Reply::Verbatim(text) if resp3 => {
                let mut framed = b"txt:".to_vec();
                framed.extend_from_slice(text);
                bulk(out, b'=', &framed);
            }
            Reply::Verbatim(text) => bulk(out, b'$', text),
            Reply::Double(x) if resp3 => line(out, b',', format_g(*x, 17).as_bytes()),
            Reply::Double(x) => bulk(out, b'$', format_g(*x, 17).as_bytes()),
            Reply::Push(items) if resp3 => aggregate(out, b'>', items, protocol),
            Reply::Push(items) => aggregate(out, b'*', items, protocol),
            Reply::Frames(frames) => {
                for frame in frames {
                    frame.encode(protocol, out);
                }
            }
        }
    }
}

/// `<kind><text>\r\n`.
fn line(out: &mut Vec<u8>, kind: u8, text: &[u8]) {
    out.push(kind);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

/// `<kind><count>\r\n` and the items.
fn aggregate(out: &mut Vec<u8>, kind: u8, items: &[Reply], protocol: Protocol) {
    line(out, kind, items.len().to_string().as_bytes());
    for item in items {
        item.encode(protocol, out);
    }
}

/// `<kind><len>\r\n<bytes>\r\n`.
fn bulk(out: &mut Vec<u8>, kind: u8, bytes: &[u8]) {
    line(out, kind, bytes.len().to_string().as_bytes());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// An error message on one line: a server turns CR and LF into spaces, so
/// that a key name in a message cannot break the framing.
fn one_line(text: &[u8]) -> Vec<u8> {
    text.iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect()
}
