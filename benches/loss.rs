//! How soon a holder hears that its lock is gone: a kept lock's key is
//! deleted on a majority of five local masters (`DEL` on three), and the
//! bench times the keeper's report (`Keeper::wait_lost`) from the third
//! `DEL`'s reply. With the loss watch (the default) the masters' word of
//! the change reaches the client and a read confirms it; without it
//! (`KeepOptions::watch(false)`), the next extension finds the key gone, a
//! period (a third of the TTL) later at most. A plain `Lock` under
//! `Redlock::watch` is timed the same way (`Lock::wait_lost`).
//!
//! Then what a watch costs the client's other calls: a lone thread's
//! `try_lock` + `unlock` cycles on the same client, with no lock watched
//! and with one watched beside them (its background thread then polls for
//! the masters' pushes), in alternating blocks; the same beside a watch
//! with the spin off (`Builder::spin(Duration::ZERO)`), where the
//! background thread reads the caller's replies and wakes it; and a lone
//! task's async cycles, without and with a watch. See
//! `benches/README.md`.
//!
//! ```text
//! cargo bench -p redlock-mio-bench --bench loss               # about 4 minutes
//! cargo bench -p redlock-mio-bench --bench loss -- --quick    # about 25 s
//! cargo bench -p redlock-mio-bench --bench loss -- --markdown # and the table of benches/README.md
//! ```

// The shared test harness (`tests/support`) and the bench fail loudly on a
// broken set-up.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../tests/support/mod.rs"]
mod support;

// (Its number formatting is for the other benches' tables.)
#[allow(dead_code)]
#[path = "markdown.rs"]
mod markdown;

use std::time::{Duration, Instant};

use rand::Rng;
use redlock_mio::{KeepOptions, Redlock};

use support::cluster::{Cluster, Connection};

const MASTERS: usize = 5;
/// The TTL each keeper extends to: a period of 1 s between extensions.
const TTL: Duration = Duration::from_secs(3);
/// The longest a report may take before the run calls it missed.
const PATIENCE: Duration = Duration::from_secs(10);

/// How the holder keeps its lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A keeper with its loss watch.
    Watched,
    /// A keeper without: the next extension finds the loss.
    Extensions,
    /// A plain lock under `Redlock::watch`, never extended.
    Plain,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Watched => "keeper, loss watch (default)",
            Mode::Extensions => "keeper, `watch(false)`: next extension",
            Mode::Plain => "plain `Lock` under `Redlock::watch`",
        }
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let markdown = std::env::args().any(|a| a == "--markdown");
    let cluster = Cluster::start(MASTERS);
    let client = Redlock::builder(cluster.urls())
        .build()
        .expect("build the client");
    let mut probes: Vec<Connection> = (cluster.nodes().iter())
        .map(|n| {
            n.connect_authenticated(Duration::from_secs(2))
                .expect("a probe connection")
        })
        .collect();
    let trials = |mode| match (mode, quick) {
        (Mode::Extensions, false) => 30,
        (Mode::Extensions, true) => 5,
        (_, false) => 200,
        (_, true) => 20,
    };
    let mut rows = Vec::new();
    for mode in [Mode::Watched, Mode::Plain, Mode::Extensions] {
        let mut delays = Vec::new();
        let mut missed = 0;
        for trial in 0..trials(mode) {
            match time_one(&client, &mut probes, mode, trial) {
                Some(delay) => delays.push(delay),
                None => missed += 1,
            }
        }
        delays.sort_unstable();
        rows.push((mode, delays, missed));
    }
    println!(
        "loss bench: {MASTERS} local masters, TTL {TTL:?} (keepers extend every 1 s); time from the third DEL's reply to the report (ms)"
    );
    println!(
        "{:<42} {:>6} {:>8} {:>8} {:>8} {:>7}",
        "holder", "n", "p50", "p99", "max", "missed"
    );
    for (mode, delays, missed) in &rows {
        println!(
            "{:<42} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>7}",
            mode.name(),
            delays.len(),
            ms(percentile(delays, 0.50)),
            ms(percentile(delays, 0.99)),
            ms(delays.last().copied().unwrap_or_default()),
            missed
        );
    }
    let costs = watch_costs(&cluster, if quick { 500 } else { 5_000 });
    println!();
    println!("a lone caller's try_lock + unlock cycle on the same client (µs)");
    println!(
        "{:<42} {:>8} {:>8} {:>8}",
        "beside it", "cycles", "p50", "p99"
    );
    for (name, cycles) in &costs {
        println!(
            "{:<42} {:>8} {:>8.1} {:>8.1}",
            name,
            cycles.len(),
            us(percentile(cycles, 0.50)),
            us(percentile(cycles, 0.99)),
        );
    }
    if markdown {
        println!();
        println!(
            "{} (µs per `try_lock` + `unlock` of a lone thread, or their async forms in a lone task, on the same client; {MASTERS} local masters; alternating blocks):",
            markdown::command("loss")
        );
        println!();
        println!("| beside it | cycles | p50 | p99 |");
        println!("|---|--:|--:|--:|");
        for (name, cycles) in &costs {
            println!(
                "| {name} | {} | {:.1} | {:.1} |",
                cycles.len(),
                us(percentile(cycles, 0.50)),
                us(percentile(cycles, 0.99)),
            );
        }
        println!();
        println!(
            "{} (ms from the third `DEL`'s reply to the report; {MASTERS} local masters; TTL 3 s, keepers extend every 1 s):",
            markdown::command("loss")
        );
        println!();
        println!("| holder | reports | p50 | p99 | max |");
        println!("|---|--:|--:|--:|--:|");
        for (mode, delays, _) in &rows {
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} |",
                mode.name(),
                delays.len(),
                ms(percentile(delays, 0.50)),
                ms(percentile(delays, 0.99)),
                ms(delays.last().copied().unwrap_or_default()),
            );
        }
    }
}

/// One trial: a lock taken and kept (or watched) as `mode` says, its key
/// deleted on masters 0, 1 and 2 at a random point of the keeper's period,
/// and the time from the third `DEL`'s reply to the report; `None` if no
/// report came within [`PATIENCE`].
fn time_one(
    client: &Redlock,
    probes: &mut [Connection],
    mode: Mode,
    trial: u32,
) -> Option<Duration> {
    let resource = format!("loss:{trial}");
    let mut lock = client.try_lock(&resource, TTL).expect("a free resource");
    let settle = Duration::from_millis(rand::rng().random_range(20..1000));
    let deleted = |probes: &mut [Connection]| {
        std::thread::sleep(settle);
        for probe in &mut probes[..3] {
            probe.request(&[b"DEL", resource.as_bytes()]).expect("DEL");
        }
        Instant::now()
    };
    match mode {
        Mode::Plain => {
            client.watch(&mut lock);
            let at = deleted(probes);
            let lost = lock.wait_lost(PATIENCE);
            let delay = at.elapsed();
            let _ = client.unlock(&mut lock);
            lost.then_some(delay)
        }
        Mode::Watched | Mode::Extensions => {
            let options = KeepOptions::new(TTL).watch(mode == Mode::Watched);
            let keeper = client.keep(lock, options).expect("keep");
            let at = deleted(probes);
            let lost = keeper.wait_lost(PATIENCE);
            let delay = at.elapsed();
            let _ = keeper.release();
            lost.then_some(delay)
        }
    }
}

/// A lone thread's cycle times on a client with nothing watched, on the
/// same client with a lock watched beside, and on a client with the spin
/// off and a lock watched beside: `blocks` blocks of each, taken in turn,
/// sorted.
fn watch_costs(cluster: &Cluster, cycles: usize) -> Vec<(&'static str, Vec<Duration>)> {
    const BLOCKS: usize = 5;
    let client = Redlock::builder(cluster.urls())
        .build()
        .expect("build the client");
    let sleeper = Redlock::builder(cluster.urls())
        .spin(Duration::ZERO)
        .build()
        .expect("build the client");
    let mut rows = vec![
        ("nothing watched", Vec::new()),
        ("a lock watched", Vec::new()),
        ("a lock watched, `spin(Duration::ZERO)`", Vec::new()),
        ("async: nothing watched", Vec::new()),
        ("async: a lock watched", Vec::new()),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let block = |client: &Redlock, tasks: bool, times: &mut Vec<Duration>| {
        for _ in 0..cycles / BLOCKS {
            let start = Instant::now();
            if tasks {
                runtime.block_on(async {
                    let lock = client.try_lock_async("loss:cycle", TTL).await;
                    let mut lock = lock.expect("acquire");
                    client.unlock_async(&mut lock).await.expect("release");
                });
            } else {
                let mut lock = client.try_lock("loss:cycle", TTL).expect("acquire");
                client.unlock(&mut lock).expect("release");
            }
            times.push(start.elapsed());
        }
    };
    let beside = |client: &Redlock, tasks: bool, times: &mut Vec<Duration>| {
        let mut watched = client.try_lock("loss:beside", TTL).expect("acquire");
        client.watch(&mut watched);
        block(client, tasks, times);
        client.unlock(&mut watched).expect("release");
    };
    // Warm-up of both clients.
    block(&client, false, &mut Vec::new());
    block(&client, true, &mut Vec::new());
    block(&sleeper, false, &mut Vec::new());
    for _ in 0..BLOCKS {
        block(&client, false, &mut rows[0].1);
        beside(&client, false, &mut rows[1].1);
        beside(&sleeper, false, &mut rows[2].1);
        block(&client, true, &mut rows[3].1);
        beside(&client, true, &mut rows[4].1);
    }
    for (_, times) in &mut rows {
        times.sort_unstable();
    }
    rows
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
