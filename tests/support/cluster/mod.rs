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
//!
//! The harness is split by concern: [`launch`] finds `redis-server`, makes
//! each node's directory and port and starts one process until it answers;
//! [`node`] holds one process and its faults (stop, kill, pause, resume,
//! restart) and the data helpers; [`resp`] is the hand-written RESP
//! connection. This file holds the options, the addresses and the
//! [`Cluster`] itself, and re-exports the public names of the others.

mod launch;
mod node;
mod resp;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::time::Duration;

// The public names of the submodules, at their old paths. Each test binary
// uses only some of them (see `support`'s own `allow(dead_code)`).
#[allow(unused_imports, reason = "each test binary uses only some of them")]
pub use self::{
    launch::{find_redis_server, redis_server_path},
    node::Node,
    resp::{Connection, encode_command},
};

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
    /// Environment variables for one node's process, at every start and
    /// restart: `(node index, name, value)` (see `support::clock`).
    pub node_env: Vec<(usize, String, String)>,
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
            node_env: Vec::new(),
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

    /// Adds a variable to node `node`'s environment
    /// ([`ClusterOptions::node_env`]).
    pub fn node_env(
        mut self,
        node: usize,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Self {
        self.node_env.push((node, name.into(), value.into()));
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
