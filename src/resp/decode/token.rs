//! What the decoder hands out: tokens, and whether it had enough input.

use core::fmt;

/// Whether a call had enough input to produce a result.
///
/// ```
/// use redlock_mio::resp::{Decoder, Status, Token};
///
/// let mut decoder = Decoder::new();
/// assert_eq!(decoder.decode(b":12")?, Status::Partial); // no CRLF yet
/// match decoder.decode(b":123\r\n")? {
///     Status::Complete(item) => assert_eq!(item.token, Token::Integer(123)),
///     Status::Partial => unreachable!("the line is whole"),
/// }
/// # Ok::<(), redlock_mio::resp::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status<T> {
    /// The value is complete.
    Complete(T),
    /// More bytes are needed; call again once they have arrived.
    Partial,
}

impl<T> Status<T> {
    /// `true` for [`Status::Complete`].
    pub fn is_complete(&self) -> bool {
        matches!(self, Status::Complete(_))
    }

    /// `true` for [`Status::Partial`].
    pub fn is_partial(&self) -> bool {
        matches!(self, Status::Partial)
    }
}

/// Which wire form a null had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NullKind {
    /// RESP3 null, `_\r\n`.
    Null,
    /// RESP2 null bulk string, `$-1\r\n`.
    Bulk,
    /// RESP2 null array, `*-1\r\n`.
    Array,
}

/// One element of a reply, borrowed from the decoder's input.
///
/// Aggregate headers carry their declared count; their elements follow as
/// the next tokens. Maps and attributes count key-value *pairs*, so a
/// `Map(2)` is followed by four values (each of which may itself be an
/// aggregate).
///
/// The replies to `SET key token NX PX ttl`, in RESP2 and RESP3:
///
/// ```
/// use redlock_mio::resp::{Decoder, Status, Token};
///
/// fn acquired(reply: &[u8]) -> Result<Option<bool>, redlock_mio::resp::Error> {
///     let Status::Complete(item) = Decoder::new().decode(reply)? else {
///         return Ok(None); // wait for more bytes
///     };
///     Ok(Some(match item.token {
///         Token::Simple(b"OK") => true,
///         Token::Null(_) => false, // `$-1` or `_`: held by another
///         _ => false,              // an error, or not a reply to SET
///     }))
/// }
/// assert_eq!(acquired(b"+OK\r\n")?, Some(true));
/// assert_eq!(acquired(b"$-1\r\n")?, Some(false));
/// assert_eq!(acquired(b"_\r\n")?, Some(false));
/// # Ok::<(), redlock_mio::resp::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
pub enum Token<'a> {
    /// Simple string, `+OK\r\n`.
    Simple(&'a [u8]),
    /// Simple error, `-ERR message\r\n`.
    Error(&'a [u8]),
    /// Integer, `:42\r\n`.
    Integer(i64),
    /// Bulk string, `$3\r\nfoo\r\n`.
    Bulk(&'a [u8]),
    /// Bulk error, `!7\r\nERR foo\r\n` (RESP3).
    BulkError(&'a [u8]),
    /// Verbatim string, `=8\r\ntxt:some\r\n` (RESP3).
    Verbatim {
        /// The three-byte format, such as `txt` or `mkd`.
        format: [u8; 3],
        /// The text after the `:` separator.
        text: &'a [u8],
    },
    /// A null, in any of its wire forms.
    Null(NullKind),
    /// Double, `,3.14\r\n` (RESP3). May be infinite, never NaN.
    Double(f64),
    /// Boolean, `#t\r\n` or `#f\r\n` (RESP3).
    Boolean(bool),
    /// Big number, `(123456789012345678901234567890\r\n` (RESP3): the
    /// digits, with a leading `-` if negative.
    BigNumber(&'a [u8]),
    /// Array header with its element count, `*2\r\n`.
    Array(usize),
    /// Set header with its element count, `~2\r\n` (RESP3).
    Set(usize),
    /// Push header with its element count, `>2\r\n` (RESP3).
    Push(usize),
    /// Map header with its number of key-value pairs, `%2\r\n` (RESP3).
    Map(usize),
    /// Attribute header with its number of key-value pairs, `|1\r\n`
    /// (RESP3). The attribute annotates the value that follows its pairs;
    /// it is not an element of the enclosing aggregate.
    Attribute(usize),
    /// Start of a streamed string, `$?\r\n` (RESP3): [`Token::Chunk`]s
    /// follow, closed by [`Token::End`].
    StreamedString,
    /// One part of a streamed string, `;4\r\nabcd\r\n`.
    Chunk(&'a [u8]),
    /// Start of a streamed array, `*?\r\n`, closed by [`Token::End`].
    StreamedArray,
    /// Start of a streamed set, `~?\r\n`, closed by [`Token::End`].
    StreamedSet,
    /// Start of a streamed map, `%?\r\n`, closed by [`Token::End`].
    StreamedMap,
    /// End of a streamed string (`;0\r\n`) or aggregate (`.\r\n`).
    End,
}

/// Byte strings shown as escaped text: `b"OK"`.
struct ByteStr<'a>(&'a [u8]);

impl fmt::Debug for ByteStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

impl fmt::Debug for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = |f: &mut fmt::Formatter<'_>, name: &str, data: &[u8]| {
            f.debug_tuple(name).field(&ByteStr(data)).finish()
        };
        match *self {
            Token::Simple(data) => bytes(f, "Simple", data),
            Token::Error(data) => bytes(f, "Error", data),
            Token::Integer(n) => f.debug_tuple("Integer").field(&n).finish(),
            Token::Bulk(data) => bytes(f, "Bulk", data),
            Token::BulkError(data) => bytes(f, "BulkError", data),
            Token::Verbatim { format, text } => f
                .debug_struct("Verbatim")
                .field("format", &ByteStr(&format))
                .field("text", &ByteStr(text))
                .finish(),
            Token::Null(kind) => f.debug_tuple("Null").field(&kind).finish(),
            Token::Double(x) => f.debug_tuple("Double").field(&x).finish(),
            Token::Boolean(b) => f.debug_tuple("Boolean").field(&b).finish(),
            Token::BigNumber(data) => bytes(f, "BigNumber", data),
            Token::Array(n) => f.debug_tuple("Array").field(&n).finish(),
            Token::Set(n) => f.debug_tuple("Set").field(&n).finish(),
            Token::Push(n) => f.debug_tuple("Push").field(&n).finish(),
            Token::Map(n) => f.debug_tuple("Map").field(&n).finish(),
            Token::Attribute(n) => f.debug_tuple("Attribute").field(&n).finish(),
            Token::StreamedString => f.write_str("StreamedString"),
            Token::Chunk(data) => bytes(f, "Chunk", data),
            Token::StreamedArray => f.write_str("StreamedArray"),
            Token::StreamedSet => f.write_str("StreamedSet"),
            Token::StreamedMap => f.write_str("StreamedMap"),
            Token::End => f.write_str("End"),
        }
    }
}

/// A decoded token and where it ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decoded<'a> {
    /// The token.
    pub token: Token<'a>,
    /// How many bytes of the input the token occupies; drop them before the
    /// next call.
    pub len: usize,
    /// `true` when this token completes a top-level reply.
    pub frame_end: bool,
}
