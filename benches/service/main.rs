//! A whole service's load on one client engine: callers (1,000 async tasks,
//! or 64 threads in a second cell) share one client and lock 10,000
//! resources drawn from a Zipf distribution, with a mix of `try_lock`,
//! `lock` with a wait, extend and unlock, and several resources at once in
//! 5% of the calls. See `benches/README.md`.
//!
//! ```text
//! cargo bench -p redlock-mio-bench --bench service               # 60 s per cell, about 2.5 minutes
//! cargo bench -p redlock-mio-bench --bench service -- --quick    # 4 s per cell
//! cargo bench -p redlock-mio-bench --bench service -- --markdown # and the table of benches/README.md
//! ```
//!
//! Writes `target/service/service.svg`.

// The shared test harness (`tests/support`) and the bench fail loudly on a
// broken set-up.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../../tests/support/mod.rs"]
mod support;

mod alloc;
mod args;
#[path = "../markdown.rs"]
mod markdown;
mod masters;
mod mix;
#[path = "../pin.rs"]
mod pin;
mod report;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::SmallRng;
use redlock_mio::{MAX_IN_FLIGHT, Redlock};

use args::{Args, Cell};
use masters::{Held, Probe};
use mix::{Ctx, MEASURE, Plan, STOP, Zipf};
use report::{Measured, Sample};
use support::cluster::Cluster;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const MASTERS: usize = 5;
/// Each call's request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);
/// The floor's cycles in flight per connection; the best is the floor.
const FLOOR_DEPTHS: [usize; 3] = [64, 256, 1000];

fn main() -> ExitCode {
    let args = match args::parse() {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // The main thread samples and reports: its allocations are the bench's.
    alloc::ignored();
    let began = Instant::now();
    let load_start = load();
    let cluster = Cluster::start(MASTERS);
    if args.pin {
        match pin::split(cluster.nodes().iter().filter_map(|n| n.pid())) {
            Ok(done) => println!("{done}"),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    let urls = cluster.urls();
    let mut probe = Probe::new(&cluster);
    println!(
        "service bench: {MASTERS} local masters; {} resources, Zipf s = {} (the hottest takes {:.1}% of the draws); \
         {:?} measured after {:?} of warm-up per cell; load average at start {load_start}",
        args.resources,
        args.zipf,
        100.0 * Zipf::new(args.resources, args.zipf).top(),
        args.secs,
        args.warm_up
    );
    let floors: Vec<(usize, f64)> = FLOOR_DEPTHS
        .iter()
        .map(|&k| (k, masters::floor(&urls, k, args.floor)))
        .collect();
    for (k, rate) in &floors {
        println!("floor, {k} in flight per connection: {rate:.0} cycles/s");
    }
    let mut cells = Vec::new();
    for (n, &cell) in args.cells.iter().enumerate() {
        let measured = run_cell(cell, n as u64, &args, &urls, &mut probe);
        report::print(&measured, &floors);
        cells.push(measured);
    }
    let load_end = load();
    println!(
        "\nload average: start {load_start}, end {load_end}; total run time {:.0} s",
        began.elapsed().as_secs_f64()
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/service");
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or(dir, |d| std::path::PathBuf::from(d).join("service"));
    if let Err(e) = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("service.svg"), report::svg(&cells, &floors)))
    {
        eprintln!("cannot write the plot: {e}");
    } else {
        println!("wrote {}", dir.join("service.svg").display());
    }
    if args.markdown {
        println!(
            "\n{}",
            report::markdown(&args, &cells, &floors, &load_start, &load_end)
        );
    }
    // Calls that fail under this load are figures; keys or queues still on
    // the masters 10 s after the callers stopped are a fault.
    if cells.iter().any(|c| c.left_after.is_none()) {
        eprintln!("service: lock keys or queues were left on the masters");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

fn callers(cell: Cell, args: &Args) -> usize {
    match cell {
        Cell::Tasks => args.tasks,
        Cell::Threads => args.threads,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The callers of `cell` on `ctx`, each looping over planned calls until
/// the phase is `STOP`; returns when every caller has finished its call.
fn callers_run(cell: Cell, ctx: &Arc<Ctx>, rt: &tokio::runtime::Runtime, main: impl FnOnce()) {
    let n = ctx.per_caller.len();
    match cell {
        Cell::Tasks => {
            let handles: Vec<_> = (0..n)
                .map(|c| {
                    let ctx = Arc::clone(ctx);
                    rt.spawn(async move {
                        let mut rng = SmallRng::seed_from_u64(c as u64 + 1);
                        loop {
                            let phase = ctx.phase();
                            if phase == STOP {
                                break;
                            }
                            let plan = Plan::draw(&mut rng, &ctx.zipf);
                            let outcome = mix::async_call(&ctx, &plan).await;
                            let wait = mix::backoff(&outcome, &mut rng);
                            ctx.record(c, plan.op, phase == MEASURE, outcome);
                            if let Some(wait) = wait {
                                tokio::time::sleep(wait).await;
                            }
                        }
                    })
                })
                .collect();
            main();
            rt.block_on(async {
                for h in handles {
                    let _ = h.await;
                }
            });
        }
        Cell::Threads => thread::scope(|s| {
            for c in 0..n {
                let ctx = Arc::clone(ctx);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(c as u64 + 1);
                    loop {
                        let phase = ctx.phase();
                        if phase == STOP {
                            break;
                        }
                        let plan = Plan::draw(&mut rng, &ctx.zipf);
                        let outcome = mix::blocking_call(&ctx, &plan);
                        let wait = mix::backoff(&outcome, &mut rng);
                        ctx.record(c, plan.op, phase == MEASURE, outcome);
                        if let Some(wait) = wait {
                            thread::sleep(wait);
                        }
                    }
                });
            }
            main();
        }),
    }
}

/// Uncontended: every caller on a resource of its own, `try_lock` and
/// `unlock` only; over the second half, the allocations per cycle, the
/// cycles and their rate.
fn uncontended(
    cell: Cell,
    args: &Args,
    urls: &[String],
    rt: &tokio::runtime::Runtime,
) -> (f64, u64, f64) {
    let n = callers(cell, args);
    let client = build(urls, n);
    let names: Vec<String> = (0..n).map(|c| format!("svc:own:{c}")).collect();
    let ctx = Arc::new(Ctx::new(client, names, Zipf::new(1, 1.0), n, u64::MAX));
    let half = args.uncontended / 2;
    let (mut allocs, mut cycles, mut secs) = (0, 0, 0.0);
    let own = |c: usize| Plan {
        op: mix::Op::Try,
        resources: [c, 0, 0, 0],
        count: 1,
        extend: false,
    };
    let ctx2 = Arc::clone(&ctx);
    match cell {
        Cell::Tasks => {
            let handles: Vec<_> = (0..n)
                .map(|c| {
                    let ctx = Arc::clone(&ctx);
                    let plan = own(c);
                    rt.spawn(async move {
                        while ctx.phase() != STOP {
                            let outcome = mix::async_call(&ctx, &plan).await;
                            ctx.record(c, plan.op, false, outcome);
                        }
                    })
                })
                .collect();
            thread::sleep(half);
            let (a0, c0, t0) = (
                alloc::allocations(),
                ctx2.cycles.load(Ordering::Relaxed),
                Instant::now(),
            );
            thread::sleep(half);
            (allocs, cycles, secs) = (
                alloc::allocations() - a0,
                ctx2.cycles.load(Ordering::Relaxed) - c0,
                t0.elapsed().as_secs_f64(),
            );
            ctx2.phase.store(STOP, Ordering::Relaxed);
            rt.block_on(async {
                for h in handles {
                    let _ = h.await;
                }
            });
        }
        Cell::Threads => thread::scope(|s| {
            for c in 0..n {
                let ctx = Arc::clone(&ctx);
                let plan = own(c);
                s.spawn(move || {
                    while ctx.phase() != STOP {
                        let outcome = mix::blocking_call(&ctx, &plan);
                        ctx.record(c, plan.op, false, outcome);
                    }
                });
            }
            thread::sleep(half);
            let (a0, c0, t0) = (
                alloc::allocations(),
                ctx2.cycles.load(Ordering::Relaxed),
                Instant::now(),
            );
            thread::sleep(half);
            (allocs, cycles, secs) = (
                alloc::allocations() - a0,
                ctx2.cycles.load(Ordering::Relaxed) - c0,
                t0.elapsed().as_secs_f64(),
            );
            ctx2.phase.store(STOP, Ordering::Relaxed);
        }),
    }
    (
        allocs as f64 / cycles.max(1) as f64,
        cycles,
        cycles as f64 / secs.max(1e-9),
    )
}

fn build(urls: &[String], callers: usize) -> Redlock {
    Redlock::builder(urls)
        .request_timeout(REQUEST_TIMEOUT)
        // A round in flight per caller: a service sizes its client to its
        // concurrency.
        .max_in_flight(callers.clamp(256, MAX_IN_FLIGHT))
        .build()
        .expect("build a client")
}

fn run_cell(cell: Cell, id: u64, args: &Args, urls: &[String], probe: &mut Probe) -> Measured {
    let n = callers(cell, args);
    let rt = runtime();
    let before = probe.held();
    let (uncontended_allocs, uncontended_cycles, uncontended_rate) =
        uncontended(cell, args, urls, &rt);
    let names: Vec<String> = (0..args.resources).map(|r| format!("svc:{r}")).collect();
    let ctx = Arc::new(Ctx::new(
        build(urls, n),
        names,
        Zipf::new(args.resources, args.zipf),
        n,
        id,
    ));
    let mut samples = Vec::with_capacity(args.secs.as_secs() as usize + 2);
    let mut warm = (0, 0, 0, 0);
    let mut end = (0, 0, 0, 0);
    let (mut stats_warm, mut stats_end) = (ctx.client.stats(), ctx.client.stats());
    let mut window = Duration::ZERO;
    let mut held_max = Held::default();
    callers_run(cell, &ctx, &rt, || {
        thread::sleep(args.warm_up);
        stats_warm = ctx.client.stats();
        warm = (
            alloc::allocations(),
            ctx.cycles.load(Ordering::Relaxed),
            alloc::rss(),
            alloc::heap(),
        );
        ctx.phase.store(MEASURE, Ordering::Relaxed);
        let start = Instant::now();
        let mut next = start;
        while start.elapsed() < args.secs {
            next += Duration::from_secs(1).min(args.secs);
            thread::sleep(next.saturating_duration_since(Instant::now()));
            let held = probe.held();
            held_max.used_memory = held_max.used_memory.max(held.used_memory);
            held_max.keys = held_max.keys.max(held.keys);
            samples.push(Sample {
                at: start.elapsed(),
                cycles: ctx.cycles.load(Ordering::Relaxed) - warm.1,
                rss: alloc::rss(),
                heap: alloc::heap(),
                held,
            });
        }
        window = start.elapsed();
        end = (
            alloc::allocations(),
            ctx.cycles.load(Ordering::Relaxed),
            alloc::rss(),
            alloc::heap(),
        );
        stats_end = ctx.client.stats();
        ctx.phase.store(STOP, Ordering::Relaxed);
    });
    // What the masters hold once every caller has returned, the client
    // gone: lock keys (a holder's token, or `reserved …`, handed to a waiter)
    // and waiters' queues.
    let per_caller: Vec<u64> = ctx
        .per_caller
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    let cycles = per_caller.iter().sum();
    let refused = ctx
        .refused
        .iter()
        .map(|r| r.load(Ordering::Relaxed))
        .collect();
    let failed = ctx.failed.load(Ordering::Relaxed);
    let first_error = ctx.first_error.lock().map(|e| e.clone()).unwrap_or(None);
    let hists = ctx.hists();
    drop(ctx);
    drop(rt);
    let at_stop = probe.leftovers();
    let left_after = probe.wait_empty(Duration::from_secs(10));
    let held_after = probe.held();
    Measured {
        cell,
        callers: n,
        window,
        cycles,
        window_cycles: end.1 - warm.1,
        refused,
        failed,
        first_error,
        hists,
        at_stop,
        allocations: end.0 - warm.0,
        uncontended_allocs,
        uncontended_cycles,
        uncontended_rate,
        rss: (warm.2, end.2),
        heap: (warm.3, end.3),
        before,
        held_max,
        held_after,
        left_after,
        leftover_keys: probe.count("svc:*"),
        leftover_queues: probe.count("redlock-mio:queue:*"),
        per_caller,
        client: (stats_warm, stats_end),
        samples,
    }
}
