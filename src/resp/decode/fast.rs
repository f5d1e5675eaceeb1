//! The fast path: common tokens that have arrived whole, decoded in one
//! pass, with digits read eight at a time.

use super::{Agg, Body, Decoded, Decoder, Error, Level, Line, NullKind, Num, Phase, Status, Token};

impl Decoder {
    /// The fast path, for a token not yet begun: integers, bulk strings,
    /// array headers, nulls, simple strings and errors that are complete in
    /// `buf` and valid are decoded here in one pass, with the digits read
    /// eight at a time.
    ///
    /// Returns `None` to hand over to the resumable path, either with the
    /// state that path would have reached (so that no byte is examined
    /// twice: a number whose terminator has not arrived, a line without its
    /// CRLF yet, a bulk string whose payload is still on its way), or
    /// untouched, having examined nothing but the type byte and the bytes
    /// of a token that is about to fail (an error is always found, and
    /// reported, by the resumable path, so both paths agree on it).
    #[inline(always)]
    pub(super) fn fast<'a>(&mut self, buf: &'a [u8]) -> Option<Result<Status<Decoded<'a>>, Error>> {
        let &first = buf.first()?;
        // Numbers here have at most 21 bytes before their CRLF; the
        // resumable path checks the line limit against smaller settings.
        // Inside a streamed string only chunks may come, and the fast path
        // takes none: `fast_value` and `fast_push` refuse there, as does
        // `fast_begin` for a token still arriving, before anything changes.
        if self.limits.max_line_len < MAX_FAST_NUMBER {
            return None;
        }
        let (token, len) = match first {
            b'+' | b'-' => {
                let line = if first == b'+' {
                    Line::Simple
                } else {
                    Line::Error
                };
                let Some(cr) = find_line_end(buf, 1) else {
                    // Not arrived yet: the resumable path would stop here.
                    if buf.len() - 1 > self.limits.max_line_len || self.in_streamed_string() {
                        return None;
                    }
                    #[cfg(test)]
                    {
                        self.examined += buf.len() - 1;
                    }
                    self.phase = Phase::Line(line);
                    self.pos = buf.len();
                    return Some(Ok(Status::Partial));
                };
                if cr - 1 > self.limits.max_line_len || buf[cr] != b'\r' {
                    return None;
                }
                match buf.get(cr + 1) {
                    Some(b'\n') => {}
                    Some(_) => return None,
                    None => {
                        if self.in_streamed_string() {
                            return None;
                        }
                        #[cfg(test)]
                        {
                            self.examined += cr;
                        }
                        self.phase = Phase::Line(line);
                        self.pos = cr;
                        return Some(Ok(Status::Partial));
                    }
                }
                let content = &buf[1..cr];
                let token = if first == b'+' {
                    Token::Simple(content)
                } else {
                    Token::Error(content)
                };
                (token, cr + 2)
            }
            b'_' => match buf.get(1..3)? {
                b"\r\n" => (Token::Null(NullKind::Null), 3),
                _ => return None,
            },
            b':' => {
                // Digits first: a sign is found as no digit there, so
                // that the common positive number's end does not wait for
                // a test of its second byte.
                let (mut acc, mut digits) = parse_digits(buf, 1);
                let negative = digits == 0 && buf.get(1) == Some(&b'-');
                if negative {
                    (acc, digits) = parse_digits(buf, 2);
                }
                let end = 1 + usize::from(negative) + digits;
                let limit = i64::MAX as u64 + u64::from(negative);
                if digits == 0 || acc > limit {
                    return None;
                }
                if buf.get(end..end + 2) != Some(b"\r\n") {
                    self.hand_over_number(Num::Integer, end, acc, digits, negative);
                    return None;
                }
                let value = if negative {
                    0i64.wrapping_sub_unsigned(acc)
                } else {
                    acc as i64
                };
                (Token::Integer(value), end + 2)
            }
            b'$' | b'*' => {
                let num = if first == b'$' {
                    Num::Length(Body::Bulk)
                } else {
                    Num::Count(Agg::Array)
                };
                // Digits first, as for integers: a null is found as no
                // digit after the type byte.
                let (acc, digits) = parse_digits(buf, 1);
                if digits == 0 {
                    return match buf.get(1..5)? {
                        b"-1\r\n" => {
                            let kind = if first == b'$' {
                                NullKind::Bulk
                            } else {
                                NullKind::Array
                            };
                            self.fast_value(Token::Null(kind), 5)
                        }
                        _ => None,
                    };
                }
                let end = 1 + digits;
                let limit = if first == b'$' {
                    self.limits.max_bulk_len
                } else {
                    self.limits.max_elements
                };
                if acc > limit {
                    return None;
                }
                if buf.get(end..end + 2) != Some(b"\r\n") {
                    self.hand_over_number(num, end, acc, digits, false);
                    return None;
                }
                let header = end + 2;
                if first == b'*' {
                    let count = usize::try_from(acc).ok()?;
                    if count == 0 {
                        (Token::Array(0), header)
                    } else {
                        if self.in_streamed_string() {
                            return None;
                        }
                        return Some(
                            self.push(Level::Counted(acc))
                                .map(|()| Status::Complete(self.open(Token::Array(count), header))),
                        );
                    }
                } else {
                    let body_len = usize::try_from(acc).ok()?;
                    let body_end = header.checked_add(body_len)?;
                    let tail_end = body_end.checked_add(2)?;
                    match buf.get(body_end..tail_end) {
                        Some(b"\r\n") => (Token::Bulk(&buf[header..body_end]), tail_end),
                        Some(_) => return None,
                        None => {
                            if self.in_streamed_string() {
                                return None;
                            }
                            // The payload is on its way; it is never scanned.
                            #[cfg(test)]
                            {
                                self.examined += digits + 2;
                            }
                            self.phase = Phase::Body(Body::Bulk);
                            self.body_start = header;
                            self.body_len = body_len;
                            return Some(Ok(Status::Partial));
                        }
                    }
                }
            }
            _ => return None,
        };
        self.fast_value(token, len)
    }

    /// `true` when the innermost open aggregate is a streamed string.
    #[inline(always)]
    fn in_streamed_string(&self) -> bool {
        matches!(self.stack.last(), Some(Level::StreamedString(_)))
    }

    /// [`Decoder::value`], with the common case (an element of a counted
    /// aggregate that is not its last) inline; `None`, with nothing
    /// changed, inside a streamed string.
    #[inline(always)]
    fn fast_value<'a>(
        &mut self,
        token: Token<'a>,
        len: usize,
    ) -> Option<Result<Status<Decoded<'a>>, Error>> {
        match self.stack.last_mut() {
            Some(Level::Counted(left)) if *left > 1 => {
                *left -= 1;
                self.annotating = false;
                Some(Ok(Status::Complete(Decoded {
                    token,
                    len,
                    frame_end: false,
                })))
            }
            Some(Level::StreamedString(_)) => None,
            _ => Some(self.value(token, len).map(Status::Complete)),
        }
    }

    /// Leaves a number whose terminator the fast path did not find where the
    /// resumable path would have reached after its digits.
    /// Inside a streamed string it leaves everything as it was.
    fn hand_over_number(&mut self, num: Num, pos: usize, acc: u64, digits: usize, negative: bool) {
        if self.in_streamed_string() {
            return;
        }
        #[cfg(test)]
        {
            self.examined += pos - 1;
        }
        self.phase = Phase::Number(num);
        self.pos = pos;
        self.acc = acc;
        // At most 19 digits.
        self.digits = digits as u32;
        self.negative = negative;
    }
}

/// The longest line limit below which the fast path leaves numbers to the
/// resumable path: a type byte, a sign and 19 digits.
const MAX_FAST_NUMBER: usize = 21;

const ONES: u64 = 0x0101_0101_0101_0101;

/// The position of the first CR or LF in `buf` from `from`, sixteen bytes
/// at a time.
#[inline(always)]
fn find_line_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(chunk) = buf.get(i..).and_then(|rest| rest.first_chunk::<16>()) {
        if let Some(at) = first_line_end(buf, i, u128::from_le_bytes(*chunk), 0) {
            return Some(at);
        }
        i += 16;
    }
    if i >= buf.len() {
        return None;
    }
    // Fewer than sixteen bytes are left: the last sixteen of the buffer,
    // with those already looked at masked off.
    if let Some(base) = buf.len().checked_sub(16) {
        let chunk = buf.get(base..).and_then(|rest| rest.first_chunk::<16>())?;
        return first_line_end(buf, base, u128::from_le_bytes(*chunk), i - base);
    }
    let rest = buf.get(i..)?;
    rest.iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .map(|at| i + at)
}

/// The first CR or LF among the sixteen bytes `chunk` read at `buf[base..]`,
/// its first `skip` bytes left out.
#[inline(always)]
fn first_line_end(buf: &[u8], base: usize, chunk: u128, skip: usize) -> Option<usize> {
    const ONES: u128 = u128::MAX / 0xff;
    // Bytes below 0x0e flag their top bit. Every CR and LF is flagged; a
    // borrow out of a flagged byte may also flag a byte above it, so each
    // flag is checked: the others (and tabs, nulls and such) are skipped.
    let mut flags = chunk.wrapping_sub(ONES * 0x0e) & !chunk & (ONES * 0x80);
    flags &= u128::MAX << (8 * skip);
    while flags != 0 {
        let at = base + (flags.trailing_zeros() / 8) as usize;
        if matches!(buf.get(at), Some(b'\r' | b'\n')) {
            return Some(at);
        }
        flags &= flags - 1;
    }
    None
}

/// Powers of ten up to 10^8.
const POW10: [u64; 9] = [
    1,
    10,
    100,
    1000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// Eight bytes (in memory order, read little-endian) with ASCII digits made
/// 0..=9, and how many of them lead: 8 when all are digits.
#[inline(always)]
fn leading_digits(word: u64) -> (u64, usize) {
    // A byte is no digit when it reaches 0x80 itself or when adding 0x76
    // does (0x0a and up): a carry out of a byte only leaves a byte already
    // flagged, and only the lowest flag is used.
    let t = word ^ (ONES * 0x30);
    let other = (t | t.wrapping_add(ONES * 0x76)) & (ONES * 0x80);
    (t, (other.trailing_zeros() / 8) as usize)
}

/// The value of the first `count` (1 to 7) digits of `t`, as
/// `leading_digits` leaves them.
#[inline(always)]
fn some_digits(t: u64, count: usize) -> u64 {
    // The digits to the top, the first (most significant) digit lowest;
    // zero bytes below them are leading zeros.
    combine_eight(t << (8 * (8 - count)))
}

/// The value of eight bytes holding one decimal digit each, the most
/// significant lowest.
#[inline(always)]
fn combine_eight(v: u64) -> u64 {
    let v = (v.wrapping_mul(10) + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v.wrapping_mul(100) + (v >> 16)) & 0x0000_ffff_0000_ffff;
    (v.wrapping_mul(10_000) + (v >> 32)) & 0xffff_ffff
}

/// The run of up to 19 ASCII digits at `buf[from..]` (19 digits always fit
/// in a `u64`): its value and length.
#[inline(always)]
fn parse_digits(buf: &[u8], from: usize) -> (u64, usize) {
    let (mut acc, mut count) = (0u64, 0);
    if let Some(words) = buf.get(from..).and_then(|rest| rest.first_chunk::<16>()) {
        // Both words at once, so that neither load waits for a branch.
        let both = u128::from_le_bytes(*words);
        let (high, n) = leading_digits(both as u64);
        let (low, m) = leading_digits((both >> 64) as u64);
        match (n, m) {
            (0, _) => return (0, 0),
            // Lengths of short payloads and counts of small aggregates:
            // their value is on the path to the next token's position,
            // so no multiply chain for them.
            (1, _) => return (high & 0xff, 1),
            (2, _) => return ((high & 0xff) * 10 + ((high >> 8) & 0xff), 2),
            (3..=7, _) => return (some_digits(high, n), n),
            (_, 0) => return (combine_eight(high), 8),
            (_, 1..=7) => {
                return (combine_eight(high) * POW10[m] + some_digits(low, m), 8 + m);
            }
            _ => {
                acc = combine_eight(high) * POW10[8] + combine_eight(low);
                count = 16;
            }
        }
    } else {
        while count < 16 {
            let Some(word) = buf
                .get(from + count..)
                .and_then(|rest| rest.first_chunk::<8>())
            else {
                break;
            };
            let (t, n) = leading_digits(u64::from_le_bytes(*word));
            match n {
                0 => return (acc, count),
                1..=7 => return (acc * POW10[n] + some_digits(t, n), count + n),
                _ => acc = acc * POW10[8] + combine_eight(t),
            }
            count += 8;
        }
    }
    while count < 19 {
        match buf.get(from + count) {
            Some(&b) if b.is_ascii_digit() => {
                acc = acc * 10 + u64::from(b - b'0');
                count += 1;
            }
            _ => break,
        }
    }
    (acc, count)
}
