//! Throughput under concurrency: acquire + release cycles per second, and
//! the cycle's p50/p99, at 1, 4, 16, 64 and 256 concurrent callers, each
//! caller on its own resource (so that no cycle fails for contention), on
//! five local masters, all variants in one run:
//!
//! - `redlock-mio, client per thread`: each caller a thread with its own
//!   client (N connections per caller);
//! - `redlock-mio, shared`: one client shared by the caller threads, their
//!   rounds in flight at once over its N connections;
//! - `redlock-mio async, shared`: one client shared by tokio tasks (on the
//!   same two-worker runtime as the peers), through the async API;
//! - `rslock 0.10, shared`: one `LockManager`, the callers tokio tasks on a
//!   two-worker runtime;
//! - `redis-rs multiplexed`: one multiplexed connection per master shared by
//!   the callers (tokio tasks): `SET NX PX` to all, quorum, `EVALSHA`
//!   release to all;
//! - `floor, K in flight`: no lock logic: one raw connection per master,
//!   K pre-encoded `SET NX PX` (K resources) written to every master, the
//!   K replies of each read, then K releases likewise (K = 1, 16, 64), by
//!   the same `EVALSHA` compare-and-delete script every Redlock client
//!   sends; and, for reference only, K = 64 with a bare `DEL` as the
//!   release (cheaper for the server, but no lock can release that way).
//!
//! ```text
//! cargo bench -p redlock-mio-bench --bench throughput             # about 1.5 minutes
//! cargo bench -p redlock-mio-bench --bench throughput -- --repeat 3  # medians of 3 passes
//! cargo bench -p redlock-mio-bench --bench throughput -- --quick  # smoke run
//! ```

#![allow(
    clippy::expect_used,
    reason = "a benchmark must fail loudly on bad setup or a broken variant"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::error::Error as StdError;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use redlock_mio::{RELEASE_SCRIPT, RELEASE_SHA1, Redlock};
use support::cluster::Cluster;

type Result<T> = std::result::Result<T, Box<dyn StdError>>;

const MASTERS: usize = 5;
const TTL: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);

/// What one cell of the table measured.
struct Cell {
    cycles: u64,
    failed: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Cell {
    fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `callers` threads, each calling `cycle(caller)` until `run` is over;
/// counts the cycles and records their latencies.
fn threads(callers: usize, run: Duration, cycle: impl Fn(usize) -> bool + Sync) -> Cell {
    let stop = AtomicBool::new(false);
    let failed = AtomicU64::new(0);
    let started = Instant::now();
    let hists: Vec<Histogram<u64>> = thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|c| {
                let (stop, failed, cycle) = (&stop, &failed, &cycle);
                s.spawn(move || {
                    let mut h = histogram();
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = Instant::now();
                        if cycle(c) {
                            h.saturating_record(nanos(t0.elapsed()));
                        } else {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    h
                })
            })
            .collect();
        thread::sleep(run);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("caller thread"))
            .collect()
    });
    merge(hists, failed.into_inner(), started.elapsed())
}

fn merge(hists: Vec<Histogram<u64>>, failed: u64, elapsed: Duration) -> Cell {
    let mut latency = histogram();
    for h in &hists {
        latency.add(h).expect("same bounds");
    }
    Cell {
        cycles: latency.len(),
        failed,
        elapsed,
        latency,
    }
}

fn client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .request_timeout(REQUEST_TIMEOUT)
        .retry_count(0)
        .build()
        .expect("build a client")
}

fn mine_per_thread(urls: &[String], callers: usize, run: Duration) -> Cell {
    let clients: Vec<Redlock> = (0..callers).map(|_| client(urls)).collect();
    threads(callers, run, |c| {
        let redlock = &clients[c];
        match redlock.try_lock(format!("tp:own:{c}"), TTL) {
            Ok(mut lock) => redlock.unlock(&mut lock).is_ok(),
            Err(_) => false,
        }
    })
}

fn mine_shared(urls: &[String], callers: usize, run: Duration) -> Cell {
    let redlock = client(urls);
    threads(callers, run, |c| {
        match redlock.try_lock(format!("tp:shared:{c}"), TTL) {
            Ok(mut lock) => redlock.unlock(&mut lock).is_ok(),
            Err(_) => false,
        }
    })
}

fn mine_async(
    rt: &tokio::runtime::Runtime,
    urls: &[String],
    callers: usize,
    run: Duration,
) -> Cell {
    let redlock = Arc::new(client(urls));
    tasks(rt, callers, run, move |c| {
        let redlock = redlock.clone();
        async move {
            let resource = format!("tp:async:{c}");
            match redlock.try_lock_async(&resource, TTL).await {
                Ok(mut lock) => redlock.unlock_async(&mut lock).await.is_ok(),
                Err(_) => false,
            }
        }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Runs `callers` tokio tasks, each looping over `cycle(caller)`.
fn tasks<F, Fut>(rt: &tokio::runtime::Runtime, callers: usize, run: Duration, cycle: F) -> Cell
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let cycle = Arc::new(cycle);
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..callers)
        .map(|c| {
            let (cycle, stop, failed) = (cycle.clone(), stop.clone(), failed.clone());
            rt.spawn(async move {
                let mut h = histogram();
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    if cycle(c).await {
                        h.saturating_record(nanos(t0.elapsed()));
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                h
            })
        })
        .collect();
    thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    let hists = rt
        .block_on(join_all(handles))
        .into_iter()
        .map(|h| h.expect("caller task"))
        .collect();
    merge(hists, failed.load(Ordering::Relaxed), started.elapsed())
}

fn rslock_shared(
    rt: &tokio::runtime::Runtime,
    urls: &[String],
    callers: usize,
    run: Duration,
) -> Cell {
    let mut manager = rslock::LockManager::new(urls.to_vec());
    manager.set_retry(1, Duration::from_millis(1));
    let manager = Arc::new(manager);
    tasks(rt, callers, run, move |c| {
        let manager = manager.clone();
        async move {
            let resource = format!("tp:rslock:{c}");
            match manager.lock(resource.as_bytes(), TTL).await {
                Ok(lock) => {
                    manager.unlock(&lock).await;
                    true
                }
                Err(_) => false,
            }
        }
    })
}

fn multiplexed(
    rt: &tokio::runtime::Runtime,
    urls: &[String],
    callers: usize,
    run: Duration,
) -> Cell {
    let release = redis1::Script::new(RELEASE_SCRIPT);
    let conns: Vec<redis1::aio::MultiplexedConnection> = urls
        .iter()
        .map(|url| {
            let client = redis1::Client::open(url.as_str()).expect("a redis-rs client");
            let mut conn = rt
                .block_on(client.get_multiplexed_async_connection())
                .expect("connect");
            let sha: String = rt.block_on(release.load_async(&mut conn)).expect("load");
            assert_eq!(sha, RELEASE_SHA1);
            conn
        })
        .collect();
    let conns = Arc::new(conns);
    let quorum = urls.len() / 2 + 1;
    tasks(rt, callers, run, move |c| {
        let conns = conns.clone();
        async move {
            let resource = format!("tp:multiplexed:{c}");
            let token: [u8; 20] = rand::random();
            let sets = join_all(conns.iter().map(|conn| {
                let mut conn = conn.clone();
                let mut cmd = redis1::cmd("SET");
                cmd.arg(&resource)
                    .arg(&token[..])
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000);
                async move {
                    tokio::time::timeout(
                        REQUEST_TIMEOUT,
                        cmd.query_async::<redis1::Value>(&mut conn),
                    )
                    .await
                }
            }))
            .await;
            let won = sets
                .iter()
                .filter(|r| matches!(r, Ok(Ok(redis1::Value::Okay))))
                .count();
            let released = join_all(conns.iter().map(|conn| {
                let mut conn = conn.clone();
                let mut cmd = redis1::cmd("EVALSHA");
                cmd.arg(RELEASE_SHA1).arg(1).arg(&resource).arg(&token[..]);
                async move {
                    tokio::time::timeout(REQUEST_TIMEOUT, cmd.query_async::<i64>(&mut conn)).await
                }
            }))
            .await;
            won >= quorum && released.iter().filter(|r| matches!(r, Ok(Ok(1)))).count() >= quorum
        }
    })
}

fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// How the floor releases: with the compare-and-delete script every
/// Redlock client must use, or with a bare `DEL` (no lock can release
/// that way safely; shown for reference).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Release {
    Script,
    Del,
}

/// The floor: `k` cycles in flight per connection, one thread.
fn floor(urls: &[String], k: usize, release: Release, run: Duration) -> Cell {
    let mut conns: Vec<(TcpStream, BufReader<TcpStream>)> = urls
        .iter()
        .map(|url| {
            let addr = url.trim_start_matches("redis://");
            let stream = TcpStream::connect(addr).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let reader = BufReader::new(stream.try_clone().expect("clone"));
            (stream, reader)
        })
        .collect();
    let token = b"floor-token-of-20-by";
    let ttl = b"10000";
    let mut sets = Vec::new();
    let mut releases = Vec::new();
    for i in 0..k {
        let resource = format!("tp:floor:{i}");
        sets.extend(encode(&[
            b"SET",
            resource.as_bytes(),
            token,
            b"NX",
            b"PX",
            ttl,
        ]));
        releases.extend(match release {
            Release::Script => encode(&[
                b"EVALSHA",
                RELEASE_SHA1.as_bytes(),
                b"1",
                resource.as_bytes(),
                token,
            ]),
            Release::Del => encode(&[b"DEL", resource.as_bytes()]),
        });
    }
    let mut line = String::new();
    for (stream, reader) in &mut conns {
        stream
            .write_all(&encode(&[b"SCRIPT", b"LOAD", RELEASE_SCRIPT.as_bytes()]))
            .expect("write");
        line.clear();
        reader.read_line(&mut line).expect("read");
        line.clear();
        reader.read_line(&mut line).expect("read");
        assert_eq!(line.trim_end(), RELEASE_SHA1, "the release script's SHA1");
    }
    let mut exchange = |bytes: &[u8], conns: &mut Vec<(TcpStream, BufReader<TcpStream>)>| -> bool {
        for (stream, _) in conns.iter_mut() {
            stream.write_all(bytes).expect("write");
        }
        let mut ok = true;
        for (_, reader) in conns.iter_mut() {
            for _ in 0..k {
                line.clear();
                reader.read_line(&mut line).expect("read");
                ok &= line.starts_with('+') || line.starts_with(':');
            }
        }
        ok
    };
    let mut latency = histogram();
    let mut failed = 0;
    let started = Instant::now();
    while started.elapsed() < run {
        let t0 = Instant::now();
        let ok = exchange(&sets, &mut conns) & exchange(&releases, &mut conns);
        let took = nanos(t0.elapsed());
        for _ in 0..k {
            latency.saturating_record(took);
        }
        if !ok {
            failed += k as u64;
        }
    }
    Cell {
        cycles: latency.len(),
        failed,
        elapsed: started.elapsed(),
        latency,
    }
}

/// A line chart of cycles/s against callers (log scale), one line per
/// variant, the floors as dashed horizontal lines.
fn svg(at: &[(&str, usize, f64)], floors: &[(usize, f64)]) -> String {
    use std::fmt::Write as _;
    let (w, h, left, right, top, bottom) = (760.0, 420.0, 70.0, 230.0, 30.0, 50.0);
    let mut names: Vec<&str> = Vec::new();
    for (name, _, _) in at {
        if !names.contains(name) {
            names.push(name);
        }
    }
    let callers: Vec<usize> = {
        let mut c: Vec<usize> = at.iter().map(|(_, c, _)| *c).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let top_rate = at
        .iter()
        .map(|(_, _, r)| *r)
        .chain(floors.iter().map(|(_, r)| *r))
        .fold(1.0, f64::max)
        * 1.05;
    let (lo, hi) = (
        (*callers.first().unwrap_or(&1) as f64).ln(),
        (*callers.last().unwrap_or(&1) as f64).ln().max(1.0),
    );
    let x = |c: usize| left + (w - left - right) * ((c as f64).ln() - lo) / (hi - lo).max(1e-9);
    let y = |r: f64| top + (h - top - bottom) * (1.0 - r / top_rate);
    let colors = [
        "#d62728", "#ff7f0e", "#1f77b4", "#9467bd", "#2ca02c", "#8c564b",
    ];
    let mut out = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n\
         <rect width='100%' height='100%' fill='white'/>\n\
         <text x='{left}' y='18'>acquire + release cycles/s against concurrent callers, 5 local masters</text>\n"
    );
    for &c in &callers {
        let _ = writeln!(
            out,
            "<text x='{:.1}' y='{:.1}' text-anchor='middle'>{c}</text>",
            x(c),
            h - bottom + 18.0
        );
    }
    for k in 0..=4 {
        let r = top_rate * f64::from(k) / 4.0;
        let _ = writeln!(
            out,
            "<line x1='{left}' x2='{:.1}' y1='{:.1}' y2='{:.1}' stroke='#eee'/><text x='{:.1}' y='{:.1}' text-anchor='end'>{:.0}</text>",
            w - right,
            y(r),
            y(r),
            left - 6.0,
            y(r) + 4.0,
            r
        );
    }
    let _ = writeln!(
        out,
        "<text x='{:.1}' y='{:.1}' text-anchor='middle'>callers (threads or tasks)</text>",
        (left + w - right) / 2.0,
        h - 12.0
    );
    let mut legend = top + 10.0;
    for (k, r) in floors {
        let _ = writeln!(
            out,
            "<line x1='{left}' x2='{:.1}' y1='{:.1}' y2='{:.1}' stroke='#7f7f7f' stroke-dasharray='4 4'/>\
             <text x='{:.1}' y='{:.1}' fill='#7f7f7f'>floor, {k} in flight</text>",
            w - right,
            y(*r),
            y(*r),
            w - right + 8.0,
            y(*r) + 4.0
        );
    }
    for (i, name) in names.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<String> = at
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, c, r)| format!("{:.1},{:.1}", x(*c), y(*r)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill='none' stroke='{color}' stroke-width='2' points='{}'/>",
            points.join(" ")
        );
        legend += 16.0;
        let _ = writeln!(
            out,
            "<rect x='{:.1}' y='{:.1}' width='12' height='3' fill='{color}'/><text x='{:.1}' y='{:.1}'>{name}</text>",
            w - right + 8.0,
            h - bottom - 110.0 + legend - 6.0,
            w - right + 24.0,
            h - bottom - 110.0 + legend
        );
    }
    out.push_str("</svg>\n");
    out
}

fn us(ns: u64) -> String {
    format!("{:.0}", ns as f64 / 1000.0)
}

/// One measured cell: variant, callers, cycles/s, p50 and p99 in ns,
/// failed attempts.
struct Row {
    name: String,
    callers: usize,
    rate: f64,
    p50: u64,
    p99: u64,
    failed: u64,
}

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    // `--repeat N`: the whole matrix N times over, interleaved (floors
    // included), and the medians summed up at the end.
    let repeat: usize = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1);
    let (run, counts): (Duration, &[usize]) = if quick {
        (Duration::from_millis(300), &[1, 4, 16])
    } else {
        (Duration::from_secs(2), &[1, 4, 16, 64, 256])
    };
    // For profiling one cell: THROUGHPUT_CALLERS=64 THROUGHPUT_ONLY=async
    // (words the variant's name must contain; the floors always run).
    let chosen: Vec<usize> = std::env::var("THROUGHPUT_CALLERS")
        .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
        .unwrap_or_default();
    let counts: &[usize] = if chosen.is_empty() { counts } else { &chosen };
    let only: Vec<String> = std::env::var("THROUGHPUT_ONLY")
        .map(|v| v.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let cluster = Cluster::start(MASTERS);
    let urls = cluster.urls();
    let rt = runtime();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "throughput bench: {MASTERS} local masters, {:?} per cell, {repeat} pass(es), load average {}",
        run,
        load.trim()
    );
    let header = || {
        println!(
            "{:<34} {:>7} {:>12} {:>9} {:>9} {:>7}",
            "variant", "callers", "cycles/s", "p50 µs", "p99 µs", "failed"
        );
    };
    let print = |row: &Row| {
        println!(
            "{:<34} {:>7} {:>12.0} {:>9} {:>9} {:>7}",
            row.name,
            row.callers,
            row.rate,
            us(row.p50),
            us(row.p99),
            row.failed
        );
    };
    let row = |name: &str, callers: usize, cell: &Cell| Row {
        name: name.to_owned(),
        callers,
        rate: cell.rate(),
        p50: cell.latency.value_at_quantile(0.5),
        p99: cell.latency.value_at_quantile(0.99),
        failed: cell.failed,
    };
    let mut rows: Vec<Row> = Vec::new();
    for pass in 1..=repeat {
        if repeat > 1 {
            println!("pass {pass} of {repeat}");
        }
        header();
        for k in [1, 16, 64] {
            let cell = floor(&urls, k, Release::Script, run);
            rows.push(row(
                &format!("floor, {k} in flight per connection"),
                1,
                &cell,
            ));
            print(rows.last().expect("just pushed"));
        }
        let del = floor(&urls, 64, Release::Del, run);
        rows.push(row("floor, 64 in flight, DEL release", 1, &del));
        print(rows.last().expect("just pushed"));
        for &callers in counts {
            let variants: [(&str, &dyn Fn() -> Cell); 5] = [
                ("redlock-mio, client per thread", &|| {
                    mine_per_thread(&urls, callers, run)
                }),
                ("redlock-mio, shared", &|| mine_shared(&urls, callers, run)),
                ("redlock-mio async, shared", &|| {
                    mine_async(&rt, &urls, callers, run)
                }),
                ("rslock 0.10, shared", &|| {
                    rslock_shared(&rt, &urls, callers, run)
                }),
                ("redis-rs multiplexed", &|| {
                    multiplexed(&rt, &urls, callers, run)
                }),
            ];
            for (name, measure) in variants {
                if !only.iter().all(|o| name.contains(o.as_str())) {
                    continue;
                }
                let cell = measure();
                rows.push(row(name, callers, &cell));
                print(rows.last().expect("just pushed"));
            }
        }
    }
    // The medians over the passes, per variant and callers, in first-seen
    // order.
    let mut keys: Vec<(String, usize)> = Vec::new();
    for r in &rows {
        if !keys.iter().any(|(n, c)| *n == r.name && *c == r.callers) {
            keys.push((r.name.clone(), r.callers));
        }
    }
    let medians: Vec<Row> = keys
        .iter()
        .map(|(name, callers)| {
            let of = |f: &dyn Fn(&Row) -> f64| {
                median(
                    rows.iter()
                        .filter(|r| r.name == *name && r.callers == *callers)
                        .map(f)
                        .collect(),
                )
            };
            Row {
                name: name.clone(),
                callers: *callers,
                rate: of(&|r| r.rate),
                p50: of(&|r| r.p50 as f64) as u64,
                p99: of(&|r| r.p99 as f64) as u64,
                failed: rows
                    .iter()
                    .filter(|r| r.name == *name && r.callers == *callers)
                    .map(|r| r.failed)
                    .sum(),
            }
        })
        .collect();
    if repeat > 1 {
        println!("medians of {repeat} passes (failed: the sum)");
        header();
        for r in &medians {
            print(r);
        }
    }
    let rate = |name: &str, callers: usize| {
        medians
            .iter()
            .find(|r| r.name == name && r.callers == callers)
            .map(|r| r.rate)
    };
    let floors: Vec<(usize, f64)> = [1, 16, 64]
        .into_iter()
        .filter_map(|k| Some((k, rate(&format!("floor, {k} in flight per connection"), 1)?)))
        .collect();
    let at: Vec<(&str, usize, f64)> = medians
        .iter()
        .filter(|r| !r.name.starts_with("floor"))
        .map(|r| (r.name.as_str(), r.callers, r.rate))
        .collect();
    let most = *counts.last().unwrap_or(&1);
    let callers = if counts.contains(&64) { 64 } else { most };
    let floor64 = floors.iter().find(|(k, _)| *k == 64).map(|(_, r)| *r);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/throughput");
    std::fs::create_dir_all(&dir)?;
    let floors_shown: Vec<(usize, f64)> = floors.iter().copied().filter(|(k, _)| *k > 1).collect();
    std::fs::write(dir.join("throughput.svg"), svg(&at, &floors_shown))?;
    println!("wrote {}", dir.join("throughput.svg").display());
    for name in ["redlock-mio, shared", "redlock-mio async, shared"] {
        if let (Some(shared), Some(floor), Some(rslock)) = (
            rate(name, callers),
            floor64,
            rate("rslock 0.10, shared", callers),
        ) {
            println!(
                "at {callers} callers: {name} / floor (64 in flight) = {:.2}, / rslock shared = {:.2}",
                shared / floor,
                shared / rslock
            );
        }
    }
    Ok(())
}
