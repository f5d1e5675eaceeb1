//! The lock variants: this crate, the peers as shipped, and the redis-rs baselines.

use super::*;

// ---------------------------------------------------------------------------
// The variants
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Mine,
    MineAsync,
    Redlock,
    Rslock,
    SyncBaseline,
    AsyncBaseline,
    Floor,
    FloorQuorum,
    FloorClassic,
}

pub(crate) const ALL: [Kind; 9] = [
    Kind::Mine,
    Kind::MineAsync,
    Kind::Redlock,
    Kind::Rslock,
    Kind::SyncBaseline,
    Kind::AsyncBaseline,
    Kind::Floor,
    Kind::FloorQuorum,
    Kind::FloorClassic,
];

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Mine => "redlock-mio",
            Kind::MineAsync => "redlock-mio as.",
            Kind::Redlock => "redlock 2.0",
            Kind::Rslock => "rslock 0.10",
            Kind::SyncBaseline => "redis-rs sync",
            Kind::AsyncBaseline => "redis-rs async",
            Kind::Floor => "floor (all)",
            Kind::FloorQuorum => "floor (quorum)",
            Kind::FloorClassic => "floor (q, cl.)",
        }
    }

    pub(crate) fn id(self) -> &'static str {
        match self {
            Kind::Mine => "redlock_mio",
            Kind::MineAsync => "redlock_mio_async",
            Kind::Redlock => "redlock",
            Kind::Rslock => "rslock",
            Kind::SyncBaseline => "redis_rs_sync",
            Kind::AsyncBaseline => "redis_rs_async",
            Kind::Floor => "floor",
            Kind::FloorQuorum => "floor_quorum",
            Kind::FloorClassic => "floor_quorum_classic",
        }
    }

    pub(crate) fn color(self) -> &'static str {
        match self {
            Kind::Mine => "#d62728",
            Kind::MineAsync => "#ff7f0e",
            Kind::Redlock => "#8c564b",
            Kind::Rslock => "#9467bd",
            Kind::SyncBaseline => "#1f77b4",
            Kind::AsyncBaseline => "#2ca02c",
            Kind::Floor => "#7f7f7f",
            Kind::FloorQuorum => "#17becf",
            Kind::FloorClassic => "#bcbd22",
        }
    }

    /// The resource of this variant in a scenario: one key per variant, all
    /// of the same length, so that a lock leaked by one variant (e.g. a peer
    /// stuck on the paused master) cannot fail another.
    pub(crate) fn resource(self, scenario: &str) -> String {
        format!("redlock-bench:{scenario}:{}", self.id())
    }
}

/// One lock variant: `acquire` takes the lock (kept inside), `release` gives
/// it back. A failed acquire is `Err` with the reason.
pub(crate) trait Variant: Send {
    fn acquire(&mut self) -> std::result::Result<(), String>;
    fn release(&mut self) -> std::result::Result<(), String>;
}

pub(crate) fn make(
    kind: Kind,
    env: &Env,
    resource: &str,
    live: &[usize],
) -> Result<Box<dyn Variant>> {
    Ok(match kind {
        Kind::Mine => Box::new(Mine::new(env, resource)?),
        Kind::MineAsync => Box::new(MineAsync::new(env, resource)?),
        Kind::Redlock => Box::new(RedlockPeer::new(env, resource)),
        Kind::Rslock => Box::new(RslockPeer::new(env, resource)?),
        Kind::SyncBaseline => Box::new(SyncBaseline::new(env, resource)?),
        Kind::AsyncBaseline => Box::new(AsyncBaseline::new(env, resource)?),
        Kind::Floor => Box::new(Floor::new(env, resource, live, live.len(), Release::Crate)?),
        Kind::FloorQuorum => Box::new(Floor::new(
            env,
            resource,
            live,
            env.quorum(),
            Release::Crate,
        )?),
        Kind::FloorClassic => Box::new(Floor::new(
            env,
            resource,
            live,
            env.quorum(),
            Release::Classic,
        )?),
    })
}

/// Variant 1: This crate.
pub(crate) struct Mine {
    pub(crate) client: Redlock,
    pub(crate) resource: Vec<u8>,
    pub(crate) held: Option<redlock_mio::Lock>,
}

impl Mine {
    pub(crate) fn new(env: &Env, resource: &str) -> Result<Mine> {
        let client = Redlock::builder(&env.urls)
            .request_timeout(REQUEST_TIMEOUT)
            .retry_count(0)
            .build()?;
        Ok(Mine {
            client,
            resource: resource.as_bytes().to_vec(),
            held: None,
        })
    }
}

impl Variant for Mine {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        let lock = self
            .client
            .try_lock(&self.resource, TTL)
            .map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let mut lock = self.held.take().ok_or("release without a lock")?;
        self.client.unlock(&mut lock).map_err(|e| e.to_string())
    }
}

/// Variant 1b: This crate's async API, each call a future run to completion
/// on a tokio current-thread runtime by the measuring thread (alone on the
/// client, each call writes its commands and polls for the replies itself,
/// yielding between polls: `Builder::spin`).
pub(crate) struct MineAsync {
    pub(crate) client: Redlock,
    pub(crate) resource: Vec<u8>,
    pub(crate) held: Option<redlock_mio::Lock>,
    pub(crate) rt: tokio::runtime::Runtime,
}

impl MineAsync {
    pub(crate) fn new(env: &Env, resource: &str) -> Result<MineAsync> {
        let Mine {
            client, resource, ..
        } = Mine::new(env, resource)?;
        Ok(MineAsync {
            client,
            resource,
            held: None,
            rt: current_thread_runtime()?,
        })
    }
}

impl Variant for MineAsync {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        let future = self.client.try_lock_async(&self.resource, TTL);
        let lock = self.rt.block_on(future).map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let mut lock = self.held.take().ok_or("release without a lock")?;
        let future = self.client.unlock_async(&mut lock);
        self.rt.block_on(future).map_err(|e| e.to_string())
    }
}

/// Variant 2: The `redlock` crate 2.0 as shipped: sync, redis-rs 0.23, a new
/// connection per command, sequential over the masters.
pub(crate) struct RedlockPeer {
    pub(crate) manager: &'static redlock::RedLock,
    pub(crate) resource: Vec<u8>,
    pub(crate) held: Option<redlock::Lock<'static>>,
}

impl RedlockPeer {
    pub(crate) fn new(env: &Env, resource: &str) -> RedlockPeer {
        let mut manager = redlock::RedLock::new(env.urls.clone());
        // One attempt (a count of 0 would make none); the delay must be
        // non-zero (`gen_range(0..delay)`) and is at most 0 ms.
        manager.set_retry(1, 1);
        RedlockPeer {
            // `Lock` borrows its manager: leaked, a few bytes per client.
            manager: Box::leak(Box::new(manager)),
            resource: resource.as_bytes().to_vec(),
            held: None,
        }
    }
}

impl Variant for RedlockPeer {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        match self.manager.lock(&self.resource, TTL_MS as usize) {
            Ok(Some(lock)) => {
                self.held = Some(lock);
                Ok(())
            }
            Ok(None) => Err("not acquired (no quorum)".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let lock = self.held.take().ok_or("release without a lock")?;
        self.manager.unlock(&lock);
        Ok(())
    }
}

pub(crate) fn current_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Variant 3: The `rslock` crate 0.10 as shipped: async, redis-rs 1.x multiplexed
/// connections, `join_all` over the masters; on a current-thread runtime.
pub(crate) struct RslockPeer {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) manager: rslock::LockManager,
    pub(crate) resource: Vec<u8>,
    pub(crate) held: Option<rslock::Lock>,
}

impl RslockPeer {
    pub(crate) fn new(env: &Env, resource: &str) -> Result<RslockPeer> {
        let mut manager = rslock::LockManager::new(env.urls.clone());
        // One attempt, no sleep after it.
        manager.set_retry(1, Duration::from_millis(1));
        Ok(RslockPeer {
            rt: current_thread_runtime()?,
            manager,
            resource: resource.as_bytes().to_vec(),
            held: None,
        })
    }
}

impl Variant for RslockPeer {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        let lock = self
            .rt
            .block_on(self.manager.lock(self.resource.as_slice(), TTL))
            .map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        let lock = self.held.take().ok_or("release without a lock")?;
        self.rt.block_on(self.manager.unlock(&lock));
        Ok(())
    }
}

pub(crate) fn redis1_info(url: &str) -> Result<redis1::ConnectionInfo> {
    use redis1::IntoConnectionInfo as _;
    let info = url.into_connection_info()?;
    Ok(info.set_tcp_settings(redis1::io::tcp::TcpSettings::default().set_nodelay(true)))
}

pub(crate) fn random_token() -> [u8; 20] {
    rand::random()
}

/// Drift as in the Redlock reference: 1 % of the TTL plus 2 ms.
pub(crate) fn still_valid(started: Instant) -> bool {
    let drift = Duration::from_millis(TTL_MS / 100 + 2);
    started.elapsed() + drift < TTL
}

/// Variant 4: redis-rs 1.x done right, sync: one persistent connection per master
/// with `TCP_NODELAY` and a read/write timeout, the release script
/// preloaded, `SET NX PX` then `EVALSHA`, sequential, quorum inline. A
/// connection that fails or times out is dropped for good.
pub(crate) struct SyncBaseline {
    pub(crate) conns: Vec<Option<redis1::Connection>>,
    pub(crate) quorum: usize,
    pub(crate) resource: Vec<u8>,
    pub(crate) token: [u8; 20],
}

impl SyncBaseline {
    pub(crate) fn new(env: &Env, resource: &str) -> Result<SyncBaseline> {
        let mut conns = Vec::new();
        for url in &env.urls {
            let client = redis1::Client::open(redis1_info(url)?)?;
            let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
            conn.set_read_timeout(Some(REQUEST_TIMEOUT))?;
            conn.set_write_timeout(Some(REQUEST_TIMEOUT))?;
            let sha = redis1::Script::new(RELEASE_SCRIPT).load(&mut conn)?;
            if sha != RELEASE_SHA1 {
                return Err(format!("SCRIPT LOAD returned {sha}, not {RELEASE_SHA1}").into());
            }
            conns.push(Some(conn));
        }
        Ok(SyncBaseline {
            conns,
            quorum: env.quorum(),
            resource: resource.as_bytes().to_vec(),
            token: [0; 20],
        })
    }

    pub(crate) fn release_all(&mut self) -> usize {
        let mut released = 0;
        for slot in &mut self.conns {
            let Some(conn) = slot else { continue };
            let reply = redis1::cmd("EVALSHA")
                .arg(RELEASE_SHA1)
                .arg(1)
                .arg(&self.resource[..])
                .arg(&self.token[..])
                .query::<i64>(conn);
            match reply {
                Ok(1) => released += 1,
                Ok(_) => {}
                Err(_) => *slot = None,
            }
        }
        released
    }
}

impl Variant for SyncBaseline {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        self.token = random_token();
        let started = Instant::now();
        let mut acquired = 0;
        for slot in &mut self.conns {
            let Some(conn) = slot else { continue };
            let reply = redis1::cmd("SET")
                .arg(&self.resource[..])
                .arg(&self.token[..])
                .arg("NX")
                .arg("PX")
                .arg(TTL_MS)
                .query::<redis1::Value>(conn);
            match reply {
                Ok(redis1::Value::Okay) => acquired += 1,
                Ok(_) => {}
                Err(_) => *slot = None,
            }
        }
        if acquired >= self.quorum && still_valid(started) {
            return Ok(());
        }
        self.release_all();
        Err(format!("not acquired: {acquired} of {}", self.conns.len()))
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        self.release_all();
        Ok(())
    }
}

pub(crate) static RELEASE: LazyLock<redis1::Script> =
    LazyLock::new(|| redis1::Script::new(RELEASE_SCRIPT));

/// Variant 5: redis-rs 1.x done right, async: a current-thread runtime, multiplexed
/// connections with `TCP_NODELAY`, `join_all` over the masters with a
/// per-node timeout, one static `Script`.
pub(crate) struct AsyncBaseline {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) conns: Vec<redis1::aio::MultiplexedConnection>,
    pub(crate) quorum: usize,
    pub(crate) resource: Vec<u8>,
    pub(crate) token: [u8; 20],
}

impl AsyncBaseline {
    pub(crate) fn new(env: &Env, resource: &str) -> Result<AsyncBaseline> {
        let rt = current_thread_runtime()?;
        let mut conns = Vec::new();
        for url in &env.urls {
            let client = redis1::Client::open(redis1_info(url)?)?;
            let mut conn = rt.block_on(client.get_multiplexed_async_connection())?;
            let sha = rt.block_on(RELEASE.load_async(&mut conn))?;
            if sha != RELEASE_SHA1 {
                return Err(format!("SCRIPT LOAD returned {sha}, not {RELEASE_SHA1}").into());
            }
            conns.push(conn);
        }
        Ok(AsyncBaseline {
            rt,
            conns,
            quorum: env.quorum(),
            resource: resource.as_bytes().to_vec(),
            token: [0; 20],
        })
    }

    pub(crate) fn release_all(&mut self) -> usize {
        let (resource, token) = (&self.resource[..], &self.token[..]);
        let replies = self.rt.block_on(join_all(self.conns.iter_mut().map(|conn| {
            let mut invocation = RELEASE.prepare_invoke();
            invocation.key(resource).arg(token);
            async move {
                tokio::time::timeout(REQUEST_TIMEOUT, invocation.invoke_async::<i64>(conn)).await
            }
        })));
        replies
            .into_iter()
            .filter(|r| matches!(r, Ok(Ok(1))))
            .count()
    }
}

impl Variant for AsyncBaseline {
    fn acquire(&mut self) -> std::result::Result<(), String> {
        self.token = random_token();
        let started = Instant::now();
        let (resource, token) = (&self.resource[..], &self.token[..]);
        let replies = self.rt.block_on(join_all(self.conns.iter_mut().map(|conn| {
            let mut cmd = redis1::cmd("SET");
            cmd.arg(resource).arg(token).arg("NX").arg("PX").arg(TTL_MS);
            async move {
                tokio::time::timeout(REQUEST_TIMEOUT, cmd.query_async::<redis1::Value>(conn)).await
            }
        })));
        let acquired = replies
            .iter()
            .filter(|r| matches!(r, Ok(Ok(redis1::Value::Okay))))
            .count();
        if acquired >= self.quorum && still_valid(started) {
            return Ok(());
        }
        self.release_all();
        Err(format!("not acquired: {acquired} of {}", self.conns.len()))
    }

    fn release(&mut self) -> std::result::Result<(), String> {
        self.release_all();
        Ok(())
    }
}
