//! Errors that say what is wrong, against real `redis-server`s set up
//! wrongly: a wrong or missing password, missing ACL permissions, replicas,
//! cluster-mode nodes. `Builder::build` refuses each it sees
//! ([`ConfigError::Misconfigured`]) whatever `require_handshakes` says; one
//! that appears later, on a running client, is [`Error::Misconfigured`]
//! (not retried) when it prevents a quorum. Either names the master by its
//! address (password masked) and keeps the server's whole message. Also: a
//! least-privilege ACL user that the lock works with, and a host name that
//! does not resolve. Then the messages of everyday failures, each checked
//! for the words that say what happened and what to do (not for its whole
//! wording): too few masters reachable, a master whose answer a decided
//! round did not need, a wait that ran out, a server that is not Redis, a
//! TTL too short, a master refusing connections.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use crate::support::check::eventually;
use crate::support::cluster::{Cluster, ClusterOptions};
use redlock_mio::{AddrError, ConfigError, Error, Redlock, Require, ServerAddr};
use redlock_mio::{NodeError, NodeState};

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

/// `build` refused with `Misconfigured`, naming `n` masters by address
/// (password masked), each failure passing `check`; the message never
/// shows the password. Returns the message.
fn assert_refused(
    built: Result<Redlock, ConfigError>,
    n: usize,
    check: impl Fn(&NodeError) -> bool,
) -> String {
    let err = built.expect_err("build must refuse the configuration");
    let ConfigError::Misconfigured { failures } = &err else {
        panic!("expected Misconfigured, got {err:?}");
    };
    assert_eq!(failures.len(), n, "{err}");
    let text = err.to_string();
    for (master, error) in failures {
        assert!(check(error), "{master}: {error:?}");
        assert!(error.is_configuration(), "{error:?}");
        assert!(
            text.contains(master.as_str()),
            "{master} missing from {text}"
        );
        if let NodeError::Handshake(e) | NodeError::Server(e) = error {
            let message = String::from_utf8_lossy(e.message());
            assert!(text.contains(&*message), "the server's message cut: {text}");
        }
    }
    assert!(!text.contains(SECRET), "the password leaked: {text}");
    text
}

/// A handshake refused with `code`.
fn refused_with(code: &'static [u8]) -> impl Fn(&NodeError) -> bool {
    move |e| matches!(e, NodeError::Handshake(e) if e.code() == code)
}

/// Grants user `locker` (password [`SECRET`]) everything on node `i`.
fn add_locker(cluster: &Cluster, i: usize) {
    let reply = cluster.command(
        i,
        &[
            b"ACL",
            b"SETUSER",
            b"locker",
            b"on",
            format!(">{SECRET}").as_bytes(),
            b"~*",
            b"&*",
            b"+@all",
        ],
    );
    assert_eq!(reply, b"+OK\r\n");
}

/// Changes `locker`'s password on node `i` and closes its connections
/// there: the running client meets the new password at its reconnect.
fn change_lockers_password(cluster: &Cluster, i: usize) {
    let reply = cluster.command(
        i,
        &[b"ACL", b"SETUSER", b"locker", b"resetpass", b">another-pw"],
    );
    assert_eq!(reply, b"+OK\r\n");
    cluster.command(i, &[b"CLIENT", b"KILL", b"USER", b"locker"]);
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
    let built = builder(urls_with(&cluster, ":wrong-pw")).build();
    let text = assert_refused(built, 3, refused_with(b"WRONGPASS"));
    assert!(text.contains(":***@127.0.0.1:"), "{text}");
    assert!(!text.contains("wrong-pw"), "the password leaked: {text}");
    println!("{text}");
}

#[test]
fn missing_password() {
    let cluster = ClusterOptions::new(3).password(SECRET).start();
    let built = builder(urls_with(&cluster, "")).build();
    let text = assert_refused(built, 3, refused_with(b"NOAUTH"));
    println!("{text}");
}

/// A password changed on the masters under a running client: its next
/// handshakes are refused, and `lock` gives up at once with
/// `Misconfigured` naming each master.
#[test]
fn a_password_changed_under_a_running_client() {
    let cluster = Cluster::start(3);
    for i in 0..3 {
        add_locker(&cluster, i);
    }
    let redlock = builder(urls_with(&cluster, &format!("locker:{SECRET}")))
        .require_handshakes(Require::All)
        .build()
        .expect("the password is right at start-up");
    for i in 0..3 {
        change_lockers_password(&cluster, i);
    }
    // The first round may meet the closed connections before the
    // reconnects meet the new password.
    assert!(
        eventually(Duration::from_secs(10), || matches!(
            redlock.try_lock("r", TTL),
            Err(Error::Misconfigured(_))
        )),
        "the new password is never seen"
    );
    let text = assert_misconfigured(&redlock, "r", "WRONGPASS");
    assert!(text.contains(":***@127.0.0.1:"), "{text}");
    println!("{text}");
}

/// ACL user `locker` with exactly what the lock needs, in `db` 0, on keys
/// `lock:*` (the operator's guide's least-privilege example, `operations`).
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

/// With fencing, the guide's least-privilege user also needs the crate's
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

    let built = builder(urls_with(&cluster, &format!("nolua:{SECRET}"))).build();
    let text = assert_refused(built, 3, |e| {
        matches!(e, NodeError::Handshake(e)
            if e.code() == b"NOPERM" && e.message() == message.as_bytes())
    });
    assert!(text.contains(message), "{text}");
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
    let built = builder(replicas.urls()).build();
    let text = assert_refused(built, 3, |e| *e == NodeError::Replica);
    assert!(text.contains("a replica, not a master"), "{text}");
    println!("{text}");
    // Without INFO, nothing is seen at start-up; the first SET finds out.
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
    let built = builder(nodes.urls()).build();
    let text = assert_refused(built, 3, |e| *e == NodeError::ClusterMode);
    assert!(text.contains("a cluster-mode node"), "{text}");
    println!("{text}");
    let redlock = builder(nodes.urls())
        .identify_masters(false)
        .build()
        .expect("build");
    let text = assert_misconfigured(&redlock, "r", "CLUSTERDOWN");
    println!("{text}");
}

/// One master of five whose password changed under a running client does
/// not stop the lock, and when the lock fails for another reason the
/// report still names it.
#[test]
fn a_misconfigured_minority_is_reported_not_fatal() {
    let cluster = Cluster::start(5);
    for i in 0..5 {
        add_locker(&cluster, i);
    }
    let redlock = builder(urls_with(&cluster, &format!("locker:{SECRET}")))
        .retry_count(0)
        .build()
        .expect("build");
    change_lockers_password(&cluster, 4);
    let mut lock = redlock.try_lock("r", TTL).expect("four of five agree");
    redlock.unlock(&mut lock).expect("unlock");

    cluster.set(0, "held", "other");
    cluster.set(1, "held", "other");
    let wrongpass = |state: &NodeState| matches!(state, NodeState::Failed(NodeError::Handshake(e)) if e.code() == b"WRONGPASS");
    let mut last = None;
    // Once master 4 has reconnected and met the new password.
    assert!(
        eventually(Duration::from_secs(10), || {
            let err = redlock.try_lock("held", TTL).expect_err("held on two");
            assert!(matches!(err, Error::Contended(_)), "{err}");
            let seen = err.report().is_some_and(|r| wrongpass(&r.nodes()[4]));
            last = Some(err);
            seen
        }),
        "master 4's refusal never reported: {last:?}"
    );
    let err = last.expect("an error");
    let report = err.report().expect("report");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "{}: handshake refused: WRONGPASS",
            report.masters().expect("names")[4]
        )),
        "{text}"
    );
}

/// A master that refuses the configuration fails the build even when the
/// others are enough and `require_handshakes` asks for nothing: the lock
/// would survive one failure fewer without a word.
#[test]
fn a_misconfigured_master_fails_the_build_whatever_require_says() {
    let good = Cluster::start(2);
    let guarded = ClusterOptions::new(1).password(SECRET).start();
    let mut urls = good.urls();
    urls.extend(urls_with(&guarded, ":wrong-pw"));
    for require in [Require::Nothing, Require::Quorum, Require::All] {
        let built = builder(urls.clone()).require_handshakes(require).build();
        let text = assert_refused(built, 1, refused_with(b"WRONGPASS"));
        assert!(!text.contains("wrong-pw"), "the password leaked: {text}");
    }
}

/// Masters that are down are not a configuration error: the build
/// succeeds unless `require_handshakes` asks for them.
#[test]
fn require_handshakes_fails_at_start_up() {
    let good = Cluster::start(2);
    let down = ClusterOptions::new(1).password(SECRET).start();
    let mut urls = good.urls();
    urls.extend(urls_with(&down, ":any-pw"));
    down.stop(0);

    let err = builder(urls.clone())
        .require_handshakes(Require::All)
        .build()
        .expect_err("one master is down");
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
    assert!(matches!(&failures[0].1, NodeError::Connect(_)), "{err}");
    assert!(!failures[0].1.is_configuration(), "{err}");
    let text = err.to_string();
    assert!(!text.contains("any-pw"), "{text}");
    println!("{text}");

    // A quorum (2 of 3) is enough with Require::Quorum, and nothing is
    // asked by default.
    builder(urls.clone())
        .require_handshakes(Require::Quorum)
        .build()
        .expect("two of three ready");
    builder(urls)
        .build()
        .expect("a master down is retried later");
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
    #[cfg(not(feature = "tls"))]
    {
        let err = Redlock::builder(["rediss://127.0.0.1:6379"])
            .build()
            .expect_err("no TLS");
        assert!(err.to_string().contains("TLS"), "{err}");
        println!("{err}");
    }
}

// ---------------------------------------------------------------------------
// Messages that name what happened and the fix.
// ---------------------------------------------------------------------------

/// Asserts that `text` holds every one of `needles`.
fn assert_says(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}

/// Two of four masters down: the error counts the reachable ones against
/// the quorum, and each down master says its connection was refused.
#[test]
fn too_few_masters_reachable_says_how_many_of_how_many() {
    let cluster = Cluster::start(4);
    cluster.stop(2);
    cluster.stop(3);
    let redlock = builder(cluster.urls())
        .retry_count(0)
        .build()
        .expect("down masters are retried later");
    let err = redlock.try_lock("r", TTL).expect_err("two of four down");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    let text = err.to_string();
    assert_says(
        &text,
        &[
            "2 of 4 masters reachable",
            "3 needed",
            "running and reachable",
        ],
    );
    assert!(!text.contains("majority of masters unreachable"), "{text}");
    let report = err.report().expect("a report");
    let down = &report.masters().expect("named")[2];
    assert!(
        text.contains(&format!("{down}: connection refused"))
            || text.contains(&format!("{down}: disconnected")),
        "{text}"
    );
}

/// A round decided by two refusals before the third master answered: the
/// third is not called "not waited for" (as if it were unwell), but a
/// master whose answer was not needed; and when it answered in time, its
/// grant is said to have been released again.
#[test]
fn a_master_a_decided_round_did_not_need_is_not_blamed() {
    let cluster = Cluster::start(3);
    let redlock = builder(cluster.urls())
        .retry_count(0)
        .build()
        .expect("build");
    let mut warm = redlock.try_lock("warm", TTL).expect("free");
    redlock.unlock(&mut warm).expect("released");
    cluster.set(0, "held", "other");
    cluster.set(1, "held", "other");
    // A paused third master cannot answer: the round is decided without it.
    cluster.pause(2);
    let err = redlock.try_lock("held", TTL).expect_err("held on two");
    cluster.resume(2);
    assert!(matches!(err, Error::Contended(_)), "{err}");
    let text = err.to_string();
    let third = &err.report().expect("report").masters().expect("named")[2];
    assert_says(
        &text,
        &[
            "held by another client",
            "refused by 2 of 3 masters",
            &format!("{third}: answer not needed (decided without it)"),
        ],
    );
    assert!(!text.contains("not waited for"), "{text}");
    // Healthy, the third answers before or after the decision: either its
    // answer was not needed, or its grant is released again.
    let err = redlock.try_lock("held", TTL).expect_err("held on two");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{third}: answer not needed"))
            || text.contains(&format!("{third}: acquired (released again: no quorum)")),
        "{text}"
    );
}

/// A wait that ran out says how long the call waited, beside its last
/// attempt's own time.
#[test]
fn a_wait_that_ran_out_shows_the_time_waited() {
    let cluster = Cluster::start(3);
    let holder = builder(cluster.urls()).build().expect("build");
    let mut held = holder.try_lock("waited", TTL).expect("free");
    let redlock = builder(cluster.urls()).build().expect("build");
    let before = redlock.stats();
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    let err = redlock
        .lock_until("waited", TTL, deadline)
        .expect_err("held throughout");
    let after = redlock.stats();
    holder.unlock(&mut held).expect("released");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    assert!(
        after.attempts - before.attempts >= 2,
        "the call waited between attempts: {before:?} -> {after:?}"
    );
    let report = err.report().expect("report");
    let waited = report.waited().expect("the call's wait is in its report");
    assert!(waited > report.elapsed(), "{waited:?} {report}");
    assert_says(
        &err.to_string(),
        &[
            &format!("after waiting {} ms", waited.as_millis()),
            "the last attempt in",
        ],
    );
    // One round: no wait to speak of.
    let mut held = holder.try_lock("waited", TTL).expect("free");
    let err = redlock.try_lock("waited", TTL).expect_err("held");
    holder.unlock(&mut held).expect("released");
    assert_eq!(err.report().expect("report").waited(), None);
    assert!(!err.to_string().contains("after waiting"), "{err}");
}

/// A TCP server that answers every connection with `reply` and closes it:
/// something that is not a Redis server. Stops when dropped.
struct NotRedis {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl NotRedis {
    fn start(reply: &'static [u8]) -> NotRedis {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut conn, _)) => {
                            let _ = conn.set_nonblocking(false);
                            let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
                            let mut request = [0u8; 512];
                            let _ = conn.read(&mut request);
                            let _ = conn.write_all(reply);
                        }
                        // Polled: the acceptor notices the drop.
                        Err(_) => thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        NotRedis {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for NotRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A server that is not Redis (a web server, a TLS port) is named for what
/// it answered and what was expected, not by a RESP type byte.
#[test]
fn a_server_that_is_not_redis_says_what_answered() {
    for (reply, guess) in [
        (
            &b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"[..],
            "HTTP server",
        ),
        // A TLS alert record: the port speaks TLS.
        (&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32][..], "rediss://"),
    ] {
        let fake = NotRedis::start(reply);
        let err = builder(vec![fake.url()])
            .connect_timeout(Duration::from_secs(2))
            .require_handshakes(Require::All)
            .build()
            .expect_err("not a master");
        let ConfigError::Handshakes { failures, .. } = &err else {
            panic!("expected Handshakes, got {err:?}");
        };
        assert!(matches!(failures[0].1, NodeError::Protocol(_)), "{err:?}");
        let text = err.to_string();
        assert_says(
            &text,
            &[
                "0 of 1 master completed the handshake",
                "not a Redis server",
                guess,
                "a Redis or Valkey master answers with a RESP reply",
                "check the address and port",
            ],
        );
        assert!(!text.contains("unknown RESP type byte"), "{text}");
        assert!(!text.contains("1 masters"), "{text}");
    }
}

/// A TTL not longer than the request timeout names the setting to change.
#[test]
fn a_ttl_too_short_names_the_request_timeout() {
    let redlock = builder(vec!["redis://127.0.0.1:1".to_owned()])
        .build()
        .expect("a master down is retried later");
    let err = redlock
        .try_lock("r", Duration::from_millis(100))
        .expect_err("shorter than the request timeout");
    assert!(matches!(err, Error::InvalidTtl { .. }), "{err}");
    assert_says(
        &err.to_string(),
        &[
            "100ms",
            "longer than the request timeout",
            "request_timeout",
        ],
    );
}
