//! One `redis-server` process of a [`Cluster`](super::Cluster): its state,
//! the faults a test injects (stop, kill, pause, resume, restart), and the
//! data helpers (`GET`, `SET`, …) on a fresh connection.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::process::Child;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::launch::{LaunchError, LaunchSpec, TempDir, free_port, server_args, tail};
use super::resp::{Connection, open_authenticated, reply_len};
use super::{
    COMMAND_TIMEOUT, ClusterOptions, LOG_TAIL_LINES, MAX_UNIX_PATH, NodeAddr, POLL_INTERVAL,
    PORT_ATTEMPTS, RESTART_BACKOFF, RESTART_PORT_WAIT, STOP_TIMEOUT,
};

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
// Nodes
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
pub(super) struct NodeState {
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
    pub(super) fn kill_no_wait(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if self.paused {
                let _ = signal(child.id(), libc::SIGCONT);
            }
            let _ = child.kill();
        }
        self.paused = false;
    }

    /// Reaps a killed process. Never panics.
    pub(super) fn reap(&mut self) {
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
    pub(super) state: Mutex<NodeState>,
    // Last field: removed after `Drop for Node` has reaped the process.
    dir: TempDir,
}

impl Node {
    /// Creates the directory and starts the process (retrying on a busy
    /// port for TCP). Panics on failure; the directory is removed then.
    pub(super) fn start(index: usize, opts: &ClusterOptions) -> Self {
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
                env: opts
                    .node_env
                    .iter()
                    .filter(|(node, _, _)| *node == index)
                    .map(|(_, k, v)| (k.clone(), v.clone()))
                    .collect(),
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
