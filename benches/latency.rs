//! Lock latency of this crate against its redis-rs peers and the physical
//! floor, in one interleaved run. See `benches/README.md`.
//!
//! ```sh
//! cargo bench --bench latency                      # five local masters, ~5 min
//! cargo bench --bench latency -- --quick           # smoke run
//! cargo bench --bench latency -- redis://h1:6379 redis://h2:6379 ...
//! ```
//!
//! Writes `target/latency/latency.json` and `target/latency/latency.svg`.

// The shared test harness (`tests/support`) panics loudly on a broken set-up.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, LazyLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use redlock_mio::{RELEASE_SCRIPT, RELEASE_SHA1, Redlock};
use support::cluster::Cluster;
use support::counting::CountingAlloc;

// ---------------------------------------------------------------------------
// Allocation counting, per thread
// ---------------------------------------------------------------------------

/// This thread's allocations so far (`support::counting` counts per thread).
fn allocations() -> u64 {
    support::counting::allocations().0
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

type Result<T> = std::result::Result<T, Box<dyn StdError>>;

const USAGE: &str = "usage: latency [--quick] [--cycles N] [--paced N] [--rate N] [--closed-only] [--only ID,..] \
                     [--contention-secs N] [--no-fault] [redis://HOST:PORT ...]";
const MASTERS: usize = 5;
const TTL: Duration = Duration::from_secs(10);
const TTL_MS: u64 = 10_000;
/// Per-node request timeout where a variant has one to set.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(50);
/// Spot-check the keys every this many cycles, outside the timed region.
const CHECK_EVERY: u64 = 1000;
/// The master paused in the fault scenario.
const PAUSED: usize = 2;
/// Percentiles reported in the tables.
const PCTS: [f64; 4] = [50.0, 90.0, 99.0, 99.9];
/// Percentiles drawn in the plot.
const PLOT_PCTS: [f64; 9] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99];

struct Args {
    quick: bool,
    cycles: u64,
    batch: u64,
    paced: u64,
    rate: u64,
    slice: u64,
    warm_up: u64,
    contention: Duration,
    fault_cycles: u64,
    fault_budget: Duration,
    fault: bool,
    contention_on: bool,
    /// Only these variants (`--only`); all when empty.
    only: Vec<Kind>,
    urls: Vec<String>,
}

fn parse_args() -> Result<Option<Args>> {
    let mut args = Args {
        quick: false,
        cycles: 20_000,
        batch: 500,
        paced: 5_000,
        rate: 1_000,
        slice: 250,
        warm_up: 1_000,
        contention: Duration::from_secs(5),
        fault_cycles: 5_000,
        fault_budget: Duration::from_secs(10),
        fault: true,
        contention_on: true,
        only: Vec::new(),
        urls: Vec::new(),
    };
    let mut cycles = None;
    let mut paced = None;
    let mut contention = None;
    let mut it = std::env::args().skip(1);
    let number = |it: &mut dyn Iterator<Item = String>, name: &str| -> Result<u64> {
        let v = it.next().ok_or_else(|| format!("{name} needs a number"))?;
        let n: u64 = v.parse().map_err(|e| format!("{name} {v}: {e}"))?;
        if n == 0 {
            return Err(format!("{name} must be at least 1").into());
        }
        Ok(n)
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            // `cargo bench` passes `--bench` to harness-less benches.
            "--bench" => {}
            "--quick" => args.quick = true,
            "--no-fault" => args.fault = false,
            "--closed-only" => {
                args.fault = false;
                args.contention_on = false;
                paced = Some(0);
            }
            "--only" => {
                let ids = it.next().ok_or("--only needs variant ids")?;
                for id in ids.split(',') {
                    let kind = ALL
                        .into_iter()
                        .find(|k| k.id() == id)
                        .ok_or_else(|| format!("--only: unknown variant {id}"))?;
                    args.only.push(kind);
                }
            }
            "--cycles" => cycles = Some(number(&mut it, "--cycles")?),
            "--paced" => paced = Some(number(&mut it, "--paced")?),
            "--rate" => args.rate = number(&mut it, "--rate")?,
            "--contention-secs" => contention = Some(number(&mut it, "--contention-secs")?),
            _ if arg.starts_with('-') => {
                return Err(format!("unknown option {arg}\n{USAGE}").into());
            }
            _ => args.urls.push(arg),
        }
    }
    if args.quick {
        args.cycles = 600;
        args.batch = 100;
        args.paced = 300;
        args.slice = 50;
        args.warm_up = 50;
        args.contention = Duration::from_secs(1);
        args.fault_cycles = 300;
        args.fault_budget = Duration::from_secs(3);
    }
    if let Some(n) = cycles {
        args.cycles = n;
    }
    if let Some(n) = paced {
        args.paced = n;
    }
    if let Some(n) = contention {
        args.contention = Duration::from_secs(n);
    }
    args.batch = args.batch.min(args.cycles);
    args.slice = args.slice.min(args.paced).max(1);
    Ok(Some(args))
}

/// Addresses of the masters, for the variants that open their own sockets.
#[derive(Clone)]
struct Env {
    urls: Vec<String>,
    addrs: Vec<SocketAddr>,
}

impl Env {
    fn new(urls: Vec<String>) -> Result<Env> {
        let addrs = urls
            .iter()
            .map(|u| socket_addr(u))
            .collect::<Result<Vec<_>>>()?;
        Ok(Env { urls, addrs })
    }

    fn quorum(&self) -> usize {
        self.urls.len() / 2 + 1
    }
}

/// `redis://host:port[/db]` to a socket address (no password: the raw
/// variants do not authenticate).
fn socket_addr(url: &str) -> Result<SocketAddr> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| format!("{url}: only redis://host:port addresses are supported"))?;
    if rest.contains('@') {
        return Err(format!("{url}: passwords are not supported by the raw variants").into());
    }
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    };
    hostport
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| format!("{url}: no address").into())
}

// ---------------------------------------------------------------------------
// The variants
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Mine,
    Redlock,
    Rslock,
    SyncBaseline,
    AsyncBaseline,
    Floor,
    FloorQuorum,
}

const ALL: [Kind; 7] = [
    Kind::Mine,
    Kind::Redlock,
    Kind::Rslock,
    Kind::SyncBaseline,
    Kind::AsyncBaseline,
    Kind::Floor,
    Kind::FloorQuorum,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mine => "redlock-mio",
            Kind::Redlock => "redlock 2.0",
            Kind::Rslock => "rslock 0.10",
            Kind::SyncBaseline => "redis-rs sync",
            Kind::AsyncBaseline => "redis-rs async",
            Kind::Floor => "floor (all)",
            Kind::FloorQuorum => "floor (quorum)",
        }
    }

    fn id(self) -> &'static str {
        match self {
            Kind::Mine => "redlock_mio",
            Kind::Redlock => "redlock",
            Kind::Rslock => "rslock",
            Kind::SyncBaseline => "redis_rs_sync",
            Kind::AsyncBaseline => "redis_rs_async",
            Kind::Floor => "floor",
            Kind::FloorQuorum => "floor_quorum",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Kind::Mine => "#d62728",
            Kind::Redlock => "#8c564b",
            Kind::Rslock => "#9467bd",
            Kind::SyncBaseline => "#1f77b4",
            Kind::AsyncBaseline => "#2ca02c",
            Kind::Floor => "#7f7f7f",
            Kind::FloorQuorum => "#17becf",
        }
    }

    /// The resource of this variant in a scenario: one key per variant, all
    /// of the same length, so that a lock leaked by one variant (e.g. a peer
    /// stuck on the paused master) cannot fail another.
    fn resource(self, scenario: &str) -> String {
        format!("redlock-bench:{scenario}:{}", self.id())
    }
}

/// One lock variant: `acquire` takes the lock (kept inside), `release` gives
/// it back. A failed acquire is `Err` with the reason.
trait Variant: Send {
    fn acquire(&mut self) -> std::result::Result<(), String>;
    fn release(&mut self) -> std::result::Result<(), String>;
}

fn make(kind: Kind, env: &Env, resource: &str, live: &[usize]) -> Result<Box<dyn Variant>> {
    Ok(match kind {
        Kind::Mine => Box::new(Mine::new(env, resource)?),
        Kind::Redlock => Box::new(RedlockPeer::new(env, resource)),
        Kind::Rslock => Box::new(RslockPeer::new(env, resource)?),
        Kind::SyncBaseline => Box::new(SyncBaseline::new(env, resource)?),
        Kind::AsyncBaseline => Box::new(AsyncBaseline::new(env, resource)?),
        Kind::Floor => Box::new(Floor::new(env, resource, live, live.len())?),
        Kind::FloorQuorum => Box::new(Floor::new(env, resource, live, env.quorum())?),
    })
}

/// Variant 1: This crate.
struct Mine {
    client: Redlock,
    resource: Vec<u8>,
    held: Option<redlock_mio::Lock>,
}

impl Mine {
    fn new(env: &Env, resource: &str) -> Result<Mine> {
        let client = Redlock::builder(&env.urls)
            .request_timeout(REQUEST_TIMEOUT)
            .retry_count(0)
            .build()?;
        Ok(Mine {
            client,
            resource: resource.as_bytes().to_vec(),
            held: None,
        })
    }
}

impl Variant for Mine {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        let lock = self
            .client
            .try_lock(&self.resource, TTL)
            .map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let mut lock = self.held.take().ok_or("release without a lock")?;
        self.client.unlock(&mut lock).map_err(|e| e.to_string())
    }
}

/// Variant 2: The `redlock` crate 2.0 as shipped: sync, redis-rs 0.23, a new
/// connection per command, sequential over the masters.
struct RedlockPeer {
    manager: &'static redlock::RedLock,
    resource: Vec<u8>,
    held: Option<redlock::Lock<'static>>,
}

impl RedlockPeer {
    fn new(env: &Env, resource: &str) -> RedlockPeer {
        let mut manager = redlock::RedLock::new(env.urls.clone());
        // One attempt (a count of 0 would make none); the delay must be
        // non-zero (`gen_range(0..delay)`) and is at most 0 ms.
        manager.set_retry(1, 1);
        RedlockPeer {
            // `Lock` borrows its manager: leaked, a few bytes per client.
            manager: Box::leak(Box::new(manager)),
            resource: resource.as_bytes().to_vec(),
            held: None,
        }
    }
}

impl Variant for RedlockPeer {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        match self.manager.lock(&self.resource, TTL_MS as usize) {
            Ok(Some(lock)) => {
                self.held = Some(lock);
                Ok(())
            }
            Ok(None) => Err("not acquired (no quorum)".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let lock = self.held.take().ok_or("release without a lock")?;
        self.manager.unlock(&lock);
        Ok(())
    }
}

fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Variant 3: The `rslock` crate 0.10 as shipped: async, redis-rs 1.x multiplexed
/// connections, `join_all` over the masters; on a current-thread runtime.
struct RslockPeer {
    rt: tokio::runtime::Runtime,
    manager: rslock::LockManager,
    resource: Vec<u8>,
    held: Option<rslock::Lock>,
}

impl RslockPeer {
    fn new(env: &Env, resource: &str) -> Result<RslockPeer> {
        let mut manager = rslock::LockManager::new(env.urls.clone());
        // One attempt, no sleep after it.
        manager.set_retry(1, Duration::from_millis(1));
        Ok(RslockPeer {
            rt: current_thread_runtime()?,
            manager,
            resource: resource.as_bytes().to_vec(),
            held: None,
        })
    }
}

impl Variant for RslockPeer {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        let lock = self
            .rt
            .block_on(self.manager.lock(self.resource.as_slice(), TTL))
            .map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let lock = self.held.take().ok_or("release without a lock")?;
        self.rt.block_on(self.manager.unlock(&lock));
        Ok(())
    }
}

fn redis1_info(url: &str) -> Result<redis1::ConnectionInfo> {
    use redis1::IntoConnectionInfo as _;
    let info = url.into_connection_info()?;
    Ok(info.set_tcp_settings(redis1::io::tcp::TcpSettings::default().set_nodelay(true)))
}

fn random_token() -> [u8; 20] {
    rand::random()
}

/// Drift as in the Redlock reference: 1 % of the TTL plus 2 ms.
fn still_valid(started: Instant) -> bool {
    let drift = Duration::from_millis(TTL_MS / 100 + 2);
    started.elapsed() + drift < TTL
}

/// Variant 4: redis-rs 1.x done right, sync: one persistent connection per master
/// with `TCP_NODELAY` and a read/write timeout, the release script
/// preloaded, `SET NX PX` then `EVALSHA`, sequential, quorum inline. A
/// connection that fails or times out is dropped for good.
struct SyncBaseline {
    conns: Vec<Option<redis1::Connection>>,
    quorum: usize,
    resource: Vec<u8>,
    token: [u8; 20],
}

impl SyncBaseline {
    fn new(env: &Env, resource: &str) -> Result<SyncBaseline> {
        let mut conns = Vec::new();
        for url in &env.urls {
            let client = redis1::Client::open(redis1_info(url)?)?;
            let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
            conn.set_read_timeout(Some(REQUEST_TIMEOUT))?;
            conn.set_write_timeout(Some(REQUEST_TIMEOUT))?;
            let sha = redis1::Script::new(RELEASE_SCRIPT).load(&mut conn)?;
            if sha != RELEASE_SHA1 {
                return Err(format!("SCRIPT LOAD returned {sha}, not {RELEASE_SHA1}").into());
            }
            conns.push(Some(conn));
        }
        Ok(SyncBaseline {
            conns,
            quorum: env.quorum(),
            resource: resource.as_bytes().to_vec(),
            token: [0; 20],
        })
    }

    fn release_all(&mut self) -> usize {
        let mut released = 0;
        for slot in &mut self.conns {
            let Some(conn) = slot else { continue };
            let reply = redis1::cmd("EVALSHA")
                .arg(RELEASE_SHA1)
                .arg(1)
                .arg(&self.resource[..])
                .arg(&self.token[..])
                .query::<i64>(conn);
            match reply {
                Ok(1) => released += 1,
                Ok(_) => {}
                Err(_) => *slot = None,
            }
        }
        released
    }
}

impl Variant for SyncBaseline {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        self.token = random_token();
        let started = Instant::now();
        let mut acquired = 0;
        for slot in &mut self.conns {
            let Some(conn) = slot else { continue };
            let reply = redis1::cmd("SET")
                .arg(&self.resource[..])
                .arg(&self.token[..])
                .arg("NX")
                .arg("PX")
                .arg(TTL_MS)
                .query::<redis1::Value>(conn);
            match reply {
                Ok(redis1::Value::Okay) => acquired += 1,
                Ok(_) => {}
                Err(_) => *slot = None,
            }
        }
        if acquired >= self.quorum && still_valid(started) {
            return Ok(());
        }
        self.release_all();
        Err(format!("not acquired: {acquired} of {}", self.conns.len()))
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        self.release_all();
        Ok(())
    }
}

static RELEASE: LazyLock<redis1::Script> = LazyLock::new(|| redis1::Script::new(RELEASE_SCRIPT));

/// Variant 5: redis-rs 1.x done right, async: a current-thread runtime, multiplexed
/// connections with `TCP_NODELAY`, `join_all` over the masters with a
/// per-node timeout, one static `Script`.
struct AsyncBaseline {
    rt: tokio::runtime::Runtime,
    conns: Vec<redis1::aio::MultiplexedConnection>,
    quorum: usize,
    resource: Vec<u8>,
    token: [u8; 20],
}

impl AsyncBaseline {
    fn new(env: &Env, resource: &str) -> Result<AsyncBaseline> {
        let rt = current_thread_runtime()?;
        let mut conns = Vec::new();
        for url in &env.urls {
            let client = redis1::Client::open(redis1_info(url)?)?;
            let mut conn = rt.block_on(client.get_multiplexed_async_connection())?;
            let sha = rt.block_on(RELEASE.load_async(&mut conn))?;
            if sha != RELEASE_SHA1 {
                return Err(format!("SCRIPT LOAD returned {sha}, not {RELEASE_SHA1}").into());
            }
            conns.push(conn);
        }
        Ok(AsyncBaseline {
            rt,
            conns,
            quorum: env.quorum(),
            resource: resource.as_bytes().to_vec(),
            token: [0; 20],
        })
    }

    fn release_all(&mut self) -> usize {
        let (resource, token) = (&self.resource[..], &self.token[..]);
        let replies = self.rt.block_on(join_all(self.conns.iter_mut().map(|conn| {
            let mut invocation = RELEASE.prepare_invoke();
            invocation.key(resource).arg(token);
            async move {
                tokio::time::timeout(REQUEST_TIMEOUT, invocation.invoke_async::<i64>(conn)).await
            }
        })));
        replies
            .into_iter()
            .filter(|r| matches!(r, Ok(Ok(1))))
            .count()
    }
}

impl Variant for AsyncBaseline {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        self.token = random_token();
        let started = Instant::now();
        let (resource, token) = (&self.resource[..], &self.token[..]);
        let replies = self.rt.block_on(join_all(self.conns.iter_mut().map(|conn| {
            let mut cmd = redis1::cmd("SET");
            cmd.arg(resource).arg(token).arg("NX").arg("PX").arg(TTL_MS);
            async move {
                tokio::time::timeout(REQUEST_TIMEOUT, cmd.query_async::<redis1::Value>(conn)).await
            }
        })));
        let acquired = replies
            .iter()
            .filter(|r| matches!(r, Ok(Ok(redis1::Value::Okay))))
            .count();
        if acquired >= self.quorum && still_valid(started) {
            return Ok(());
        }
        self.release_all();
        Err(format!("not acquired: {acquired} of {}", self.conns.len()))
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        self.release_all();
        Ok(())
    }
}

/// RESP encoding of a command, for the pre-encoded floor and the checker.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Variant 6: The floor: the same five `SET NX PX` and five `EVALSHA` release
/// commands, pre-encoded with a fixed token, written to every socket and
/// read back with non-blocking mio sockets, counting CRLF-terminated reply
/// lines (these replies are one line each). No lock logic. "floor (all)"
/// waits for a reply from every socket, "floor (quorum)" for the first
/// `quorum` replies; it reads the late ones in a later round, as a client
/// that decides at quorum does.
struct Floor {
    poll: mio::Poll,
    events: mio::Events,
    socks: Vec<mio::net::TcpStream>,
    /// Per socket: bytes received and not yet consumed, replies owed.
    bufs: Vec<([u8; 64], usize, u32)>,
    /// Replies needed to finish a round.
    need: usize,
    set: Vec<u8>,
    release: Vec<u8>,
}

impl Floor {
    fn new(env: &Env, resource: &str, live: &[usize], need: usize) -> Result<Floor> {
        let poll = mio::Poll::new()?;
        let mut socks = Vec::new();
        let load = encode(&[b"SCRIPT", b"LOAD", RELEASE_SCRIPT.as_bytes()]);
        for (token, &i) in live.iter().enumerate() {
            let mut stream = TcpStream::connect_timeout(&env.addrs[i], Duration::from_secs(1))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            stream.write_all(&load)?;
            // `$40\r\n<sha>\r\n`; nothing else is sent before it is read.
            let mut reader = BufReader::new(&stream);
            let (mut line, mut sha) = (String::new(), String::new());
            reader.read_line(&mut line)?;
            if line.trim_end() == "$40" {
                reader.read_line(&mut sha)?;
            }
            drop(reader);
            if sha.trim_end() != RELEASE_SHA1 {
                return Err(format!("floor: SCRIPT LOAD replied {line:?} {sha:?}").into());
            }
            stream.set_nonblocking(true)?;
            let mut stream = mio::net::TcpStream::from_std(stream);
            poll.registry()
                .register(&mut stream, mio::Token(token), mio::Interest::READABLE)?;
            socks.push(stream);
        }
        let token = b"floor-fixed-token-20";
        let ttl = TTL_MS.to_string();
        let r = resource.as_bytes();
        Ok(Floor {
            poll,
            events: mio::Events::with_capacity(16),
            bufs: vec![([0; 64], 0, 0); socks.len()],
            need: need.min(socks.len()),
            socks,
            set: encode(&[b"SET", r, token, b"NX", b"PX", ttl.as_bytes()]),
            release: encode(&[b"EVALSHA", RELEASE_SHA1.as_bytes(), b"1", r, token]),
        })
    }

    /// Writes `cmd` to every socket and waits until `need` sockets have
    /// returned their reply to it, which must be `expect`.
    fn round(&mut self, release: bool, expect: &[u8]) -> std::result::Result<(), String> {
        let cmd = if release { &self.release } else { &self.set };
        for (sock, buf) in self.socks.iter_mut().zip(&mut self.bufs) {
            let mut written = 0;
            while written < cmd.len() {
                match sock.write(&cmd[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::yield_now(),
                    Err(e) => return Err(e.to_string()),
                }
            }
            buf.2 += 1;
        }
        let mut done = 0;
        while done < self.need {
            self.poll
                .poll(&mut self.events, Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            if self.events.is_empty() {
                return Err(format!(
                    "floor: {} replies missing after 5 s",
                    self.need - done
                ));
            }
            for event in &self.events {
                let i = event.token().0;
                let (buf, len, owed) = &mut self.bufs[i];
                while *owed > 0 {
                    match self.socks[i].read(&mut buf[*len..]) {
                        Ok(0) => return Err("floor: connection closed".to_owned()),
                        Ok(n) => *len += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e.to_string()),
                    }
                    // Consume the complete lines; the last one owed is this
                    // round's reply, earlier ones are late replies.
                    let mut at = 0;
                    while *owed > 0 {
                        let Some(end) = buf[at..*len].windows(2).position(|w| w == b"\r\n") else {
                            break;
                        };
                        let line = &buf[at..at + end + 2];
                        *owed -= 1;
                        if *owed == 0 {
                            if line != expect {
                                return Err(format!(
                                    "floor: reply {:?}",
                                    String::from_utf8_lossy(line)
                                ));
                            }
                            done += 1;
                        } else if line != b"+OK\r\n" && line != b":1\r\n" {
                            return Err(format!(
                                "floor: late reply {:?}",
                                String::from_utf8_lossy(line)
                            ));
                        }
                        at += end + 2;
                    }
                    buf.copy_within(at..*len, 0);
                    *len -= at;
                    if *len == buf.len() {
                        return Err("floor: reply too long".to_owned());
                    }
                }
            }
        }
        Ok(())
    }
}

impl Variant for Floor {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        self.round(false, b"+OK\r\n")
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        self.round(true, b":1\r\n")
    }
}

/// Plain blocking connections that check keys outside the timed region.
struct Checker {
    conns: Vec<TcpStream>,
}

impl Checker {
    fn new(env: &Env, live: &[usize]) -> Result<Checker> {
        let mut conns = Vec::new();
        for &i in live {
            let stream = TcpStream::connect_timeout(&env.addrs[i], Duration::from_secs(1))?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            conns.push(stream);
        }
        Ok(Checker { conns })
    }

    /// `PTTL key` on each master (-2: no key), for diagnostics.
    fn pttls(&mut self, key: &str) -> Result<Vec<i64>> {
        let cmd = encode(&[b"PTTL", key.as_bytes()]);
        let mut out = Vec::new();
        for conn in &mut self.conns {
            conn.write_all(&cmd)?;
            let mut line = String::new();
            BufReader::new(&*conn).read_line(&mut line)?;
            let n = line
                .trim_end()
                .strip_prefix(':')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("PTTL replied {line:?}"))?;
            out.push(n);
        }
        Ok(out)
    }

    /// On how many masters `key` exists.
    fn count(&mut self, key: &str) -> Result<usize> {
        let cmd = encode(&[b"EXISTS", key.as_bytes()]);
        let mut n = 0;
        for conn in &mut self.conns {
            conn.write_all(&cmd)?;
            let mut reply = [0u8; 4];
            conn.read_exact(&mut reply)?;
            match &reply {
                b":1\r\n" => n += 1,
                b":0\r\n" => {}
                other => return Err(format!("EXISTS replied {other:?}").into()),
            }
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

fn histogram() -> Histogram<u64> {
    // 1 ns to 1 h, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|e| panic!("{e}"))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

#[derive(Clone)]
struct Stats {
    acquire: Histogram<u64>,
    release: Histogram<u64>,
    cycle: Histogram<u64>,
    allocations: u64,
    failures: u64,
    note: String,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            acquire: histogram(),
            release: histogram(),
            cycle: histogram(),
            allocations: 0,
            failures: 0,
            note: String::new(),
        }
    }

    fn count(&self) -> u64 {
        self.cycle.len()
    }

    fn allocs_per_cycle(&self) -> f64 {
        self.allocations as f64 / self.count().max(1) as f64
    }
}

struct Slot {
    kind: Kind,
    resource: String,
    variant: Box<dyn Variant>,
    cycles: u64,
    /// Spot-check every this many cycles.
    check_every: u64,
    /// Spot checks after release, and how many found the key still there.
    checks: u64,
    leftovers: u64,
}

/// One verified cycle: acquire (timed), spot-check (untimed), release
/// (timed), spot-check (untimed). `intended` is the start the latencies are
/// measured from (now, in closed loop).
fn cycle(
    slot: &mut Slot,
    checker: &mut Checker,
    quorum: usize,
    intended: Option<Instant>,
    stats: Option<&mut Stats>,
) -> Result<()> {
    let check = slot.cycles % slot.check_every == 0;
    slot.cycles += 1;
    let a0 = allocations();
    let t0 = Instant::now();
    let acquired = slot.variant.acquire();
    let t1 = Instant::now();
    let a1 = allocations();
    if let Err(e) = acquired {
        return Err(format!("{}: acquire failed in a healthy run: {e}", slot.kind.name()).into());
    }
    if check {
        let n = checker.count(&slot.resource)?;
        if n < quorum {
            return Err(format!(
                "{}: acquired, but the key is on {n} masters only",
                slot.kind.name()
            )
            .into());
        }
    }
    let a2 = allocations();
    let t2 = Instant::now();
    let released = slot.variant.release();
    let t3 = Instant::now();
    let a3 = allocations();
    released.map_err(|e| format!("{}: release failed: {e}", slot.kind.name()))?;
    if check {
        // A client that decides at quorum returns before the last masters
        // have answered the release: give them a moment.
        let mut n = checker.count(&slot.resource)?;
        let deadline = Instant::now() + Duration::from_millis(500);
        while n != 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(1));
            n = checker.count(&slot.resource)?;
        }
        slot.checks += 1;
        if n != 0 {
            // Counted and reported, not fatal: the next acquire still finds
            // a quorum as long as a minority is left, else it aborts.
            slot.leftovers += 1;
            eprintln!(
                "warning: {}: released, but the key is still on {n} masters after 500 ms \
                 (spot check {}; PTTL per master in ms, -2 = gone: {:?})",
                slot.kind.name(),
                slot.checks,
                checker.pttls(&slot.resource)?
            );
        }
    }
    if let Some(stats) = stats {
        let start = intended.unwrap_or(t0);
        // Paced: acquire from the intended start; release is its own service
        // time; the cycle from the intended start to the end of release.
        let acquire = t1.saturating_duration_since(start);
        let release = t3 - t2;
        stats.acquire.saturating_record(nanos(acquire));
        stats.release.saturating_record(nanos(release));
        stats.cycle.saturating_record(nanos(acquire + release));
        stats.allocations += (a1 - a0) + (a3 - a2);
    }
    Ok(())
}

fn warm_up(slots: &mut [Slot], checker: &mut Checker, quorum: usize, n: u64) -> Result<()> {
    for slot in slots.iter_mut() {
        for _ in 0..n {
            cycle(slot, checker, quorum, None, None)?;
        }
    }
    Ok(())
}

/// Closed loop, in round-robin batches; the order rotates every round.
fn closed_loop(
    slots: &mut [Slot],
    checker: &mut Checker,
    quorum: usize,
    args: &Args,
) -> Result<Vec<Stats>> {
    let mut stats = vec![Stats::new(); slots.len()];
    let rounds = args.cycles.div_ceil(args.batch);
    for round in 0..rounds {
        for j in 0..slots.len() {
            let i = (j + round as usize) % slots.len();
            for _ in 0..args.batch {
                cycle(&mut slots[i], checker, quorum, None, Some(&mut stats[i]))?;
            }
        }
    }
    Ok(stats)
}

/// Waits until `at`: sleeps until shortly before, then spins.
fn wait_until(at: Instant) {
    let now = Instant::now();
    if at > now + Duration::from_micros(150) {
        thread::sleep(at - now - Duration::from_micros(100));
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

/// Paced at `rate` cycles/s, one variant at a time in interleaved slices;
/// latency from each cycle's intended start (free of coordinated omission).
fn paced(
    slots: &mut [Slot],
    checker: &mut Checker,
    quorum: usize,
    args: &Args,
) -> Result<Vec<Stats>> {
    let mut stats = vec![Stats::new(); slots.len()];
    if args.paced == 0 {
        return Ok(stats);
    }
    let period = Duration::from_nanos(1_000_000_000 / args.rate);
    let rounds = args.paced.div_ceil(args.slice);
    for round in 0..rounds {
        for j in 0..slots.len() {
            let i = (j + round as usize) % slots.len();
            let start = Instant::now() + Duration::from_millis(1);
            for k in 0..args.slice {
                let intended = start + period * k as u32;
                wait_until(intended);
                cycle(
                    &mut slots[i],
                    checker,
                    quorum,
                    Some(intended),
                    Some(&mut stats[i]),
                )?;
            }
        }
    }
    Ok(stats)
}

/// The contention scenarios: a tight loop, and a random wait of up to 1 ms
/// after each failed attempt.
const CONTENTION_BACKOFFS: [Duration; 2] = [Duration::ZERO, Duration::from_millis(1)];

struct ContentionResult {
    kind: Kind,
    /// Most random wait after a failed attempt (zero: try again at once).
    backoff: Duration,
    acquired: u64,
    attempts: u64,
    secs: f64,
    success: Histogram<u64>,
    attempt: Histogram<u64>,
    error: Option<String>,
}

/// `threads` clients, each with its own connections, try to take one
/// resource for `duration`, releasing at once after each success. After a
/// failed attempt a client waits a random time from zero to `backoff` (the
/// same for every variant), as Redlock's retry rule says; with a zero
/// `backoff` it tries again at once.
fn contention(
    env: &Env,
    kind: Kind,
    threads: usize,
    duration: Duration,
    backoff: Duration,
) -> ContentionResult {
    let resource = kind.resource("contended");
    let barrier = Arc::new(Barrier::new(threads));
    let live: Vec<usize> = (0..env.addrs.len()).collect();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (env, resource, barrier, live) =
                (env.clone(), resource.clone(), barrier.clone(), live.clone());
            thread::spawn(move || -> std::result::Result<_, String> {
                let made = make(kind, &env, &resource, &live).map_err(|e| e.to_string());
                barrier.wait();
                let mut variant = made?;
                let (mut success, mut attempt) = (histogram(), histogram());
                let (mut acquired, mut attempts) = (0u64, 0u64);
                let end = Instant::now() + duration;
                while Instant::now() < end {
                    let t0 = Instant::now();
                    let ok = variant.acquire().is_ok();
                    let took = nanos(t0.elapsed());
                    attempts += 1;
                    attempt.saturating_record(took);
                    if ok {
                        acquired += 1;
                        success.saturating_record(took);
                        variant.release()?;
                    } else if !backoff.is_zero() {
                        let wait = rand::random_range(0..=backoff.as_nanos() as u64);
                        thread::sleep(Duration::from_nanos(wait));
                    }
                }
                Ok((acquired, attempts, success, attempt))
            })
        })
        .collect();
    let mut result = ContentionResult {
        kind,
        backoff,
        acquired: 0,
        attempts: 0,
        secs: duration.as_secs_f64(),
        success: histogram(),
        attempt: histogram(),
        error: None,
    };
    for handle in handles {
        match handle.join() {
            Ok(Ok((acquired, attempts, success, attempt))) => {
                result.acquired += acquired;
                result.attempts += attempts;
                let _ = result.success.add(&success);
                let _ = result.attempt.add(&attempt);
            }
            Ok(Err(e)) => result.error = Some(e),
            Err(_) => result.error = Some("a client thread panicked".to_owned()),
        }
    }
    result
}

enum FaultOutcome {
    Done(Box<Stats>),
    Blocked { after: u64, waited: Duration },
}

/// Runs `variant` with one master paused in a thread of its own, for up to
/// `cycles` cycles or `budget`; gives up waiting after `budget + grace`
/// (the thread is leaked: it may be stuck forever).
fn fault_run(
    kind: Kind,
    mut variant: Box<dyn Variant>,
    cycles: u64,
    budget: Duration,
) -> FaultOutcome {
    let grace = Duration::from_secs(10);
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let counter = progress.clone();
    let spawned = thread::Builder::new()
        .name(format!("fault-{}", kind.id()))
        .spawn(move || {
            let mut stats = Stats::new();
            let end = Instant::now() + budget;
            for _ in 0..cycles {
                if Instant::now() >= end {
                    stats.note = format!("stopped at the {budget:?} budget");
                    break;
                }
                let a0 = allocations();
                let t0 = Instant::now();
                let acquired = variant.acquire();
                let t1 = Instant::now();
                counter.fetch_add(1, Ordering::Relaxed);
                if acquired.is_err() {
                    stats.failures += 1;
                    if stats.note.is_empty() {
                        stats.note =
                            format!("acquire failed: {}", acquired.err().unwrap_or_default());
                    }
                    continue;
                }
                let t2 = Instant::now();
                if variant.release().is_err() {
                    stats.failures += 1;
                }
                let t3 = Instant::now();
                stats.allocations += allocations() - a0;
                stats.acquire.saturating_record(nanos(t1 - t0));
                stats.release.saturating_record(nanos(t3 - t2));
                stats.cycle.saturating_record(nanos(t3 - t0));
            }
            let _ = tx.send(stats);
        });
    if let Err(e) = spawned {
        let mut stats = Stats::new();
        stats.note = format!("could not spawn: {e}");
        return FaultOutcome::Done(Box::new(stats));
    }
    let waited = budget + grace;
    match rx.recv_timeout(waited) {
        Ok(stats) => FaultOutcome::Done(Box::new(stats)),
        Err(_) => FaultOutcome::Blocked {
            after: progress.load(Ordering::Relaxed),
            waited,
        },
    }
}

// ---------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn fmt_us(ns: u64) -> String {
    let v = us(ns);
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn pct(h: &Histogram<u64>, p: f64) -> u64 {
    h.value_at_quantile(p / 100.0)
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}

type Pick = fn(&Stats) -> &Histogram<u64>;

const PARTS: [(&str, Pick); 3] = [
    ("acquire", |s| &s.acquire),
    ("release", |s| &s.release),
    ("cycle", |s| &s.cycle),
];

fn latency_table(out: &mut String, title: &str, kinds: &[Kind], stats: &[Stats]) {
    let floor = kinds.iter().position(|&k| k == Kind::Floor);
    let floor_q = kinds.iter().position(|&k| k == Kind::FloorQuorum);
    let mine = kinds.iter().position(|&k| k == Kind::Mine);
    let _ = writeln!(
        out,
        "\n## {title}\n(µs; ×fl = ratio to floor (all), ×fq to floor (quorum), ×me to redlock-mio, at p50 and p99)"
    );
    for (part, pick) in PARTS {
        let _ = writeln!(
            out,
            "\n{part:<8} {:<15} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>6} {:>6}  {:>6} {:>6}  {:>6} {:>6}",
            "variant",
            "n",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "×fl50",
            "×fl99",
            "×fq50",
            "×fq99",
            "×me50",
            "×me99"
        );
        for (k, s) in kinds.iter().zip(stats) {
            let h = pick(s);
            if h.is_empty() {
                let _ = writeln!(out, "{:<8} {:<15} {:>6}  no samples", "", k.name(), 0);
                continue;
            }
            let rel = |r: Option<usize>, p: f64| {
                r.map_or("-".to_owned(), |r| {
                    ratio(pct(h, p), pct(pick(&stats[r]), p))
                })
            };
            let _ = writeln!(
                out,
                "{:<8} {:<15} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>6} {:>6}  {:>6} {:>6}  {:>6} {:>6}",
                "",
                k.name(),
                h.len(),
                fmt_us(pct(h, 50.0)),
                fmt_us(pct(h, 90.0)),
                fmt_us(pct(h, 99.0)),
                fmt_us(pct(h, 99.9)),
                fmt_us(h.max()),
                rel(floor, 50.0),
                rel(floor, 99.0),
                rel(floor_q, 50.0),
                rel(floor_q, 99.0),
                rel(mine, 50.0),
                rel(mine, 99.0),
            );
        }
    }
}

fn json_hist(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "null".to_owned();
    }
    let mut s = format!("{{\"count\": {}", h.len());
    for p in PCTS {
        let _ = write!(s, ", \"p{p}\": {:.3}", us(pct(h, p)));
    }
    let _ = write!(
        s,
        ", \"max\": {:.3}, \"mean\": {:.3}}}",
        us(h.max()),
        h.mean() / 1000.0
    );
    s
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_stats(kinds: &[Kind], stats: &[Stats]) -> String {
    let rows: Vec<String> = kinds
        .iter()
        .zip(stats)
        .map(|(k, s)| {
            format!(
                "    {{\"variant\": {}, \"id\": \"{}\", \"cycles\": {}, \"failures\": {}, \
                 \"allocations_per_cycle\": {:.2}, \"note\": {}, \"acquire_us\": {}, \
                 \"release_us\": {}, \"cycle_us\": {}}}",
                json_str(k.name()),
                k.id(),
                s.count(),
                s.failures,
                s.allocs_per_cycle(),
                json_str(&s.note),
                json_hist(&s.acquire),
                json_hist(&s.release),
                json_hist(&s.cycle),
            )
        })
        .collect();
    format!("[\n{}\n  ]", rows.join(",\n"))
}

/// One panel of percentile curves: x = percentile on a log scale of
/// 1 / (1 - p), y = µs on a log scale.
fn svg_panel(out: &mut String, x0: f64, title: &str, curves: &[(Kind, &Histogram<u64>)]) {
    let (w, h, left, top, right, bottom) = (520.0, 380.0, 60.0, 40.0, 20.0, 50.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let points: Vec<(Kind, Vec<f64>)> = curves
        .iter()
        .filter(|(_, hist)| !hist.is_empty())
        .map(|(k, hist)| (*k, PLOT_PCTS.iter().map(|&p| us(pct(hist, p))).collect()))
        .collect();
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="22" font-size="14" text-anchor="middle" font-weight="bold">{title}</text>"##,
        x0 + left + pw / 2.0
    );
    if points.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">no samples</text>"##,
            x0 + left + pw / 2.0,
            top + ph / 2.0
        );
        return;
    }
    let all = points.iter().flat_map(|(_, v)| v.iter().copied());
    let lo = all.clone().fold(f64::INFINITY, f64::min).max(0.1);
    let hi = all.fold(0.0f64, f64::max).max(lo * 10.0);
    // Decades of µs: 0.1 µs to 1000 s at most.
    let ylo = lo.log10().floor().clamp(-1.0, 8.0);
    let yhi = hi.log10().ceil().clamp(ylo + 1.0, 9.0);
    let xof = |p: f64| (1.0 / (1.0 - p / 100.0)).log10();
    let (xlo, xhi) = (xof(PLOT_PCTS[0]), xof(PLOT_PCTS[PLOT_PCTS.len() - 1]));
    let px = |p: f64| x0 + left + (xof(p) - xlo) / (xhi - xlo) * pw;
    let py = |v: f64| top + ph - (v.log10().max(ylo) - ylo) / (yhi - ylo) * ph;
    let _ = writeln!(
        out,
        r##"<rect x="{:.1}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        x0 + left
    );
    for p in [50.0, 90.0, 99.0, 99.9, 99.99] {
        let x = px(p);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">p{p}</text>"##,
            top + ph,
            top + ph + 16.0
        );
    }
    for e in (ylo as i32)..=(yhi as i32) {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            if v.log10() > yhi + 1e-9 {
                continue;
            }
            let y = py(v);
            let label = if v >= 1000.0 {
                format!("{} ms", v / 1000.0)
            } else {
                format!("{v} µs")
            };
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{label}</text>"##,
                x0 + left,
                x0 + left + pw,
                x0 + left - 4.0,
                y + 3.0
            );
        }
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">percentile</text>"##,
        x0 + left + pw / 2.0,
        h - 8.0
    );
    for (kind, values) in &points {
        let path: Vec<String> = PLOT_PCTS
            .iter()
            .zip(values)
            .map(|(&p, &v)| format!("{:.1},{:.1}", px(p), py(v)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"##,
            kind.color(),
            path.join(" ")
        );
    }
}

/// The legend, one row under the panels.
fn svg_legend(out: &mut String, y: f64, kinds: &[Kind]) {
    for (n, kind) in kinds.iter().enumerate() {
        let x = 30.0 + n as f64 * 143.0;
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{y:.1}" font-size="12">{}</text>"##,
            y - 4.0,
            x + 20.0,
            y - 4.0,
            kind.color(),
            x + 25.0,
            kind.name()
        );
    }
}

fn svg(closed: &[(Kind, &Histogram<u64>)], paced: &[(Kind, &Histogram<u64>)], rate: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="1040" height="410" viewBox="0 0 1040 410" font-family="sans-serif"><rect width="1040" height="410" fill="white"/>"##
    );
    svg_panel(&mut out, 0.0, "closed loop: acquire + release", closed);
    svg_panel(
        &mut out,
        520.0,
        &format!("paced {rate}/s: cycle from intended start"),
        paced,
    );
    let kinds: Vec<Kind> = closed.iter().map(|(k, _)| *k).collect();
    svg_legend(&mut out, 398.0, &kinds);
    out.push_str("</svg>\n");
    out
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("latency")
}

// ---------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------

fn main() -> ExitCode {
    match parse_args().and_then(|args| args.map_or(Ok(()), run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("latency bench failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let began = Instant::now();
    let load_start = loadavg();
    // Short sleeps in the paced mode: ask for 1 ns of timer slack.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only affects
    // this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    let mut cluster = None;
    let urls = if args.urls.is_empty() {
        let c = Cluster::start(MASTERS);
        let urls = c.urls();
        cluster = Some(c);
        urls
    } else {
        args.urls.clone()
    };
    let env = Env::new(urls)?;
    let quorum = env.quorum();
    let all: Vec<usize> = (0..env.addrs.len()).collect();
    println!(
        "latency bench: {} masters (quorum {quorum}), TTL {TTL:?}, {} mode; load average at start {load_start}",
        env.urls.len(),
        if args.quick { "quick" } else { "full" }
    );

    let selected: Vec<Kind> = ALL
        .into_iter()
        .filter(|k| args.only.is_empty() || args.only.contains(k))
        .collect();
    let mut slots = Vec::new();
    for &kind in &selected {
        let resource = kind.resource("healthy");
        let variant = make(kind, &env, &resource, &all)
            .map_err(|e| format!("{}: setup failed: {e}", kind.name()))?;
        slots.push(Slot {
            kind,
            resource,
            variant,
            cycles: 0,
            check_every: if args.quick { 100 } else { CHECK_EVERY },
            checks: 0,
            leftovers: 0,
        });
    }
    let mut checker = Checker::new(&env, &all)?;
    warm_up(&mut slots, &mut checker, quorum, args.warm_up)?;

    let t = Instant::now();
    let load_closed = loadavg();
    let closed = closed_loop(&mut slots, &mut checker, quorum, &args)?;
    eprintln!("closed loop done in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let paced_stats = paced(&mut slots, &mut checker, quorum, &args)?;
    eprintln!("paced done in {:.1} s", t.elapsed().as_secs_f64());
    let load_measured = loadavg();

    let kinds: Vec<Kind> = slots.iter().map(|s| s.kind).collect();
    let mut out = String::new();
    latency_table(&mut out, "closed loop (service time)", &kinds, &closed);
    latency_table(
        &mut out,
        &format!(
            "paced at {}/s per variant (response time from the intended start; release is service time)",
            args.rate
        ),
        &kinds,
        &paced_stats,
    );
    let _ = writeln!(
        out,
        "\n## heap allocations per cycle (acquire + release, measuring thread); spot checks"
    );
    for (slot, (c, p)) in slots.iter().zip(closed.iter().zip(&paced_stats)) {
        let _ = writeln!(
            out,
            "{:<15} closed {:>8.1}   paced {:>8.1}   key gone after release: {} of {} checks",
            slot.kind.name(),
            c.allocs_per_cycle(),
            p.allocs_per_cycle(),
            slot.checks - slot.leftovers,
            slot.checks
        );
    }
    print!("{out}");

    // Contention: every lock variant (the floor has no lock logic).
    let mut contended = Vec::new();
    let mut cout = String::new();
    let contending: Vec<Kind> = selected
        .iter()
        .copied()
        .filter(|&k| args.contention_on && !matches!(k, Kind::Floor | Kind::FloorQuorum))
        .collect();
    for backoff in CONTENTION_BACKOFFS {
        if !contending.is_empty() {
            let _ = writeln!(
                cout,
                "\n## contention: 4 client threads, one resource, {:?} each; after a failed attempt \
                 a random wait of 0 to {:?} (acquire latency, µs)",
                args.contention, backoff
            );
            let _ = writeln!(
                cout,
                "{:<15} {:>9} {:>9} {:>8} | success {:>7} {:>7} {:>7} {:>7} | attempts {:>7} {:>7} {:>7} {:>7}",
                "variant",
                "acq/s",
                "attempts",
                "success%",
                "p50",
                "p90",
                "p99",
                "p99.9",
                "p50",
                "p90",
                "p99",
                "p99.9"
            );
        }
        for &kind in &contending {
            let r = contention(&env, kind, 4, args.contention, backoff);
            let line = |h: &Histogram<u64>| {
                PCTS.iter()
                    .map(|&p| {
                        if h.is_empty() {
                            format!("{:>7}", "-")
                        } else {
                            format!("{:>7}", fmt_us(pct(h, p)))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = writeln!(
                cout,
                "{:<15} {:>9.0} {:>9} {:>7.1}% | success {} | attempts {}{}",
                kind.name(),
                r.acquired as f64 / r.secs,
                r.attempts,
                100.0 * r.acquired as f64 / r.attempts.max(1) as f64,
                line(&r.success),
                line(&r.attempt),
                r.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  error: {e}"))
            );
            let left = checker.count(&kind.resource("contended"))?;
            if left != 0 {
                let _ = writeln!(cout, "  warning: key left on {left} masters after the run");
            }
            contended.push(r);
        }
    }
    print!("{cout}");
    out.push_str(&cout);

    // Fault: one master paused (only with our own cluster).
    let mut fault = Vec::new();
    let mut fout = String::new();
    if let (Some(cluster), true) = (&cluster, args.fault) {
        let live: Vec<usize> = all.iter().copied().filter(|&i| i != PAUSED).collect();
        let mut variants = Vec::new();
        for &kind in &selected {
            let resource = kind.resource("fault");
            // The floor talks only to the live masters: it has no timeout.
            let nodes = if matches!(kind, Kind::Floor | Kind::FloorQuorum) {
                &live
            } else {
                &all
            };
            let mut slot = Slot {
                kind,
                resource: resource.clone(),
                variant: make(kind, &env, &resource, nodes)?,
                cycles: 0,
                check_every: CHECK_EVERY,
                checks: 0,
                leftovers: 0,
            };
            // Connections up and warm before the pause.
            warm_up(
                std::slice::from_mut(&mut slot),
                &mut checker,
                quorum,
                args.warm_up.min(100),
            )?;
            variants.push(slot);
        }
        cluster.pause(PAUSED);
        let _ = writeln!(
            fout,
            "\n## fault: master {PAUSED} of {} paused (SIGSTOP); closed loop, up to {} cycles or {:?} per variant (µs)",
            env.urls.len(),
            args.fault_cycles,
            args.fault_budget
        );
        let _ = writeln!(
            fout,
            "{:<15} {:>6} {:>6} | acquire {:>7} {:>7} {:>7} {:>7} {:>8} | healthy acquire {:>7} {:>7} | note",
            "variant", "n", "failed", "p50", "p90", "p99", "p99.9", "max", "p50", "p99"
        );
        for slot in variants {
            let kind = slot.kind;
            let healthy = &closed[kinds.iter().position(|&k| k == kind).unwrap_or(0)];
            let outcome = fault_run(kind, slot.variant, args.fault_cycles, args.fault_budget);
            match &outcome {
                FaultOutcome::Done(s) => {
                    let h = &s.acquire;
                    let cell = |p: Option<f64>| {
                        if h.is_empty() {
                            "-".to_owned()
                        } else {
                            fmt_us(p.map_or(h.max(), |p| pct(h, p)))
                        }
                    };
                    let _ = writeln!(
                        fout,
                        "{:<15} {:>6} {:>6} | acquire {:>7} {:>7} {:>7} {:>7} {:>8} | healthy acquire {:>7} {:>7} | {}",
                        kind.name(),
                        s.count(),
                        s.failures,
                        cell(Some(50.0)),
                        cell(Some(90.0)),
                        cell(Some(99.0)),
                        cell(Some(99.9)),
                        cell(None),
                        fmt_us(pct(&healthy.acquire, 50.0)),
                        fmt_us(pct(&healthy.acquire, 99.0)),
                        s.note
                    );
                }
                FaultOutcome::Blocked { after, waited } => {
                    let _ = writeln!(
                        fout,
                        "{:<15} blocked > {} s (the call never returned; {after} acquire attempts returned before)",
                        kind.name(),
                        waited.as_secs()
                    );
                }
            }
            fault.push((kind, outcome));
        }
        cluster.resume(PAUSED);
    } else {
        let _ = writeln!(
            fout,
            "\n## fault: skipped ({})",
            if args.fault {
                "needs the bench's own cluster"
            } else {
                "--no-fault"
            }
        );
    }
    print!("{fout}");
    out.push_str(&fout);

    let elapsed = began.elapsed();
    let load_end = loadavg();
    let summary = format!(
        "\nload average: start {load_start}, before measuring {load_closed}, after closed+paced {load_measured}, end {load_end}; total run time {:.1} s\n",
        elapsed.as_secs_f64()
    );
    print!("{summary}");

    // JSON and SVG.
    let dir = target_dir();
    std::fs::create_dir_all(&dir)?;
    let contention_json: Vec<String> = contended
        .iter()
        .map(|r| {
            format!(
                "    {{\"variant\": {}, \"id\": \"{}\", \"threads\": 4, \"backoff_us\": {}, \"seconds\": {}, \"acquired\": {}, \
                 \"attempts\": {}, \"acquisitions_per_s\": {:.1}, \"success_acquire_us\": {}, \
                 \"attempt_us\": {}, \"error\": {}}}",
                json_str(r.kind.name()),
                r.kind.id(),
                r.backoff.as_micros(),
                r.secs,
                r.acquired,
                r.attempts,
                r.acquired as f64 / r.secs,
                json_hist(&r.success),
                json_hist(&r.attempt),
                r.error.as_deref().map_or("null".to_owned(), json_str)
            )
        })
        .collect();
    let fault_json: Vec<String> = fault
        .iter()
        .map(|(k, o)| match o {
            FaultOutcome::Done(s) => json_stats(&[*k], std::slice::from_ref(s))
                .trim_start_matches("[\n")
                .trim_end_matches("\n  ]")
                .to_owned(),
            FaultOutcome::Blocked { after, waited } => format!(
                "    {{\"variant\": {}, \"id\": \"{}\", \"blocked_after_s\": {}, \"attempts_returned\": {after}}}",
                json_str(k.name()),
                k.id(),
                waited.as_secs()
            ),
        })
        .collect();
    let json = format!(
        "{{\n  \"masters\": {},\n  \"quick\": {},\n  \"ttl_ms\": {TTL_MS},\n  \"paced_rate_per_s\": {},\n  \
         \"load_average\": {{\"start\": \"{load_start}\", \"measuring\": \"{load_closed}\", \"after\": \"{load_measured}\", \"end\": \"{load_end}\"}},\n  \
         \"run_seconds\": {:.1},\n  \"closed_loop\": {},\n  \"paced\": {},\n  \"spot_checks\": [{}],\n  \"contention\": [\n{}\n  ],\n  \"fault_paused_master\": {PAUSED},\n  \"fault\": [\n{}\n  ]\n}}\n",
        env.urls.len(),
        args.quick,
        args.rate,
        elapsed.as_secs_f64(),
        json_stats(&kinds, &closed),
        json_stats(&kinds, &paced_stats),
        slots
            .iter()
            .map(|s| format!(
                "{{\"id\": \"{}\", \"after_release\": {}, \"key_left\": {}}}",
                s.kind.id(),
                s.checks,
                s.leftovers
            ))
            .collect::<Vec<_>>()
            .join(", "),
        contention_json.join(",\n"),
        fault_json.join(",\n"),
    );
    std::fs::write(dir.join("latency.json"), json)?;
    let closed_curves: Vec<(Kind, &Histogram<u64>)> = kinds
        .iter()
        .copied()
        .zip(closed.iter().map(|s| &s.cycle))
        .collect();
    let paced_curves: Vec<(Kind, &Histogram<u64>)> = kinds
        .iter()
        .copied()
        .zip(paced_stats.iter().map(|s| &s.cycle))
        .collect();
    std::fs::write(
        dir.join("latency.svg"),
        svg(&closed_curves, &paced_curves, args.rate),
    )?;
    std::fs::write(dir.join("latency.txt"), format!("{out}{summary}"))?;
    println!("wrote {}/latency.{{json,svg,txt}}", dir.display());
    drop(cluster);
    Ok(())
}
