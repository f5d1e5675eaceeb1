//! An in-process TCP proxy between a client and one real `redis-server`,
//! for fault-injection tests: latency, stalls, dropped replies, closed and
//! reset connections, writes sliced into 1-byte segments.
//!
//! ```ignore
//! mod support;
//! use support::cluster::Cluster;
//! use support::proxy::{Dir, Proxies};
//!
//! let cluster = Cluster::start(5);
//! let proxies = Proxies::front(&cluster);
//! let redlock = Redlock::builder(proxies.urls()).build()?;
//! proxies[0].stall(Dir::Both); // node 0 gets nothing, answers nothing
//! proxies[1].drop_replies(); // node 1 applies commands, the client hears nothing
//! proxies[0].heal(); // what was held back is forwarded now, in order
//! // Dropping `proxies` closes every connection and joins every thread.
//! ```
//!
//! Each [`Proxy`] listens on a fresh port of 127.0.0.1 and, for every
//! connection it accepts, opens one to its target and runs two pump threads
//! (client → server and server → client) with blocking sockets and short
//! read timeouts. Faults are switched from the test through the handle and
//! apply at once to live connections and to later ones. Every thread looks
//! at a stop flag at least every [`TICK`] while idle (a blocked write gives
//! up after 2 s, a connect to the target after 1 s), so dropping the handle
//! stops and joins them all, leaving no thread and no socket behind.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::ops::Index;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::cluster::Cluster;

/// The longest a proxy thread waits before it looks at its flags again.
pub const TICK: Duration = Duration::from_millis(10);

/// How long the proxy waits for its target to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long one write to a peer may block before the link counts as
/// broken (a peer that reads nothing, e.g. a paused server with full
/// buffers).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Bytes held back per direction (stalled or delayed) before the proxy
/// stops reading, so that the kernel's buffers push back instead.
const MAX_HELD: usize = 1 << 20;

/// Pause between two 1-byte writes in slice mode.
const SLICE_GAP: Duration = Duration::from_micros(50);

/// Deliveries remembered per proxy for [`Proxy::deliveries`].
const MAX_LOG: usize = 100_000;

/// A direction of traffic through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Requests: client → server.
    ToServer,
    /// Replies: server → client.
    ToClient,
    /// Both directions.
    Both,
}

impl Dir {
    fn indices(self) -> &'static [usize] {
        match self {
            Dir::ToServer => &[0],
            Dir::ToClient => &[1],
            Dir::Both => &[0, 1],
        }
    }
}

/// What the proxy does to one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Mode {
    /// Every chunk is forwarded this long after it was read.
    latency: Duration,
    /// Read and hold everything, forward nothing (until healed).
    stalled: bool,
    /// Read and throw away everything.
    discard: bool,
    /// Forward one byte per write, with `TCP_NODELAY`.
    slice: bool,
}

/// Counters of one proxy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted from clients.
    pub accepted: usize,
    /// Connections currently open.
    pub live: usize,
    /// Connections the proxy reset (RST to the client).
    pub resets: usize,
    /// Connections the proxy closed on purpose ([`Proxy::drop_connections`]).
    pub drops: usize,
    /// Bytes forwarded to the server.
    pub to_server: u64,
    /// Bytes forwarded to the client.
    pub to_client: u64,
    /// Reply bytes thrown away by [`Proxy::drop_replies`].
    pub discarded: u64,
}

/// One proxied connection: the client's socket and the server's.
struct Link {
    client: TcpStream,
    server: TcpStream,
    dead: AtomicBool,
}

impl Link {
    /// Closes both sides (FIN to both peers) and tells the pumps to stop.
    fn close(&self) {
        self.dead.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    /// Resets the client's side (RST once the pumps let go of it) and
    /// closes the server's.
    fn reset(&self) {
        if self.dead.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = set_linger_zero(&self.client);
        // SHUT_RD sends nothing on the wire; it wakes the pump blocked in
        // read. The RST leaves when the last handle to the socket closes.
        let _ = self.client.shutdown(Shutdown::Read);
        let _ = self.server.shutdown(Shutdown::Both);
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }
}

/// `SO_LINGER` with a zero timeout: closing the socket then sends RST
/// instead of FIN.
fn set_linger_zero(stream: &TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is open for the lifetime of `stream`; the option value
    // is a plain `linger` struct whose size is passed along.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

struct Shared {
    target: SocketAddr,
    stop: AtomicBool,
    modes: Mutex<[Mode; 2]>,
    links: Mutex<Vec<Arc<Link>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    reset_on_accept: AtomicUsize,
    reset_on_request: AtomicUsize,
    accepted: AtomicUsize,
    resets: AtomicUsize,
    drops: AtomicUsize,
    bytes: [AtomicU64; 2],
    discarded: AtomicU64,
    log: Mutex<Vec<(Instant, Dir, usize)>>,
    /// Chunks being written on and not yet counted in `bytes` and `log`.
    forwarding: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn mode(&self, dir: usize) -> Mode {
        lock(&self.modes)[dir]
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn forget_dead(&self) {
        lock(&self.links).retain(|l| !l.is_dead());
    }

    fn record(&self, dir: usize, n: usize) {
        self.bytes[dir].fetch_add(n as u64, Ordering::Relaxed);
        let mut log = lock(&self.log);
        if log.len() < MAX_LOG {
            let dir = if dir == 0 {
                Dir::ToServer
            } else {
                Dir::ToClient
            };
            log.push((Instant::now(), dir, n));
        }
    }
}

/// A TCP proxy in front of one server; see the module docs.
pub struct Proxy {
    listen: SocketAddr,
    password: Option<String>,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("listen", &self.listen)
            .field("target", &self.shared.target)
            .field("modes", &*lock(&self.shared.modes))
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Starts a proxy on a fresh port of 127.0.0.1 that forwards to
    /// `target`.
    ///
    /// # Panics
    ///
    /// If it cannot listen.
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("proxy: cannot bind 127.0.0.1:0: {e}"));
        let listen = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy: no local address: {e}"));
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("proxy: cannot make the listener non-blocking: {e}"));
        let shared = Arc::new(Shared {
            target,
            stop: AtomicBool::new(false),
            modes: Mutex::new([Mode::default(); 2]),
            links: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            reset_on_accept: AtomicUsize::new(0),
            reset_on_request: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            resets: AtomicUsize::new(0),
            drops: AtomicUsize::new(0),
            bytes: [AtomicU64::new(0), AtomicU64::new(0)],
            discarded: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            forwarding: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("proxy-accept-{}", listen.port()))
                .spawn(move || accept_loop(&listener, &shared))
                .unwrap_or_else(|e| panic!("proxy: cannot spawn a thread: {e}"))
        };
        Proxy {
            listen,
            password: None,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// Where it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// `redis://127.0.0.1:PORT` of the proxy (with the server's password,
    /// if it was given one by [`Proxies::front`]; used as is, so it must
    /// not need percent-encoding).
    pub fn url(&self) -> String {
        match &self.password {
            Some(pw) => format!("redis://:{pw}@{}", self.listen),
            None => format!("redis://{}", self.listen),
        }
    }

    fn set(&self, dir: Dir, f: impl Fn(&mut Mode)) {
        let mut modes = lock(&self.shared.modes);
        for &i in dir.indices() {
            f(&mut modes[i]);
        }
    }

    /// Delays every chunk in `dir` by `latency` (replacing an earlier
    /// latency); zero turns it off.
    pub fn latency(&self, dir: Dir, latency: Duration) {
        self.set(dir, |m| m.latency = latency);
    }

    /// Reads and holds everything in `dir`, forwarding nothing until
    /// [`heal`](Self::heal) (which forwards what was held, in order).
    pub fn stall(&self, dir: Dir) {
        self.set(dir, |m| m.stalled = true);
    }

    /// Lets the server apply what it is sent but throws its replies away:
    /// the client never hears them.
    pub fn drop_replies(&self) {
        self.set(Dir::ToClient, |m| m.discard = true);
    }

    /// Forwards `dir` one byte per write (`TCP_NODELAY`, a short pause
    /// between writes), so the peer sees 1-byte segments.
    pub fn slice(&self, dir: Dir) {
        self.set(dir, |m| m.slice = true);
    }

    /// Back to plain forwarding in both directions; bytes held by a stall
    /// are forwarded now. Pending one-shot resets are cancelled.
    pub fn heal(&self) {
        self.set(Dir::Both, |m| *m = Mode::default());
        self.shared.reset_on_accept.store(0, Ordering::SeqCst);
        self.shared.reset_on_request.store(0, Ordering::SeqCst);
    }

    /// Closes every open connection on both sides (FIN to client and
    /// server). Later connections are accepted as usual.
    pub fn drop_connections(&self) -> usize {
        let links: Vec<Arc<Link>> = lock(&self.shared.links).drain(..).collect();
        for link in &links {
            if !link.is_dead() {
                self.shared.drops.fetch_add(1, Ordering::SeqCst);
            }
            link.close();
        }
        links.len()
    }

    /// Resets every open connection: the client gets RST
    /// (`SO_LINGER` 0, then close), the server a FIN.
    pub fn reset_connections(&self) -> usize {
        let links: Vec<Arc<Link>> = lock(&self.shared.links).drain(..).collect();
        for link in &links {
            if !link.is_dead() {
                self.shared.resets.fetch_add(1, Ordering::SeqCst);
            }
            link.reset();
        }
        links.len()
    }

    /// Resets the next `n` connections as soon as they are accepted,
    /// before the server sees them: the client's handshake meets RST.
    pub fn reset_next_connections(&self, n: usize) {
        self.shared.reset_on_accept.store(n, Ordering::SeqCst);
    }

    /// The next `n` times a client sends bytes, the proxy resets that
    /// connection instead of forwarding them: the request is in flight,
    /// never reaches the server, and the client gets RST.
    pub fn reset_on_next_request(&self, n: usize) {
        self.shared.reset_on_request.store(n, Ordering::SeqCst);
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        Stats {
            accepted: s.accepted.load(Ordering::SeqCst),
            live: lock(&s.links).iter().filter(|l| !l.is_dead()).count(),
            resets: s.resets.load(Ordering::SeqCst),
            drops: s.drops.load(Ordering::SeqCst),
            to_server: s.bytes[0].load(Ordering::SeqCst),
            to_client: s.bytes[1].load(Ordering::SeqCst),
            discarded: s.discarded.load(Ordering::SeqCst),
        }
    }

    /// Every chunk forwarded so far (the first [`MAX_LOG`]): when it was
    /// written, in which direction, how many bytes.
    pub fn deliveries(&self) -> Vec<(Instant, Dir, usize)> {
        lock(&self.shared.log).clone()
    }

    /// Whether a chunk is being written on right now. A chunk is counted
    /// ([`Proxy::stats`], [`Proxy::deliveries`]) only once written, and
    /// its peer may act on it before: once the effect of a request is seen
    /// on the server and this is `false`, the request is counted.
    pub fn is_forwarding(&self) -> bool {
        self.shared.forwarding.load(Ordering::SeqCst) > 0
    }
}

impl Drop for Proxy {
    /// Stops accepting, closes every connection and joins every thread.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for link in lock(&self.shared.links).drain(..) {
            link.close();
        }
        let threads: Vec<JoinHandle<()>> = lock(&self.shared.threads).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stopping() {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(_) => {
                thread::sleep(TICK);
                continue;
            }
        };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nonblocking(false);
        let take_one = |counter: &AtomicUsize| {
            counter
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if take_one(&shared.reset_on_accept) {
            shared.resets.fetch_add(1, Ordering::SeqCst);
            let _ = set_linger_zero(&client);
            drop(client);
            continue;
        }
        let server = match TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) {
            Ok(server) => server,
            Err(_) => {
                // The server is down: the client is refused, as it would be
                // without the proxy (but after its connect succeeded).
                let _ = set_linger_zero(&client);
                drop(client);
                continue;
            }
        };
        for s in [&client, &server] {
            let _ = s.set_nodelay(true);
            let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        }
        let link = Arc::new(Link {
            client,
            server,
            dead: AtomicBool::new(false),
        });
        shared.forget_dead();
        lock(&shared.links).push(Arc::clone(&link));
        let mut threads = lock(&shared.threads);
        threads.retain(|t| !t.is_finished());
        for dir in [0, 1] {
            let (link2, shared2) = (Arc::clone(&link), Arc::clone(shared));
            let spawned = thread::Builder::new()
                .name(format!("proxy-pump-{dir}"))
                .spawn(move || pump(&link2, &shared2, dir));
            match spawned {
                Ok(handle) => threads.push(handle),
                Err(_) => link.close(),
            }
        }
    }
}

/// Moves bytes in one direction of one link (0: client → server, 1:
/// server → client) until either side closes or the proxy stops.
fn pump(link: &Link, shared: &Shared, dir: usize) {
    let (mut from, mut to) = if dir == 0 {
        (&link.client, &link.server)
    } else {
        (&link.server, &link.client)
    };
    let mut held: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut held_bytes = 0usize;
    let mut buf = vec![0u8; 16 * 1024];
    let result: io::Result<()> = (|| {
        loop {
            if shared.stopping() || link.is_dead() {
                return Ok(());
            }
            let mode = shared.mode(dir);
            let now = Instant::now();
            // Forward what is due.
            if !mode.stalled {
                while let Some((due, _)) = held.front() {
                    if *due > now {
                        break;
                    }
                    let Some((_, chunk)) = held.pop_front() else {
                        break;
                    };
                    held_bytes -= chunk.len();
                    // Raised before the write, lowered after the record: a
                    // chunk the server may have seen is either counted or
                    // still in `forwarding` (see `Proxy::is_forwarding`).
                    shared.forwarding.fetch_add(1, Ordering::SeqCst);
                    let written = forward(&mut to, &chunk, mode.slice, shared, link);
                    if written.is_ok() {
                        shared.record(dir, chunk.len());
                    }
                    shared.forwarding.fetch_sub(1, Ordering::SeqCst);
                    written?;
                    if link.is_dead() {
                        return Ok(());
                    }
                }
            }
            // Wait for input no longer than until the next chunk is due.
            let wait = match held.front() {
                Some((due, _)) if !mode.stalled => due.saturating_duration_since(now).min(TICK),
                _ => TICK,
            }
            .max(Duration::from_millis(1));
            if held_bytes >= MAX_HELD {
                thread::sleep(wait);
                continue;
            }
            from.set_read_timeout(Some(wait))?;
            let n = match from.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            };
            if dir == 0
                && shared
                    .reset_on_request
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                shared.resets.fetch_add(1, Ordering::SeqCst);
                link.reset();
                return Ok(());
            }
            let mode = shared.mode(dir);
            if mode.discard {
                shared.discarded.fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            held.push_back((Instant::now() + mode.latency, buf[..n].to_vec()));
            held_bytes += n;
        }
    })();
    let _ = result;
    // Whatever ended this direction ends the link: the other pump stops,
    // and the last handle to each socket closes it.
    if !link.is_dead() {
        link.close();
    }
    shared.forget_dead();
}

/// Writes `chunk`, one byte per write in slice mode.
fn forward(
    to: &mut &TcpStream,
    chunk: &[u8],
    slice: bool,
    shared: &Shared,
    link: &Link,
) -> io::Result<()> {
    if !slice {
        return to.write_all(chunk);
    }
    for byte in chunk {
        if shared.stopping() || link.is_dead() {
            return Ok(());
        }
        to.write_all(std::slice::from_ref(byte))?;
        to.flush()?;
        thread::sleep(SLICE_GAP);
    }
    Ok(())
}

/// A [`Proxy`] in front of every node of a [`Cluster`], in node order.
#[derive(Debug)]
pub struct Proxies {
    proxies: Vec<Proxy>,
}

impl Proxies {
    /// Starts one proxy per node of `cluster` (TCP nodes only).
    ///
    /// # Panics
    ///
    /// If a node listens on a Unix socket.
    pub fn front(cluster: &Cluster) -> Proxies {
        let proxies = cluster
            .nodes()
            .iter()
            .map(|node| {
                let target = node
                    .addr()
                    .socket_addr()
                    .unwrap_or_else(|| panic!("proxy: node {} is not on TCP", node.index()));
                let mut proxy = Proxy::start(target);
                proxy.password = node.password().map(str::to_owned);
                proxy
            })
            .collect();
        Proxies { proxies }
    }

    /// The client URLs: one per proxy, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(Proxy::url).collect()
    }

    /// The number of proxies.
    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    /// Always `false` for a proxied cluster.
    pub fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    /// All proxies, in node order.
    pub fn iter(&self) -> impl Iterator<Item = &Proxy> {
        self.proxies.iter()
    }

    /// [`Proxy::heal`] on every proxy.
    pub fn heal_all(&self) {
        self.proxies.iter().for_each(Proxy::heal);
    }
}

impl Index<usize> for Proxies {
    type Output = Proxy;

    fn index(&self, i: usize) -> &Proxy {
        &self.proxies[i]
    }
}
