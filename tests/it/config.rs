//! Configuration: what `Builder::build` refuses, what each call refuses
//! before sending anything, what the retry count means, that passwords
//! never show, and how unreachable masters are reported.

use std::net::{Ipv4Addr, TcpListener, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::eventually;
use crate::support::clients::client;
use crate::support::cluster::Cluster;
use redlock_mio::{
    AddrError, Builder, ConfigError, Error, MAX_RESOURCE_LEN, MAX_TIMEOUT, MAX_TTL, Redlock,
    ServerAddr,
};
use redlock_mio::{NodeError, NodeState};

const TTL: Duration = Duration::from_secs(10);

/// Addresses on 127.0.0.1 where nothing listens (the kernel just handed
/// the ports out and they were closed again).
fn dead_urls(n: usize) -> Vec<String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| format!("redis://{}", l.local_addr().expect("local address")))
        .collect()
}

fn build_err<I, S>(servers: I) -> ConfigError
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    Redlock::builder(servers)
        .build()
        .expect_err("the configuration must be refused")
}

/// `calls` of `command` in `INFO commandstats` of node `i`.
fn calls(cluster: &Cluster, i: usize, command: &str) -> u64 {
    let reply = cluster.command(i, &[b"INFO", b"commandstats"]);
    let text = String::from_utf8_lossy(&reply);
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |rest| {
            rest.split(',')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a call count")
        })
}

fn reset_stats(cluster: &Cluster) {
    for i in 0..cluster.len() {
        cluster.command(i, &[b"CONFIG", b"RESETSTAT"]);
    }
}

#[test]
fn no_servers() {
    assert_eq!(build_err(Vec::<String>::new()), ConfigError::NoServers);
    assert_eq!(build_err([""; 0]), ConfigError::NoServers);
}

#[test]
fn duplicate_servers() {
    let cases: &[(&[&str], usize, usize)] = &[
        (&["redis://127.0.0.1:7000", "redis://127.0.0.1:7000"], 1, 0),
        (
            &[
                "redis://127.0.0.1:7000",
                "redis://127.0.0.1:7001",
                "redis://127.0.0.1:7002",
                "redis://127.0.0.1:7001",
            ],
            3,
            1,
        ),
        // Credentials and database do not make another master.
        (
            &["redis://127.0.0.1:7000", "redis://u:pw@127.0.0.1:7000/2"],
            1,
            0,
        ),
        // The default port is 6379.
        (&["redis://127.0.0.1", "redis://127.0.0.1:6379"], 1, 0),
        (&["redis://[::1]:7000", "redis://[::1]:7000/1"], 1, 0),
        (&["unix:///tmp/r.sock", "unix:///tmp/r.sock?db=1"], 1, 0),
        (&["unix:///tmp/r.sock", "redis+unix:///tmp/r.sock"], 1, 0),
    ];
    for &(servers, index, first) in cases {
        let err = build_err(servers);
        assert_eq!(
            err,
            ConfigError::DuplicateServer { index, first },
            "{servers:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("server #{index} is the same master as server #{first}")
        );
    }
    // Different ports, and a TCP and a Unix server, are different masters
    // (nothing listens there: building succeeds all the same).
    let mut urls = dead_urls(2);
    urls.push("unix:///nonexistent/redis.sock".to_owned());
    Redlock::builder(&urls).build().expect("distinct masters");
}

/// A host name is resolved when parsed: `localhost` is the same master as
/// `127.0.0.1` on the same port.
#[test]
fn duplicate_server_by_name() {
    let resolved = ("localhost", 7000)
        .to_socket_addrs()
        .expect("localhost resolves")
        .next()
        .expect("an address");
    let err = build_err(["redis://127.0.0.1:7000", "redis://localhost:7000"]);
    if resolved.ip() == Ipv4Addr::LOCALHOST {
        assert_eq!(err, ConfigError::DuplicateServer { index: 1, first: 0 });
    } else {
        // `localhost` resolves to ::1 first on this machine.
        let err = build_err([
            format!("redis://{resolved}"),
            "redis://localhost:7000".into(),
        ]);
        assert_eq!(err, ConfigError::DuplicateServer { index: 1, first: 0 });
    }
    let err = build_err(["redis://localhost:7000", "redis://localhost:7000/3"]);
    assert_eq!(err, ConfigError::DuplicateServer { index: 1, first: 0 });
}

#[test]
fn malformed_urls() {
    use AddrError::*;
    let cases = [
        ("", UnsupportedScheme),
        ("127.0.0.1:6379", UnsupportedScheme),
        ("http://127.0.0.1:6379", UnsupportedScheme),
        ("redis:/127.0.0.1:6379", UnsupportedScheme),
        ("tcp://127.0.0.1:6379", UnsupportedScheme),
        ("redis://", MissingHost),
        ("redis://:6379", MissingHost),
        ("redis://u:p@:6379", MissingHost),
        ("redis://[::1", MissingHost),
        ("redis://[::1]x", Unexpected),
        ("redis://127.0.0.1:", InvalidPort),
        ("redis://127.0.0.1:x", InvalidPort),
        ("redis://127.0.0.1:-1", InvalidPort),
        ("redis://127.0.0.1:+80", InvalidPort),
        ("redis://127.0.0.1: 80", InvalidPort),
        ("redis://127.0.0.1:6379/x", InvalidDb),
        ("redis://127.0.0.1:6379/-1", InvalidDb),
        ("redis://127.0.0.1:6379/1/2", InvalidDb),
        ("redis://127.0.0.1:6379/1?x=y", InvalidDb),
        ("redis://127.0.0.1:6379/99999999999", InvalidDb),
        ("redis://u:%zz@127.0.0.1:6379", InvalidEscape),
        ("redis://u:%4@127.0.0.1:6379", InvalidEscape),
        ("redis://%@127.0.0.1:6379", InvalidEscape),
        ("unix://", MissingHost),
        ("unix://?db=1", MissingHost),
        ("unix:///tmp/r.sock?foo=1", Unexpected),
        ("unix:///tmp/r.sock?db", Unexpected),
        ("unix:///tmp/r.sock?db=x", InvalidDb),
        ("unix:///tmp/r.sock?pass=%g0", InvalidEscape),
    ];
    for (url, error) in cases {
        // The bad address is the second: the error names its position.
        let err = build_err(["redis://127.0.0.1:7000", url]);
        assert_eq!(
            err,
            ConfigError::InvalidAddr {
                index: 1,
                error: error.clone()
            },
            "{url:?}"
        );
        assert_eq!(ServerAddr::parse(url), Err(error.clone()), "{url:?}");
        assert!(err.to_string().starts_with("server #1: "), "{err}");
    }
    #[cfg(not(feature = "tls"))]
    assert_eq!(
        ServerAddr::parse("rediss://127.0.0.1:6379"),
        Err(TlsUnsupported)
    );
}

#[test]
fn port_out_of_range() {
    for url in [
        "redis://127.0.0.1:0",
        "redis://127.0.0.1:65536",
        "redis://127.0.0.1:99999",
        "redis://[::1]:0",
        "redis://[::1]:65536",
        "redis://u:pw@127.0.0.1:0/1",
    ] {
        assert_eq!(
            build_err([url]),
            ConfigError::InvalidAddr {
                index: 0,
                error: AddrError::InvalidPort
            },
            "{url}"
        );
    }
    // The extremes of the range are fine.
    for url in ["redis://127.0.0.1:1", "redis://127.0.0.1:65535"] {
        let addr = ServerAddr::parse(url).expect("valid port");
        assert_eq!(addr.to_string(), url);
    }
}

#[test]
fn zero_timeouts() {
    let servers = dead_urls(1);
    type Set = fn(Builder) -> Builder;
    let cases: [(&str, Set); 4] = [
        ("request_timeout", |b| b.request_timeout(Duration::ZERO)),
        ("connect_timeout", |b| b.connect_timeout(Duration::ZERO)),
        ("stall_timeout", |b| b.stall_timeout(Duration::ZERO)),
        ("max_backoff", |b| b.max_backoff(Duration::ZERO)),
    ];
    for (name, set) in cases {
        let err = set(Redlock::builder(&servers))
            .build()
            .expect_err("zero timeout");
        assert_eq!(err, ConfigError::ZeroTimeout(name));
        assert!(err.to_string().contains(name), "{err}");
    }
}

/// Every timeout and delay has a range: past `MAX_TIMEOUT` (say,
/// `Duration::MAX`) it is a typed error, never a panic on `Instant`
/// overflow; `MAX_TIMEOUT` itself is accepted.
#[test]
fn huge_timeouts_and_delays() {
    let servers = dead_urls(1);
    type Set = fn(Builder, Duration) -> Builder;
    let cases: [(&str, Set); 6] = [
        ("request_timeout", |b, d| {
            b.request_timeout(d).stall_timeout(d)
        }),
        ("connect_timeout", |b, d| b.connect_timeout(d)),
        ("stall_timeout", |b, d| b.stall_timeout(d)),
        ("max_backoff", |b, d| b.max_backoff(d)),
        ("retry_delay", |b, d| b.retry_delay(d)),
        ("retry_jitter", |b, d| b.retry_jitter(d)),
    ];
    for (name, set) in cases {
        for huge in [Duration::MAX, MAX_TIMEOUT + Duration::from_nanos(1)] {
            let err = set(Redlock::builder(&servers), huge)
                .build()
                .expect_err("too long");
            assert_eq!(
                err,
                ConfigError::TooLong {
                    name,
                    max: MAX_TIMEOUT
                },
                "{name} = {huge:?}"
            );
            assert!(err.to_string().contains(name), "{err}");
        }
        if name != "connect_timeout" {
            // (An hour-long connect timeout would make build() wait an
            // hour for the dead server.)
            set(Redlock::builder(&servers), MAX_TIMEOUT)
                .build()
                .unwrap_or_else(|e| panic!("{name} = MAX_TIMEOUT: {e}"));
        }
    }
}

/// The largest accepted delays: no arithmetic on `Instant` overflows in
/// a call (a retry an hour or two away does not fit before the deadline,
/// so `lock_until` gives up at once).
#[test]
fn largest_delays_do_not_panic() {
    let servers = dead_urls(3);
    let redlock = Redlock::builder(&servers)
        .request_timeout(Duration::from_millis(20))
        .retry_delay(MAX_TIMEOUT)
        .retry_jitter(MAX_TIMEOUT)
        .max_backoff(MAX_TIMEOUT)
        .build()
        .expect("build");
    let soon = Instant::now() + Duration::from_millis(500);
    let err = redlock
        .lock_until("r", Duration::from_secs(10), soon)
        .expect_err("masters down");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
    assert!(Instant::now() < soon, "gave up at once");
    let err = redlock.try_lock("r", MAX_TTL).expect_err("masters down");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
}

#[test]
fn drift_factor_range() {
    let servers = dead_urls(1);
    for factor in [
        1.0,
        1.5,
        -0.1,
        -1e-9,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        let err = Redlock::builder(&servers)
            .drift_factor(factor)
            .build()
            .expect_err("bad drift factor");
        assert_eq!(err, ConfigError::InvalidDriftFactor, "{factor}");
    }
    for factor in [0.0, 0.01, 0.5, 0.999] {
        Redlock::builder(&servers)
            .drift_factor(factor)
            .build()
            .unwrap_or_else(|e| panic!("drift factor {factor}: {e}"));
    }
}

#[test]
fn stall_before_request_timeout() {
    let servers = dead_urls(1);
    let err = Redlock::builder(&servers)
        .request_timeout(Duration::from_millis(100))
        .stall_timeout(Duration::from_millis(99))
        .build()
        .expect_err("stall shorter than a round");
    assert_eq!(err, ConfigError::StallBeforeRequestTimeout);
    // The default stall timeout follows the request timeout, up to the
    // longest request timeout accepted.
    for request in [Duration::from_secs(2), Duration::from_secs(10), MAX_TIMEOUT] {
        let builder = Redlock::builder(&servers).request_timeout(request);
        assert!(format!("{builder:?}").contains(&format!(
            "stall_timeout: {:?}",
            (request * 2).min(MAX_TIMEOUT)
        )));
        builder
            .build()
            .unwrap_or_else(|e| panic!("request timeout {request:?} alone: {e}"));
    }
    Redlock::builder(&servers)
        .request_timeout(Duration::from_millis(100))
        .stall_timeout(Duration::from_millis(100))
        .build()
        .expect("equal is fine");
}

/// Every call refuses a bad TTL or resource before sending anything.
#[test]
fn call_time_errors() {
    let cluster = Cluster::start(5);
    let request_timeout = Duration::from_millis(50);
    let redlock = client(cluster.urls(), request_timeout);
    let mut held = redlock.try_lock("held", TTL).expect("a lock to extend");
    reset_stats(&cluster);

    let bad_ttls = [
        (Duration::ZERO, "shorter than 1 ms"),
        (Duration::from_micros(999), "shorter than 1 ms"),
        (MAX_TTL + Duration::from_millis(1), "MAX_TTL"),
        (Duration::MAX, "MAX_TTL"),
        (request_timeout, "request timeout"),
        (
            request_timeout - Duration::from_millis(1),
            "request timeout",
        ),
        // 52 ms - 50 ms of round - (0.52 + 2) ms of drift < 0.
        (Duration::from_millis(52), "validity"),
    ];
    for (ttl, reason) in bad_ttls {
        let check = |err: Error| match err {
            Error::InvalidTtl {
                ttl: got,
                reason: why,
            } => {
                assert_eq!(got, ttl);
                assert!(why.contains(reason), "{ttl:?}: {why}");
            }
            other => panic!("{ttl:?}: {other}"),
        };
        check(redlock.try_lock("r", ttl).expect_err("bad TTL"));
        check(redlock.lock("r", ttl).expect_err("bad TTL"));
        check(
            redlock
                .lock_until("r", ttl, Instant::now() + TTL)
                .expect_err("bad TTL"),
        );
        check(redlock.lock_guard("r", ttl).expect_err("bad TTL"));
        check(redlock.extend(&mut held, ttl).expect_err("bad TTL"));
    }
    // A large drift factor eats the validity of a TTL that would be fine
    // with the default: 0.9 * 200 ms + 2 ms + 50 ms > 200 ms.
    let drifty = Redlock::builder(cluster.urls())
        .request_timeout(request_timeout)
        .drift_factor(0.9)
        .build()
        .expect("build");
    let err = drifty
        .try_lock("r", Duration::from_millis(200))
        .expect_err("drift eats all");
    assert!(
        matches!(err, Error::InvalidTtl { reason, .. } if reason.contains("validity")),
        "{err}"
    );
    let long = vec![b'x'; MAX_RESOURCE_LEN + 1];
    let huge = vec![b'y'; 1 << 20];
    for resource in [&b""[..], &long, &huge] {
        let len = resource.len();
        for err in [
            redlock.try_lock(resource, TTL).expect_err("bad resource"),
            redlock.lock(resource, TTL).expect_err("bad resource"),
            redlock
                .lock_until(resource, TTL, Instant::now() + TTL)
                .expect_err("bad resource"),
            redlock.lock_guard(resource, TTL).expect_err("bad resource"),
        ] {
            assert_eq!(err, Error::InvalidResource { len });
            assert!(!err.is_retryable());
        }
    }
    // Nothing of the above reached a server.
    for i in 0..5 {
        assert_eq!(calls(&cluster, i, "set"), 0, "node {i}: a SET was sent");
        assert_eq!(calls(&cluster, i, "evalsha"), 0, "node {i}");
        assert_eq!(calls(&cluster, i, "eval"), 0, "node {i}");
    }
    assert_eq!(held.extensions(), 0);
    let mut ok = drifty
        .try_lock("ok", Duration::from_millis(600))
        .expect("0.9 * 600 + 2 + 50 < 600");
    drifty.unlock(&mut ok).expect("unlock");

    // The longest resource allowed works, end to end.
    let longest = vec![b'z'; MAX_RESOURCE_LEN];
    let mut lock = redlock.try_lock(&longest, TTL).expect("MAX_RESOURCE_LEN");
    assert_eq!(lock.resource(), &longest[..]);
    for i in 0..5 {
        assert_eq!(
            cluster.get(i, &longest).as_deref(),
            Some(&lock.token()[..]),
            "node {i}"
        );
    }
    redlock.extend(&mut lock, TTL).expect("extend");
    redlock.unlock(&mut lock).expect("unlock");
    redlock.unlock(&mut held).expect("unlock");
    assert!(
        eventually(Duration::from_secs(5), || (0..5)
            .all(|i| !cluster.exists(i, &longest))),
        "released everywhere"
    );
}

/// `retry_count` is the number of retries: 0 makes `lock` a single
/// attempt, and `k` makes it `k + 1`.
#[test]
fn retry_count() {
    let cluster = Cluster::start(5);
    let holder = Redlock::builder(cluster.urls()).build().expect("build");
    let mut lock = holder.try_lock("held", TTL).expect("holder");
    for (retries, delay) in [(0, Duration::from_secs(10)), (2, Duration::from_millis(20))] {
        let redlock = Redlock::builder(cluster.urls())
            .retry_count(retries)
            .retry_delay(delay)
            .retry_jitter(Duration::from_millis(5))
            .build()
            .expect("build");
        reset_stats(&cluster);
        let started = Instant::now();
        let err = redlock.lock("held", TTL).expect_err("held");
        assert!(matches!(err, Error::Contended(_)), "{err}");
        if retries == 0 {
            // No retry delay was waited for.
            assert!(
                started.elapsed() < delay / 2,
                "took {:?}",
                started.elapsed()
            );
        }
        // Each attempt is an acquire that waits (a script: the masters
        // queue a waiter they refuse).
        let attempts = u64::from(retries) + 1;
        assert!(
            eventually(Duration::from_secs(5), || (0..5)
                .all(|i| calls(&cluster, i, "evalsha") >= attempts)),
            "every node got {attempts} acquires"
        );
        for i in 0..5 {
            assert_eq!(calls(&cluster, i, "evalsha"), attempts, "node {i}");
        }
        assert_eq!(redlock.stats().attempts, attempts);
    }
    holder.unlock(&mut lock).expect("unlock");
}

/// The password given in a URL never shows in any `Debug` or `Display`.
#[test]
fn passwords_never_shown() {
    const SECRET: &str = "s3cretPW";
    let dead = dead_urls(3);
    let with_password: Vec<String> = dead
        .iter()
        .map(|u| u.replace("redis://", &format!("redis://user:{SECRET}@")))
        .collect();
    let mut shown = Vec::new();

    let redlock = Redlock::builder(&with_password)
        .retry_count(0)
        .build()
        .expect("build");
    shown.push(format!("{redlock:?}"));
    assert!(shown[0].contains("user:***@"), "{}", shown[0]);
    let err = redlock.try_lock("r", TTL).expect_err("unreachable");
    shown.push(format!("{err} {err:?}"));
    if let Some(report) = err.report() {
        shown.push(format!("{report} {report:?}"));
    }

    for url in [
        format!("redis://user:{SECRET}@127.0.0.1:1"),
        format!("redis://:{SECRET}@127.0.0.1:1/2"),
        "redis://user:s3cret%50W@127.0.0.1:1".to_owned(),
        format!("unix:///tmp/r.sock?user=u&pass={SECRET}"),
        format!("unix:///tmp/r.sock?password={SECRET}&db=3"),
    ] {
        let addr = ServerAddr::parse(&url).expect("valid");
        assert!(addr.has_password());
        shown.push(format!("{addr} {addr:?} {:?}", addr.endpoint()));
    }

    let url = with_password[0].clone();
    let bad = [
        vec![url.clone(), url.clone()],
        vec![url.clone(), format!("redis://user:{SECRET}@127.0.0.1:0")],
        vec![url.clone(), format!("redis://user:{SECRET}@127.0.0.1:1/x")],
        vec![url.clone(), format!("redis://user:{SECRET}%zz@127.0.0.1:1")],
        vec![url.clone(), format!("redis://user:{SECRET}@127.0.0.1:x")],
        vec![url.clone(), format!("redis://user:{SECRET}@")],
    ];
    for servers in bad {
        let err = build_err(&servers);
        shown.push(format!("{err} {err:?}"));
    }
    let err = Redlock::builder([&url])
        .request_timeout(Duration::ZERO)
        .build()
        .expect_err("zero timeout");
    shown.push(format!("{err} {err:?}"));

    for text in &shown {
        assert!(!text.contains(SECRET), "password shown: {text}");
        assert!(!text.contains("s3cret%50W"), "password shown: {text}");
    }
}

/// A `Builder` is `Debug`, too: it must not show the passwords of the URLs
/// it holds.
#[test]
fn builder_debug_hides_password() {
    let builder = Redlock::builder(["redis://user:s3cretPW@127.0.0.1:1"]);
    let shown = format!("{builder:?}");
    assert!(!shown.contains("s3cretPW"), "password shown: {shown}");
}

/// Masters where nothing listens: building succeeds (they are retried
/// later), and a lock attempt is `Unavailable` with every node failing to
/// connect.
#[test]
fn unreachable_servers() {
    let urls = dead_urls(5);
    let redlock = Redlock::builder(&urls)
        .retry_count(0)
        .build()
        .expect("build succeeds without servers");
    assert_eq!(redlock.masters(), 5);
    assert_eq!(redlock.quorum(), 3);
    // The first attempt meets refused connects; later ones may find the
    // connections still in back-off.
    for attempt in 0..3 {
        let started = Instant::now();
        let err = redlock.try_lock("r", TTL).expect_err("nothing listens");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "attempt {attempt} took {:?}",
            started.elapsed()
        );
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        assert!(err.is_retryable());
        let report = err.report().expect("report");
        assert!(report.unreachable() >= 3, "{report}");
        assert_eq!(report.ok() + report.refused(), 0, "{report}");
        for (i, state) in report.nodes().iter().enumerate() {
            assert!(
                matches!(
                    state,
                    NodeState::Failed(
                        NodeError::Connect(std::io::ErrorKind::ConnectionRefused)
                            | NodeError::Disconnected
                    ) | NodeState::Pending
                ),
                "attempt {attempt}, node {i}: {state:?}"
            );
        }
        thread::sleep(Duration::from_millis(30));
    }
    // `lock` gives up after its retries with the same error.
    let err = Redlock::builder(&urls)
        .retry_count(2)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(5))
        .build()
        .expect("build")
        .lock("r", TTL)
        .expect_err("nothing listens");
    assert!(matches!(err, Error::Unavailable(_)), "{err}");

    for (n, quorum) in [(1, 1), (2, 2), (3, 2), (4, 3), (7, 4)] {
        let redlock = Redlock::builder(dead_urls(n)).build().expect("build");
        assert_eq!((redlock.masters(), redlock.quorum()), (n, quorum));
    }
}
