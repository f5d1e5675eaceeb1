//! A fake RESP server, for what a real `redis-server` never sends: broken,
//! oversized, unprompted or missing replies.
//!
//! ```ignore
//! mod support;
//! use support::hostile::{Action, Handshake, Hostile};
//!
//! // Answers the client's handshake correctly, then every lock command
//! // with a bulk string header far over the client's limit.
//! let fake = Hostile::start(Handshake::Correct, |_req| {
//!     vec![Action::send(b"$536870913\r\n")]
//! });
//! let url = fake.url(); // redis://127.0.0.1:PORT
//! // ... a client over `url` and real masters ...
//! assert!(fake.accepted() >= 1);
//! // Dropping `fake` stops the acceptor and every connection thread.
//! ```
//!
//! The server listens on `127.0.0.1:0`, runs a thread per accepted
//! connection, and reads the client's commands (RESP arrays of bulk
//! strings). It answers the handshake itself, as [`Handshake`] says: `+OK`
//! to `AUTH` and `SELECT`, a RESP3 `HELLO` map, the push that confirms a
//! `SUBSCRIBE`, a master's `INFO` with a run_id of its own, and
//! to `SCRIPT LOAD` the SHA1 of the script it
//! was given ([`RELEASE_SHA1`] or [`EXTEND_SHA1`], chosen by the script
//! text). Every other command (a lock command: `SET`, `EVALSHA`, `EVAL`) is
//! passed to the test's behaviour, which returns the [`Action`]s to take:
//! bytes to send, a long stream, a close, or nothing. [`Hostile::inject`]
//! sends unprompted bytes on the latest connection.
//!
//! Everything is bounded: reads stop at [`MAX_REQUEST_BUFFER`] bytes of
//! unparsed input, streams at their declared size, writes time out after
//! [`WRITE_TIMEOUT`], and at most [`MAX_CONNECTIONS`] connections are
//! served. Dropping the [`Hostile`] stops the acceptor and joins every
//! thread (each notices within [`POLL_INTERVAL`], or after a write that
//! blocks for at most [`WRITE_TIMEOUT`]).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redlock_mio::scripts::{
    ACQUIRE_MANY_SCRIPT, ACQUIRE_MANY_SHA1, EXTEND_MANY_SCRIPT, EXTEND_MANY_SHA1, EXTEND_SCRIPT,
    EXTEND_SHA1, LEAVE_SCRIPT, LEAVE_SHA1, RELEASE_MANY_SCRIPT, RELEASE_MANY_SHA1, RELEASE_SCRIPT,
    RELEASE_SHA1, WAIT_ACQUIRE_SCRIPT, WAIT_ACQUIRE_SHA1,
};

/// How often idle threads check whether the server is being dropped.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// How long one write may block (a client that stopped reading).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Unparsed request bytes after which a connection is dropped.
pub const MAX_REQUEST_BUFFER: usize = 1 << 20;

/// Connections accepted before the server stops accepting.
pub const MAX_CONNECTIONS: usize = 2000;

/// Bytes written per `write` of an [`Action::Stream`].
const STREAM_CHUNK: usize = 64 * 1024;

/// Most arguments of one command the server accepts.
const MAX_ARGS: usize = 64;

/// How the fake server answers the client's handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// As Redis does: `+OK` to `AUTH`/`SELECT`, the script's SHA1 to each
    /// `SCRIPT LOAD`.
    Correct,
    /// A SHA1 of 40 zeros to each `SCRIPT LOAD`.
    WrongSha1,
    /// Each `SCRIPT LOAD` gets the SHA1 of the *other* script (the replies
    /// as if out of order).
    Swapped,
    /// Nothing at all, to any command: the connection is accepted and then
    /// never answered.
    Silent,
}

/// One thing the server does in answer to a command.
#[derive(Debug, Clone)]
pub enum Action {
    /// Writes these bytes.
    Send(Vec<u8>),
    /// Writes `head`, then `fill` repeated until `total` bytes (head
    /// included) are written, the client closes, or the server is dropped.
    Stream {
        /// The first bytes.
        head: Vec<u8>,
        /// The byte repeated after `head`.
        fill: u8,
        /// Bytes written at most, `head` included.
        total: usize,
    },
    /// Waits this long (bounded by the server being dropped).
    Sleep(Duration),
    /// Waits until the flag is raised (bounded by the server being
    /// dropped): the test decides when the fake reads on.
    WaitFor(Arc<AtomicBool>),
    /// Shuts the connection down (both directions) and ends its thread.
    Close,
}

impl Action {
    /// [`Action::Send`] of a copy of `bytes`.
    pub fn send(bytes: impl AsRef<[u8]>) -> Action {
        Action::Send(bytes.as_ref().to_vec())
    }
}

/// A lock command the server received, handed to the behaviour.
#[derive(Debug)]
pub struct Request<'a> {
    /// Which accepted connection it came on, from 1.
    pub conn: usize,
    /// Its position among the lock commands of its connection, from 0.
    pub seq: usize,
    /// Its position among the lock commands of all connections, from 0.
    pub total: usize,
    /// The command's arguments, the verb first.
    pub args: &'a [Vec<u8>],
}

impl Request<'_> {
    /// The verb, upper-cased (`SET`, `EVALSHA`, `EVAL`, …).
    pub fn verb(&self) -> String {
        self.args
            .first()
            .map(|v| String::from_utf8_lossy(v).to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// Whether this is the acquire (`SET … NX PX …`).
    pub fn is_set(&self) -> bool {
        self.verb() == "SET"
    }

    /// Whether this is a script call (`EVALSHA` or `EVAL`).
    pub fn is_script(&self) -> bool {
        matches!(self.verb().as_str(), "EVALSHA" | "EVAL")
    }

    /// What a healthy, uncontended server answers: `+OK` to `SET`, `:1` to
    /// a script (released or extended), `-ERR` to anything else.
    pub fn healthy_reply(&self) -> &'static [u8] {
        if self.is_set() {
            b"+OK\r\n"
        } else if self.is_script() {
            b":1\r\n"
        } else {
            b"-ERR unknown command\r\n"
        }
    }
}

/// The behaviour: the actions for each lock command received.
type Behaviour = dyn Fn(&Request<'_>) -> Vec<Action> + Send + Sync;

struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    peer_closed: AtomicUsize,
    closed_by_fake: AtomicUsize,
    lock_commands: AtomicUsize,
    bytes_sent: AtomicUsize,
    handshake: Handshake,
    behaviour: Box<Behaviour>,
    /// A second handle on the latest connection, for [`Hostile::inject`].
    latest: Mutex<Option<TcpStream>>,
}

/// A running fake server; dropping it stops it and joins its threads.
pub struct Hostile {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hostile")
            .field("addr", &self.addr)
            .field("handshake", &self.shared.handshake)
            .field("accepted", &self.accepted())
            .field("peer_closed", &self.peer_closed())
            .field("closed_by_fake", &self.closed_by_fake())
            .field("lock_commands", &self.lock_commands())
            .field("bytes_sent", &self.bytes_sent())
            .finish_non_exhaustive()
    }
}

impl Hostile {
    /// Starts a fake server that answers the handshake as `handshake` says
    /// and every lock command with what `behaviour` returns.
    ///
    /// # Panics
    ///
    /// If 127.0.0.1:0 cannot be bound.
    pub fn start<F>(handshake: Handshake, behaviour: F) -> Hostile
    where
        F: Fn(&Request<'_>) -> Vec<Action> + Send + Sync + 'static,
    {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("hostile server: cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("hostile server: no local address: {e}"));
        listener.set_nonblocking(true).unwrap_or_else(|e| {
            panic!("hostile server: cannot make the listener non-blocking: {e}")
        });
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            peer_closed: AtomicUsize::new(0),
            closed_by_fake: AtomicUsize::new(0),
            lock_commands: AtomicUsize::new(0),
            bytes_sent: AtomicUsize::new(0),
            handshake,
            behaviour: Box::new(behaviour),
            latest: Mutex::new(None),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("hostile-accept-{}", addr.port()))
                .spawn(move || accept_loop(&listener, &shared))
                .unwrap_or_else(|e| panic!("hostile server: cannot spawn the acceptor: {e}"))
        };
        Hostile {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections the client closed (end of stream on read, or a failed
    /// write) so far.
    pub fn peer_closed(&self) -> usize {
        self.shared.peer_closed.load(Ordering::SeqCst)
    }

    /// Connections the fake closed by [`Action::Close`] so far.
    pub fn closed_by_fake(&self) -> usize {
        self.shared.closed_by_fake.load(Ordering::SeqCst)
    }

    /// Lock commands received so far (handshake commands not counted).
    pub fn lock_commands(&self) -> usize {
        self.shared.lock_commands.load(Ordering::SeqCst)
    }

    /// Bytes written to clients so far.
    pub fn bytes_sent(&self) -> usize {
        self.shared.bytes_sent.load(Ordering::SeqCst)
    }

    /// Writes `bytes`, unprompted, on the latest accepted connection.
    /// Returns whether there was one and the write succeeded.
    pub fn inject(&self, bytes: &[u8]) -> bool {
        let mut latest = self
            .shared
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match latest.as_mut() {
            Some(stream) => {
                let ok = stream.write_all(bytes).is_ok();
                if ok {
                    self.shared
                        .bytes_sent
                        .fetch_add(bytes.len(), Ordering::SeqCst);
                }
                ok
            }
            None => false,
        }
    }

    /// Polls `check` every millisecond until it holds or `within` has
    /// passed; returns whether it held.
    pub fn wait_until(&self, within: Duration, check: impl Fn(&Hostile) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if check(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(stream) = self
            .shared
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
        if let Some(acceptor) = self.acceptor.take() {
            // The acceptor joins the connection threads. A panic in one of
            // them is not re-raised here: drop may run while unwinding.
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let conn = shared.accepted.fetch_add(1, Ordering::SeqCst) + 1;
                if conn > MAX_CONNECTIONS {
                    drop(stream);
                    continue;
                }
                if let Ok(copy) = stream.try_clone() {
                    *shared.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(copy);
                }
                let shared = Arc::clone(shared);
                let spawned = thread::Builder::new()
                    .name(format!("hostile-conn-{conn}"))
                    .spawn(move || serve(stream, conn, &shared));
                if let Ok(handle) = spawned {
                    workers.push(handle);
                }
                // Reap the threads that are done, so that a long test does
                // not keep thousands of handles.
                workers.retain(|w| !w.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL_INTERVAL),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => thread::sleep(POLL_INTERVAL),
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
}

/// Why a connection thread stops.
enum End {
    /// The client closed or reset the connection.
    Peer,
    /// The server is being dropped, the behaviour closed it, or the input
    /// was unparsable or too long.
    Server,
}

fn serve(mut stream: TcpStream, conn: usize, shared: &Shared) {
    let setup = stream
        .set_read_timeout(Some(POLL_INTERVAL))
        .and_then(|()| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
        .and_then(|()| stream.set_nodelay(true));
    if setup.is_err() {
        return;
    }
    let mut input: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 16 * 1024];
    let mut seq = 0;
    let end = 'conn: loop {
        if shared.stop.load(Ordering::SeqCst) {
            break End::Server;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break End::Peer,
            Ok(n) => input.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => break End::Peer,
        }
        loop {
            let (args, used) = match parse_command(&input) {
                Ok(Some(parsed)) => parsed,
                Ok(None) if input.len() > MAX_REQUEST_BUFFER => break 'conn End::Server,
                Ok(None) => break,
                Err(()) => break 'conn End::Server,
            };
            input.drain(..used);
            let actions = match handshake_reply(shared.handshake, &args) {
                Some(reply) => reply.map(Action::Send).into_iter().collect(),
                None => {
                    let total = shared.lock_commands.fetch_add(1, Ordering::SeqCst);
                    if shared.handshake == Handshake::Silent {
                        Vec::new()
                    } else {
                        let request = Request {
                            conn,
                            seq,
                            total,
                            args: &args,
                        };
                        seq += 1;
                        (shared.behaviour)(&request)
                    }
                }
            };
            for action in actions {
                if let Some(end) = perform(&mut stream, action, shared) {
                    break 'conn end;
                }
            }
        }
    };
    if let End::Peer = end {
        shared.peer_closed.fetch_add(1, Ordering::SeqCst);
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Carries out `action`; `Some` when the connection must end.
fn perform(stream: &mut TcpStream, action: Action, shared: &Shared) -> Option<End> {
    let write = |stream: &mut TcpStream, bytes: &[u8]| -> Option<End> {
        match stream.write_all(bytes) {
            Ok(()) => {
                shared.bytes_sent.fetch_add(bytes.len(), Ordering::SeqCst);
                None
            }
            // A write that timed out: the client stopped reading.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Some(End::Server)
            }
            Err(_) => Some(End::Peer),
        }
    };
    match action {
        Action::Send(bytes) => write(stream, &bytes),
        Action::Stream { head, fill, total } => {
            if let Some(end) = write(stream, &head) {
                return Some(end);
            }
            let block = vec![fill; STREAM_CHUNK];
            let mut sent = head.len();
            while sent < total {
                if shared.stop.load(Ordering::SeqCst) {
                    return Some(End::Server);
                }
                let n = STREAM_CHUNK.min(total - sent);
                if let Some(end) = write(stream, &block[..n]) {
                    return Some(end);
                }
                sent += n;
            }
            None
        }
        Action::Sleep(duration) => {
            let until = Instant::now() + duration;
            while Instant::now() < until {
                if shared.stop.load(Ordering::SeqCst) {
                    return Some(End::Server);
                }
                thread::sleep(POLL_INTERVAL.min(until.saturating_duration_since(Instant::now())));
            }
            None
        }
        Action::WaitFor(flag) => {
            while !flag.load(Ordering::SeqCst) {
                if shared.stop.load(Ordering::SeqCst) {
                    return Some(End::Server);
                }
                thread::sleep(POLL_INTERVAL);
            }
            None
        }
        Action::Close => {
            let _ = stream.shutdown(Shutdown::Both);
            shared.closed_by_fake.fetch_add(1, Ordering::SeqCst);
            Some(End::Server)
        }
    }
}

/// The server's own answer to a handshake command: `Some(Some(bytes))` to
/// send, `Some(None)` to stay silent, `None` for a lock command (the
/// behaviour's business).
fn handshake_reply(handshake: Handshake, args: &[Vec<u8>]) -> Option<Option<Vec<u8>>> {
    let verb = args.first()?.to_ascii_uppercase();
    let reply: Vec<u8> = match verb.as_slice() {
        b"AUTH" | b"SELECT" => b"+OK\r\n".to_vec(),
        b"PING" => b"+PONG\r\n".to_vec(),
        // RESP3 from now on: the fake's replies are the same in both.
        b"HELLO" => b"%1\r\n$5\r\nproto\r\n:3\r\n".to_vec(),
        // Confirmed by a push, as a RESP3 server does.
        b"SUBSCRIBE" => {
            let channel = args.get(1).map_or(&[][..], Vec::as_slice);
            let mut push = format!(">3\r\n$9\r\nsubscribe\r\n${}\r\n", channel.len()).into_bytes();
            push.extend_from_slice(channel);
            push.extend_from_slice(b"\r\n:1\r\n");
            push
        }
        b"INFO" => {
            // A master of its own: a run_id no other server in the process
            // has (the client refuses twins).
            static SERVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let text = format!(
                "# Server\r\nrun_id:{:024x}{n:016x}\r\nuptime_in_seconds:3600\r\n\r\n# Replication\r\nrole:master\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n",
                u64::from(std::process::id())
            );
            format!("${}\r\n{text}\r\n", text.len()).into_bytes()
        }
        b"SCRIPT" if args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"LOAD")) => {
            let script = args.get(2).map_or(&[][..], Vec::as_slice);
            let (own, other) = if script == RELEASE_SCRIPT.as_bytes() {
                (RELEASE_SHA1, EXTEND_SHA1)
            } else if script == EXTEND_SCRIPT.as_bytes() {
                (EXTEND_SHA1, RELEASE_SHA1)
            } else if let Some(&(_, sha1)) = [
                (ACQUIRE_MANY_SCRIPT, ACQUIRE_MANY_SHA1),
                (RELEASE_MANY_SCRIPT, RELEASE_MANY_SHA1),
                (EXTEND_MANY_SCRIPT, EXTEND_MANY_SHA1),
                (WAIT_ACQUIRE_SCRIPT, WAIT_ACQUIRE_SHA1),
                (LEAVE_SCRIPT, LEAVE_SHA1),
            ]
            .iter()
            .find(|(text, _)| script == text.as_bytes())
            {
                (sha1, RELEASE_SHA1)
            } else {
                return Some(Some(b"-ERR hostile: unknown script\r\n".to_vec()));
            };
            let sha1 = match handshake {
                Handshake::Swapped => other.to_owned(),
                Handshake::WrongSha1 => "0".repeat(40),
                Handshake::Correct | Handshake::Silent => own.to_owned(),
            };
            format!("${}\r\n{sha1}\r\n", sha1.len()).into_bytes()
        }
        _ => return None,
    };
    Some((handshake != Handshake::Silent).then_some(reply))
}

/// A parsed command's arguments and its length in bytes.
type Parsed = (Vec<Vec<u8>>, usize);

/// Parses one command (a RESP array of bulk strings) at the start of
/// `buf`: its arguments and length, `Ok(None)` if incomplete, `Err` if it
/// is not such an array.
fn parse_command(buf: &[u8]) -> Result<Option<Parsed>, ()> {
    let Some((count, mut pos)) = header(buf, 0, b'*')? else {
        return Ok(None);
    };
    if count > MAX_ARGS {
        return Err(());
    }
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((len, start)) = header(buf, pos, b'$')? else {
            return Ok(None);
        };
        if len > MAX_REQUEST_BUFFER {
            return Err(());
        }
        let end = start + len;
        let Some(tail) = buf.get(end..end + 2) else {
            return Ok(None);
        };
        if tail != b"\r\n" {
            return Err(());
        }
        args.push(buf[start..end].to_vec());
        pos = end + 2;
    }
    Ok(Some((args, pos)))
}

/// Reads `<kind><decimal>\r\n` at `pos`: the number and the position after
/// the CRLF.
fn header(buf: &[u8], pos: usize, kind: u8) -> Result<Option<(usize, usize)>, ()> {
    let Some(&first) = buf.get(pos) else {
        return Ok(None);
    };
    if first != kind {
        return Err(());
    }
    let Some(cr) = buf[pos..].iter().position(|&b| b == b'\r') else {
        return if buf.len() - pos > 32 {
            Err(())
        } else {
            Ok(None)
        };
    };
    let digits = &buf[pos + 1..pos + cr];
    let number = std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .ok_or(())?;
    match buf.get(pos + cr + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((number, pos + cr + 2))),
        Some(_) => Err(()),
    }
}
