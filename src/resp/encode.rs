//! The command encoder: a RESP array of bulk strings.

use bytes::BufMut;

/// One argument of a command: bytes, or an integer written in decimal.
///
/// Integers are formatted on the stack; nothing is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg<'a> {
    /// Binary-safe bytes, sent as they are.
    Bytes(&'a [u8]),
    /// A signed integer, sent as its decimal text.
    Int(i64),
    /// An unsigned integer, sent as its decimal text.
    Uint(u64),
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(bytes: &'a [u8]) -> Arg<'a> {
        Arg::Bytes(bytes)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for Arg<'a> {
    fn from(bytes: &'a [u8; N]) -> Arg<'a> {
        Arg::Bytes(bytes)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Arg<'a> {
        Arg::Bytes(text.as_bytes())
    }
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Arg::Int(n)
    }
}

impl From<u64> for Arg<'_> {
    fn from(n: u64) -> Self {
        Arg::Uint(n)
    }
}

impl From<u32> for Arg<'_> {
    fn from(n: u32) -> Self {
        Arg::Uint(n.into())
    }
}

impl From<usize> for Arg<'_> {
    fn from(n: usize) -> Self {
        // usize is at most 64 bits on every supported target.
        Arg::Uint(n as u64)
    }
}

/// Decimal digits of a `u64`, right-aligned in a stack buffer.
struct Digits {
    buf: [u8; 20],
    start: usize,
}

/// "00", "01", .. "99": two digits per division.
const PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        pairs[2 * i] = b'0' + (i / 10) as u8;
        pairs[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    pairs
};

impl Digits {
    fn new(mut n: u64) -> Digits {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            start -= 2;
            buf[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            start -= 2;
            buf[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            buf[start] = b'0' + n as u8;
        }
        Digits { buf, start }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// A command is assembled here, on the stack, and handed to the buffer in
/// one `put_slice`: each `BufMut` call costs a capacity check and a length
/// update, and a command is made of many small pieces.
const STAGE: usize = 256;

/// Room a header needs: a type byte, 20 digits and CRLF.
const HEADER_ROOM: usize = 24;

/// The bytes of a command not yet handed to the caller's buffer.
struct Stage {
    bytes: [u8; STAGE],
    len: usize,
}

impl Stage {
    /// Writes `prefix`, the decimal `n` and CRLF.
    #[inline(always)]
    fn header<B: BufMut + ?Sized>(&mut self, buf: &mut B, prefix: u8, n: u64) {
        if self.len + HEADER_ROOM > STAGE {
            self.flush(buf);
        }
        let at = self.len;
        if n < 100 {
            // One or two digits, the common case for counts and argument
            // lengths: one 8-byte store (the header room covers it), of
            // which 4 or 5 bytes count.
            let (tens, ones) = ((n / 10) as u8, (n % 10) as u8);
            let (word, len) = if tens == 0 {
                ([prefix, b'0' + ones, b'\r', b'\n', 0, 0, 0, 0], 4)
            } else {
                ([prefix, b'0' + tens, b'0' + ones, b'\r', b'\n', 0, 0, 0], 5)
            };
            self.bytes[at..at + 8].copy_from_slice(&word);
            self.len = at + len;
            return;
        }
        let digits = Digits::new(n);
        let digits = digits.as_bytes();
        let end = at + 1 + digits.len();
        self.bytes[at] = prefix;
        self.bytes[at + 1..end].copy_from_slice(digits);
        self.bytes[end..end + 2].copy_from_slice(b"\r\n");
        self.len = end + 2;
    }

    /// Writes `data` and CRLF.
    #[inline(always)]
    fn payload<B: BufMut + ?Sized>(&mut self, buf: &mut B, data: &[u8]) {
        let end = self.len + data.len();
        if let Some(room) = self.bytes.get_mut(self.len..end + 2) {
            room[..data.len()].copy_from_slice(data);
            room[data.len()..].copy_from_slice(b"\r\n");
            self.len = end + 2;
            return;
        }
        // Too long to stage: what is staged goes first, then `data` as is.
        self.flush(buf);
        buf.put_slice(data);
        buf.put_slice(b"\r\n");
    }

    fn flush<B: BufMut + ?Sized>(&mut self, buf: &mut B) {
        buf.put_slice(&self.bytes[..self.len]);
        self.len = 0;
    }
}

fn put_bulk<B: BufMut + ?Sized>(stage: &mut Stage, buf: &mut B, negative: bool, data: &[u8]) {
    stage.header(buf, b'$', (data.len() + usize::from(negative)) as u64);
    if negative {
        // The sign goes with the digits: a header leaves room for it.
        stage.bytes[stage.len] = b'-';
        stage.len += 1;
    }
    stage.payload(buf, data);
}

/// Writes `args` as one command: a RESP array of bulk strings, the form
/// every Redis server accepts in both RESP2 and RESP3.
///
/// Works with any [`BufMut`], `Vec<u8>` and `BytesMut` among them. Nothing is
/// allocated when the buffer has [`command_len`] bytes of spare capacity.
///
/// ```
/// use redlock_mio::resp::encode_command;
///
/// let mut buf = Vec::with_capacity(64);
/// encode_command(&mut buf, &["SET".into(), b"key".into(), "NX".into(), "PX".into(), 30_000u64.into()]);
/// assert_eq!(buf, b"*5\r\n$3\r\nSET\r\n$3\r\nkey\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n");
/// ```
pub fn encode_command<B: BufMut + ?Sized>(buf: &mut B, args: &[Arg<'_>]) {
    let mut stage = Stage {
        bytes: [0; STAGE],
        len: 0,
    };
    stage.header(buf, b'*', args.len() as u64);
    for arg in args {
        match *arg {
            Arg::Bytes(bytes) => put_bulk(&mut stage, buf, false, bytes),
            Arg::Int(n) => put_bulk(
                &mut stage,
                buf,
                n < 0,
                Digits::new(n.unsigned_abs()).as_bytes(),
            ),
            Arg::Uint(n) => put_bulk(&mut stage, buf, false, Digits::new(n).as_bytes()),
        }
    }
    stage.flush(buf);
}

/// The exact number of bytes [`encode_command`] writes for `args`.
pub fn command_len(args: &[Arg<'_>]) -> usize {
    fn header(n: usize) -> usize {
        3 + Digits::new(n as u64).as_bytes().len()
    }
    args.iter().fold(header(args.len()), |total, arg| {
        let len = match *arg {
            Arg::Bytes(bytes) => bytes.len(),
            Arg::Int(n) => Digits::new(n.unsigned_abs()).as_bytes().len() + usize::from(n < 0),
            Arg::Uint(n) => Digits::new(n).as_bytes().len(),
        };
        total + header(len) + len + 2
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(args: &[Arg<'_>]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_command(&mut buf, args);
        assert_eq!(buf.len(), command_len(args), "command_len disagrees");
        buf
    }

    #[test]
    fn integers_are_decimal() {
        assert_eq!(encoded(&[0i64.into()]), b"*1\r\n$1\r\n0\r\n");
        assert_eq!(encoded(&[(-7i64).into()]), b"*1\r\n$2\r\n-7\r\n");
        assert_eq!(
            encoded(&[i64::MIN.into()]),
            b"*1\r\n$20\r\n-9223372036854775808\r\n"
        );
        assert_eq!(
            encoded(&[u64::MAX.into()]),
            b"*1\r\n$20\r\n18446744073709551615\r\n"
        );
        assert_eq!(encoded(&[10usize.into()]), b"*1\r\n$2\r\n10\r\n");
        assert_eq!(
            encoded(&[4_000_000_000u32.into()]),
            b"*1\r\n$10\r\n4000000000\r\n"
        );
    }

    #[test]
    fn binary_and_empty_arguments() {
        assert_eq!(
            encoded(&[b"\r\n\0\xff".into(), b"".into()]),
            b"*2\r\n$4\r\n\r\n\0\xff\r\n$0\r\n\r\n"
        );
        assert_eq!(encoded(&[]), b"*0\r\n");
    }

    #[test]
    fn writes_into_bytes_mut_without_growing() {
        let args: [Arg<'_>; 3] = ["GET".into(), "k".into(), 12345u64.into()];
        let mut buf = bytes::BytesMut::with_capacity(command_len(&args));
        let before = buf.capacity();
        encode_command(&mut buf, &args);
        assert_eq!(buf.capacity(), before);
        assert_eq!(&buf[..], b"*3\r\n$3\r\nGET\r\n$1\r\nk\r\n$5\r\n12345\r\n");
    }
}
