//! The clients under test, each running acquire + release cycles with
//! `callers` concurrent callers for a while.

use super::*;

/// Errors printed so far: a few, so that a rare failure names its kind
/// without flooding the table.
static PRINTED: AtomicU64 = AtomicU64::new(0);

/// `result` as the cell counts it (`true`: a cycle done), printing the
/// first few errors of the run to stderr.
fn done(variant: &str, result: std::result::Result<(), redlock_mio::Error>) -> bool {
    match result {
        Ok(()) => true,
        Err(error) => {
            if PRINTED.fetch_add(1, Ordering::Relaxed) < 10 {
                eprintln!("throughput: {variant}: a cycle failed: {error}");
            }
            false
        }
    }
}

fn client(urls: &[String]) -> Redlock {
    Redlock::builder(urls)
        .request_timeout(REQUEST_TIMEOUT)
        .retry_count(0)
        .build()
        .expect("build a client")
}

pub(crate) fn mine_per_thread(urls: &[String], callers: usize, run: Duration) -> Cell {
    let clients: Vec<Redlock> = (0..callers).map(|_| client(urls)).collect();
    threads(callers, run, |c| {
        let redlock = &clients[c];
        let result = redlock
            .try_lock(format!("tp:own:{c}"), TTL)
            .and_then(|mut lock| redlock.unlock(&mut lock));
        done("client per thread", result)
    })
}

pub(crate) fn mine_shared(urls: &[String], callers: usize, run: Duration) -> Cell {
    let redlock = client(urls);
    threads(callers, run, |c| {
        let result = redlock
            .try_lock(format!("tp:shared:{c}"), TTL)
            .and_then(|mut lock| redlock.unlock(&mut lock));
        done("shared", result)
    })
}

pub(crate) fn mine_async(
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
            let result = match redlock.try_lock_async(&resource, TTL).await {
                Ok(mut lock) => redlock.unlock_async(&mut lock).await,
                Err(error) => Err(error),
            };
            done("async, shared", result)
        }
    })
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
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
                    let ok = cycle(c).await;
                    record(&mut h, &failed, t0, ok);
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

pub(crate) fn rslock_shared(
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

pub(crate) fn multiplexed(
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
