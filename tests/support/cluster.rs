//! A harness that runs real, independent `redis-server` processes (the N
//! masters of a Redlock deployment) for integration tests.
//!
//! ```ignore
//! mod support;
//! use support::cluster::{Cluster, ClusterOptions};
//!
//! let cluster = Cluster::start(3);
//! cluster.node(0).command(&[b"SET", b"k", b"v"]);
//! assert_eq!(cluster.get(0, "k").as_deref(), Some(&b"v"[..]));
//! cluster.kill(1); // SIGKILL: node 1 now refuses connections
//! cluster.restart(1); // same port, same dir; empty without persistence
//! // Dropping `cluster` (also while unwinding from a panic) kills every
//! // process it started, reaps them and removes their directories.
//! ```
//!
//! Every node is its own `redis-server` process with its own temporary
//! directory (under [`std::env::temp_dir`]), listening either on a free TCP
//! port of 127.0.0.1 or on a Unix socket inside that directory. Tests may run
//! in parallel (threads of one test binary, or several processes under
//! nextest): ports are picked by the kernel, and a start that loses a race
//! for its port is retried on a fresh one.
//!
//! The harness speaks RESP on its own ([`encode_command`], [`Connection`]),
//! so it does not depend on the codec of the crate under test.
//!
//! All methods take `&self`, and [`Cluster`] is `Send + Sync`: a test may
//! kill, pause or restart a node from another thread (e.g. inside
//! [`std::thread::scope`]) while a client works against the cluster.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Most nodes one [`Cluster`] may have.
pub const MAX_NODES: usize = 7;

/// How long one start of one node may take until it answers `PING`.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Node::stop`] waits after SIGTERM before it sends SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Read and write timeout of [`Node::command`] and the helpers built on it.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`Node::restart`] keeps trying while its port is taken.
pub const RESTART_PORT_WAIT: Duration = Duration::from_secs(3);

/// Starts on fresh ports tried before giving up on a new node.
const PORT_ATTEMPTS: usize = 20;
/// Pause between restart attempts on a busy port.
const RESTART_BACKOFF: Duration = Duration::from_millis(50);
/// Pause between two readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Lines of a node's logs quoted in a panic message.
const LOG_TAIL_LINES: usize = 40;
/// Longest Unix socket path (`sun_path` holds 108 bytes with the NUL).
const MAX_UNIX_PATH: usize = 107;

/// The install hint printed when `redis-server` is missing.
const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server` \
     (or `bash .ci/install-redis`), or set REDIS_SERVER=/path/to/redis-server";

// ---------------------------------------------------------------------------
// Finding the binary
// ---------------------------------------------------------------------------

/// The `redis-server` binary the harness runs: `$REDIS_SERVER` if set (and
/// not empty), else the first executable `redis-server` on `$PATH`.
///
/// # Panics
///
/// If there is none, with a message naming the install command. Tests that
/// need Redis fail rather than skip silently.
pub fn redis_server_path() -> PathBuf {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FOUND.get_or_init(find_redis_server) {
        Ok(path) => path.clone(),
        Err(msg) => panic!("{msg}"),
    }
}

/// The `redis-server` to use (`REDIS_SERVER`, else the one on `PATH`), or
/// why there is none; never panics.
pub fn find_redis_server() -> Result<PathBuf, String> {
    if let Some(var) = std::env::var_os("REDIS_SERVER").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&var);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(format!(
                "REDIS_SERVER={} is not an executable file; {INSTALL_HINT}",
                path.display()
            ))
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| {
            format!(
                "redis-server was not found on PATH ({}); the integration tests \
                 need a real Redis server: {INSTALL_HINT}",
                path_var.to_string_lossy()
            )
        })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

// ---------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------

/// How to start a [`Cluster`]; [`Cluster::start_with`] takes it.
///
/// `ClusterOptions::new(5).unix(true).password("pw").start()` or a struct
/// literal with `..Default::default()` both work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Number of independent `redis-server` processes, 1 to [`MAX_NODES`].
    pub nodes: usize,
    /// Listen on a Unix socket `<dir>/redis.sock` (mode 700) instead of TCP
    /// (`--port 0 --unixsocket … --unixsocketperm 700`).
    pub unix: bool,
    /// Keep data across restarts: `--appendonly yes --appendfsync always`
    /// (every write is on disk before the reply, so even SIGKILL loses
    /// nothing). Off: `--save "" --appendonly no`, a restarted node is empty.
    pub persistence: bool,
    /// More `redis-server` arguments, e.g. `["--maxmemory", "1mb"]`; they
    /// come after the harness's own, so they override them.
    pub extra_args: Vec<String>,
    /// Start every node with `--requirepass`; the harness's own helpers
    /// (readiness probe, [`Node::command`], …) then send `AUTH` first.
    pub password: Option<String>,
}

impl Default for ClusterOptions {
    /// One TCP node, no persistence, no password, no extra arguments.
    fn default() -> Self {
        Self {
            nodes: 1,
            unix: false,
            persistence: false,
            extra_args: Vec::new(),
            password: None,
        }
    }
}

impl ClusterOptions {
    /// Options for `nodes` TCP nodes, otherwise the defaults.
    pub fn new(nodes: usize) -> Self {
        Self {
            nodes,
            ..Self::default()
        }
    }

    /// Sets [`ClusterOptions::unix`].
    pub fn unix(mut self, unix: bool) -> Self {
        self.unix = unix;
        self
    }

    /// Sets [`ClusterOptions::persistence`].
    pub fn persistence(mut self, persistence: bool) -> Self {
        self.persistence = persistence;
        self
    }

    /// Appends one argument to [`ClusterOptions::extra_args`].
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Appends arguments to [`ClusterOptions::extra_args`].
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets [`ClusterOptions::password`].
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Same as [`Cluster::start_with`]`(self)`.
    pub fn start(self) -> Cluster {
        Cluster::start_with(self)
    }
}

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

/// Where a node listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeAddr {
    /// A TCP address on 127.0.0.1.
    Tcp(SocketAddr),
    /// The path of a Unix domain socket.
    Unix(PathBuf),
}

impl NodeAddr {
    /// The TCP address, if this is one.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self {
            Self::Tcp(addr) => Some(*addr),
            Self::Unix(_) => None,
        }
    }

    /// The TCP port, if this is a TCP address.
    pub fn port(&self) -> Option<u16> {
        self.socket_addr().map(|a| a.port())
    }

    /// The Unix socket path, if this is one.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            Self::Tcp(_) => None,
            Self::Unix(path) => Some(path),
        }
    }
}

impl fmt::Display for NodeAddr {
    /// `127.0.0.1:PORT` or the socket path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(addr) => write!(f, "{addr}"),
            Self::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

// ---------------------------------------------------------------------------
// Temporary directories and ports
// ---------------------------------------------------------------------------

/// A directory under `temp_dir()` removed (with its content) on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        for _ in 0..100 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!(
                "redlock-mio-test-{}-{}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed),
                nanos
            );
            let path = base.join(name);
            match fs::create_dir(&path) {
                Ok(()) => return Self(path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => panic!("cannot create a temp dir {}: {e}", path.display()),
            }
        }
        panic!(
            "cannot create a unique temp dir under {}: 100 names taken",
            base.display()
        );
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A port the kernel reports free on 127.0.0.1, not yet handed out by this
/// process. Another process may still take it before `redis-server` binds
/// it; the caller retries then.
fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to pick a free port: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cannot read the port of a bound listener: {e}"))
            .port();
        drop(listener);
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
    panic!("the kernel keeps handing out ports this process already used");
}

// ---------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------

fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) takes plain integers and has no memory effects. The
    // caller holds the unreaped `Child` of `pid`, so the pid is not reused.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The state letter of `/proc/<pid>/stat` (`T` = stopped), if readable.
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may contain anything, so go from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Waits (at most 2 s) until the process is stopped (`stopped == true`) or
/// no longer stopped, as far as `/proc` tells; SIGSTOP and SIGCONT are
/// asynchronous and tests need the new state to hold when `pause`/`resume`
/// return. Without `/proc` this returns at once.
fn wait_stop_state(pid: u32, stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        match proc_state(pid) {
            None => return,
            Some(state) if (state == 'T' || state == 't') == stopped => return,
            Some(_) => thread::sleep(Duration::from_millis(1)),
        }
    }
}

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
fn reply_len(buf: &[u8]) -> io::Result<Option<usize>> {
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
fn is_error_with(reply: &[u8], prefix: &[u8]) -> bool {
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
fn open_authenticated(
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

// ---------------------------------------------------------------------------
// Starting one process
// ---------------------------------------------------------------------------

/// Why one start attempt failed.
enum LaunchError {
    /// The port was taken (by another test, most likely): try again.
    AddrInUse,
    /// Anything else: the message says what, with the logs.
    Failed(String),
}

/// What a node needs to be started (again).
#[derive(Debug)]
struct LaunchSpec {
    label: String,
    addr: NodeAddr,
    args: Vec<OsString>,
    log: PathBuf,
    output: PathBuf,
    password: Option<String>,
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// The content of `path` from byte `from` on (lossy), empty if unreadable.
fn read_from(path: &Path, from: u64) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

/// The last `n` lines of a file, for panic messages.
fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            if lines.is_empty() {
                "(empty)".to_owned()
            } else {
                lines[start..].join("\n")
            }
        }
        Err(e) => format!("(cannot read: {e})"),
    }
}

impl LaunchSpec {
    fn logs(&self) -> String {
        format!(
            "--- last {LOG_TAIL_LINES} lines of {} ---\n{}\n--- stdout/stderr {} ---\n{}\n---",
            self.log.display(),
            tail(&self.log, LOG_TAIL_LINES),
            self.output.display(),
            tail(&self.output, LOG_TAIL_LINES),
        )
    }

    fn command_line(&self, bin: &Path) -> String {
        let mut s = bin.display().to_string();
        for a in &self.args {
            s.push(' ');
            let a = a.to_string_lossy();
            if a.is_empty() || a.contains(' ') {
                s.push_str(&format!("{a:?}"));
            } else {
                s.push_str(&a);
            }
        }
        s
    }

    fn failure(&self, bin: &Path, what: &str) -> LaunchError {
        LaunchError::Failed(format!(
            "redis {} ({}) {what}\ncommand: {}\n{}",
            self.label,
            self.addr,
            self.command_line(bin),
            self.logs()
        ))
    }

    /// Starts the process and waits until it answers `PING`.
    fn launch(&self) -> Result<Child, LaunchError> {
        let bin = redis_server_path();
        let log_start = file_len(&self.log);
        let out_start = file_len(&self.output);
        let output = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.output)
            .map_err(|e| self.failure(&bin, &format!("cannot open its output file: {e}")))?;
        let output2 = output
            .try_clone()
            .map_err(|e| self.failure(&bin, &format!("cannot clone its output file: {e}")))?;
        let mut child = Command::new(&bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(output))
            .stderr(Stdio::from(output2))
            .spawn()
            .map_err(|e| self.failure(&bin, &format!("could not be spawned: {e}")))?;

        match self.wait_ready(&mut child) {
            Ready::Yes => Ok(child),
            Ready::Exited(status) => {
                let _ = child.wait();
                let new_output =
                    read_from(&self.log, log_start) + &read_from(&self.output, out_start);
                if new_output.contains("Address already in use") {
                    Err(LaunchError::AddrInUse)
                } else {
                    Err(self.failure(&bin, &format!("exited during startup ({status})")))
                }
            }
            Ready::No(why) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(self.failure(&bin, &format!("was killed: {why}")))
            }
        }
    }

    /// One readiness probe: `Ok` once the process `pid` itself answers
    /// `+PONG`; `Err(why not yet)` otherwise. `AUTH` (if any), `PING` and
    /// `INFO server` are pipelined, and `process_id` in the `INFO` reply
    /// must be `pid`: if another test's server holds the port, it is the
    /// one that answers, and our process is about to exit on `EADDRINUSE`.
    fn probe(&self, pid: u32) -> Result<(), String> {
        let mut conn = Connection::open(&self.addr, Duration::from_millis(250))
            .map_err(|e| format!("connect: {e}"))?;
        let mut request = Vec::new();
        if let Some(pw) = &self.password {
            request.extend(encode_command(&[b"AUTH", pw.as_bytes()]));
        }
        request.extend(encode_command(&[b"PING"]));
        request.extend(encode_command(&[b"INFO", b"server"]));
        conn.send_raw(&request).map_err(|e| format!("send: {e}"))?;
        let mut read = |what: &str| {
            conn.read_reply()
                .map_err(|e| format!("reading the reply to {what}: {e}"))
        };
        let auth = match &self.password {
            Some(_) => Some(read("AUTH")?),
            None => None,
        };
        let ping = read("PING")?;
        let info = read("INFO")?;
        let lossy = |r: &[u8]| String::from_utf8_lossy(r).into_owned();
        if let Some(auth) = auth.filter(|r| r != b"+OK\r\n") {
            return Err(format!("AUTH got {:?}", lossy(&auth)));
        }
        if is_error_with(&ping, b"LOADING") {
            return Err("-LOADING".to_owned());
        }
        if !lossy(&info).contains(&format!("\r\nprocess_id:{pid}\r\n")) {
            return Err(format!(
                "answered by another process (INFO: {:?})",
                lossy(&info).lines().find(|l| l.starts_with("process_id:"))
            ));
        }
        if ping == b"+PONG\r\n" {
            Ok(())
        } else {
            Err(format!("PING got {:?}", lossy(&ping)))
        }
    }

    /// Polls until the process answers `+PONG`, exits, or
    /// [`START_TIMEOUT`] passes.
    fn wait_ready(&self, child: &mut Child) -> Ready {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Ready::Exited(status);
            }
            let last = match self.probe(child.id()) {
                Ok(()) => return Ready::Yes,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                return Ready::No(format!(
                    "no +PONG within {START_TIMEOUT:?}; last probe: {last}"
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// The outcome of [`LaunchSpec::wait_ready`].
enum Ready {
    /// It answered `+PONG`.
    Yes,
    /// The process exited.
    Exited(ExitStatus),
    /// Timed out; the reason.
    No(String),
}

// ---------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct NodeState {
    /// The process, while it has not been reaped.
    child: Option<Child>,
    /// SIGSTOP sent and no SIGCONT since.
    paused: bool,
}

impl NodeState {
    /// The pid if the process is still alive (running or paused); reaps it
    /// if it has exited on its own.
    fn live_pid(&mut self) -> Option<u32> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            Ok(Some(_)) | Err(_) => {
                self.child = None;
                self.paused = false;
                None
            }
        }
    }

    /// SIGCONT if paused, then SIGKILL; does not wait. Never panics.
    fn kill_no_wait(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if self.paused {
                let _ = signal(child.id(), libc::SIGCONT);
            }
            let _ = child.kill();
        }
        self.paused = false;
    }

    /// Reaps a killed process. Never panics.
    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

/// One `redis-server` process of a [`Cluster`], with its address and its
/// directory (which holds `redis.log`, `output.log`, and the socket or the
/// AOF files when used). Its address stays the same across restarts.
#[derive(Debug)]
pub struct Node {
    index: usize,
    spec: LaunchSpec,
    state: Mutex<NodeState>,
    // Last field: removed after `Drop for Node` has reaped the process.
    dir: TempDir,
}

impl Node {
    /// Creates the directory and starts the process (retrying on a busy
    /// port for TCP). Panics on failure; the directory is removed then.
    fn start(index: usize, opts: &ClusterOptions) -> Self {
        let dir = TempDir::new();
        let log = dir.0.join("redis.log");
        let output = dir.0.join("output.log");
        let sock = dir.0.join("redis.sock");
        if opts.unix && sock.as_os_str().len() > MAX_UNIX_PATH {
            panic!(
                "Unix socket path {} is longer than {MAX_UNIX_PATH} bytes; \
                 set TMPDIR to a shorter directory",
                sock.display()
            );
        }
        let attempts = if opts.unix { 1 } else { PORT_ATTEMPTS };
        let mut busy_ports = Vec::new();
        for _ in 0..attempts {
            let addr = if opts.unix {
                NodeAddr::Unix(sock.clone())
            } else {
                NodeAddr::Tcp(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::LOCALHOST,
                    free_port(),
                )))
            };
            let spec = LaunchSpec {
                label: format!("node {index}"),
                args: server_args(opts, &addr, &dir.0, &log),
                addr,
                log: log.clone(),
                output: output.clone(),
                password: opts.password.clone(),
            };
            match spec.launch() {
                Ok(child) => {
                    return Self {
                        index,
                        spec,
                        state: Mutex::new(NodeState {
                            child: Some(child),
                            paused: false,
                        }),
                        dir,
                    };
                }
                Err(LaunchError::AddrInUse) => busy_ports.push(spec.addr.to_string()),
                Err(LaunchError::Failed(msg)) => panic!("{msg}"),
            }
        }
        panic!(
            "redis node {index} could not start: every port tried was taken: {}\n{}",
            busy_ports.join(", "),
            tail(&log, LOG_TAIL_LINES)
        );
    }

    fn state(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The index of this node in its cluster.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Where the node listens (the same across restarts).
    pub fn addr(&self) -> &NodeAddr {
        &self.spec.addr
    }

    /// A connection URL: `redis://127.0.0.1:PORT` or `unix:///…/redis.sock`;
    /// with a password `redis://:PASSWORD@127.0.0.1:PORT` or
    /// `unix:///…/redis.sock?pass=PASSWORD` (percent-encoded).
    pub fn url(&self) -> String {
        match (&self.spec.addr, self.spec.password.as_deref()) {
            (NodeAddr::Tcp(a), None) => format!("redis://{a}"),
            (NodeAddr::Tcp(a), Some(pw)) => format!("redis://:{}@{a}", percent_encode(pw)),
            (NodeAddr::Unix(p), None) => format!("unix://{}", p.display()),
            (NodeAddr::Unix(p), Some(pw)) => {
                format!("unix://{}?pass={}", p.display(), percent_encode(pw))
            }
        }
    }

    /// The node's own temporary directory (`--dir`).
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// The node's Redis log file (`--logfile`).
    pub fn log_path(&self) -> &Path {
        &self.spec.log
    }

    /// The last `lines` lines of the Redis log, e.g. for an assert message.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.spec.log, lines)
    }

    /// The password given with `--requirepass`, if any.
    pub fn password(&self) -> Option<&str> {
        self.spec.password.as_deref()
    }

    /// The pid of the process while it is alive (running or paused);
    /// `None` after [`Node::stop`]/[`Node::kill`] or if it exited.
    pub fn pid(&self) -> Option<u32> {
        self.state().live_pid()
    }

    /// `true` while the process is alive, paused or not.
    pub fn is_running(&self) -> bool {
        self.state().live_pid().is_some()
    }

    /// `true` between [`Node::pause`] and [`Node::resume`].
    pub fn is_paused(&self) -> bool {
        let mut st = self.state();
        st.live_pid().is_some() && st.paused
    }

    fn live_pid_or_panic(&self, st: &mut NodeState, what: &str) -> u32 {
        st.live_pid().unwrap_or_else(|| {
            panic!(
                "cannot {what} redis node {} ({}): it is not running\n{}",
                self.index,
                self.spec.addr,
                self.spec.logs()
            )
        })
    }

    /// Graceful stop: SIGTERM (after SIGCONT if paused), wait up to
    /// [`STOP_TIMEOUT`], then SIGKILL. No-op if not running.
    pub fn stop(&self) {
        let mut st = self.state();
        terminate(&mut st);
    }

    /// SIGKILL and reap: the node is gone at once, connections are reset,
    /// and new ones are refused. No-op if not running.
    pub fn kill(&self) {
        let mut st = self.state();
        st.kill_no_wait();
        st.reap();
    }

    /// SIGSTOP: the process freezes; connections still open at the kernel
    /// level but get no reply. Returns once the process is stopped.
    ///
    /// # Panics
    ///
    /// If the node is not running.
    pub fn pause(&self) {
        let mut st = self.state();
        let pid = self.live_pid_or_panic(&mut st, "pause");
        signal(pid, libc::SIGSTOP)
            .unwrap_or_else(|e| panic!("SIGSTOP to redis node {} (pid {pid}): {e}", self.index));
        st.paused = true;
        wait_stop_state(pid, true);
    }

    /// SIGCONT: undoes [`Node::pause`]; the node answers what it was sent
    /// meanwhile. Returns once the process runs again.
    ///
    /// # Panics
    ///
    /// If the node is not running.
    pub fn resume(&self) {
        let mut st = self.state();
        let pid = self.live_pid_or_panic(&mut st, "resume");
        signal(pid, libc::SIGCONT)
            .unwrap_or_else(|e| panic!("SIGCONT to redis node {} (pid {pid}): {e}", self.index));
        st.paused = false;
        wait_stop_state(pid, false);
    }

    /// Starts the node again with the same address, directory and
    /// arguments, and waits until it answers `PING`. A running node is
    /// [stopped](Node::stop) first (resumed first if paused). Without
    /// persistence it comes back empty.
    ///
    /// # Panics
    ///
    /// If it cannot start (e.g. its port stays taken by another process).
    pub fn restart(&self) {
        let mut st = self.state();
        terminate(&mut st);
        let deadline = Instant::now() + RESTART_PORT_WAIT;
        while Instant::now() < deadline {
            match self.spec.launch() {
                Ok(child) => {
                    st.child = Some(child);
                    st.paused = false;
                    return;
                }
                Err(LaunchError::AddrInUse) => thread::sleep(RESTART_BACKOFF),
                Err(LaunchError::Failed(msg)) => panic!("restart: {msg}"),
            }
        }
        panic!(
            "restart: redis node {} could not bind {} again: address in use \
             for {RESTART_PORT_WAIT:?}\n{}",
            self.index,
            self.spec.addr,
            self.spec.logs()
        );
    }

    /// A raw connection with the given connect/read/write timeout; no `AUTH`
    /// is sent.
    pub fn connect(&self, timeout: Duration) -> io::Result<Connection> {
        Connection::open(&self.spec.addr, timeout)
    }

    /// A connection that has sent `AUTH` if the node has a password.
    pub fn connect_authenticated(&self, timeout: Duration) -> io::Result<Connection> {
        open_authenticated(&self.spec.addr, self.spec.password.as_deref(), timeout)
    }

    /// Sends one command on a fresh (authenticated) connection and returns
    /// the raw bytes of the reply, or the I/O error.
    pub fn try_command(&self, args: &[&[u8]], timeout: Duration) -> io::Result<Vec<u8>> {
        self.connect_authenticated(timeout)?.request(args)
    }

    /// Sends one command on a fresh (authenticated) connection and returns
    /// the raw bytes of the reply (e.g. `b"+OK\r\n"`, `b"$-1\r\n"`), with a
    /// [`COMMAND_TIMEOUT`] for each read and write.
    ///
    /// # Panics
    ///
    /// On any I/O error or timeout, naming the node and the command.
    pub fn command(&self, args: &[&[u8]]) -> Vec<u8> {
        self.try_command(args, COMMAND_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "redis node {} ({}): command {:?} failed: {e}",
                self.index,
                self.spec.addr,
                args.iter()
                    .map(|a| String::from_utf8_lossy(a))
                    .collect::<Vec<_>>()
            )
        })
    }

    fn unexpected(&self, what: &str, reply: &[u8]) -> ! {
        panic!(
            "redis node {} ({}): unexpected reply to {what}: {:?}",
            self.index,
            self.spec.addr,
            String::from_utf8_lossy(reply)
        )
    }

    /// `GET key`: `None` if the key does not exist.
    ///
    /// # Panics
    ///
    /// On an I/O error or a reply that is not a bulk string.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        let reply = self.command(&[b"GET", key.as_ref()]);
        if reply == b"$-1\r\n" {
            return None;
        }
        match (reply.first(), reply_len(&reply)) {
            (Some(b'$'), Ok(Some(n))) if n == reply.len() => {
                let start = reply.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1);
                Some(reply[start..reply.len() - 2].to_vec())
            }
            _ => self.unexpected("GET", &reply),
        }
    }

    /// `SET key value`.
    ///
    /// # Panics
    ///
    /// On an I/O error or a reply other than `+OK`.
    pub fn set(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let reply = self.command(&[b"SET", key.as_ref(), value.as_ref()]);
        if reply != b"+OK\r\n" {
            self.unexpected("SET", &reply);
        }
    }

    /// `EXISTS key`.
    ///
    /// # Panics
    ///
    /// On an I/O error or a reply other than `:0` / `:1`.
    pub fn exists(&self, key: impl AsRef<[u8]>) -> bool {
        let reply = self.command(&[b"EXISTS", key.as_ref()]);
        match reply.as_slice() {
            b":1\r\n" => true,
            b":0\r\n" => false,
            _ => self.unexpected("EXISTS", &reply),
        }
    }

    /// `FLUSHALL`: removes every key of the node.
    ///
    /// # Panics
    ///
    /// On an I/O error or a reply other than `+OK`.
    pub fn flushall(&self) {
        let reply = self.command(&[b"FLUSHALL"]);
        if reply != b"+OK\r\n" {
            self.unexpected("FLUSHALL", &reply);
        }
    }
}

impl Drop for Node {
    /// Kills and reaps the process if still there; then the directory goes.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        st.kill_no_wait();
        st.reap();
    }
}

/// SIGTERM (after SIGCONT if paused), bounded wait, then SIGKILL; reaps.
fn terminate(st: &mut NodeState) {
    let Some(pid) = st.live_pid() else {
        return;
    };
    if st.paused {
        let _ = signal(pid, libc::SIGCONT);
        st.paused = false;
    }
    if signal(pid, libc::SIGTERM).is_ok() {
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if st.live_pid().is_none() {
                return;
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
    st.kill_no_wait();
    st.reap();
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The command line of one node; `extra_args` come last so they win.
fn server_args(opts: &ClusterOptions, addr: &NodeAddr, dir: &Path, log: &Path) -> Vec<OsString> {
    let port = addr.port().unwrap_or(0).to_string();
    let mut args: Vec<OsString> = [
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--enable-debug-command",
        "local",
        "--save",
        "",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let persistence: &[&str] = if opts.persistence {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    args.extend(persistence.iter().map(OsString::from));
    if let Some(pw) = &opts.password {
        args.push("--requirepass".into());
        args.push(pw.into());
    }
    args.push("--dir".into());
    args.push(dir.into());
    args.push("--logfile".into());
    args.push(log.into());
    if let NodeAddr::Unix(path) = addr {
        args.push("--unixsocket".into());
        args.push(path.into());
        args.push("--unixsocketperm".into());
        args.push("700".into());
    }
    args.extend(opts.extra_args.iter().map(OsString::from));
    args
}

// ---------------------------------------------------------------------------
// The cluster
// ---------------------------------------------------------------------------

/// N independent `redis-server` processes (Redlock's N masters, not a Redis
/// Cluster). Dropping it — also while a test unwinds from a panic — SIGCONTs
/// paused nodes, SIGKILLs and reaps every process it started, and removes
/// every temporary directory. Nodes are addressed by index `0..len()`.
#[derive(Debug)]
pub struct Cluster {
    opts: ClusterOptions,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` TCP nodes (1 to [`MAX_NODES`]) with the default options
    /// and waits until each answers `PING`.
    ///
    /// # Panics
    ///
    /// If `n` is out of range, `redis-server` is missing, or a node does not
    /// start (with the tail of its log). Nodes already started are cleaned
    /// up.
    pub fn start(n: usize) -> Self {
        Self::start_with(ClusterOptions::new(n))
    }

    /// Starts a cluster as `opts` says; see [`Cluster::start`].
    pub fn start_with(opts: ClusterOptions) -> Self {
        assert!(
            (1..=MAX_NODES).contains(&opts.nodes),
            "a test cluster has 1 to {MAX_NODES} nodes, not {}",
            opts.nodes
        );
        // Fail early, once, with the install hint.
        redis_server_path();
        let mut cluster = Self {
            nodes: Vec::with_capacity(opts.nodes),
            opts,
        };
        // If a start panics, `cluster` is dropped while unwinding and cleans
        // up the nodes started so far.
        for i in 0..cluster.opts.nodes {
            let node = Node::start(i, &cluster.opts);
            cluster.nodes.push(node);
        }
        cluster
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always `false`: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All nodes, in index order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    pub fn node(&self, i: usize) -> &Node {
        self.nodes.get(i).unwrap_or_else(|| {
            panic!(
                "node index {i} out of range: the cluster has {} nodes",
                self.nodes.len()
            )
        })
    }

    /// The addresses of all nodes, in index order.
    pub fn addrs(&self) -> Vec<NodeAddr> {
        self.nodes.iter().map(|n| n.addr().clone()).collect()
    }

    /// The URLs of all nodes, in index order (see [`Node::url`]).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// [`Node::stop`] on node `i`: SIGTERM, bounded wait, then SIGKILL.
    pub fn stop(&self, i: usize) {
        self.node(i).stop();
    }

    /// [`Node::kill`] on node `i`: SIGKILL and reap.
    pub fn kill(&self, i: usize) {
        self.node(i).kill();
    }

    /// [`Node::pause`] on node `i`: SIGSTOP.
    pub fn pause(&self, i: usize) {
        self.node(i).pause();
    }

    /// [`Node::resume`] on node `i`: SIGCONT.
    pub fn resume(&self, i: usize) {
        self.node(i).resume();
    }

    /// [`Node::restart`] on node `i`: same address and directory.
    pub fn restart(&self, i: usize) {
        self.node(i).restart();
    }

    /// [`Node::is_running`] of node `i` (paused counts as running).
    pub fn is_running(&self, i: usize) -> bool {
        self.node(i).is_running()
    }

    /// [`Node::is_paused`] of node `i`.
    pub fn is_paused(&self, i: usize) -> bool {
        self.node(i).is_paused()
    }

    /// [`Node::command`] on node `i`: raw reply bytes.
    pub fn command(&self, i: usize, args: &[&[u8]]) -> Vec<u8> {
        self.node(i).command(args)
    }

    /// [`Node::get`] on node `i`.
    pub fn get(&self, i: usize, key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        self.node(i).get(key)
    }

    /// [`Node::set`] on node `i`.
    pub fn set(&self, i: usize, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.node(i).set(key, value);
    }

    /// [`Node::exists`] on node `i`.
    pub fn exists(&self, i: usize, key: impl AsRef<[u8]>) -> bool {
        self.node(i).exists(key)
    }

    /// [`Node::flushall`] on node `i`.
    pub fn flushall(&self, i: usize) {
        self.node(i).flushall();
    }
}

impl Drop for Cluster {
    /// SIGCONT paused nodes and SIGKILL every process first (so they die in
    /// parallel), then reap them all; then the nodes' directories are
    /// removed. Never panics.
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .kill_no_wait();
        }
        for node in &mut self.nodes {
            node.state
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .reap();
        }
        // Dropping the nodes (after this body) removes their directories.
    }
}
