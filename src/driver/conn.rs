//! One connection to one master: the socket side. The protocol (handshake,
//! requests, replies, timers) is the master's session in the [`Core`],
//! which decides when a socket is needed; this file opens it, registers it
//! with the poller, writes what the core has to send and reads into it.

use std::io::{self, Read, Write};
#[cfg(feature = "tls")]
use std::sync::Arc;

use mio::event::{Event, Source};
use mio::net::TcpStream;
#[cfg(unix)]
use mio::net::UnixStream;
use mio::{Interest, Registry, Token as MioToken};

use super::core::Core;
#[cfg(feature = "tls")]
use super::tls::{TlsFailure, TlsStream};
use crate::addr::{Endpoint, ServerAddr};
use crate::link::READ_BUFFER;
use crate::rules::NodeError;

/// The TLS client configuration shared by the connections, if any.
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = Option<Arc<rustls::ClientConfig>>;
/// Without the `tls` feature there is none.
#[cfg(not(feature = "tls"))]
pub(crate) type TlsConfig = ();

/// Bytes read from one connection per readiness event (or per
/// [`Conn::read_more`]) before the driver gets control back to check its
/// deadlines: a server that keeps sending cannot hold a call.
const READ_BUDGET: usize = 8 * READ_BUFFER;

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(Box<TlsStream>),
}

impl Stream {
    fn source(&mut self) -> &mut dyn Source {
        match self {
            Stream::Tcp(s) => s,
            #[cfg(unix)]
            Stream::Unix(s) => s,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
        }
    }

    /// Whether this is a TLS session (whose own writes may wait for the
    /// socket at any time).
    fn is_tls(&self) -> bool {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(_) => true,
            _ => false,
        }
    }

    /// Sends what a TLS session still holds (nothing for plain sockets).
    fn flush_buffered(&mut self) -> io::Result<()> {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.flush_tls(),
            _ => Ok(()),
        }
    }

    /// `Ok(true)` once a non-blocking connect has completed.
    fn connected(&mut self) -> io::Result<bool> {
        let (error, peer) = match self {
            Stream::Tcp(s) => (s.take_error()?, s.peer_addr().map(|_| ())),
            #[cfg(unix)]
            Stream::Unix(s) => (s.take_error()?, s.peer_addr().map(|_| ())),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => (s.tcp().take_error()?, s.tcp().peer_addr().map(|_| ())),
        };
        if let Some(error) = error {
            return Err(error);
        }
        match peer {
            Ok(()) => {
                match self {
                    Stream::Tcp(s) => s.set_nodelay(true)?,
                    #[cfg(feature = "tls")]
                    Stream::Tls(s) => s.tcp().set_nodelay(true)?,
                    #[cfg(unix)]
                    Stream::Unix(_) => {}
                }
                // The TLS handshake starts as soon as the socket is writable.
                self.flush_buffered()?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The socket of one master, if it has one, and its place with the poller.
pub(crate) struct Conn {
    /// The master's index: its poller token, less the driver's base.
    index: usize,
    /// Its poller token.
    token: MioToken,
    /// The TLS configuration, for `rediss://` masters.
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The socket, and the start of the master's session it belongs to
    /// (see [`Core::socket`]).
    stream: Option<(Stream, u64)>,
    /// The last read stopped at [`READ_BUDGET`] with more data possibly
    /// waiting: under edge-triggered readiness no new event will say so,
    /// so the driver calls [`read_more`](Self::read_more).
    backlog: bool,
    /// The socket is registered for writable events too. Only while it
    /// connects or has bytes the socket would not take (and always for
    /// TLS): a writable edge after every send (the peer's ACK frees buffer
    /// space) would otherwise end the wait for replies early, one wasted
    /// poll per round.
    writable: bool,
    /// Reads and writes of the socket so far, each a system call on a
    /// plain socket (see [`crate::EngineStats`]).
    reads: u64,
    writes: u64,
}

impl Conn {
    /// The socket side of master `index`, registered under `token` once
    /// it has a socket.
    pub(crate) fn new(index: usize, token: usize, tls: &TlsConfig) -> Conn {
        #[cfg(not(feature = "tls"))]
        let () = *tls;
        Conn {
            index,
            token: MioToken(token),
            #[cfg(feature = "tls")]
            tls: tls.clone(),
            stream: None,
            backlog: false,
            writable: false,
            reads: 0,
            writes: 0,
        }
    }

    /// Reads and writes of this master's sockets so far.
    pub(crate) fn io_count(&self) -> (u64, u64) {
        (self.reads, self.writes)
    }

    /// The start of the master's session the socket belongs to, if there
    /// is one.
    pub(crate) fn start(&self) -> Option<u64> {
        self.stream.as_ref().map(|(_, start)| *start)
    }

    /// Opens a non-blocking socket to `addr` for start `start` of the
    /// master's session (whose handshake waits for it to connect).
    pub(crate) fn open(
        &mut self,
        registry: &Registry,
        addr: &ServerAddr,
        start: u64,
    ) -> Result<(), NodeError> {
        let stream = match addr.endpoint() {
            #[cfg(feature = "tls")]
            Endpoint::Tcp(socket) if addr.is_tls() => {
                let name = addr.tls_name().unwrap_or_default();
                match &self.tls {
                    Some(config) => TcpStream::connect(*socket).and_then(|tcp| {
                        TlsStream::new(tcp, config.clone(), name).map(|s| Stream::Tls(Box::new(s)))
                    }),
                    None => Err(io::Error::other(TlsFailure("no TLS configuration".into()))),
                }
            }
            Endpoint::Tcp(socket) => TcpStream::connect(*socket).map(Stream::Tcp),
            #[cfg(unix)]
            Endpoint::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
            // Not reached: `ServerAddr::parse` refuses `unix://` off Unix.
            #[cfg(not(unix))]
            Endpoint::Unix(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "Unix sockets need a Unix system",
            )),
        };
        let registered = stream.and_then(|mut stream| {
            registry
                .register(
                    stream.source(),
                    self.token,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map(|()| stream)
        });
        #[cfg(feature = "tracing")]
        tracing::debug!(master = %addr, "connecting");
        #[cfg(feature = "metrics")]
        metrics::counter!("redlock_connects_total", "master" => addr.to_string()).increment(1);
        match registered {
            Ok(stream) => {
                self.stream = Some((stream, start));
                self.backlog = false;
                self.writable = true;
                Ok(())
            }
            Err(e) => {
                let error = tls_error(&e).unwrap_or(NodeError::Connect(e.kind()));
                dropped(addr, &error);
                Err(error)
            }
        }
    }

    /// Drops the socket to `addr`, if there is one: the master's session
    /// went down after `error`.
    pub(crate) fn close(&mut self, registry: &Registry, addr: &ServerAddr, error: &NodeError) {
        let Some((mut stream, _)) = self.stream.take() else {
            return;
        };
        // Deregistering a socket that is about to close cannot fail in a
        // way that matters: closing removes it from the poll set anyway.
        let _ = registry.deregister(stream.source());
        dropped(addr, error);
        self.backlog = false;
    }

    /// Writes what the core has to send to this master until done or the
    /// socket would block; in the latter case the socket is registered for
    /// writable events until it takes the rest.
    pub(crate) fn flush<W>(
        &mut self,
        registry: &Registry,
        core: &mut Core<W>,
    ) -> Result<(), NodeError> {
        let Some((stream, _)) = self.stream.as_mut() else {
            return Ok(());
        };
        stream.flush_buffered().map_err(|e| io_error(&e))?;
        let blocked = loop {
            let bytes = core.transmit(self.index);
            if bytes.is_empty() {
                break false;
            }
            self.writes += 1;
            match stream.write(bytes) {
                Ok(0) => return Err(NodeError::Io(io::ErrorKind::WriteZero)),
                Ok(n) => core.advance(self.index, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(&e)),
            }
        };
        let want = blocked || core.is_connecting(self.index) || stream.is_tls();
        if want != self.writable {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry
                .reregister(stream.source(), self.token, interest)
                .map_err(|e| io_error(&e))?;
            self.writable = want;
        }
        Ok(())
    }

    /// Whether the last read stopped at its budget with data possibly
    /// left in the socket: then call [`read_more`](Self::read_more).
    pub(crate) fn has_backlog(&self) -> bool {
        self.backlog
    }

    /// Handles readiness: completes a connect, writes, and reads the
    /// replies that arrived (up to [`READ_BUDGET`] bytes) into the core,
    /// with the time they were read.
    pub(crate) fn handle_event<W>(
        &mut self,
        event: &Event,
        registry: &Registry,
        core: &mut Core<W>,
    ) -> Result<(), NodeError> {
        if core.is_connecting(self.index) {
            let Some((stream, _)) = self.stream.as_mut() else {
                return Ok(());
            };
            match stream.connected() {
                Ok(true) => core.handle_connected(self.index, crate::clock::now()),
                Ok(false) => return Ok(()),
                Err(e) => return Err(tls_error(&e).unwrap_or(NodeError::Connect(e.kind()))),
            }
        }
        self.flush(registry, core)?;
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            // A FIN or an error that came with this event is not seen by a
            // short read: then read on to the end.
            let short_ok = !(event.is_read_closed() || event.is_error());
            self.read(core, short_ok)?;
            // Reading may have finished the handshake or answered a
            // NOSCRIPT: write what that queued.
            self.flush(registry, core)?;
        }
        Ok(())
    }

    /// Goes on reading after a read that stopped at its budget, as
    /// [`handle_event`](Self::handle_event) does for a readable event.
    pub(crate) fn read_more<W>(
        &mut self,
        registry: &Registry,
        core: &mut Core<W>,
    ) -> Result<(), NodeError> {
        self.backlog = false;
        self.read(core, false)?;
        self.flush(registry, core)
    }

    /// Whether a short read proves the socket drained: true for plain TCP
    /// and Unix sockets; not for TLS, whose session may hold decrypted
    /// bytes beyond what one read hands out.
    fn reads_drain(&self) -> bool {
        match &self.stream {
            #[cfg(feature = "tls")]
            Some((Stream::Tls(_), _)) => false,
            _ => true,
        }
    }

    /// Reads until the socket would block or [`READ_BUDGET`] bytes were
    /// read. The time is taken after each read, so that a decision never
    /// uses a time from before its reply arrived.
    fn read<W>(&mut self, core: &mut Core<W>, short_ok: bool) -> Result<(), NodeError> {
        let mut budget = READ_BUDGET;
        let i = self.index;
        loop {
            if budget == 0 {
                self.backlog = true;
                return Ok(());
            }
            let drains = self.reads_drain();
            let Some((stream, _)) = self.stream.as_mut() else {
                return Ok(());
            };
            let buf = core.read_buf(i)?;
            let buf_len = buf.len();
            self.reads += 1;
            match stream.read(buf) {
                Ok(0) => {
                    core.handle_read(i, 0, crate::clock::now())?;
                    return Err(NodeError::Closed);
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let short = n < buf_len;
                    core.handle_read(i, n, crate::clock::now())?;
                    if short && short_ok && drains {
                        // A stream socket's read returns all it has, up to
                        // the buffer: a short read emptied the receive
                        // queue. Under edge-triggered readiness (epoll
                        // EPOLLET, kqueue EV_CLEAR, as mio registers) any
                        // byte or FIN that arrives from now on raises a new
                        // readable event, so the read that would only say
                        // EAGAIN is skipped: one syscall less per master
                        // per round. A FIN that arrived before this event
                        // was reported is not raised again, and a short
                        // read does not show it: the event's read-closed
                        // flag does, and then `short_ok` is false.
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(&e)),
            }
        }
    }
}

/// Tells that the connection to `addr` was dropped after `error` (with
/// the `tracing` feature).
fn dropped(addr: &ServerAddr, error: &NodeError) {
    #[cfg(feature = "tracing")]
    match error {
        NodeError::Closed | NodeError::Io(_) | NodeError::Disconnected => {
            tracing::debug!(master = %addr, %error, "connection dropped");
        }
        _ => tracing::warn!(master = %addr, %error, "connection dropped"),
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (addr, error);
}

/// The node error for a failed read or write: a TLS failure as such.
fn io_error(e: &io::Error) -> NodeError {
    tls_error(e).unwrap_or(NodeError::Io(e.kind()))
}

#[cfg(feature = "tls")]
fn tls_error(e: &io::Error) -> Option<NodeError> {
    let failure = e.get_ref()?.downcast_ref::<TlsFailure>()?;
    Some(NodeError::Tls(failure.0.as_str().into()))
}

#[cfg(not(feature = "tls"))]
fn tls_error(_: &io::Error) -> Option<NodeError> {
    None
}
