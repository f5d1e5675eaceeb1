//! Tests of the test harness itself (`tests/support/cluster/`): it starts
//! real `redis-server` processes, controls them, and leaves nothing behind.
// Test code: a panic with context is the intended way to fail.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::io;
use std::net::TcpListener;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::cluster::{
    Cluster, ClusterOptions, MAX_NODES, NodeAddr, encode_command, redis_server_path,
};

const PONG: &[u8] = b"+PONG\r\n";
const OK: &[u8] = b"+OK\r\n";

/// `true` if a process with this pid exists (zombies included).
fn process_exists(pid: u32) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill(2) with signal 0 only checks for existence.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        return true;
    }
    let err = io::Error::last_os_error();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ESRCH),
        "kill({pid}, 0) failed with something else than ESRCH: {err}"
    );
    false
}

fn live_pids(cluster: &Cluster) -> Vec<u32> {
    cluster
        .nodes()
        .iter()
        .map(|n| n.pid().expect("node should be running"))
        .collect()
}

fn dirs(cluster: &Cluster) -> Vec<PathBuf> {
    cluster.nodes().iter().map(|n| n.dir().to_owned()).collect()
}

fn assert_all_gone(pids: &[u32], dirs: &[PathBuf]) {
    for &pid in pids {
        assert!(!process_exists(pid), "redis pid {pid} still exists");
    }
    for dir in dirs {
        assert!(!dir.exists(), "temp dir {} still exists", dir.display());
    }
}

/// Starts `n` TCP nodes and checks each answers PING on its own port.
fn start_and_ping(n: usize) {
    let cluster = Cluster::start(n);
    assert_eq!(cluster.len(), n);
    assert!(!cluster.is_empty());
    let mut ports = HashSet::new();
    let mut pids = HashSet::new();
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert_eq!(node.index(), i);
        assert_eq!(node.command(&[b"PING"]), PONG, "node {i}");
        let NodeAddr::Tcp(addr) = node.addr() else {
            panic!("node {i}: expected a TCP address, got {}", node.addr());
        };
        assert!(addr.ip().is_loopback(), "node {i} on {addr}");
        assert!(ports.insert(addr.port()), "port {addr} used twice");
        assert_eq!(node.url(), format!("redis://127.0.0.1:{}", addr.port()));
        assert!(node.dir().is_dir(), "dir of node {i}");
        assert!(node.log_path().is_file(), "log of node {i}");
        let pid = node.pid().expect("running node has a pid");
        assert!(process_exists(pid));
        assert!(pids.insert(pid));
        assert!(cluster.is_running(i));
        assert!(!cluster.is_paused(i));
    }
    assert_eq!(cluster.urls().len(), n);
    assert_eq!(cluster.addrs().len(), n);
    let dir_set: HashSet<_> = dirs(&cluster).into_iter().collect();
    assert_eq!(dir_set.len(), n, "each node has its own dir");
}

#[test]
fn start_1_node() {
    start_and_ping(1);
}

#[test]
fn start_3_nodes() {
    start_and_ping(3);
}

#[test]
fn start_5_nodes() {
    start_and_ping(5);
}

#[test]
fn start_7_nodes() {
    start_and_ping(MAX_NODES);
}

#[test]
#[should_panic(expected = "1 to 7 nodes")]
fn zero_nodes_is_refused() {
    let _ = Cluster::start(0);
}

#[test]
fn default_config_has_no_persistence_and_debug_enabled() {
    let cluster = Cluster::start(1);
    assert_eq!(
        cluster.command(0, &[b"CONFIG", b"GET", b"save"]),
        b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert_eq!(
        cluster.command(0, &[b"CONFIG", b"GET", b"appendonly"]),
        b"*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
    assert_eq!(cluster.command(0, &[b"DEBUG", b"SLEEP", b"0"]), OK);
    let dir = cluster
        .node(0)
        .dir()
        .to_str()
        .expect("utf-8 dir")
        .to_owned();
    let expected = format!("*2\r\n$3\r\ndir\r\n${}\r\n{dir}\r\n", dir.len());
    assert_eq!(
        String::from_utf8_lossy(&cluster.command(0, &[b"CONFIG", b"GET", b"dir"])),
        expected
    );
}

#[test]
fn set_get_exists_flushall() {
    let cluster = Cluster::start(2);
    assert_eq!(cluster.command(0, &[b"SET", b"k", b"v\r\n1"]), OK);
    assert_eq!(cluster.get(0, "k").as_deref(), Some(&b"v\r\n1"[..]));
    assert_eq!(cluster.command(0, &[b"GET", b"k"]), b"$4\r\nv\r\n1\r\n");
    assert!(cluster.exists(0, "k"));
    // Nodes are independent.
    assert_eq!(cluster.get(1, "k"), None);
    assert!(!cluster.exists(1, "k"));
    // Other reply types are returned whole.
    assert_eq!(cluster.command(1, &[b"INCR", b"n"]), b":1\r\n");
    assert_eq!(
        cluster.command(0, &[b"MGET", b"k", b"missing"]),
        b"*2\r\n$4\r\nv\r\n1\r\n$-1\r\n"
    );
    assert!(
        cluster
            .command(0, &[b"NO-SUCH-COMMAND"])
            .starts_with(b"-ERR")
    );
    cluster.set(1, b"empty", b"");
    assert_eq!(cluster.get(1, b"empty"), Some(Vec::new()));
    // A big value spans several reads.
    let big = vec![b'x'; 100_000];
    cluster.set(0, "big", &big);
    assert_eq!(cluster.get(0, "big"), Some(big));
    cluster.flushall(0);
    assert!(!cluster.exists(0, "k"));
    assert!(cluster.exists(1, "n"));
}

#[test]
fn raw_connection_pipelines() {
    let cluster = Cluster::start(1);
    let mut conn = cluster
        .node(0)
        .connect(Duration::from_secs(2))
        .expect("connect");
    let mut pipeline = encode_command(&[b"SET", b"a", b"1"]);
    pipeline.extend(encode_command(&[b"GET", b"a"]));
    pipeline.extend(encode_command(&[b"PING"]));
    conn.send_raw(&pipeline).expect("send");
    assert_eq!(conn.read_reply().expect("reply 1"), OK);
    assert_eq!(conn.read_reply().expect("reply 2"), b"$1\r\n1\r\n");
    assert_eq!(conn.read_reply().expect("reply 3"), PONG);
}

#[test]
fn kill_refuses_connections_then_restart_is_empty_on_same_port() {
    let cluster = Cluster::start(3);
    let addr = cluster.node(1).addr().clone();
    let old_pid = cluster.node(1).pid().expect("pid");
    cluster.set(1, "k", "v");
    cluster.set(0, "k", "v");

    cluster.kill(1);
    assert!(!cluster.is_running(1));
    assert_eq!(cluster.node(1).pid(), None);
    assert!(!process_exists(old_pid), "killed pid is reaped");
    let err = cluster
        .node(1)
        .connect(Duration::from_secs(1))
        .expect_err("a killed node must refuse connections");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    // The others are untouched.
    assert_eq!(cluster.command(0, &[b"PING"]), PONG);
    assert_eq!(cluster.command(2, &[b"PING"]), PONG);

    cluster.restart(1);
    assert!(cluster.is_running(1));
    assert_eq!(cluster.node(1).addr(), &addr, "restart keeps the address");
    assert_ne!(cluster.node(1).pid(), Some(old_pid));
    assert_eq!(cluster.command(1, &[b"PING"]), PONG);
    assert_eq!(cluster.get(1, "k"), None, "no persistence: restarted empty");
    assert_eq!(cluster.get(0, "k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn stop_is_graceful_and_restart_of_a_running_node_works() {
    let cluster = Cluster::start(2);
    let pid = cluster.node(0).pid().expect("pid");
    cluster.stop(0);
    assert!(!cluster.is_running(0));
    assert!(!process_exists(pid));
    assert!(
        cluster.node(0).log_tail(20).contains("ready to exit"),
        "SIGTERM shutdown is logged:\n{}",
        cluster.node(0).log_tail(20)
    );
    // Stopping or killing a stopped node is a no-op.
    cluster.stop(0);
    cluster.kill(0);
    cluster.restart(0);
    assert_eq!(cluster.command(0, &[b"PING"]), PONG);

    // Restart of a running node stops it first.
    cluster.set(1, "k", "v");
    let pid = cluster.node(1).pid().expect("pid");
    cluster.restart(1);
    assert!(!process_exists(pid));
    assert_eq!(cluster.get(1, "k"), None);
}

#[test]
fn pause_times_out_then_resume_answers() {
    let cluster = Cluster::start(2);
    let node = cluster.node(0);
    cluster.pause(0);
    assert!(cluster.is_paused(0));
    assert!(cluster.is_running(0), "a paused node is still running");

    let mut conn = node
        .connect(Duration::from_millis(200))
        .expect("the kernel still accepts connections for a paused node");
    let started = Instant::now();
    let err = conn
        .request(&[b"PING"])
        .expect_err("a paused node must not answer");
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "expected a read timeout, got {err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    // The other node is not affected.
    assert_eq!(cluster.command(1, &[b"PING"]), PONG);

    cluster.resume(0);
    assert!(!cluster.is_paused(0));
    // The PING sent while paused is answered now.
    conn.set_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    assert_eq!(conn.read_reply().expect("late reply"), PONG);
    assert_eq!(cluster.command(0, &[b"PING"]), PONG);
}

#[test]
fn restart_and_stop_of_a_paused_node() {
    let cluster = Cluster::start(2);
    cluster.pause(0);
    cluster.restart(0);
    assert!(!cluster.is_paused(0));
    assert_eq!(cluster.command(0, &[b"PING"]), PONG);

    cluster.pause(1);
    let pid = cluster.node(1).pid().expect("pid");
    let started = Instant::now();
    cluster.stop(1);
    assert!(!process_exists(pid));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "stop resumes a paused node so SIGTERM works (took {:?})",
        started.elapsed()
    );
}

#[test]
fn restart_waits_for_its_port_to_be_free_again() {
    let cluster = Cluster::start(1);
    let addr = cluster.node(0).addr().socket_addr().expect("tcp");
    cluster.kill(0);
    // Someone else holds the port for a while: restart retries until free.
    let squatter = TcpListener::bind(addr).expect("the port of a killed node is free");
    // Read before the releaser starts: the port is free 300 ms after it at
    // the earliest, however late the threads run.
    let started = Instant::now();
    let releaser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        drop(squatter);
    });
    cluster.restart(0);
    assert!(started.elapsed() >= Duration::from_millis(300));
    releaser.join().expect("releaser thread");
    assert_eq!(cluster.node(0).addr().socket_addr(), Some(addr));
    assert_eq!(cluster.command(0, &[b"PING"]), PONG);
    assert!(
        cluster
            .node(0)
            .log_tail(1000)
            .contains("Address already in use"),
        "the first attempts hit the busy port"
    );
}

#[test]
fn restart_is_not_fooled_by_another_redis_on_its_port() {
    let cluster = Cluster::start(1);
    let port = cluster.node(0).addr().port().expect("tcp");
    cluster.kill(0);
    // Another test's server took the port: it answers PING, but it is not
    // our node, so restart must wait until the port is free again.
    let mut squatter = Command::new(redis_server_path())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the squatter");
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster
        .node(0)
        .try_command(&[b"PING"], Duration::from_millis(100))
        .ok()
        .as_deref()
        != Some(PONG)
    {
        assert!(Instant::now() < deadline, "the squatter did not start");
        thread::sleep(Duration::from_millis(5));
    }
    let squatter_pid = squatter.id();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(400));
        squatter.kill().expect("kill the squatter");
        squatter.wait().expect("reap the squatter");
    });
    cluster.restart(0);
    killer.join().expect("killer thread");
    let pid = cluster.node(0).pid().expect("restarted node runs");
    assert_ne!(pid, squatter_pid);
    let info = cluster.command(0, &[b"INFO", b"server"]);
    assert!(
        String::from_utf8_lossy(&info).contains(&format!("process_id:{pid}\r\n")),
        "the restarted node itself answers"
    );
}

#[test]
fn restart_on_a_port_taken_for_good_panics() {
    let cluster = Cluster::start(1);
    let addr = cluster.node(0).addr().socket_addr().expect("tcp");
    cluster.kill(0);
    let _squatter = TcpListener::bind(addr).expect("the port of a killed node is free");
    let result = panic::catch_unwind(AssertUnwindSafe(|| cluster.restart(0)));
    let payload = result.expect_err("restart on a taken port must fail");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(msg.contains("address in use"), "message: {msg}");
    assert!(!cluster.is_running(0));
}

#[test]
fn unix_socket_cluster() {
    let cluster = ClusterOptions::new(3).unix(true).start();
    for (i, node) in cluster.nodes().iter().enumerate() {
        let NodeAddr::Unix(path) = node.addr() else {
            panic!("node {i}: expected a Unix socket, got {}", node.addr());
        };
        assert!(path.starts_with(node.dir()));
        assert_eq!(node.url(), format!("unix://{}", path.display()));
        assert!(node.url().starts_with("unix:///"));
        assert_eq!(node.command(&[b"PING"]), PONG);
        assert_eq!(node.addr().port(), None);
    }
    assert_eq!(
        cluster.command(0, &[b"CONFIG", b"GET", b"port"]),
        b"*2\r\n$4\r\nport\r\n$1\r\n0\r\n",
        "no TCP listener"
    );
    cluster.set(2, "k", "v");
    assert_eq!(cluster.get(2, "k").as_deref(), Some(&b"v"[..]));
    cluster.kill(2);
    let err = cluster
        .node(2)
        .connect(Duration::from_secs(1))
        .expect_err("a killed node must refuse connections");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
    cluster.restart(2);
    assert_eq!(cluster.command(2, &[b"PING"]), PONG);
    assert_eq!(cluster.get(2, "k"), None);
}

#[test]
fn password_requires_auth() {
    let cluster = ClusterOptions::new(2).password("s3cret pw").start();
    let node = cluster.node(0);
    let port = node.addr().port().expect("tcp");
    assert_eq!(node.url(), format!("redis://:s3cret%20pw@127.0.0.1:{port}"));
    let mut raw = node.connect(Duration::from_secs(2)).expect("connect");
    let reply = raw.request(&[b"GET", b"k"]).expect("reply");
    assert!(
        reply.starts_with(b"-NOAUTH"),
        "unauthenticated: {:?}",
        String::from_utf8_lossy(&reply)
    );
    assert!(
        raw.request(&[b"AUTH", b"wrong"])
            .expect("reply")
            .starts_with(b"-WRONGPASS")
    );
    // The helpers authenticate.
    assert_eq!(node.command(&[b"PING"]), PONG);
    cluster.set(0, "k", "v");
    assert_eq!(cluster.get(0, "k").as_deref(), Some(&b"v"[..]));
    cluster.kill(1);
    cluster.restart(1);
    assert_eq!(cluster.command(1, &[b"PING"]), PONG);

    let unix = ClusterOptions::new(1).unix(true).password("p@ss").start();
    assert!(unix.node(0).url().ends_with("/redis.sock?pass=p%40ss"));
    assert_eq!(unix.command(0, &[b"PING"]), PONG);
}

#[test]
fn persistence_survives_kill_and_restart() {
    let cluster = ClusterOptions::new(1).persistence(true).start();
    assert_eq!(
        cluster.command(0, &[b"CONFIG", b"GET", b"appendfsync"]),
        b"*2\r\n$11\r\nappendfsync\r\n$6\r\nalways\r\n"
    );
    cluster.set(0, "k", "v");
    cluster.kill(0);
    cluster.restart(0);
    assert_eq!(cluster.get(0, "k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn extra_args_are_applied() {
    let cluster = Cluster::start_with(ClusterOptions {
        nodes: 2,
        extra_args: vec!["--maxmemory".into(), "1mb".into()],
        ..ClusterOptions::default()
    });
    for i in 0..2 {
        assert_eq!(
            cluster.command(i, &[b"CONFIG", b"GET", b"maxmemory"]),
            b"*2\r\n$9\r\nmaxmemory\r\n$7\r\n1048576\r\n"
        );
    }
    assert_eq!(cluster.options().nodes, 2);
}

#[test]
fn a_node_that_cannot_start_panics_with_its_log() {
    let result = panic::catch_unwind(|| {
        ClusterOptions::new(1)
            .args(["--no-such-directive", "x"])
            .start()
    });
    let payload = result.expect_err("a bad directive must fail the start");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(msg.contains("exited during startup"), "message: {msg}");
    assert!(msg.contains("no-such-directive"), "message: {msg}");
    assert!(msg.contains("Bad directive"), "log tail in message: {msg}");
}

#[test]
fn drop_leaves_no_process_and_no_dir() {
    let cluster = Cluster::start(3);
    let pids = live_pids(&cluster);
    let dirs = dirs(&cluster);
    cluster.pause(1);
    let killed_dir_only = cluster.node(2).dir().to_owned();
    cluster.kill(2);
    assert!(killed_dir_only.exists(), "the dir stays until drop");
    drop(cluster);
    assert_all_gone(&pids, &dirs);
}

#[test]
fn panic_in_a_test_still_cleans_up() {
    let seen: Mutex<Option<(Vec<u32>, Vec<PathBuf>)>> = Mutex::new(None);
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let cluster = Cluster::start(2);
        cluster.pause(0);
        *seen.lock().unwrap() = Some((live_pids(&cluster), dirs(&cluster)));
        panic!("deliberate test failure with a live cluster");
    }));
    assert!(result.is_err());
    let (pids, dirs) = seen
        .into_inner()
        .unwrap()
        .expect("the closure ran up to the panic");
    assert_eq!(pids.len(), 2);
    assert_all_gone(&pids, &dirs);
}

#[test]
fn clusters_in_parallel_threads_do_not_clash() {
    const THREADS: usize = 8;
    let all: Vec<(Vec<u32>, Vec<PathBuf>, Vec<NodeAddr>)> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || {
                    let cluster = Cluster::start(2);
                    for i in 0..2 {
                        let value = format!("thread {t} node {i}");
                        cluster.set(i, "owner", &value);
                        assert_eq!(
                            cluster.get(i, "owner").as_deref(),
                            Some(value.as_bytes()),
                            "a node is shared with another cluster"
                        );
                    }
                    // Restart on the same port while the others churn.
                    cluster.kill(1);
                    cluster.restart(1);
                    assert_eq!(cluster.get(1, "owner"), None);
                    assert_eq!(
                        cluster.get(0, "owner").as_deref(),
                        Some(format!("thread {t} node 0").as_bytes())
                    );
                    (live_pids(&cluster), dirs(&cluster), cluster.addrs())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a cluster thread panicked"))
            .collect()
    });
    let addrs: HashSet<NodeAddr> = all.iter().flat_map(|(_, _, a)| a.clone()).collect();
    assert_eq!(addrs.len(), THREADS * 2, "every node has its own address");
    for (pids, dirs, _) in &all {
        assert_all_gone(pids, dirs);
    }
}

#[test]
fn control_from_another_thread() {
    let cluster = Cluster::start(3);
    thread::scope(|s| {
        s.spawn(|| cluster.kill(2));
        s.spawn(|| cluster.pause(1));
    });
    assert!(!cluster.is_running(2));
    assert!(cluster.is_paused(1));
    thread::scope(|s| {
        s.spawn(|| cluster.resume(1));
        s.spawn(|| cluster.restart(2));
    });
    for i in 0..3 {
        assert_eq!(cluster.command(i, &[b"PING"]), PONG);
    }
}

#[test]
fn cluster_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Cluster>();
}
