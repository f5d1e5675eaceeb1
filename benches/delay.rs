//! A delay line on loopback: a TCP proxy in front of each master that holds
//! every byte for a one-way delay, with jitter, before passing it on, in both
//! directions, so that the lock benches can run as if the masters were in
//! other zones or on other hosts (`tc netem` needs a kernel module and
//! privileges this machine does not have).
//!
//! - **Per master**: a round-trip time and a jitter, changed at any time
//!   ([`DelayLine::set`]); a chunk read from either side waits half the RTT,
//!   times a factor drawn uniformly in `[1 - jitter, 1 + jitter]`.
//! - **Loss-free and FIFO per connection**: a chunk is never due before the
//!   chunk read before it on the same connection and direction, so jitter
//!   never reorders the bytes of one connection (TCP would not either).
//! - **Bounded**: at most [`MAX_QUEUED`] bytes wait per direction of a
//!   connection; beyond that the line stops reading and the kernel's buffers
//!   push back on the sender.
//! - **One thread for every master and connection**, on a mio poller, with
//!   a `timerfd` for the due times (epoll's own timeout counts whole
//!   milliseconds, too coarse for a 100 µs delay) and no spinning: on a
//!   small machine the line takes no CPU from the masters while it waits.
//!   Its own lateness (a chunk written after its due time, because the
//!   thread woke late) is measured ([`DelayLine::take_lateness`]): that is
//!   the delay's error, the same for every client behind the line.
//! - **Ahead of the processes it carries**: its thread asks for a real-time
//!   priority (`SCHED_FIFO`, the lowest), or else a nice of -10, as a
//!   network is not queued behind the client's and the masters' CPU time;
//!   [`DelayLine::priority`] says what it got.
//! - **Stops by itself**: dropping the handle wakes the thread, which closes
//!   every socket and ends; the handle joins it.
//!
//! Listens on fresh ports of 127.0.0.1 only.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

/// Bytes that may wait per direction of one connection.
pub(crate) const MAX_QUEUED: usize = 1 << 20;

/// The most read from a socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// How long the line waits for a master to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One master's setting: the one-way delay and the jitter, read by the
/// line's thread for every chunk.
struct Setting {
    one_way_ns: AtomicU64,
    /// Jitter as parts per million of the delay.
    jitter_ppm: AtomicU64,
}

struct Shared {
    stop: AtomicBool,
    settings: Vec<Setting>,
    /// Bytes waiting in the line, all connections together.
    queued: AtomicUsize,
    /// How long after its due time each chunk was written (ns).
    lateness: Mutex<Histogram<u64>>,
    /// Connections ended by a socket error rather than closed by a peer.
    broken: AtomicUsize,
    /// What priority the thread got: see `Priority`.
    priority: AtomicUsize,
}

/// The priority the line's thread got.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Priority {
    /// Not known yet: the thread has not started.
    Unknown,
    /// `SCHED_FIFO` 1.
    RealTime,
    /// Nice -10.
    Nice,
    /// Neither could be had: the default.
    Default,
}

const PRIORITIES: [Priority; 4] = [
    Priority::Unknown,
    Priority::RealTime,
    Priority::Nice,
    Priority::Default,
];

/// Raises this thread's priority as far as allowed, first to `SCHED_FIFO`.
fn raise_priority() -> Priority {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is this thread; `param` is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        return Priority::RealTime;
    }
    // SAFETY: gettid takes no argument; setpriority takes integers and
    // changes only this thread's nice value.
    let raised = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -10) == 0
    };
    if raised {
        Priority::Nice
    } else {
        Priority::Default
    }
}

fn lateness_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap_or_else(|e| panic!("{e}"))
}

/// Delay proxies in front of N masters, one thread for all; see the module
/// docs.
pub(crate) struct DelayLine {
    listen: Vec<SocketAddr>,
    shared: Arc<Shared>,
    waker: Waker,
    thread: Option<JoinHandle<()>>,
}

impl DelayLine {
    /// Starts a proxy on a fresh port of 127.0.0.1 for each of `targets`,
    /// with no delay until [`set`](Self::set).
    pub(crate) fn start(targets: &[SocketAddr]) -> io::Result<DelayLine> {
        let poll = Poll::new()?;
        let mut listeners = Vec::new();
        let mut listen = Vec::new();
        for (i, _) in targets.iter().enumerate() {
            let mut listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
            listen.push(listener.local_addr()?);
            poll.registry()
                .register(&mut listener, Token(i), Interest::READABLE)?;
            listeners.push(listener);
        }
        let n = targets.len();
        // SAFETY: timerfd_create takes two integer arguments and returns a
        // new file descriptor or -1.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by timerfd_create and is owned by
        // nobody else.
        let timer = unsafe { OwnedFd::from_raw_fd(fd) };
        poll.registry().register(
            &mut SourceFd(&timer.as_raw_fd()),
            Token(n),
            Interest::READABLE,
        )?;
        let waker = Waker::new(poll.registry(), Token(n + 1))?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            settings: (0..n)
                .map(|_| Setting {
                    one_way_ns: AtomicU64::new(0),
                    jitter_ppm: AtomicU64::new(0),
                })
                .collect(),
            queued: AtomicUsize::new(0),
            lateness: Mutex::new(lateness_histogram()),
            broken: AtomicUsize::new(0),
            priority: AtomicUsize::new(0),
        });
        let mut line = Line {
            poll,
            listeners,
            targets: targets.to_vec(),
            timer,
            armed: None,
            conns: Vec::new(),
            free: Vec::new(),
            due: BinaryHeap::new(),
            buf: vec![0; READ_CHUNK],
            late: Vec::new(),
            shared: Arc::clone(&shared),
        };
        let thread = thread::Builder::new()
            .name("delay-line".to_owned())
            .spawn(move || line.run())?;
        Ok(DelayLine {
            listen,
            shared,
            waker,
            thread: Some(thread),
        })
    }

    /// `redis://127.0.0.1:PORT` of each proxy, in the order of the targets.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.listen.iter().map(|a| format!("redis://{a}")).collect()
    }

    /// From now on, master `i`'s chunks wait `rtt / 2` each way, times a
    /// factor drawn uniformly in `[1 - jitter, 1 + jitter]` (`jitter` a
    /// fraction below 1).
    pub(crate) fn set(&self, i: usize, rtt: Duration, jitter: f64) {
        let setting = &self.shared.settings[i];
        let one_way = u64::try_from(rtt.as_nanos() / 2).unwrap_or(u64::MAX);
        setting.one_way_ns.store(one_way, Ordering::Relaxed);
        setting.jitter_ppm.store(
            (jitter.clamp(0.0, 0.999) * 1e6).round() as u64,
            Ordering::Relaxed,
        );
    }

    /// Waits until no byte waits in the line, up to `limit`; whether it is
    /// empty.
    pub(crate) fn wait_idle(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while self.shared.queued.load(Ordering::SeqCst) != 0 {
            if Instant::now() >= end {
                return false;
            }
            thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// The lateness of every chunk written since the last call (ns after
    /// its due time), and a fresh start.
    pub(crate) fn take_lateness(&self) -> Histogram<u64> {
        let mut h = self
            .shared
            .lateness
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *h, lateness_histogram())
    }

    /// Connections ended by a socket error so far (not by a peer closing).
    pub(crate) fn broken(&self) -> usize {
        self.shared.broken.load(Ordering::Relaxed)
    }

    /// The priority the line's thread got.
    pub(crate) fn priority(&self) -> Priority {
        PRIORITIES[self.shared.priority.load(Ordering::SeqCst).min(3)]
    }
}

impl Drop for DelayLine {
    /// Stops the thread, which closes every socket, and joins it.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One direction of a connection: the bytes waiting, cut into the chunks
/// they were read as, each with its due time.
#[derive(Default)]
struct Pipe {
    bytes: VecDeque<u8>,
    chunks: VecDeque<(Instant, usize)>,
    /// The due time of the last chunk queued: the next is never earlier.
    last_due: Option<Instant>,
    /// The source closed its side: close the destination's once drained.
    eof: bool,
    /// The destination's side is closed.
    shut: bool,
    /// Reading stopped at `MAX_QUEUED`; resumes once below.
    full: bool,
}

/// One proxied connection: `socks[0]` the client's, `socks[1]` the
/// master's; `pipes[d]` reads `socks[d]` and writes `socks[1 - d]`.
struct Conn {
    master: usize,
    socks: [TcpStream; 2],
    pipes: [Pipe; 2],
}

/// The line's thread: the poller, the connections and the due times.
struct Line {
    poll: Poll,
    listeners: Vec<TcpListener>,
    targets: Vec<SocketAddr>,
    timer: OwnedFd,
    /// The due time the timer is armed for.
    armed: Option<Instant>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// (due, connection slot, direction) of every chunk waiting; an entry
    /// whose chunk went out (or whose connection ended) is harmless.
    due: BinaryHeap<Reverse<(Instant, usize, usize)>>,
    buf: Vec<u8>,
    /// Lateness of the chunks written by one flush, recorded at its end.
    late: Vec<Duration>,
    shared: Arc<Shared>,
}

impl Line {
    fn timer_token(&self) -> usize {
        self.listeners.len()
    }

    fn waker_token(&self) -> usize {
        self.listeners.len() + 1
    }

    fn conn_token(&self, slot: usize, side: usize) -> Token {
        Token(self.listeners.len() + 2 + 2 * slot + side)
    }

    fn run(&mut self) {
        // Due times are short: no timer slack on this thread.
        // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only
        // affects this thread.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
        }
        let priority = raise_priority();
        let code = PRIORITIES.iter().position(|&p| p == priority).unwrap_or(3);
        self.shared.priority.store(code, Ordering::SeqCst);
        let mut events = Events::with_capacity(256);
        while !self.shared.stop.load(Ordering::SeqCst) {
            if let Err(e) = self.poll.poll(&mut events, None) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("delay line: poll failed, stopping: {e}");
                break;
            }
            for event in &events {
                let token = event.token().0;
                if token < self.listeners.len() {
                    self.accept(token);
                } else if token == self.timer_token() {
                    self.clear_timer();
                } else if token == self.waker_token() {
                    // The stop flag is looked at by the loop.
                } else {
                    let at = token - self.listeners.len() - 2;
                    let (slot, side) = (at / 2, at % 2);
                    if event.is_writable() {
                        // The pipe that writes to this socket.
                        self.flush(slot, 1 - side);
                    }
                    if event.is_readable() || event.is_read_closed() || event.is_error() {
                        self.read(slot, side);
                    }
                }
            }
            self.deliver();
        }
        // Dropping `self` closes every socket.
    }

    /// Accepts every pending connection on listener `i` and connects each
    /// to its master.
    fn accept(&mut self, i: usize) {
        loop {
            let client = match self.listeners[i].accept() {
                Ok((client, _)) => client,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let server =
                match std::net::TcpStream::connect_timeout(&self.targets[i], CONNECT_TIMEOUT)
                    .and_then(|s| s.set_nonblocking(true).map(|()| s))
                {
                    Ok(server) => TcpStream::from_std(server),
                    // The master is down: the client's connection closes at once.
                    Err(_) => continue,
                };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let mut conn = Conn {
                master: i,
                socks: [client, server],
                pipes: [Pipe::default(), Pipe::default()],
            };
            let mut registered = true;
            for side in 0..2 {
                let token = self.conn_token(slot, side);
                registered &= self
                    .poll
                    .registry()
                    .register(
                        &mut conn.socks[side],
                        token,
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_ok();
            }
            self.conns[slot] = Some(conn);
            if !registered {
                self.close(slot, true);
            }
        }
    }

    /// This chunk's delay for master `i`.
    fn delay(&self, i: usize) -> Duration {
        let setting = &self.shared.settings[i];
        let one_way = setting.one_way_ns.load(Ordering::Relaxed) as f64;
        let jitter = setting.jitter_ppm.load(Ordering::Relaxed) as f64 / 1e6;
        let factor = if jitter > 0.0 {
            1.0 + rand::random_range(-jitter..=jitter)
        } else {
            1.0
        };
        Duration::from_nanos((one_way * factor).max(0.0) as u64)
    }

    /// Reads what socket `d` of connection `slot` has into pipe `d`.
    fn read(&mut self, slot: usize, d: usize) {
        loop {
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            let pipe = &conn.pipes[d];
            if pipe.eof {
                return;
            }
            let room = MAX_QUEUED.saturating_sub(pipe.bytes.len());
            if room == 0 {
                conn.pipes[d].full = true;
                return;
            }
            let want = room.min(self.buf.len());
            match conn.socks[d].read(&mut self.buf[..want]) {
                Ok(0) => {
                    conn.pipes[d].eof = true;
                    // Closes the other side now if nothing waits.
                    self.flush(slot, d);
                    return;
                }
                Ok(n) => {
                    let master = conn.master;
                    let delay = self.delay(master);
                    let Some(conn) = self.conns[slot].as_mut() else {
                        return;
                    };
                    let pipe = &mut conn.pipes[d];
                    let mut due = Instant::now() + delay;
                    if let Some(last) = pipe.last_due {
                        due = due.max(last);
                    }
                    pipe.last_due = Some(due);
                    pipe.bytes.extend(&self.buf[..n]);
                    pipe.chunks.push_back((due, n));
                    self.shared.queued.fetch_add(n, Ordering::SeqCst);
                    self.due.push(Reverse((due, slot, d)));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.close(slot, true);
                    return;
                }
            }
        }
    }

    /// Writes the chunks of pipe `d` of connection `slot` that are due, as
    /// far as the destination takes them.
    fn flush(&mut self, slot: usize, d: usize) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let (pipes, socks) = (&mut conn.pipes, &mut conn.socks);
        let pipe = &mut pipes[d];
        let to = &mut socks[1 - d];
        let late = &mut self.late;
        late.clear();
        let mut failed = false;
        loop {
            let now = Instant::now();
            let ready: usize = pipe
                .chunks
                .iter()
                .take_while(|(due, _)| *due <= now)
                .map(|(_, len)| len)
                .sum();
            if ready == 0 {
                break;
            }
            let (front, _) = pipe.bytes.as_slices();
            let take = ready.min(front.len());
            match to.write(&front[..take]) {
                Ok(0) => {
                    failed = true;
                    break;
                }
                Ok(mut n) => {
                    pipe.bytes.drain(..n);
                    self.shared.queued.fetch_sub(n, Ordering::SeqCst);
                    let written = Instant::now();
                    while n > 0 {
                        let Some((due, len)) = pipe.chunks.front_mut() else {
                            break;
                        };
                        let part = n.min(*len);
                        *len -= part;
                        n -= part;
                        if *len == 0 {
                            late.push(written.saturating_duration_since(*due));
                            pipe.chunks.pop_front();
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        if !late.is_empty() {
            let mut h = self
                .shared
                .lateness
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            for l in late.drain(..) {
                h.saturating_record(u64::try_from(l.as_nanos()).unwrap_or(u64::MAX).max(1));
            }
        }
        if failed {
            self.close(slot, true);
            return;
        }
        if pipe.eof && pipe.chunks.is_empty() && !pipe.shut {
            pipe.shut = true;
            let _ = to.shutdown(Shutdown::Write);
        }
        let resume = pipe.full && pipe.bytes.len() < MAX_QUEUED;
        if resume {
            pipe.full = false;
        }
        let done = pipes.iter().all(|p| p.shut);
        if done {
            self.close(slot, false);
        } else if resume {
            self.read(slot, d);
        }
    }

    /// Writes every chunk due by now and arms the timer for the next one.
    fn deliver(&mut self) {
        loop {
            let now = Instant::now();
            while let Some(&Reverse((due, slot, d))) = self.due.peek() {
                if due > now {
                    break;
                }
                self.due.pop();
                self.flush(slot, d);
            }
            let Some(&Reverse((next, _, _))) = self.due.peek() else {
                self.arm(None);
                return;
            };
            let now = Instant::now();
            if next > now {
                self.arm(Some(next));
                return;
            }
        }
    }

    /// Arms the timer for `at`, or disarms it.
    fn arm(&mut self, at: Option<Instant>) {
        if at == self.armed {
            return;
        }
        self.armed = at;
        let wait = at.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1))
        });
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: the timer fd is open for the life of `self`; `spec` is a
        // valid itimerspec and the old value is not asked for.
        unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut());
        }
    }

    /// Reads the timer's expirations, so that it can signal again.
    fn clear_timer(&mut self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into an 8-byte buffer from the
        // timer fd, open for the life of `self`.
        unsafe {
            libc::read(self.timer.as_raw_fd(), expirations.as_mut_ptr().cast(), 8);
        }
        self.armed = None;
    }

    /// Ends connection `slot`: both sockets close, what waited is dropped.
    fn close(&mut self, slot: usize, broken: bool) {
        let Some(mut conn) = self.conns[slot].take() else {
            return;
        };
        for sock in &mut conn.socks {
            let _ = self.poll.registry().deregister(sock);
        }
        let waiting: usize = conn.pipes.iter().map(|p| p.bytes.len()).sum();
        self.shared.queued.fetch_sub(waiting, Ordering::SeqCst);
        if broken {
            self.shared.broken.fetch_add(1, Ordering::Relaxed);
        }
        self.free.push(slot);
    }
}
