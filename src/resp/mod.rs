//! RESP2/RESP3 codec, free of I/O.
//!
//! The codec never touches a socket. The [`Decoder`] is fed the bytes a
//! connection has received so far and hands out one [`Token`] at a time,
//! borrowed from those bytes; the encoder ([`encode_command`]) writes a
//! command into a buffer the caller owns.
//!
//! It is public on purpose: a zero-allocation codec for RESP2 and RESP3,
//! strict and bounded by [`Limits`], is useful beyond this crate (another
//! client, a proxy, a test server), and a public decoder can be fuzzed and
//! checked against other implementations from outside the crate.
//!
//! # Decoding
//!
//! A reply is pulled as a flat stream of tokens rather than built as a tree:
//! `*2\r\n$3\r\nfoo\r\n:7\r\n` decodes to [`Token::Array(2)`](Token::Array),
//! [`Token::Bulk(b"foo")`](Token::Bulk), [`Token::Integer(7)`](Token::Integer),
//! and the last token is marked [`Decoded::frame_end`]. Nothing is allocated
//! per reply, whatever count an aggregate declares, and the decoder's own
//! state is a fixed-size stack of open aggregates bounded by
//! [`Limits::max_depth`].
//!
//! The decoder is incremental: pass it the unconsumed bytes (starting at the
//! first byte not yet consumed, with any newly received bytes appended), and
//! it resumes where it stopped. A token that has not fully arrived yields
//! [`Status::Partial`]; bytes it already examined are not examined again, so
//! feeding a reply one byte at a time costs time linear in its length, also in
//! the middle of a large bulk string. When a token is complete, drop the
//! first [`Decoded::len`] bytes of your buffer before the next call.
//!
//! ```
//! use redlock_mio::resp::{Decoder, Status, Token};
//!
//! let mut decoder = Decoder::new();
//! let mut input = Vec::new();
//! let mut seen = Vec::new();
//! for chunk in [&b"*2\r\n$3\r\nfo"[..], b"o\r\n:", b"7\r\n"] {
//!     input.extend_from_slice(chunk);
//!     while let Status::Complete(item) = decoder.decode(&input)? {
//!         seen.push(format!("{:?}", item.token));
//!         input.drain(..item.len);
//!     }
//! }
//! assert_eq!(seen, ["Array(2)", "Bulk(b\"foo\")", "Integer(7)"]);
//! # Ok::<(), redlock_mio::resp::Error>(())
//! ```
//!
//! # Strictness and limits
//!
//! The decoder accepts exactly the grammar of RESP2 and RESP3: lengths and
//! integers are decimal with an optional leading `-` only (and `-1` is the
//! only negative length, for `$` and `*`), every line ends in CRLF, every
//! bulk payload is followed by CRLF, integers must fit in `i64`. Doubles
//! accept `inf` and `-inf`; `nan` is rejected, because Redis never sends it.
//! Streamed strings (`$?` with `;` chunks) and streamed aggregates (`*?`,
//! `%?`, `~?` closed by `.`) are supported.
//!
//! [`Limits`] bound the nesting depth, the element count of an aggregate, the
//! length of a bulk string and of a simple line. A violation is a typed
//! [`Error`]. After any error the decoder stays failed and returns the same
//! error on every later call: the byte stream can no longer be trusted, so
//! the connection must be dropped (or the decoder [reset](Decoder::reset) for
//! a new one).

mod decode;
mod encode;

pub use decode::{Decoded, Decoder, Error, Limits, NullKind, Status, Token};
pub use encode::{Arg, command_len, encode_command};
