//! How soon a holder hears that its lock is gone: a kept lock's key is
//! deleted on a majority of five local masters (`DEL` on three), and the
//! bench times the keeper's report (`Keeper::wait_lost`) from the third
//! `DEL`'s reply. With the loss watch (the default) the masters' word of
//! the change reaches the client and a read confirms it; without it
//! (`KeepOptions::watch(false)`), the next extension finds the key gone, a
//! period (a third of the TTL) later at most. A plain `Lock` under
//! `Redlock::watch` is timed the same way (`Lock::wait_lost`). See
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
    if markdown {
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
