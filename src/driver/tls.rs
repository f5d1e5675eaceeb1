//! TLS over a non-blocking TCP socket, with rustls (feature `tls`).
//!
//! rustls is sans-I/O: it takes the bytes read from the socket
//! ([`read_tls`](rustls::ClientConnection::read_tls)), hands out the
//! plaintext, buffers the plaintext written to it and says what to send
//! ([`write_tls`](rustls::ClientConnection::write_tls)). This stream moves
//! bytes between it and the socket as far as the socket allows and never
//! blocks: the link's handshake is written before the TLS handshake has
//! finished (rustls holds it until then), and the connect timeout covers
//! both.

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

/// A TLS failure (a certificate refused, a protocol error), carried through
/// `io::Error` to the connection, which reports it as
/// [`NodeError::Tls`](crate::NodeError::Tls).
#[derive(Debug)]
pub(super) struct TlsFailure(pub(super) String);

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsFailure {}

fn failure(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, TlsFailure(error.to_string()))
}

/// A TCP socket with a TLS session over it.
pub(super) struct TlsStream {
    tcp: TcpStream,
    tls: ClientConnection,
}

impl TlsStream {
    /// Starts a session to `name` (checked against the server's
    /// certificate) over `tcp`, whose connect may still be under way.
    pub(super) fn new(
        tcp: TcpStream,
        config: Arc<ClientConfig>,
        name: &str,
    ) -> io::Result<TlsStream> {
        let name = ServerName::try_from(name.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                TlsFailure(format!("invalid server name: {e}")),
            )
        })?;
        let tls = ClientConnection::new(config, name).map_err(failure)?;
        Ok(TlsStream { tcp, tls })
    }

    pub(super) fn tcp(&mut self) -> &mut TcpStream {
        &mut self.tcp
    }

    /// Sends what rustls has to send, until done or the socket would
    /// block (then the next writable event goes on).
    pub(super) fn flush_tls(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Plaintext into `buf`: what rustls holds, else what the socket has.
    /// `Ok(0)` at the end of the stream; `WouldBlock` when nothing more
    /// can be read now.
    pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match self.tls.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    let processed = self.tls.process_new_packets().map_err(failure);
                    // A handshake message or an alert may be due, also after
                    // a failure (the alert tells the server why).
                    self.flush_tls()?;
                    processed?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes all of `bytes` into the session (rustls buffers them, before
    /// the handshake too) and sends what the socket takes now.
    pub(super) fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.tls.writer().write(bytes)?;
        self.flush_tls()?;
        if n == 0 && !bytes.is_empty() {
            // rustls's plaintext buffer is full until the socket drains.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }
}
