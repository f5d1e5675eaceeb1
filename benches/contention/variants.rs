//! The clients under test, and what counts their attempts.
//!
//! A worker with a client of its own is a [`Worker`]: blocking calls, as a
//! process of its own would make them. Tasks sharing one client share a
//! [`SharedClient`], which runs `drive::task_loop` with its futures.

use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlock_mio::Redlock;

use super::drive::{Failure, Outcome, Shared, task_loop};

/// The TTL of the contended lock: far longer than a holding, so that no
/// lock expires under a holder.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// The one contended resource.
pub(crate) const RESOURCE: &str = "contention:resource";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Variant {
    /// This crate with the default settings (retry after 200 ± 100 ms).
    Mio,
    /// This crate retrying after 5 ± 2.5 ms.
    MioFast,
    /// `rslock` 0.10 as shipped (its default retry: 3 tries, a random
    /// 0-200 ms between them, `acquire_no_guard` looping over those).
    Rslock,
}

pub(crate) const ALL: [Variant; 3] = [Variant::Mio, Variant::MioFast, Variant::Rslock];

impl Variant {
    pub(crate) fn id(self) -> &'static str {
        match self {
            Variant::Mio => "redlock_mio",
            Variant::MioFast => "redlock_mio_5ms",
            Variant::Rslock => "rslock",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Mio => "redlock-mio",
            Variant::MioFast => "redlock-mio, retry 5 ms",
            Variant::Rslock => "rslock 0.10",
        }
    }

    pub(crate) fn color(self) -> &'static str {
        match self {
            Variant::Mio => "#d62728",
            Variant::MioFast => "#ff7f0e",
            Variant::Rslock => "#9467bd",
        }
    }

    /// The library, whose capacity the variant's cells are compared with
    /// (the retry settings play no part in an uncontended cycle).
    pub(crate) fn library(self) -> &'static str {
        match self {
            Variant::Mio | Variant::MioFast => "redlock-mio",
            Variant::Rslock => "rslock 0.10",
        }
    }

    /// A worker of this variant with a client of its own; `n` names its
    /// warm-up key.
    pub(crate) fn worker(self, urls: &[String], probe: &Arc<Probe>, n: usize) -> Box<dyn Worker> {
        let warm = format!("contention:warm:{n}");
        match self {
            Variant::Mio | Variant::MioFast => Box::new(MioWorker {
                client: self.client(urls),
                warm,
                held: None,
            }),
            Variant::Rslock => Box::new(RslockWorker {
                rt: tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime"),
                manager: rslock::LockManager::new(urls.to_vec()),
                warm,
                held: None,
                probe: Arc::clone(probe),
            }),
        }
    }

    /// A client of this crate with the variant's settings (none but the
    /// retry delay and its jitter differ from the defaults; and behind the
    /// delay line, the masters stand for remote ones, to which the client
    /// never yields, though it sees loopback addresses).
    fn client(self, urls: &[String]) -> Redlock {
        let builder = Redlock::builder(urls)
            .yield_to_local_masters(!REMOTE_MASTERS.load(std::sync::atomic::Ordering::Relaxed));
        let builder = match self {
            Variant::MioFast => builder
                .retry_delay(Duration::from_millis(5))
                .retry_jitter(Duration::from_micros(2500)),
            Variant::Mio | Variant::Rslock => builder,
        };
        builder.build().expect("build a client")
    }
}

/// Set by `--rtt`: the masters are reached through the delay line and
/// stand for masters on other hosts.
pub(crate) static REMOTE_MASTERS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A worker's client, driven by blocking calls.
pub(crate) trait Worker: Send {
    /// Takes [`RESOURCE`] for `ttl`, trying until `deadline`.
    fn acquire(&mut self, ttl: Duration, deadline: Instant) -> Result<(), Failure>;
    /// Releases the lock taken.
    fn release(&mut self) -> Result<(), String>;
    /// Forgets the lock taken without releasing it, as a crashed holder
    /// would: its key stays on the masters until its TTL.
    fn forget(&mut self);
    /// Connects and takes and releases a key of its own once, so that no
    /// connect falls in a measured window.
    fn warm(&mut self) -> Result<(), String>;
    /// What counts this worker's attempts.
    fn counter(&self) -> Counter;
}

struct MioWorker {
    client: Redlock,
    warm: String,
    held: Option<redlock_mio::Lock>,
}

/// A failed `lock_until` or `lock_until_async`: a retryable error means
/// that the deadline came first.
fn mio_failure(error: &redlock_mio::Error) -> Failure {
    Failure {
        gave_up: error.is_retryable(),
        message: error.to_string(),
    }
}

impl Worker for MioWorker {
    fn acquire(&mut self, ttl: Duration, deadline: Instant) -> Result<(), Failure> {
        let lock = self
            .client
            .lock_until(RESOURCE, ttl, deadline)
            .map_err(|e| mio_failure(&e))?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let mut lock = self.held.take().ok_or("release without a lock")?;
        self.client.unlock(&mut lock).map_err(|e| e.to_string())
    }

    fn forget(&mut self) {
        // Dropping a `Lock` releases nothing.
        self.held = None;
    }

    fn warm(&mut self) -> Result<(), String> {
        let mut lock = self
            .client
            .try_lock(&self.warm, TTL)
            .map_err(|e| e.to_string())?;
        self.client.unlock(&mut lock).map_err(|e| e.to_string())
    }

    fn counter(&self) -> Counter {
        Counter::Client(Box::new(self.client.clone()))
    }
}

struct RslockWorker {
    rt: tokio::runtime::Runtime,
    manager: rslock::LockManager,
    warm: String,
    held: Option<rslock::Lock>,
    probe: Arc<Probe>,
}

/// `rslock`'s loop until acquired (`acquire_no_guard`), given up at
/// `deadline`.
async fn rslock_acquire(
    manager: &rslock::LockManager,
    ttl: Duration,
    deadline: Instant,
) -> Result<rslock::Lock, Failure> {
    let acquire = manager.acquire_no_guard(RESOURCE.as_bytes(), ttl);
    match tokio::time::timeout_at(deadline.into(), acquire).await {
        Ok(Ok(lock)) => Ok(lock),
        Ok(Err(e)) => Err(Failure {
            gave_up: false,
            message: e.to_string(),
        }),
        Err(_) => Err(Failure {
            gave_up: true,
            message: "deadline passed".to_owned(),
        }),
    }
}

impl Worker for RslockWorker {
    fn acquire(&mut self, ttl: Duration, deadline: Instant) -> Result<(), Failure> {
        let lock = self
            .rt
            .block_on(rslock_acquire(&self.manager, ttl, deadline))?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        // `rslock`'s unlock is best effort and reports nothing.
        let lock = self.held.take().ok_or("release without a lock")?;
        self.rt.block_on(self.manager.unlock(&lock));
        Ok(())
    }

    fn forget(&mut self) {
        // Dropping an `rslock::Lock` releases nothing either.
        self.held = None;
    }

    fn warm(&mut self) -> Result<(), String> {
        let lock = self
            .rt
            .block_on(self.manager.lock(self.warm.as_bytes(), TTL))
            .map_err(|e| e.to_string())?;
        self.rt.block_on(self.manager.unlock(&lock));
        Ok(())
    }

    fn counter(&self) -> Counter {
        Counter::Server(Arc::clone(&self.probe))
    }
}

/// One client shared by tasks, as the async API or `rslock`'s offer it.
pub(crate) enum SharedClient {
    Mio(Redlock),
    Rslock(rslock::LockManager, Arc<Probe>),
}

impl SharedClient {
    pub(crate) fn new(variant: Variant, urls: &[String], probe: &Arc<Probe>) -> SharedClient {
        match variant {
            Variant::Mio | Variant::MioFast => SharedClient::Mio(variant.client(urls)),
            Variant::Rslock => {
                SharedClient::Rslock(rslock::LockManager::new(urls.to_vec()), Arc::clone(probe))
            }
        }
    }

    /// Connects, and takes and releases a key of its own once.
    pub(crate) fn warm(&self, rt: &tokio::runtime::Runtime) -> Result<(), String> {
        let warm = "contention:warm:shared";
        match self {
            SharedClient::Mio(client) => rt
                .block_on(async {
                    let mut lock = client.try_lock_async(warm, TTL).await?;
                    client.unlock_async(&mut lock).await
                })
                .map_err(|e| e.to_string()),
            SharedClient::Rslock(manager, _) => rt
                .block_on(async {
                    let lock = manager.lock(warm.as_bytes(), TTL).await?;
                    manager.unlock(&lock).await;
                    Ok::<(), rslock::LockError>(())
                })
                .map_err(|e| e.to_string()),
        }
    }

    pub(crate) fn counter(&self) -> Counter {
        match self {
            SharedClient::Mio(client) => Counter::Client(Box::new(client.clone())),
            SharedClient::Rslock(_, probe) => Counter::Server(Arc::clone(probe)),
        }
    }

    /// Starts `callers` tasks on `rt`, each looping on the lock.
    pub(crate) fn spawn(
        &self,
        rt: &tokio::runtime::Runtime,
        callers: usize,
        shared: &Arc<Shared>,
    ) -> Vec<tokio::task::JoinHandle<Outcome>> {
        match self {
            SharedClient::Mio(client) => {
                let (a, r) = (client.clone(), client.clone());
                let acquire = move |deadline: Instant| {
                    let client = a.clone();
                    async move {
                        client
                            .lock_until_async(RESOURCE, TTL, deadline)
                            .await
                            .map_err(|e| mio_failure(&e))
                    }
                };
                let release = move |mut lock: redlock_mio::Lock| {
                    let client = r.clone();
                    async move {
                        client
                            .unlock_async(&mut lock)
                            .await
                            .map_err(|e| e.to_string())
                    }
                };
                spawn_tasks(rt, callers, shared, acquire, release)
            }
            SharedClient::Rslock(manager, _) => {
                let (a, r) = (manager.clone(), manager.clone());
                let acquire = move |deadline: Instant| {
                    let manager = a.clone();
                    async move { rslock_acquire(&manager, TTL, deadline).await }
                };
                let release = move |lock: rslock::Lock| {
                    let manager = r.clone();
                    async move {
                        manager.unlock(&lock).await;
                        Ok(())
                    }
                };
                spawn_tasks(rt, callers, shared, acquire, release)
            }
        }
    }
}

/// Spawns `callers` tasks running [`task_loop`] with these futures.
fn spawn_tasks<L, A, AF, R, RF>(
    rt: &tokio::runtime::Runtime,
    callers: usize,
    shared: &Arc<Shared>,
    acquire: A,
    release: R,
) -> Vec<tokio::task::JoinHandle<Outcome>>
where
    L: Send + 'static,
    A: Fn(Instant) -> AF + Clone + Send + 'static,
    AF: Future<Output = Result<L, Failure>> + Send + 'static,
    R: Fn(L) -> RF + Clone + Send + 'static,
    RF: Future<Output = Result<(), String>> + Send + 'static,
{
    (0..callers)
        .map(|c| {
            rt.spawn(task_loop(
                c,
                Arc::clone(shared),
                acquire.clone(),
                release.clone(),
            ))
        })
        .collect()
}

/// What counts attempts: this crate's `stats()`, or, for `rslock`, which
/// counts nothing, the `SET` commands master 0 has served (every attempt
/// sends one `SET NX PX` to each master).
#[derive(Clone)]
pub(crate) enum Counter {
    Client(Box<Redlock>),
    Server(Arc<Probe>),
}

/// The attempts `counters` have counted: the sum of the clients'
/// `stats().attempts`, plus master 0's `SET` calls once if a counter is the
/// server's (a cell runs alone, so they are its variant's).
pub(crate) fn attempts(counters: &[Counter]) -> u64 {
    let mut sum = 0;
    let mut server = None;
    for counter in counters {
        match counter {
            Counter::Client(client) => sum += client.stats().attempts,
            Counter::Server(probe) => server = Some(probe),
        }
    }
    sum + server.map_or(0, |probe| probe.sets())
}

/// A plain connection to master 0 that reads its `SET` count.
pub(crate) struct Probe {
    conn: Mutex<TcpStream>,
}

impl Probe {
    pub(crate) fn connect(addr: SocketAddr) -> Probe {
        let conn = TcpStream::connect(addr).expect("connect to master 0");
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("set a read timeout");
        Probe {
            conn: Mutex::new(conn),
        }
    }

    /// `cmdstat_set:calls` of `INFO commandstats`.
    pub(crate) fn sets(&self) -> u64 {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.write_all(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
            .expect("send INFO");
        let mut reader = BufReader::new(&*conn);
        let mut header = String::new();
        reader.read_line(&mut header).expect("read INFO");
        let len: usize = header
            .trim_end()
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .expect("INFO replies a bulk string");
        let mut body = vec![0; len + 2];
        reader.read_exact(&mut body).expect("read INFO's body");
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_set:calls="))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }
}
