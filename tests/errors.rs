//! Errors that say what is wrong, against real `redis-server`s set up
//! wrongly: a wrong or missing password, missing ACL permissions, replicas,
//! cluster-mode nodes. Each is [`Error::Misconfigured`] (not retried) when
//! it prevents a quorum, names the master by its address (password masked)
//! and keeps the server's whole message; `Builder::require_handshakes`
//! turns them into a start-up error. Also: a least-privilege ACL user that
//! the lock works with, and a host name that does not resolve.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::time::Duration;

use redlock_mio::rules::{NodeError, NodeState};
use redlock_mio::{AddrError, ConfigError, Error, Redlock, Require, ServerAddr};
use support::cluster::{Cluster, ClusterOptions};

const TTL: Duration = Duration::from_secs(10);
const SECRET: &str = "s3cret-pw";

fn builder(urls: Vec<String>) -> redlock_mio::Builder {
    Redlock::builder(urls)
        .request_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(300))
        .retry_count(3)
}

/// `redis://user:password@127.0.0.1:port` for every node.
fn urls_with(cluster: &Cluster, userinfo: &str) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            let port = node.addr().socket_addr().expect("a TCP node").port();
            format!("redis://{userinfo}@127.0.0.1:{port}")
        })
        .collect()
}

/// `lock` gives up at once with `Misconfigured`; every node's state
/// passes `check`; the message names each master by address, carries
/// `needle` whole, and never the password.
fn assert_misconfigured(redlock: &Redlock, resource: &str, needle: &str) -> String {
    let before = redlock.stats();
    let err = redlock.lock(resource, TTL).expect_err("misconfigured");
    let after = redlock.stats();
    assert!(matches!(err, Error::Misconfigured(_)), "{err}");
    assert!(!err.is_retryable(), "{err}");
    // `builder` allows three retries: one round means none was made.
    assert_eq!(
        (
            after.attempts - before.attempts,
            after.misconfigured - before.misconfigured
        ),
        (1, 1),
        "lock() retried a configuration error: {before:?} -> {after:?}"
    );
    let report = err.report().expect("a report");
    let n = report.nodes().len();
    assert!(
        report.misconfigured() > n - report.quorum(),
        "enough masters refuse to make a quorum impossible: {report}"
    );
    let text = err.to_string();
    for name in report.masters().expect("masters named") {
        assert!(text.contains(name.as_str()), "{name} missing from {text}");
    }
    assert!(
        !text.contains('#'),
        "masters by number, not address: {text}"
    );
    assert!(text.contains(needle), "{needle:?} missing from {text}");
    assert!(!text.contains(SECRET), "the password leaked: {text}");
    text
}

#[test]
fn wrong_password() {
    let cluster = ClusterOptions::new(3).password(SECRET).start();
    let redlock = builder(urls_with(&cluster, ":wrong-pw"))
        .build()
        .expect("build");
    let text = assert_misconfigured(&redlock, "r", "WRONGPASS");
    assert!(text.contains(":***@127.0.0.1:"), "{text}");
    assert!(!text.contains("wrong-pw"), "the password leaked: {text}");
    println!("{text}");
}

#[test]
fn missing_password() {
    let cluster = ClusterOptions::new(3).password(SECRET).start();
    let redlock = builder(urls_with(&cluster, "")).build().expect("build");
    let text = assert_misconfigured(&redlock, "r", "NOAUTH Authentication required.");
    println!("{text}");
}

/// ACL user `locker` with exactly what the lock needs, in `db` 0, on keys
/// `lock:*` (the README's least-privilege example).
const LOCKER_ACL: &[&str] = &[
    "ACL",
    "SETUSER",
    "locker",
    "reset",
    "on",
    ">s3cret-pw",
    "~lock:*",
    "resetchannels",
    "-@all",
    "+set",
    "+evalsha",
    "+eval",
    "+script|load",
    "+get",
    "+del",
    "+pexpire",
    "+info",
];

#[test]
fn least_privilege_acl_user_can_lock() {
    let cluster = Cluster::start(3);
    for i in 0..3 {
        let args: Vec<&[u8]> = LOCKER_ACL.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(cluster.command(i, &args), b"+OK\r\n");
    }
    let redlock = builder(urls_with(&cluster, &format!("locker:{SECRET}")))
        .require_handshakes(Require::All)
        .build()
        .expect("the ACL allows the handshake");
    let mut lock = redlock.try_lock("lock:orders", TTL).expect("lock");
    redlock.extend(&mut lock, TTL).expect("extend");
    redlock.unlock(&mut lock).expect("unlock");
    // A key outside the user's pattern is refused, not "unreachable".
    let text = assert_misconfigured(&redlock, "orders", "NOPERM");
    println!("{text}");
}

/// With fencing, the README's least-privilege user also needs the crate's
/// keys (`redlock-mio:*`: the fence keys, and the deployment's longest TTL,
/// set at the handshake) and the commands the fence scripts run.
#[test]
fn least_privilege_acl_user_can_take_fenced_locks() {
    let cluster = Cluster::start(3);
    let extra = ["~redlock-mio:*", "+incr", "+exists", "+time"];
    for i in 0..3 {
        let args: Vec<&[u8]> = LOCKER_ACL
            .iter()
            .chain(&extra)
            .map(|a| a.as_bytes())
            .collect();
        assert_eq!(cluster.command(i, &args), b"+OK\r\n");
    }
    let redlock = builder(urls_with(&cluster, &format!("locker:{SECRET}")))
        .require_handshakes(Require::All)
        .fencing(TTL)
        .build()
        .expect("the ACL allows the handshake");
    let mut lock = redlock.try_lock("lock:orders", TTL).expect("lock");
    assert!(lock.fence().is_some());
    redlock.unlock(&mut lock).expect("unlock");
    let mut again = redlock.try_lock("lock:orders", TTL).expect("lock");
    assert!(again.fence() > lock.fence());
    redlock.unlock(&mut again).expect("unlock");
}

#[test]
fn missing_acl_permission_keeps_the_whole_message() {
    let cluster = Cluster::start(3);
    for i in 0..3 {
        let reply = cluster.command(
            i,
            &[
                b"ACL",
                b"SETUSER",
                b"nolua",
                b"reset",
                b"on",
                b">s3cret-pw",
                b"~*",
                b"+set",
                b"+get",
                b"+del",
            ],
        );
        assert_eq!(reply, b"+OK\r\n");
    }
    // What the server itself says to this user's `SCRIPT LOAD`, in its own
    // words (Redis and Valkey word it differently): the error must carry it
    // whole.
    let mut conn = cluster
        .node(0)
        .connect(Duration::from_secs(2))
        .expect("connect");
    let auth = conn
        .request(&[b"AUTH", b"nolua", SECRET.as_bytes()])
        .expect("AUTH");
    assert_eq!(auth, b"+OK\r\n");
    let refusal = conn
        .request(&[b"SCRIPT", b"LOAD", b"return 1"])
        .expect("SCRIPT LOAD");
    let refusal = String::from_utf8(refusal).expect("UTF-8");
    let message = refusal
        .strip_prefix('-')
        .and_then(|m| m.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("an error reply: {refusal:?}"));
    assert!(message.starts_with("NOPERM "), "{message}");

    let redlock = builder(urls_with(&cluster, &format!("nolua:{SECRET}")))
        .build()
        .expect("build");
    let err = redlock.lock("r", TTL).expect_err("misconfigured");
    let report = err.report().expect("a report");
    for state in report.nodes() {
        assert!(
            matches!(state, NodeState::Failed(NodeError::Handshake(e))
                if e.code() == b"NOPERM" && e.message() == message.as_bytes()),
            "{report}"
        );
    }
    let text = assert_misconfigured(&redlock, "r", message);
    println!("{text}");
}

#[test]
fn replicas_are_read_only() {
    let master = Cluster::start(1);
    let port = master.node(0).addr().socket_addr().expect("tcp").port();
    let replicas = ClusterOptions::new(3)
        .args(["--replicaof", "127.0.0.1", &port.to_string()])
        .start();
    // Identified at the handshake (INFO says role:slave), by default.
    let redlock = builder(replicas.urls()).build().expect("build");
    let text = assert_misconfigured(&redlock, "r", "a replica, not a master");
    println!("{text}");
    // Without INFO, the first SET finds out.
    let redlock = builder(replicas.urls())
        .identify_masters(false)
        .build()
        .expect("build");
    let text = assert_misconfigured(&redlock, "r", "READONLY");
    println!("{text}");
}

#[test]
fn cluster_mode_nodes() {
    let nodes = ClusterOptions::new(3)
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .start();
    let redlock = builder(nodes.urls()).build().expect("build");
    let text = assert_misconfigured(&redlock, "r", "a cluster-mode node");
    println!("{text}");
    let redlock = builder(nodes.urls())
        .identify_masters(false)
        .build()
        .expect("build");
    let text = assert_misconfigured(&redlock, "r", "CLUSTERDOWN");
    println!("{text}");
}

/// One master of five with a wrong password does not stop the lock, and
/// when the lock fails for another reason the report still names it.
#[test]
fn a_misconfigured_minority_is_reported_not_fatal() {
    let good = Cluster::start(4);
    let guarded = ClusterOptions::new(1).password(SECRET).start();
    let mut urls = good.urls();
    urls.extend(urls_with(&guarded, ":wrong-pw"));
    let redlock = builder(urls).retry_count(0).build().expect("build");
    let mut lock = redlock.try_lock("r", TTL).expect("four of five agree");
    redlock.unlock(&mut lock).expect("unlock");

    good.set(0, "held", "other");
    good.set(1, "held", "other");
    let err = redlock.try_lock("held", TTL).expect_err("held on two");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    let report = err.report().expect("report");
    assert!(
        matches!(&report.nodes()[4], NodeState::Failed(NodeError::Handshake(e)) if e.code() == b"WRONGPASS"),
        "{report}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "{}: handshake refused: WRONGPASS",
            report.masters().expect("names")[4]
        )),
        "{text}"
    );
}

#[test]
fn require_handshakes_fails_at_start_up() {
    let good = Cluster::start(2);
    let guarded = ClusterOptions::new(1).password(SECRET).start();
    let mut urls = good.urls();
    urls.extend(urls_with(&guarded, ":wrong-pw"));

    let err = builder(urls.clone())
        .require_handshakes(Require::All)
        .build()
        .expect_err("one master refuses the password");
    let ConfigError::Handshakes {
        required,
        ready,
        failures,
    } = &err
    else {
        panic!("expected Handshakes, got {err:?}");
    };
    assert_eq!((*required, *ready), (3, 2));
    assert_eq!(failures.len(), 1);
    assert!(failures[0].0.contains(":***@127.0.0.1:"), "{err}");
    assert!(
        matches!(&failures[0].1, NodeError::Handshake(e) if e.code() == b"WRONGPASS"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("WRONGPASS") && !text.contains("wrong-pw"),
        "{text}"
    );
    println!("{text}");

    // A quorum (2 of 3) is enough with Require::Quorum.
    builder(urls)
        .require_handshakes(Require::Quorum)
        .build()
        .expect("two of three ready");
}

#[test]
fn unresolvable_host_says_why() {
    let err = ServerAddr::parse("redis://no-such-host.invalid:6379").expect_err("no such host");
    let AddrError::Resolve { host, message } = &err else {
        panic!("expected Resolve, got {err:?}");
    };
    assert_eq!(host, "no-such-host.invalid");
    assert!(
        !message.is_empty() && message != "uncategorized error",
        "{message}"
    );
    println!("{err}");
    let err = Redlock::builder(["rediss://127.0.0.1:6379"])
        .build()
        .expect_err("no TLS");
    assert!(err.to_string().contains("TLS"), "{err}");
    println!("{err}");
}
