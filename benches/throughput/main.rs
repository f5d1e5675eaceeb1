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
//! cargo bench -p redlock-mio-bench --bench throughput -- --pin    # masters on one CPU, callers on the rest
//! cargo bench -p redlock-mio-bench --bench throughput -- --markdown  # and the table of benches/README.md
//! ```

#![allow(
    clippy::expect_used,
    reason = "a benchmark must fail loudly on bad setup or a broken variant"
)]

#[path = "../../tests/support/mod.rs"]
mod support;

mod floor;
#[path = "../markdown.rs"]
mod markdown;
#[path = "../pin.rs"]
mod pin;
mod plot;
mod summary;
mod variants;

use plot::svg;
use variants::{mine_async, mine_per_thread, mine_shared, multiplexed, rslock_shared, runtime};

use std::error::Error as StdError;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use hdrhistogram::Histogram;
use redlock_mio::Redlock;
use redlock_mio::scripts::{RELEASE_SCRIPT, RELEASE_SHA1};
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
                        record(&mut h, failed, t0, cycle(c));
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

/// Records a cycle that started at `t0`: its latency if it succeeded,
/// else a failed attempt.
fn record(h: &mut Histogram<u64>, failed: &AtomicU64, t0: Instant, ok: bool) {
    if ok {
        h.saturating_record(nanos(t0.elapsed()));
    } else {
        failed.fetch_add(1, Ordering::Relaxed);
    }
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
    let markdown = args.iter().any(|a| a == "--markdown");
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
    if args.iter().any(|a| a == "--pin") {
        println!(
            "{}",
            pin::split(cluster.nodes().iter().filter_map(|n| n.pid()))?
        );
    }
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
            let cell = floor::run(&urls, k, floor::Release::Script, run);
            rows.push(row(
                &format!("floor, {k} in flight per connection"),
                1,
                &cell,
            ));
            print(rows.last().expect("just pushed"));
        }
        let del = floor::run(&urls, 64, floor::Release::Del, run);
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
    if markdown {
        println!("\n{}", summary::markdown(&medians, repeat, counts));
    }
    Ok(())
}
