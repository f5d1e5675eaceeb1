//! One connection to one master: the socket side. The protocol (handshake,
//! requests, replies, timers) is the [`Link`]'s; this file connects,
//! registers with the poller, writes what the link asks and reads into it.

use std::io::{self, Read, Write};
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Instant;

use mio::event::{Event, Source};
use mio::net::TcpStream;
#[cfg(unix)]
use mio::net::UnixStream;
use mio::{Interest, Registry, Token as MioToken};

#[cfg(feature = "tls")]
use super::tls::{TlsFailure, TlsStream};
use crate::addr::{Endpoint, ServerAddr};
use crate::commands::Command;
use crate::link::{Link, LinkConfig, READ_BUFFER, Sink};
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
    fn flush_pending(&mut self) -> io::Result<()> {
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
                self.flush_pending()?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }
}

pub(crate) struct Conn {
    index: usize,
    addr: ServerAddr,
    /// The TLS configuration, for `rediss://` masters.
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
    stream: Option<Stream>,
    link: Link,
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
}

impl Conn {
    pub(crate) fn new(
        index: usize,
        addr: ServerAddr,
        config: LinkConfig,
        tls: &TlsConfig,
        now: Instant,
    ) -> Conn {
        #[cfg(not(feature = "tls"))]
        let () = *tls;
        Conn {
            index,
            addr,
            #[cfg(feature = "tls")]
            tls: tls.clone(),
            stream: None,
            link: Link::new(config, now),
            backlog: false,
            writable: false,
        }
    }

    pub(crate) fn addr(&self) -> &ServerAddr {
        &self.addr
    }

    /// The protocol state.
    pub(crate) fn link(&self) -> &Link {
        &self.link
    }

    /// The protocol state, to tell it of a round that timed out on it.
    pub(crate) fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }

    /// Starts a non-blocking connect, with the handshake queued behind it.
    /// A connect that fails at once leaves the connection down, with its
    /// back-off doubled like any other failure.
    pub(crate) fn connect(&mut self, registry: &Registry, now: Instant) -> Result<(), NodeError> {
        let stream = match self.addr.endpoint() {
            #[cfg(feature = "tls")]
            Endpoint::Tcp(addr) if self.addr.is_tls() => {
                let name = self.addr.tls_name().unwrap_or_default();
                match &self.tls {
                    Some(config) => TcpStream::connect(*addr).and_then(|tcp| {
                        TlsStream::new(tcp, config.clone(), name).map(|s| Stream::Tls(Box::new(s)))
                    }),
                    None => Err(io::Error::other(TlsFailure("no TLS configuration".into()))),
                }
            }
            Endpoint::Tcp(addr) => TcpStream::connect(*addr).map(Stream::Tcp),
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
                    MioToken(self.index),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map(|()| stream)
        });
        #[cfg(feature = "tracing")]
        tracing::debug!(master = %self.addr, "connecting");
        #[cfg(feature = "metrics")]
        metrics::counter!("redlock_connects_total", "master" => self.addr.to_string()).increment(1);
        match registered {
            Ok(stream) => {
                self.stream = Some(stream);
                self.backlog = false;
                self.writable = true;
                self.link
                    .start(self.addr.user(), self.addr.password(), self.addr.db(), now);
                Ok(())
            }
            Err(e) => {
                let error = tls_error(&e).unwrap_or(NodeError::Connect(e.kind()));
                self.close(registry, error.clone(), now);
                Err(error)
            }
        }
    }

    /// Drops the socket and everything in flight after `error` (see
    /// [`Link::close`]).
    pub(crate) fn close(&mut self, registry: &Registry, error: NodeError, now: Instant) {
        if let Some(mut stream) = self.stream.take() {
            // Deregistering a socket that is about to close cannot fail in a
            // way that matters: closing removes it from the poll set anyway.
            let _ = registry.deregister(stream.source());
        }
        #[cfg(feature = "tracing")]
        match error {
            NodeError::Closed | NodeError::Io(_) | NodeError::Disconnected => {
                tracing::debug!(master = %self.addr, %error, "connection dropped");
            }
            _ => tracing::warn!(master = %self.addr, %error, "connection dropped"),
        }
        self.backlog = false;
        self.link.close(error, now);
    }

    /// Queues `command`, encoded as `bytes`, for `round`, connecting first
    /// if the connection is down and its back-off has expired. Nothing is
    /// written yet. On error
    /// the connection is down (closed, if it was up), except for
    /// [`NodeError::Lagging`]: then only this command was refused (never a
    /// release that `must_reach` this master: see `Link::queue`).
    pub(crate) fn send(
        &mut self,
        registry: &Registry,
        command: &Command<'_>,
        bytes: &[u8],
        round: u64,
        must_reach: bool,
        now: Instant,
    ) -> Result<(), NodeError> {
        if self.link.is_down() {
            if !self.link.may_send(now) {
                // Say why it is down (a refused handshake, say), not just that.
                return Err(self.link.down_reason());
            }
            self.connect(registry, now)?;
        }
        if let Err(error) = self.link.queue(command, bytes, round, must_reach, now) {
            // A lagging master keeps its connection, and what it holds.
            if error != NodeError::Lagging {
                self.close(registry, error.clone(), now);
            }
            return Err(error);
        }
        Ok(())
    }

    /// Writes what the link has to send until done or the socket would
    /// block; in the latter case the socket is registered for writable
    /// events until it takes the rest.
    pub(crate) fn flush(&mut self, registry: &Registry) -> Result<(), NodeError> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        stream.flush_pending().map_err(|e| io_error(&e))?;
        let blocked = loop {
            let bytes = self.link.transmit();
            if bytes.is_empty() {
                break false;
            }
            match stream.write(bytes) {
                Ok(0) => return Err(NodeError::Io(io::ErrorKind::WriteZero)),
                Ok(n) => self.link.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(&e)),
            }
        };
        let want = blocked || self.link.is_connecting() || stream.is_tls();
        if want != self.writable {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry
                .reregister(stream.source(), MioToken(self.index), interest)
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
    /// replies that arrived (up to [`READ_BUDGET`] bytes), passing the
    /// outcomes of the live rounds' commands to `sink` with the time
    /// they were read. Replies to other rounds are matched and dropped.
    pub(crate) fn handle_event(
        &mut self,
        event: &Event,
        registry: &Registry,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        if self.link.is_connecting() {
            let Some(stream) = self.stream.as_mut() else {
                return Ok(());
            };
            match stream.connected() {
                Ok(true) => self.link.connected(crate::clock::now()),
                Ok(false) => return Ok(()),
                Err(e) => return Err(tls_error(&e).unwrap_or(NodeError::Connect(e.kind()))),
            }
        }
        self.flush(registry)?;
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            // A FIN or an error that came with this event is not seen by a
            // short read: then read on to the end.
            let short_ok = !(event.is_read_closed() || event.is_error());
            self.read(sink, short_ok)?;
            // Reading may have finished the handshake or answered a
            // NOSCRIPT: write what that queued.
            self.flush(registry)?;
        }
        Ok(())
    }

    /// Goes on reading after a read that stopped at its budget, as
    /// [`handle_event`](Self::handle_event) does for a readable event.
    pub(crate) fn read_more(
        &mut self,
        registry: &Registry,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        self.backlog = false;
        self.read(sink, false)?;
        self.flush(registry)
    }

    /// Whether a short read proves the socket drained: true for plain TCP
    /// and Unix sockets; not for TLS, whose session may hold decrypted
    /// bytes beyond what one read hands out.
    fn reads_drain(&self) -> bool {
        match &self.stream {
            #[cfg(feature = "tls")]
            Some(Stream::Tls(_)) => false,
            _ => true,
        }
    }

    /// Reads until the socket would block or [`READ_BUDGET`] bytes were
    /// read. The time is taken after each read, so that a decision never
    /// uses a time from before its reply arrived.
    fn read(&mut self, sink: &mut dyn Sink, short_ok: bool) -> Result<(), NodeError> {
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                self.backlog = true;
                return Ok(());
            }
            let Some(stream) = self.stream.as_mut() else {
                return Ok(());
            };
            let buf = self.link.read_buf()?;
            let buf_len = buf.len();
            match stream.read(buf) {
                Ok(0) => {
                    self.link.handle_read(0, crate::clock::now(), sink)?;
                    return Err(NodeError::Closed);
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let short = n < buf_len;
                    self.link.handle_read(n, crate::clock::now(), sink)?;
                    if short && short_ok && self.reads_drain() {
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
