//! Contention on one resource: C workers take one lock in turn on five local
//! masters, and the bench measures how well the lock is handed from one
//! holder to the next, against what the lock could do uncontended.
//!
//! Each worker loops: acquire (`lock_until`, deadline 10 s away), hold
//! 200 µs (spinning, see `drive::Shared::hold`), release, think 2 ms. Cells:
//! C = 1, 8, 32, 128 workers, each a thread with a client of its own (as C
//! processes would be), and C tokio tasks sharing one client (the async
//! API). Variants, side by side in the same run: this crate with its default
//! settings, this crate retrying after 5 ms, and `rslock` 0.10 as shipped.
//! The capacity, one client locking back to back, is measured in the same
//! run. A second scenario, the crashed holder, measures how soon waiters
//! take over a lock whose holder never releases it.
//!
//! An in-process witness proves exclusion as it goes, and the timeline
//! proves it again afterwards: two holders at once abort the cell loudly and
//! fail the run.
//!
//! ```text
//! cargo bench -p redlock-mio-bench --bench contention              # about 1.5 minutes
//! cargo bench -p redlock-mio-bench --bench contention -- --quick   # smoke run, about 6 s
//! cargo bench -p redlock-mio-bench --bench contention -- --markdown  # and the tables of benches/README.md
//! cargo bench -p redlock-mio-bench --bench contention -- --cells 32,shared32 --only redlock_mio --secs 10
//! cargo bench -p redlock-mio-bench --bench contention -- --rtt 1 --cells 32  # masters behind the delay line
//! ```
//!
//! Writes `target/contention/contention.svg`.

// The shared test harness (`tests/support`) and the bench fail loudly on a
// broken set-up.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

mod analyse;
mod args;
mod cpu;
mod crash;
#[path = "../delay.rs"]
#[allow(dead_code, reason = "the contention bench uses part of the delay line")]
mod delay;
mod drive;
#[path = "../markdown.rs"]
mod markdown;
#[path = "../pin.rs"]
mod pin;
mod plot;
mod report;
mod variants;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use args::{Args, Cell};
use report::{Capacity, Results, Row};
use support::cluster::Cluster;
use variants::{Probe, SharedClient, Variant};

const MASTERS: usize = 5;

/// The tokio runtime of the shared-client cells: two workers, as in the
/// throughput bench.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Adds a slice of `run` to `capacity`: one client of its variant,
/// acquire + hold + release back to back, no think time.
fn capacity_slice(capacity: &mut Capacity, urls: &[String], probe: &Arc<Probe>, run: Duration) {
    let variant = capacity.variant;
    let measured = drive::clients(vec![variant.worker(urls, probe, 0)], run, Duration::ZERO);
    let figures = analyse::figures(&measured);
    assert!(
        !figures.violated,
        "{}: exclusion violated by one client",
        variant.name()
    );
    if figures.erred {
        eprintln!(
            "{}: a capacity slice met errors: {}",
            variant.name(),
            figures.errors
        );
    }
    capacity.add(figures.rate, &figures.wait, figures.cpu, figures.acquired);
}

/// Runs `cell` for `variant`.
fn run_cell(
    cell: Cell,
    variant: Variant,
    urls: &[String],
    probe: &Arc<Probe>,
    rt: &tokio::runtime::Runtime,
    run: Duration,
) -> drive::Run {
    match cell {
        Cell::Clients(c) => {
            let workers = (0..c).map(|n| variant.worker(urls, probe, n)).collect();
            drive::clients(workers, run, drive::THINK)
        }
        Cell::Shared(c) => drive::tasks(rt, &SharedClient::new(variant, urls, probe), c, run),
        Cell::Crash => unreachable!("the crashed holder runs trials"),
    }
}

fn main() -> ExitCode {
    let args = match args::parse() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    let cluster = Cluster::start(MASTERS);
    cpu::watch_masters(cluster.nodes().iter().filter_map(|n| n.pid()).collect());
    if args.pin {
        match pin::split(cluster.nodes().iter().filter_map(|n| n.pid())) {
            Ok(done) => println!("{done}"),
            Err(e) => {
                eprintln!("--pin: {e}");
                return ExitCode::from(2);
            }
        }
    }
    // `--rtt`: the workers reach the masters through the delay line; the
    // probe reads master 0 directly.
    let line = args.rtt.map(|ms| {
        variants::REMOTE_MASTERS.store(true, std::sync::atomic::Ordering::Relaxed);
        let addrs: Vec<std::net::SocketAddr> = cluster
            .nodes()
            .iter()
            .map(|n| n.addr().socket_addr().expect("masters on TCP"))
            .collect();
        let line = delay::DelayLine::start(&addrs).expect("the delay line");
        for i in 0..MASTERS {
            line.set(i, Duration::from_secs_f64(ms / 1000.0), 0.2);
        }
        line
    });
    let urls = line
        .as_ref()
        .map_or_else(|| cluster.urls(), delay::DelayLine::urls);
    let probe = Arc::new(Probe::connect(
        cluster
            .node(0)
            .addr()
            .socket_addr()
            .expect("master 0 on TCP"),
    ));
    let rt = runtime();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "contention bench: {MASTERS} local masters{}, one resource, {:?} per cell, load average {}",
        args.rtt.map_or(String::new(), |ms| format!(
            " behind the delay line at an RTT of {ms} ms ± 20%"
        )),
        args.run,
        load.trim()
    );
    let results = measure(&args, &urls, &probe, &rt);
    let failed = results
        .rows
        .iter()
        .any(|r| r.figures.violated || (args.quick && r.figures.erred))
        || results
            .crashes
            .iter()
            .flat_map(|(_, t)| t)
            .any(|t| t.violated || (args.quick && t.error.is_some()));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/contention");
    let svg = plot::svg(&results, &args.variants);
    match std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("contention.svg"), svg))
    {
        Ok(()) => println!("wrote {}", dir.join("contention.svg").display()),
        Err(e) => eprintln!("could not write the plot: {e}"),
    }
    if args.markdown {
        println!("\n{}", report::markdown(&results, args.run, args.crash_ttl));
    }
    if let Some(line) = &line {
        let late = line.take_lateness();
        println!(
            "the delay line ({:?} priority) wrote each chunk {:.1} µs after its due time at p50, {:.1} µs at p99",
            line.priority(),
            late.value_at_quantile(0.5) as f64 / 1000.0,
            late.value_at_quantile(0.99) as f64 / 1000.0
        );
    }
    println!("took {:.1} s", began.elapsed().as_secs_f64());
    if failed {
        eprintln!("contention: FAILED (an exclusion violation, or an error in a --quick run)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Every cell of `args`: the cells, the variants in a rotating order,
/// with slices of the capacities between them, then the crashed holder.
fn measure(
    args: &Args,
    urls: &[String],
    probe: &Arc<Probe>,
    rt: &tokio::runtime::Runtime,
) -> Results {
    // The capacity is measured in slices, one before the cells and one
    // after each, and taken as their median: a busy moment of the machine
    // then moves it little, and the spread of the slices says how busy.
    let mut capacities: Vec<Capacity> = Vec::new();
    for &variant in &args.variants {
        if !capacities.iter().any(|c| c.library == variant.library()) {
            capacities.push(Capacity::new(variant));
        }
    }
    let slice = args.run / 3;
    let sample = |capacities: &mut Vec<Capacity>| {
        for capacity in capacities.iter_mut() {
            capacity_slice(capacity, urls, probe, slice);
        }
    };
    let capacity_of = |capacities: &[Capacity], variant: Variant| {
        capacities
            .iter()
            .find(|c| c.library == variant.library())
            .map_or(f64::NAN, Capacity::rate)
    };
    sample(&mut capacities);
    println!(
        "the cells as they run, against the capacity so far (times in ms):\n{}",
        report::header()
    );
    let mut rows = Vec::new();
    let contended = args.cells.iter().filter(|&&c| c != Cell::Crash);
    for (i, &cell) in contended.enumerate() {
        for j in 0..args.variants.len() {
            let variant = args.variants[(i + j) % args.variants.len()];
            let measured = run_cell(cell, variant, urls, probe, rt, args.run);
            let row = Row {
                cell,
                variant,
                capacity: capacity_of(&capacities, variant),
                figures: analyse::figures(&measured),
            };
            println!("{}", report::human(&row));
            rows.push(row);
        }
        sample(&mut capacities);
    }
    println!("{}", report::capacities_line(&capacities));
    // The tables list the variants of a cell in one order, whatever order
    // they ran in.
    let position = |v: Variant| args.variants.iter().position(|&w| w == v);
    let cell_at = |c: Cell| args.cells.iter().position(|&d| d == c);
    rows.sort_by_key(|r| (cell_at(r.cell), position(r.variant)));
    if !rows.is_empty() {
        println!("against the median capacity:\n{}", report::header());
        for row in &mut rows {
            row.capacity = capacity_of(&capacities, row.variant);
            println!("{}", report::human(row));
        }
    }
    let mut crashes = Vec::new();
    if args.cells.contains(&Cell::Crash) {
        println!(
            "crashed holder: TTL {:?}, {} waiters; replacement delay (ms) median, max; attempts meanwhile, median",
            args.crash_ttl,
            crash::WAITERS
        );
        for &variant in &args.variants {
            let trials: Vec<crash::Trial> = (0..args.trials)
                .map(|_| crash::trial(variant, urls, probe, args.crash_ttl))
                .collect();
            let [name, median, max, attempts, errors] = report::crash_line(variant, &trials);
            println!("{name:<24} {median:>8} {max:>8} {attempts:>8}  {errors}");
            crashes.push((variant, trials));
        }
    }
    Results {
        rows,
        capacities,
        crashes,
    }
}
