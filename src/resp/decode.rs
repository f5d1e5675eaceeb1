//! The incremental RESP2/RESP3 decoder. See the [module docs](super).

mod fast;
mod limits;
mod token;

pub use limits::{Error, Limits};
pub use token::{Decoded, NullKind, Status, Token};

/// What the current token is, once its type byte is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a type byte.
    Start,
    /// Reading the decimal number after the type byte.
    Number(Num),
    /// Reading a line up to its CRLF.
    Line(Line),
    /// Header read; waiting for `body_len` bytes and a CRLF from `body_start`.
    Body(Body),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Integer,
    Length(Body),
    Count(Agg),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Bulk,
    BulkError,
    Verbatim,
    Chunk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agg {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    Simple,
    Error,
    Double,
    Boolean,
    BigNumber,
    Null,
    End,
}

/// An open aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Elements still expected by a counted aggregate.
    Counted(u64),
    /// Values still expected by an attribute's pairs.
    Attribute(u64),
    /// Elements seen so far in a streamed aggregate; `pairs` for maps.
    Streamed { seen: u64, pairs: bool },
    /// Bytes seen so far in a streamed string.
    StreamedString(u64),
}

/// How much stack to reserve up front; deeper nesting (when the limit
/// allows it) grows the stack once.
const PREALLOCATED_DEPTH: usize = 256;

/// The incremental RESP2/RESP3 decoder. See the [module docs](super).
///
/// One decoder serves one byte stream (one connection).
///
/// ```
/// use redlock_mio::resp::{Decoder, Status, Token};
///
/// let mut decoder = Decoder::new();
/// let mut input: &[u8] = b"*2\r\n:1\r\n$5\r\nhello\r\n";
/// let mut tokens = Vec::new();
/// while let Status::Complete(item) = decoder.decode(input)? {
///     tokens.push(item.token);
///     input = &input[item.len..];
///     if item.frame_end {
///         break; // one whole reply
///     }
/// }
/// assert_eq!(tokens, [Token::Array(2), Token::Integer(1), Token::Bulk(b"hello")]);
/// assert!(decoder.is_idle());
/// # Ok::<(), redlock_mio::resp::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Decoder {
    limits: Limits,
    stack: Vec<Level>,
    phase: Phase,
    failed: Option<Error>,
    /// An attribute has ended and the value it annotates has not begun.
    annotating: bool,
    /// Bytes of the current token examined so far.
    pos: usize,
    // Number state.
    acc: u64,
    digits: u32,
    negative: bool,
    streamed: bool,
    cr: bool,
    // Body state.
    body_start: usize,
    body_len: usize,
    /// Bytes examined by the scanning loops, for the no-rescan tests.
    #[cfg(test)]
    examined: usize,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder with the default [`Limits`].
    pub fn new() -> Decoder {
        Decoder::with_limits(Limits::DEFAULT)
    }

    /// A decoder with the given limits. Its nesting stack is allocated here,
    /// once; decoding allocates nothing.
    pub fn with_limits(limits: Limits) -> Decoder {
        Decoder {
            limits,
            stack: Vec::with_capacity(limits.max_depth.min(PREALLOCATED_DEPTH)),
            phase: Phase::Start,
            failed: None,
            annotating: false,
            pos: 0,
            acc: 0,
            digits: 0,
            negative: false,
            streamed: false,
            cr: false,
            body_start: 0,
            body_len: 0,
            #[cfg(test)]
            examined: 0,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many aggregates are open: 0 between replies.
    pub fn depth(&self) -> usize {
        self.stack.len()
    }

    /// `true` between replies: no aggregate is open, no token is half read
    /// and no attribute waits for the value it annotates.
    pub fn is_idle(&self) -> bool {
        self.stack.is_empty()
            && !self.annotating
            && self.phase == Phase::Start
            && self.failed.is_none()
    }

    /// The error that failed this decoder, if any.
    pub fn failure(&self) -> Option<Error> {
        self.failed
    }

    /// Forgets all state, including a failure, to decode a new byte stream.
    pub fn reset(&mut self) {
        self.stack.clear();
        self.failed = None;
        self.annotating = false;
        self.restart_token();
    }

    /// Decodes the next token from `buf`.
    ///
    /// `buf` must start at the first byte not yet consumed: the bytes passed
    /// to the previous call, minus the [`Decoded::len`] of the token it
    /// returned, plus whatever arrived since. Returns
    /// [`Status::Partial`] when the next token has not fully arrived;
    /// nothing is consumed then, and the next call resumes where this one
    /// stopped.
    ///
    /// # Errors
    ///
    /// A protocol violation or an exceeded [`Limits`] bound. The decoder
    /// stays failed: every later call returns the same error until
    /// [`reset`](Decoder::reset).
    #[inline]
    pub fn decode<'a>(&mut self, buf: &'a [u8]) -> Result<Status<Decoded<'a>>, Error> {
        if self.phase == Phase::Start && self.failed.is_none() {
            if let Some(done) = self.fast(buf) {
                if let Err(error) = done {
                    self.failed = Some(error);
                }
                return done;
            }
        }
        self.decode_resumable(buf)
    }

    /// The general path: any token, from any point. [`Decoder::fast`]
    /// handles the common tokens when they have arrived whole.
    #[inline(never)]
    fn decode_resumable<'a>(&mut self, buf: &'a [u8]) -> Result<Status<Decoded<'a>>, Error> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        match self.step(buf) {
            Ok(status) => Ok(status),
            Err(error) => {
                self.failed = Some(error);
                Err(error)
            }
        }
    }

    fn restart_token(&mut self) {
        self.phase = Phase::Start;
        self.pos = 0;
        self.acc = 0;
        self.digits = 0;
        self.negative = false;
        self.streamed = false;
        self.cr = false;
    }

    fn step<'a>(&mut self, buf: &'a [u8]) -> Result<Status<Decoded<'a>>, Error> {
        if buf.len() < self.pos {
            // The caller dropped bytes we had examined: start the token over
            // rather than trust stale state.
            self.restart_token();
        }
        if self.phase == Phase::Start {
            let Some(&first) = buf.first() else {
                return Ok(Status::Partial);
            };
            self.begin(first)?;
        }
        let done = match self.phase {
            Phase::Start => return Ok(Status::Partial),
            Phase::Number(num) => match self.scan_number(buf, num)? {
                Some(end) => self.finish_number(buf, num, end)?,
                None => return Ok(Status::Partial),
            },
            Phase::Line(line) => match self.scan_line(buf)? {
                Some(end) => self.finish_line(&buf[1..end - 2], line, end)?,
                None => return Ok(Status::Partial),
            },
            Phase::Body(body) => self.finish_body(buf, body)?,
        };
        Ok(match done {
            Some(decoded) => {
                self.restart_token();
                Status::Complete(decoded)
            }
            None => Status::Partial,
        })
    }

    /// Chooses the phase for a type byte, checking that the token may stand
    /// here.
    fn begin(&mut self, first: u8) -> Result<(), Error> {
        let in_string = matches!(self.stack.last(), Some(Level::StreamedString(_)));
        if in_string && first != b';' {
            return Err(Error::ExpectedChunk);
        }
        self.phase = match first {
            b'+' => Phase::Line(Line::Simple),
            b'-' => Phase::Line(Line::Error),
            b':' => Phase::Number(Num::Integer),
            b'$' => Phase::Number(Num::Length(Body::Bulk)),
            b'*' => Phase::Number(Num::Count(Agg::Array)),
            b'_' => Phase::Line(Line::Null),
            b'#' => Phase::Line(Line::Boolean),
            b',' => Phase::Line(Line::Double),
            b'(' => Phase::Line(Line::BigNumber),
            b'!' => Phase::Number(Num::Length(Body::BulkError)),
            b'=' => Phase::Number(Num::Length(Body::Verbatim)),
            b'%' => Phase::Number(Num::Count(Agg::Map)),
            b'~' => Phase::Number(Num::Count(Agg::Set)),
            b'>' => Phase::Number(Num::Count(Agg::Push)),
            b'|' => Phase::Number(Num::Count(Agg::Attribute)),
            b';' if in_string => Phase::Number(Num::Length(Body::Chunk)),
            b';' => return Err(Error::UnexpectedChunk),
            b'.' => match self.stack.last() {
                Some(Level::Streamed { seen, pairs })
                    if (!*pairs || seen % 2 == 0) && !self.annotating =>
                {
                    Phase::Line(Line::End)
                }
                _ => return Err(Error::UnexpectedEnd),
            },
            other => return Err(Error::UnknownType(other)),
        };
        self.pos = 1;
        Ok(())
    }

    /// Reads the number after the type byte, resuming at `self.pos`.
    /// Returns the token's header length (through the CRLF) once complete.
    fn scan_number(&mut self, buf: &[u8], num: Num) -> Result<Option<usize>, Error> {
        let (may_be_negative, may_stream) = match num {
            Num::Integer => (true, false),
            Num::Length(Body::Bulk) => (true, true),
            Num::Length(_) => (false, false),
            Num::Count(Agg::Array) => (true, true),
            Num::Count(Agg::Map | Agg::Set) => (false, true),
            Num::Count(Agg::Push | Agg::Attribute) => (false, false),
        };
        let mut i = self.pos;
        while let Some(&b) = buf.get(i) {
            i += 1;
            #[cfg(test)]
            {
                self.examined += 1;
            }
            if self.cr {
                if b != b'\n' {
                    return Err(Error::MissingCrlf);
                }
                self.pos = i;
                return Ok(Some(i));
            }
            match b {
                b'0'..=b'9' if !self.streamed => {
                    self.acc = self
                        .acc
                        .checked_mul(10)
                        .and_then(|v| v.checked_add(u64::from(b - b'0')))
                        .ok_or(self.number_too_large(num))?;
                    self.digits += 1;
                    if self.acc > self.number_limit(num) {
                        return Err(self.number_too_large(num));
                    }
                    // Leading zeros keep the value small: bound the line.
                    if i - 1 > self.limits.max_line_len {
                        return Err(Error::LineTooLong {
                            limit: self.limits.max_line_len,
                        });
                    }
                }
                b'-' if i == 2 && may_be_negative => self.negative = true,
                b'?' if i == 2 && may_stream => self.streamed = true,
                b'\r' if self.digits > 0 || self.streamed => self.cr = true,
                b'\n' if self.digits > 0 || self.streamed => return Err(Error::MissingCrlf),
                _ => return Err(Error::InvalidNumber),
            }
        }
        self.pos = i;
        Ok(None)
    }

    /// The largest magnitude the number being read may have.
    fn number_limit(&self, num: Num) -> u64 {
        match num {
            Num::Integer => i64::MAX as u64 + u64::from(self.negative),
            _ if self.negative => 1,
            Num::Length(_) => self.limits.max_bulk_len,
            Num::Count(_) => self.limits.max_elements,
        }
    }

    fn number_too_large(&self, num: Num) -> Error {
        match num {
            Num::Integer => Error::IntegerOverflow,
            _ if self.negative => Error::InvalidLength,
            Num::Length(_) => Error::BulkTooLong {
                limit: self.limits.max_bulk_len,
            },
            Num::Count(_) => Error::TooManyElements {
                limit: self.limits.max_elements,
            },
        }
    }

    fn finish_number<'a>(
        &mut self,
        buf: &'a [u8],
        num: Num,
        end: usize,
    ) -> Result<Option<Decoded<'a>>, Error> {
        if num == Num::Integer {
            let value = if self.negative {
                // acc <= 2^63 was checked digit by digit.
                0i64.wrapping_sub_unsigned(self.acc)
            } else {
                self.acc as i64
            };
            return self.value(Token::Integer(value), end).map(Some);
        }
        if self.negative && self.acc != 1 {
            return Err(Error::InvalidLength);
        }
        match num {
            Num::Integer => Err(Error::InvalidNumber),
            Num::Length(body) => {
                if self.streamed {
                    self.push(Level::StreamedString(0))?;
                    return Ok(Some(self.open(Token::StreamedString, end)));
                }
                if self.negative {
                    return self.value(Token::Null(NullKind::Bulk), end).map(Some);
                }
                if body == Body::Chunk {
                    if self.acc == 0 {
                        self.stack.pop();
                        return self.value(Token::End, end).map(Some);
                    }
                    if let Some(Level::StreamedString(total)) = self.stack.last_mut() {
                        *total = total.saturating_add(self.acc);
                        if *total > self.limits.max_bulk_len {
                            return Err(Error::BulkTooLong {
                                limit: self.limits.max_bulk_len,
                            });
                        }
                    }
                }
                if body == Body::Verbatim && self.acc < 4 {
                    return Err(Error::InvalidVerbatim);
                }
                // A payload (and its CRLF) whose end is past `usize::MAX`
                // can never arrive; this also keeps `finish_body` from
                // overflowing when `max_bulk_len` is that large.
                self.body_len = usize::try_from(self.acc)
                    .ok()
                    .filter(|&len| {
                        end.checked_add(len)
                            .and_then(|e| e.checked_add(2))
                            .is_some()
                    })
                    .ok_or(Error::BulkTooLong {
                        limit: self.limits.max_bulk_len,
                    })?;
                self.body_start = end;
                self.phase = Phase::Body(body);
                self.finish_body(buf, body)
            }
            Num::Count(agg) => {
                if self.streamed {
                    let (token, pairs) = match agg {
                        Agg::Map => (Token::StreamedMap, true),
                        Agg::Set => (Token::StreamedSet, false),
                        _ => (Token::StreamedArray, false),
                    };
                    self.push(Level::Streamed { seen: 0, pairs })?;
                    return Ok(Some(self.open(token, end)));
                }
                if self.negative {
                    return self.value(Token::Null(NullKind::Array), end).map(Some);
                }
                let count = self.acc;
                let len = usize::try_from(count).map_err(|_| Error::TooManyElements {
                    limit: self.limits.max_elements,
                })?;
                let (token, values) = match agg {
                    Agg::Array => (Token::Array(len), Some(count)),
                    Agg::Set => (Token::Set(len), Some(count)),
                    Agg::Push => (Token::Push(len), Some(count)),
                    Agg::Map => (Token::Map(len), count.checked_mul(2)),
                    Agg::Attribute => (Token::Attribute(len), count.checked_mul(2)),
                };
                let values = values.ok_or(Error::TooManyElements {
                    limit: self.limits.max_elements,
                })?;
                if values == 0 {
                    if agg == Agg::Attribute {
                        // An empty attribute annotates the value after it.
                        self.annotating = true;
                        return Ok(Some(self.open(token, end)));
                    }
                    return self.value(token, end).map(Some);
                }
                let level = if agg == Agg::Attribute {
                    Level::Attribute(values)
                } else {
                    Level::Counted(values)
                };
                self.push(level)?;
                Ok(Some(self.open(token, end)))
            }
        }
    }

    fn finish_body<'a>(&mut self, buf: &'a [u8], body: Body) -> Result<Option<Decoded<'a>>, Error> {
        let start = self.body_start;
        let end = start + self.body_len;
        let Some(tail) = buf.get(end..end + 2) else {
            return Ok(None);
        };
        if tail != b"\r\n" {
            return Err(Error::MissingCrlf);
        }
        let data = &buf[start..end];
        let token = match body {
            Body::Bulk => Token::Bulk(data),
            Body::BulkError => Token::BulkError(data),
            Body::Chunk => return Ok(Some(self.open(Token::Chunk(data), end + 2))),
            Body::Verbatim => match data {
                [a, b, c, b':', text @ ..] => Token::Verbatim {
                    format: [*a, *b, *c],
                    text,
                },
                _ => return Err(Error::InvalidVerbatim),
            },
        };
        self.value(token, end + 2).map(Some)
    }

    /// Finds the CRLF of a line, resuming at `self.pos`. Returns the
    /// position after the LF once complete.
    fn scan_line(&mut self, buf: &[u8]) -> Result<Option<usize>, Error> {
        let limit = self.limits.max_line_len;
        let from = self.pos;
        let Some(rest) = buf.get(from..) else {
            return Ok(None);
        };
        let found = rest.iter().position(|&b| b == b'\r' || b == b'\n');
        #[cfg(test)]
        {
            self.examined += found.map_or(rest.len(), |at| at + 1);
        }
        match found {
            None => {
                if buf.len() - 1 > limit {
                    return Err(Error::LineTooLong { limit });
                }
                self.pos = buf.len();
                Ok(None)
            }
            Some(offset) => {
                let cr = from + offset;
                if cr - 1 > limit {
                    return Err(Error::LineTooLong { limit });
                }
                if buf[cr] != b'\r' {
                    return Err(Error::MissingCrlf);
                }
                match buf.get(cr + 1) {
                    None => {
                        self.pos = cr;
                        Ok(None)
                    }
                    Some(b'\n') => Ok(Some(cr + 2)),
                    Some(_) => Err(Error::MissingCrlf),
                }
            }
        }
    }

    fn finish_line<'a>(
        &mut self,
        content: &'a [u8],
        line: Line,
        end: usize,
    ) -> Result<Option<Decoded<'a>>, Error> {
        let token = match line {
            Line::Simple => Token::Simple(content),
            Line::Error => Token::Error(content),
            Line::Double => Token::Double(parse_double(content).ok_or(Error::InvalidDouble)?),
            Line::Boolean => match content {
                b"t" => Token::Boolean(true),
                b"f" => Token::Boolean(false),
                _ => return Err(Error::InvalidBoolean),
            },
            Line::BigNumber => {
                let digits = content.strip_prefix(b"-").unwrap_or(content);
                if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                    return Err(Error::InvalidBigNumber);
                }
                Token::BigNumber(content)
            }
            Line::Null | Line::End if !content.is_empty() => return Err(Error::InvalidNull),
            Line::Null => Token::Null(NullKind::Null),
            Line::End => {
                self.stack.pop();
                Token::End
            }
        };
        self.value(token, end).map(Some)
    }

    #[inline(always)]
    fn push(&mut self, level: Level) -> Result<(), Error> {
        if self.stack.len() >= self.limits.max_depth {
            return Err(Error::TooDeep {
                limit: self.limits.max_depth,
            });
        }
        // An aggregate opening is the annotated value, or (for another
        // attribute) annotates it in turn.
        self.annotating = false;
        self.stack.push(level);
        Ok(())
    }

    /// A token that opens something (or a chunk): no value is complete.
    #[inline(always)]
    fn open<'a>(&self, token: Token<'a>, len: usize) -> Decoded<'a> {
        Decoded {
            token,
            len,
            frame_end: false,
        }
    }

    /// A token that completes a value: count it in the enclosing
    /// aggregates, closing those it fills.
    #[inline(always)]
    fn value<'a>(&mut self, token: Token<'a>, len: usize) -> Result<Decoded<'a>, Error> {
        self.annotating = false;
        let frame_end = loop {
            match self.stack.last_mut() {
                None => break true,
                Some(Level::Counted(left)) => {
                    *left -= 1;
                    if *left > 0 {
                        break false;
                    }
                    // The aggregate is complete: it is a value of its parent.
                    self.stack.pop();
                }
                Some(Level::Attribute(left)) => {
                    *left -= 1;
                    if *left == 0 {
                        // The annotated value comes next.
                        self.stack.pop();
                        self.annotating = true;
                    }
                    break false;
                }
                Some(Level::Streamed { seen, pairs }) => {
                    *seen += 1;
                    let count = if *pairs { seen.div_ceil(2) } else { *seen };
                    if count > self.limits.max_elements {
                        return Err(Error::TooManyElements {
                            limit: self.limits.max_elements,
                        });
                    }
                    break false;
                }
                // Only chunks stand in a streamed string; `begin` refuses
                // anything else, and chunks do not complete values.
                Some(Level::StreamedString(_)) => break false,
            }
        };
        Ok(Decoded {
            token,
            len,
            frame_end,
        })
    }
}

/// Parses a RESP3 double: `inf`, `-inf`, or an optionally negative decimal
/// with an optional fraction and exponent. NaN is refused.
fn parse_double(text: &[u8]) -> Option<f64> {
    let unsigned = text.strip_prefix(b"-").unwrap_or(text);
    if unsigned == b"inf" {
        return Some(if unsigned.len() == text.len() {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        });
    }
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut rest = unsigned;
    let whole = digits(rest);
    if whole == 0 {
        return None;
    }
    rest = &rest[whole..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = digits(fraction);
        if n == 0 {
            return None;
        }
        rest = &fraction[n..];
    }
    if let Some(exponent) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let exponent = exponent
            .strip_prefix(b"-")
            .or_else(|| exponent.strip_prefix(b"+"))
            .unwrap_or(exponent);
        let n = digits(exponent);
        if n == 0 {
            return None;
        }
        rest = &exponent[n..];
    }
    if !rest.is_empty() {
        return None;
    }
    // The grammar above is ASCII and a subset of what `f64::from_str` takes.
    core::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests;
