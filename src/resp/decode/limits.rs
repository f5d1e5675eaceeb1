//! Protocol errors and the limits that bound a peer.

use core::fmt;

/// A protocol violation. The decoder that returned it stays failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The first byte of a token is not a RESP type.
    UnknownType(u8),
    /// A length or integer has a character other than digits and one
    /// leading `-`, or no digits.
    InvalidNumber,
    /// An integer does not fit in `i64`.
    IntegerOverflow,
    /// A negative length other than `-1`, or `-1` where no null is allowed.
    InvalidLength,
    /// A bulk string (or the sum of a streamed string's chunks) is longer
    /// than [`Limits::max_bulk_len`].
    BulkTooLong {
        /// The limit in force.
        limit: u64,
    },
    /// A line (simple string or error, double, big number, or the number
    /// after `:`, `$`, `*` and the like) is longer than
    /// [`Limits::max_line_len`], or has no CRLF within it.
    LineTooLong {
        /// The limit in force.
        limit: usize,
    },
    /// An aggregate declares or streams more elements than
    /// [`Limits::max_elements`].
    TooManyElements {
        /// The limit in force.
        limit: u64,
    },
    /// Aggregates are nested deeper than [`Limits::max_depth`].
    TooDeep {
        /// The limit in force.
        limit: usize,
    },
    /// A line or bulk payload is not terminated by CRLF, or a simple line
    /// contains a bare CR or LF.
    MissingCrlf,
    /// A double is not a decimal floating-point number, `inf` or `-inf`.
    InvalidDouble,
    /// A boolean is neither `t` nor `f`.
    InvalidBoolean,
    /// A big number is not an optionally negative run of digits.
    InvalidBigNumber,
    /// A verbatim string is shorter than 4 bytes or lacks the `:` after its
    /// three-byte format.
    InvalidVerbatim,
    /// A null or end marker (`_`, `.`) has content before its CRLF.
    InvalidNull,
    /// A chunk (`;`) outside a streamed string.
    UnexpectedChunk,
    /// Something other than a chunk inside a streamed string.
    ExpectedChunk,
    /// An end marker (`.`) outside a streamed aggregate, after a key of a
    /// streamed map with no value, or after an attribute, which must be
    /// followed by the value it annotates.
    UnexpectedEnd,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnknownType(b) => write!(f, "unknown RESP type byte 0x{b:02x}"),
            Error::InvalidNumber => f.write_str("malformed number in RESP header"),
            Error::IntegerOverflow => f.write_str("RESP integer does not fit in i64"),
            Error::InvalidLength => f.write_str("invalid negative RESP length"),
            Error::BulkTooLong { limit } => {
                write!(f, "RESP bulk string longer than the limit of {limit} bytes")
            }
            Error::LineTooLong { limit } => {
                write!(f, "RESP line longer than the limit of {limit} bytes")
            }
            Error::TooManyElements { limit } => {
                write!(
                    f,
                    "RESP aggregate has more than the limit of {limit} elements"
                )
            }
            Error::TooDeep { limit } => {
                write!(f, "RESP aggregates nested deeper than the limit of {limit}")
            }
            Error::MissingCrlf => f.write_str("RESP line or payload not terminated by CRLF"),
            Error::InvalidDouble => f.write_str("malformed RESP double"),
            Error::InvalidBoolean => f.write_str("malformed RESP boolean"),
            Error::InvalidBigNumber => f.write_str("malformed RESP big number"),
            Error::InvalidVerbatim => f.write_str("malformed RESP verbatim string"),
            Error::InvalidNull => f.write_str("RESP null or end marker with content"),
            Error::UnexpectedChunk => f.write_str("RESP chunk outside a streamed string"),
            Error::ExpectedChunk => f.write_str("RESP streamed string interrupted"),
            Error::UnexpectedEnd => f.write_str("RESP end marker out of place"),
        }
    }
}

impl std::error::Error for Error {}

/// Bounds that keep a hostile or broken peer from exhausting memory or
/// stack. Exceeding one is a typed [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub(super) max_depth: usize,
    pub(super) max_elements: u64,
    pub(super) max_bulk_len: u64,
    pub(super) max_line_len: usize,
}

impl Limits {
    /// The defaults: depth 128, 2^32 - 1 elements, 512 MiB bulk strings
    /// (Redis's own `proto-max-bulk-len`), 64 KiB lines.
    pub const DEFAULT: Limits = Limits {
        max_depth: 128,
        max_elements: u32::MAX as u64,
        max_bulk_len: 512 * 1024 * 1024,
        max_line_len: 64 * 1024,
    };

    /// The default limits, as [`Limits::DEFAULT`].
    pub const fn new() -> Limits {
        Limits::DEFAULT
    }

    /// Sets the deepest allowed nesting of aggregates (streamed strings and
    /// attributes count as a level). At least 1 is used.
    pub const fn with_max_depth(mut self, depth: usize) -> Limits {
        self.max_depth = if depth == 0 { 1 } else { depth };
        self
    }

    /// Sets the most elements (pairs, for maps and attributes) that one
    /// aggregate may declare or stream.
    pub const fn with_max_elements(mut self, count: u64) -> Limits {
        self.max_elements = count;
        self
    }

    /// Sets the longest allowed bulk string, bulk error, verbatim string or
    /// streamed string (all chunks together), in bytes.
    pub const fn with_max_bulk_len(mut self, len: u64) -> Limits {
        self.max_bulk_len = len;
        self
    }

    /// Sets the longest allowed content of a simple line (simple string,
    /// simple error, double, big number), in bytes. The caller's buffer
    /// never needs to hold more than this plus the CRLF for a line.
    pub const fn with_max_line_len(mut self, len: usize) -> Limits {
        self.max_line_len = len;
        self
    }

    /// The deepest allowed nesting.
    pub const fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// The most elements per aggregate.
    pub const fn max_elements(&self) -> u64 {
        self.max_elements
    }

    /// The longest bulk string, in bytes.
    pub const fn max_bulk_len(&self) -> u64 {
        self.max_bulk_len
    }

    /// The longest simple line, in bytes.
    pub const fn max_line_len(&self) -> usize {
        self.max_line_len
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}
