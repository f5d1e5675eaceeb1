//! Small checks shared by the integration tests: polling with a deadline,
//! reading a node's state (TTLs, command statistics), and a master's state
//! in a round's report.

use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::NodeState;

use super::cluster::Cluster;

/// The clock drift allowed for a lock of `ttl`, as `Builder::drift_factor`
/// documents it: `ttl * factor`, plus 2 ms.
pub fn drift(ttl: Duration, factor: f64) -> Duration {
    ttl.mul_f64(factor) + Duration::from_millis(2)
}

/// Polls `check` every 5 ms until it holds or `within` has passed; returns
/// whether it held. For "eventually on every node" checks: a lock call
/// returns at quorum, before the last nodes have answered.
pub fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// A master a round could not reach: it failed, or did not answer in
/// time.
pub fn is_unreachable(state: &NodeState) -> bool {
    matches!(state, NodeState::Failed(_) | NodeState::TimedOut)
}

/// Parses an integer reply `:N\r\n`.
pub fn integer(reply: &[u8]) -> i64 {
    let text = String::from_utf8_lossy(reply);
    text.strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {text:?}"))
}

/// `PTTL key` on node `i`, in milliseconds (-2: no key, -1: no expiry).
pub fn pttl(cluster: &Cluster, i: usize, key: &[u8]) -> i64 {
    integer(&cluster.command(i, &[b"PTTL", key]))
}

/// `(calls, failed_calls)` of `command` (lower case, e.g. `evalsha`) in
/// `INFO commandstats` of node `i`; `(0, 0)` if never called.
pub fn command_stats(cluster: &Cluster, i: usize, command: &str) -> (u64, u64) {
    let reply = cluster.command(i, &[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&reply);
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = text.lines().find(|l| l.starts_with(&prefix)) else {
        return (0, 0);
    };
    let field = |name: &str| -> u64 {
        line[prefix.len()..]
            .split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    (field("calls"), field("failed_calls"))
}

/// Nodes among `nodes` that hold `key` with `token`.
pub fn holders(
    cluster: &Cluster,
    nodes: impl IntoIterator<Item = usize>,
    key: &[u8],
    token: &[u8],
) -> Vec<usize> {
    nodes
        .into_iter()
        .filter(|&i| cluster.get(i, key).as_deref() == Some(token))
        .collect()
}

/// Waits until none of `nodes` has `key`; panics naming those that keep
/// it.
pub fn assert_gone(cluster: &Cluster, nodes: &[usize], key: &[u8], within: Duration) {
    let gone = eventually(within, || nodes.iter().all(|&i| !cluster.exists(i, key)));
    let left: Vec<usize> = nodes
        .iter()
        .copied()
        .filter(|&i| cluster.exists(i, key))
        .collect();
    assert!(
        gone,
        "key \"{}\" still on nodes {left:?} after {within:?}",
        key.escape_ascii()
    );
}

/// `CONFIG RESETSTAT` on every node, so that [`command_stats`] counts from
/// zero.
pub fn reset_stats(cluster: &Cluster) {
    for i in 0..cluster.len() {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }
}

/// One TCP connection to 127.0.0.1 as `/proc/net/tcp` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpEntry {
    /// The local address, as the table writes it (`0100007F:9C40`).
    pub local: String,
    /// The state: `01` established, `08` close-wait (the peer's FIN came).
    pub state: String,
    /// Bytes received and not yet read by the owner of the socket.
    pub rx_queue: u64,
}

/// The TCP connections whose remote end is 127.0.0.1:`port`: for a test
/// client's connections to a server, whether the server's bytes or FIN
/// have arrived, which no call of the client says.
pub fn tcp_to(port: u16) -> Vec<TcpEntry> {
    let table = std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_else(|e| panic!("cannot read /proc/net/tcp: {e}"));
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local_address rem_address st tx_queue:rx_queue ...
            let mut fields = line.split_whitespace().skip(1);
            let (local, rem, state, queues) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            if rem != remote {
                return None;
            }
            let rx = queues.split(':').nth(1)?;
            Some(TcpEntry {
                local: local.to_owned(),
                state: state.to_owned(),
                rx_queue: u64::from_str_radix(rx, 16).ok()?,
            })
        })
        .collect()
}

/// Closes every client connection of node `i` (the caller's own included):
/// the plain ones and those subscribed to a channel, which the server
/// counts apart (a client's connections subscribe to its wake channel).
pub fn kill_clients(cluster: &Cluster, i: usize) {
    for kind in [&b"normal"[..], b"pubsub"] {
        cluster.command(i, &[b"CLIENT", b"KILL", b"TYPE", kind]);
    }
}

/// On how many masters the wait queue of `resource` holds `n` waiters or
/// more.
pub fn queued_on(cluster: &Cluster, resource: &[u8], n: i64) -> usize {
    let queue = [&b"redlock-mio:queue:"[..], resource].concat();
    (0..cluster.len())
        .filter(|&i| integer(&cluster.command(i, &[b"ZCARD", &queue])) >= n)
        .count()
}

/// On how many of `nodes` the wait queue of `resource` holds a waiter:
/// [`queued_on`] for the masters that answer (not a paused one).
pub fn queued_at(cluster: &Cluster, nodes: &[usize], resource: &[u8]) -> usize {
    let queue = [&b"redlock-mio:queue:"[..], resource].concat();
    nodes
        .iter()
        .filter(|&&i| integer(&cluster.command(i, &[b"ZCARD", &queue])) >= 1)
        .count()
}

/// Every command's `calls` in `INFO commandstats` of node `i`, by name
/// (lower case), but `info`'s own: what the node ran, for a check that a
/// call sent nothing (a snapshot before and one after must be equal).
pub fn calls(cluster: &Cluster, i: usize) -> std::collections::BTreeMap<String, u64> {
    let reply = cluster.command(i, &[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&reply);
    text.lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            (name != "info").then(|| (name.to_owned(), calls))
        })
        .collect()
}

/// Each of `keys` that some master still has (escaped, the first bytes
/// only), with those masters.
pub fn left_on(cluster: &Cluster, keys: &[Vec<u8>]) -> Vec<(String, Vec<usize>)> {
    keys.iter()
        .filter_map(|key| {
            let on: Vec<usize> = (0..cluster.len())
                .filter(|&i| cluster.exists(i, key))
                .collect();
            (!on.is_empty()).then(|| (short(key), on))
        })
        .collect()
}

/// The first 48 bytes of `key`, escaped, and its length if it is longer.
pub fn short(key: &[u8]) -> String {
    match key.get(..48) {
        Some(head) if key.len() > 48 => format!("{}... ({} bytes)", head.escape_ascii(), key.len()),
        _ => key.escape_ascii().to_string(),
    }
}
