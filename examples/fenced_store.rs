//! A store that checks fences turns away a holder whose lock ran out while
//! it was paused: the scenario of the Kleppmann/antirez debate, with the
//! remedy of [`Builder::fencing`](redlock_mio::Builder::fencing).
//!
//! ```sh
//! cargo run --example fenced_store                         # three local masters
//! cargo run --example fenced_store -- redis://127.0.0.1:7000 redis://127.0.0.1:7001 redis://127.0.0.1:7002
//! ```
//!
//! Client 1 takes the lock on `invoice:42` and is paused (a GC pause, a
//! page fault, a stopped VM) past its validity. Client 2 takes the lock,
//! writes, and releases. Client 1 wakes up and writes: with the token
//! alone the store could not tell who is newer; with the fence it refuses
//! the older writer. Exits non-zero if the store accepted the stale write.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use redlock_mio::Redlock;
use support::cluster::Cluster;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The protected resource: it keeps, per key, the value and the largest
/// fence it accepted, and refuses a write that carries a fence no larger.
#[derive(Default)]
struct Store {
    rows: Mutex<HashMap<String, (u64, String)>>,
}

impl Store {
    fn write(&self, key: &str, fence: u64, value: &str) -> std::result::Result<(), u64> {
        let mut rows = self
            .rows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match rows.get(key) {
            Some(&(seen, _)) if fence <= seen => Err(seen),
            _ => {
                rows.insert(key.to_owned(), (fence, value.to_owned()));
                Ok(())
            }
        }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fenced_store failed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    // Stopped when dropped.
    let mut cluster = None;
    let urls = if given.is_empty() {
        support::cluster::find_redis_server()
            .map_err(|e| format!("{e} (or pass the addresses of running masters)"))?;
        let started = Cluster::start(3);
        let urls = started.urls();
        cluster = Some(started);
        urls
    } else {
        given
    };
    let ttl = Duration::from_millis(500);
    let client = || {
        Redlock::builder(&urls)
            .fencing(Duration::from_secs(1))
            .build()
    };
    let (one, two) = (client()?, client()?);
    let store = Store::default();

    let mut first = one.lock("invoice:42", ttl)?;
    let old = first.fence().ok_or("fencing is on")?;
    println!("client 1: locked invoice:42, fence {old}; now paused");
    thread::sleep(ttl + Duration::from_millis(200));

    let mut second = two.lock("invoice:42", ttl)?;
    let new = second.fence().ok_or("fencing is on")?;
    println!("client 2: locked invoice:42, fence {new}");
    match store.write("invoice:42", new, "paid by client 2") {
        Ok(()) => println!("client 2: write accepted"),
        Err(seen) => return Err(format!("client 2 refused (store saw fence {seen})").into()),
    }
    two.unlock(&mut second)?;

    println!(
        "client 1: wakes up, its lock expired {:?} ago",
        first.valid_until().elapsed()
    );
    let stale = store.write("invoice:42", old, "paid by client 1");
    let _ = one.unlock(&mut first);
    drop(cluster);
    match stale {
        Err(seen) => {
            println!("client 1: write refused: fence {old} is not above {seen}");
            Ok(())
        }
        Ok(()) => Err("the store accepted a stale write".into()),
    }
}
