//! RESP, by hand: the harness's own encoder and a raw connection that
//! reads one complete reply at a time, so the harness does not depend on
//! the codec of the crate under test.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::NodeAddr;

// ---------------------------------------------------------------------------
// RESP, by hand
// ---------------------------------------------------------------------------

/// Encodes a command as a RESP array of bulk strings.
pub fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The length of the complete reply at the start of `buf`, `None` if more
/// bytes are needed. Understands RESP2 (`+ - : $ *`) and, leniently, the
/// common RESP3 types.
pub(super) fn reply_len(buf: &[u8]) -> io::Result<Option<usize>> {
    reply_end(buf, 0)
}

fn reply_end(buf: &[u8], start: usize) -> io::Result<Option<usize>> {
    let Some(&kind) = buf.get(start) else {
        return Ok(None);
    };
    let Some(cr) = buf[start..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &buf[start + 1..start + cr];
    let after_line = start + cr + 2;
    let count = || -> io::Result<i64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                invalid(format!(
                    "bad length {:?} in reply {:?}",
                    String::from_utf8_lossy(line),
                    String::from_utf8_lossy(buf)
                ))
            })
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(after_line)),
        b'$' | b'!' | b'=' => {
            let n = count()?;
            if n < 0 {
                return Ok(Some(after_line));
            }
            let end = after_line + n as usize + 2;
            if buf.len() < end {
                Ok(None)
            } else if &buf[end - 2..end] != b"\r\n" {
                Err(invalid(format!(
                    "bulk string not ended by CRLF in reply {:?}",
                    String::from_utf8_lossy(buf)
                )))
            } else {
                Ok(Some(end))
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = count()?;
            if n < 0 {
                return Ok(Some(after_line));
            }
            let elements = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = after_line;
            for _ in 0..elements {
                match reply_end(buf, pos)? {
                    Some(end) => pos = end,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute map is followed by the reply it annotates.
                return reply_end(buf, pos);
            }
            Ok(Some(pos))
        }
        other => Err(invalid(format!(
            "unknown RESP type byte {:?} in reply {:?}",
            other as char,
            String::from_utf8_lossy(buf)
        ))),
    }
}

/// `true` if `reply` is the RESP error `-PREFIX…`.
pub(super) fn is_error_with(reply: &[u8], prefix: &[u8]) -> bool {
    reply.first() == Some(&b'-') && reply[1..].starts_with(prefix)
}

#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A raw connection to one node: no `AUTH` is sent for you, so it can also
/// check what an unauthenticated client gets. Replies are returned as the
/// raw bytes of one complete reply.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    buf: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` and sets read and write timeouts to `timeout`
    /// (for TCP also the connect timeout).
    pub fn open(addr: &NodeAddr, timeout: Duration) -> io::Result<Self> {
        let stream = match addr {
            NodeAddr::Tcp(sa) => {
                let s = TcpStream::connect_timeout(sa, timeout)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            NodeAddr::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        };
        let conn = Self {
            stream,
            buf: Vec::new(),
        };
        conn.set_timeout(Some(timeout))?;
        Ok(conn)
    }

    /// Sets the read and write timeouts (`None`: block forever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match &self.stream {
            Stream::Tcp(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(timeout)?;
                s.set_write_timeout(timeout)
            }
        }
    }

    /// Writes raw bytes (e.g. a hand-made or pipelined request).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.stream {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
        }
    }

    /// Writes one command, encoded by [`encode_command`].
    pub fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        self.send_raw(&encode_command(args))
    }

    /// Reads one complete reply and returns its raw bytes. A read timeout
    /// shows as `WouldBlock` or `TimedOut`, a closed connection as
    /// `UnexpectedEof`.
    pub fn read_reply(&mut self) -> io::Result<Vec<u8>> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(n) = reply_len(&self.buf)? {
                return Ok(self.buf.drain(..n).collect());
            }
            let read = match &mut self.stream {
                Stream::Tcp(s) => s.read(&mut chunk),
                Stream::Unix(s) => s.read(&mut chunk),
            };
            match read {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "connection closed with {} bytes of an unfinished reply",
                            self.buf.len()
                        ),
                    ));
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one command and reads its reply.
    pub fn request(&mut self, args: &[&[u8]]) -> io::Result<Vec<u8>> {
        self.send(args)?;
        self.read_reply()
    }
}

/// Opens a connection and, if `password` is set, authenticates it.
pub(super) fn open_authenticated(
    addr: &NodeAddr,
    password: Option<&str>,
    timeout: Duration,
) -> io::Result<Connection> {
    let mut conn = Connection::open(addr, timeout)?;
    if let Some(pw) = password {
        let reply = conn.request(&[b"AUTH", pw.as_bytes()])?;
        if reply != b"+OK\r\n" {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("AUTH failed: {:?}", String::from_utf8_lossy(&reply)),
            ));
        }
    }
    Ok(conn)
}
