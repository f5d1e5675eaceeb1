//! The demo: a walk through the lock's life with the latency of each step,
//! then a latency run of acquire + release cycles.
//!
//! ```sh
//! cargo run --release --example demo                       # five local masters
//! cargo run --release --example demo -- --cycles 100000
//! cargo run --release --example demo -- redis://127.0.0.1:7000 redis://127.0.0.1:7001 redis://127.0.0.1:7002
//! ```
//!
//! Without addresses it starts five `redis-server` processes on free
//! loopback ports (the test harness's `Cluster`) and stops them at the end.
//! It exits with a non-zero status on any unexpected outcome.

#[path = "../tests/support/mod.rs"]
mod support;

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use redlock_mio::{Error, Lock, Redlock};
use redlock_mio::{NodeState, Op, Report};
use support::cluster::Cluster;
use support::counting::{self, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

type Result<T> = std::result::Result<T, Box<dyn StdError>>;

const USAGE: &str = "usage: demo [--cycles N] [redis://HOST:PORT ...]";
const MASTERS: usize = 5;
const TTL: Duration = Duration::from_secs(10);
const RESOURCE: &str = "demo:orders:42";
const BENCH_RESOURCE: &str = "demo:bench";
const WARM_UP: u64 = 500;

struct Args {
    cycles: u64,
    urls: Vec<String>,
}

fn parse_args() -> Result<Option<Args>> {
    let mut args = Args {
        cycles: 10_000,
        urls: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let cycles = match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "--cycles" => it.next().ok_or("--cycles needs a number")?,
            _ => match arg.strip_prefix("--cycles=") {
                Some(n) => n.to_owned(),
                None if arg.starts_with('-') => {
                    return Err(format!("unknown option {arg}\n{USAGE}").into());
                }
                None => {
                    args.urls.push(arg);
                    continue;
                }
            },
        };
        args.cycles = cycles
            .parse()
            .map_err(|e| format!("--cycles {cycles}: {e}"))?;
        if args.cycles == 0 {
            return Err("--cycles must be at least 1".into());
        }
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    match parse_args().and_then(|args| args.map_or(Ok(()), run)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Makes sure a `redis-server` can be started: when there is none, says so
/// in one line and installs Debian's package as `.ci/install-redis` does;
/// where that cannot be done, fails with one line naming what to install.
fn ensure_redis_server() -> Result<()> {
    if support::cluster::find_redis_server().is_ok() {
        return Ok(());
    }
    println!("redis-server not found: installing it with apt-get (.ci/install-redis)");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/install-redis");
    let installed = std::process::Command::new("bash")
        .arg(script)
        .status()
        .is_ok_and(|status| status.success());
    if installed && support::cluster::find_redis_server().is_ok() {
        return Ok(());
    }
    Err(
        "redis-server (Redis 7 or later) is needed and could not be installed here: \
         install it (Debian/Ubuntu: apt-get install redis-server) or set \
         REDIS_SERVER=/path/to/redis-server, or pass the addresses of running masters"
            .into(),
    )
}

fn run(args: Args) -> Result<()> {
    // Stopped when dropped, also on an early return or a panic.
    let mut cluster = None;
    let urls = if args.urls.is_empty() {
        ensure_redis_server()?;
        let started = Instant::now();
        let c = Cluster::start(MASTERS);
        let urls = c.urls();
        println!(
            "started {MASTERS} local redis-server masters in {:.0} ms",
            ms(started.elapsed())
        );
        cluster = Some(c);
        urls
    } else {
        args.urls
    };

    let (a, took_a) = timed(|| Redlock::builder(&urls).build());
    let a = a?;
    // B tries once, so that its failure shows at once.
    let (b, took_b) = timed(|| Redlock::builder(&urls).retry_count(0).build());
    let b = b?;
    println!(
        "{} masters, quorum {}: {}",
        a.masters(),
        a.quorum(),
        urls.join(" ")
    );
    if a.masters() % 2 == 0 {
        println!(
            "warning: an even number of masters tolerates no more failures than one fewer \
             ({} of {} must agree, so {} may fail); prefer an odd number",
            a.quorum(),
            a.masters(),
            a.masters() - a.quorum()
        );
    }
    println!(
        "clients A and B connected in {} and {}",
        us(took_a),
        us(took_b)
    );

    walkthrough(&a, &b, &urls)?;
    latency_run(&a, args.cycles)?;

    if let Some(cluster) = cluster.take() {
        drop(cluster);
        println!("\nstopped the masters");
    }
    Ok(())
}

fn walkthrough(a: &Redlock, b: &Redlock, urls: &[String]) -> Result<()> {
    println!(
        "\nwalkthrough on \"{RESOURCE}\", TTL {} s (latency of each call first)",
        TTL.as_secs()
    );

    let (lock, took) = timed(|| a.try_lock(RESOURCE, TTL));
    let mut lock = lock.map_err(|e| format!("A try_lock: {e}"))?;
    step(took, "A try_lock", &held(&lock));

    let (contended, took) = timed(|| b.try_lock(RESOURCE, TTL));
    match contended {
        Err(error @ Error::Contended(_)) => {
            step(took, "B try_lock", "fails as it should: Contended");
            if let Some(report) = error.report() {
                print_report(report, urls);
            }
        }
        Err(error) => return Err(format!("B try_lock: expected Contended, got {error}").into()),
        Ok(_) => return Err("B try_lock won a lock that A holds".into()),
    }

    let (extended, took) = timed(|| a.extend(&mut lock, TTL));
    extended.map_err(|e| format!("A extend: {e}"))?;
    step(
        took,
        "A extend",
        &format!(
            "validity {:.3} s, extensions {}",
            lock.validity().as_secs_f64(),
            lock.extensions()
        ),
    );

    let (released, took) = timed(|| a.unlock(&mut lock));
    released.map_err(|e| format!("A unlock: {e}"))?;
    step(took, "A unlock", "released");

    let (lock, took) = timed(|| b.try_lock(RESOURCE, TTL));
    let mut lock = lock.map_err(|e| format!("B try_lock after A released: {e}"))?;
    step(took, "B try_lock", &held(&lock));
    let (released, took) = timed(|| b.unlock(&mut lock));
    released.map_err(|e| format!("B unlock: {e}"))?;
    step(took, "B unlock", "released");

    let (guard, took) = timed(|| a.lock_guard(RESOURCE, TTL));
    let guard = guard.map_err(|e| format!("A lock_guard: {e}"))?;
    step(took, "A lock_guard", &held(&guard));
    let ((), took) = timed(|| drop(guard));
    step(took, "drop(guard)", "released on drop");
    let (lock, took) = timed(|| b.try_lock(RESOURCE, TTL));
    let mut lock = lock.map_err(|e| format!("B try_lock after the guard's drop: {e}"))?;
    step(took, "B try_lock", "acquired: the guard did release it");
    b.unlock(&mut lock).map_err(|e| format!("B unlock: {e}"))?;
    Ok(())
}

fn latency_run(client: &Redlock, cycles: u64) -> Result<()> {
    // Nanoseconds, 1 ns to 60 s, 3 significant digits; recording into a
    // histogram made with bounds never allocates.
    let new = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3);
    let (mut acquire, mut release, mut cycle) = (new()?, new()?, new()?);

    let one = |n: u64| -> Result<(Duration, Duration)> {
        let t0 = Instant::now();
        let mut lock = client
            .try_lock(BENCH_RESOURCE, TTL)
            .map_err(|e| format!("acquire of cycle {n}: {e}"))?;
        let t1 = Instant::now();
        client
            .unlock(&mut lock)
            .map_err(|e| format!("release of cycle {n}: {e}"))?;
        Ok((t1 - t0, t1.elapsed()))
    };
    for n in 0..WARM_UP {
        one(n)?;
    }
    let allocations = counting::allocations().0;
    let started = Instant::now();
    for n in 0..cycles {
        let (acq, rel) = one(n)?;
        acquire.saturating_record(nanos(acq));
        release.saturating_record(nanos(rel));
        cycle.saturating_record(nanos(acq + rel));
    }
    let wall = started.elapsed();
    let allocations = counting::allocations().0 - allocations;

    println!(
        "\nlatency run: {cycles} try_lock + unlock cycles, one client, \"{BENCH_RESOURCE}\" \
         (after {WARM_UP} warm-up cycles)"
    );
    println!(
        "  {:<8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "µs", "p50", "p90", "p99", "p99.9", "max", "count"
    );
    for (name, h) in [
        ("acquire", &acquire),
        ("release", &release),
        ("cycle", &cycle),
    ] {
        let mut line = format!("  {name:<8}");
        for q in [0.50, 0.90, 0.99, 0.999] {
            write!(line, " {:>9.1}", h.value_at_quantile(q) as f64 / 1e3)?;
        }
        write!(line, " {:>9.1} {:>7}", h.max() as f64 / 1e3, h.len())?;
        println!("{line}");
    }
    println!(
        "  {:.0} cycles/s; heap allocations: {allocations} in {cycles} cycles ({:.3} per cycle)",
        cycles as f64 / wall.as_secs_f64(),
        allocations as f64 / cycles as f64
    );
    Ok(())
}

/// Runs `f`, returning its result and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

fn step(took: Duration, what: &str, outcome: &str) {
    println!("  {:>10}  {what:<13} {outcome}", us(took));
}

fn held(lock: &Lock) -> String {
    let mut token = String::with_capacity(2 * lock.token().len());
    for byte in lock.token() {
        let _ = write!(token, "{byte:02x}");
    }
    format!(
        "acquired \"{}\", token {token}, validity {:.3} s",
        lock.resource().escape_ascii(),
        lock.validity().as_secs_f64()
    )
}

fn print_report(report: &Report, urls: &[String]) {
    let (ok, refused) = match report.op() {
        Op::Acquire => ("acquired", "held by another client"),
        Op::Extend => ("extended", "not held"),
        Op::Release => ("released", "not held"),
        _ => ("done", "refused"),
    };
    println!(
        "{:14}report: quorum {}, decided in {}: {} {ok}, {} refused, {} unreachable",
        "",
        report.quorum(),
        us(report.elapsed()),
        report.ok(),
        report.refused(),
        report.unreachable()
    );
    for (i, state) in report.nodes().iter().enumerate() {
        let state = match state {
            NodeState::Ok => ok.to_owned(),
            NodeState::Refused => refused.to_owned(),
            NodeState::Pending => "answer not needed (decided without it)".to_owned(),
            NodeState::TimedOut => "timed out".to_owned(),
            NodeState::Failed(error) => error.to_string(),
            NodeState::Quarantined => {
                format!("{ok}, but not counted: restarted within the longest TTL")
            }
            _ => format!("{state:?}"),
        };
        let url = urls.get(i).map_or("?", String::as_str);
        println!("{:16}#{i} {url:<24} {state}", "");
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
