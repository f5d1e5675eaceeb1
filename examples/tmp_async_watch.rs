//! Scratch measurement (not committed).
#![allow(clippy::unwrap_used)]
#[path = "../tests/support/mod.rs"]
mod support;
use redlock_mio::Redlock;
use std::time::{Duration, Instant};
use support::cluster::Cluster;
#[global_allocator]
static GLOBAL: support::counting::CountingAlloc = support::counting::CountingAlloc;

fn run(client: &Redlock, n: usize) -> (f64, f64) {
    let mut v = Vec::with_capacity(n);
    futures_executor::block_on(async {
        for _ in 0..n {
            let t = Instant::now();
            let mut lock = client
                .try_lock_async("bench:cycle", Duration::from_secs(10))
                .await
                .unwrap();
            client.unlock_async(&mut lock).await.unwrap();
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    });
    v.sort_by(|a, b| a.total_cmp(b));
    (v[n / 2], v[n * 99 / 100])
}

fn main() {
    let cluster = Cluster::start(5);
    let client = Redlock::builder(cluster.urls()).build().unwrap();
    for round in 0..3 {
        let plain = run(&client, 3000);
        let mut held = client
            .try_lock("bench:watched", Duration::from_secs(60))
            .unwrap();
        client.watch(&mut held);
        let e0 = client.stats().engine;
        let watched = run(&client, 3000);
        let e1 = client.stats().engine;
        client.unlock(&mut held).unwrap();
        println!(
            "round {round}: async plain p50 {:.1} p99 {:.1} | watched p50 {:.1} p99 {:.1} | wakes/cycle {:.2} polls {:.2} looks {:.2}",
            plain.0,
            plain.1,
            watched.0,
            watched.1,
            (e1.wakes - e0.wakes) as f64 / 3000.0,
            (e1.polls - e0.polls) as f64 / 3000.0,
            (e1.looks - e0.looks) as f64 / 3000.0
        );
    }
}
