//! A directed scenario, driven by hand through the client's core and the
//! master model: an extend written on a connection the client then drops
//! can still reach the master later (a socket closed with data unsent
//! keeps retransmitting it), after a newer extend sent on the new
//! connection, and shorten the key under its holder.
//!
//! The extend scripts never shorten a key (`PEXPIRE … GT`), so the stale
//! extend lands without effect.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly"
)]

use std::time::{Duration, Instant};

use redlock_mio::ServerAddr;
use redlock_mio::rules::NodeError;
use redlock_mio::sim::{Client, Names, Settings};
use redlock_mio_sim::{Conn, Master};

const EPOCH_US: u64 = 1_700_000_000_000_000;

struct Rig {
    t0: Instant,
    /// Time since `t0`.
    now: Duration,
    client: Client,
    masters: Vec<Master>,
    /// The master's end of the client's current socket to each.
    conns: Vec<Option<Conn>>,
}

impl Rig {
    fn new(n: usize) -> Rig {
        let t0 = Instant::now();
        let settings = Settings {
            request_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            backoff_max: Duration::from_millis(100),
            drift_factor: 0.01,
            retry_count: 0,
            retry_delay: Duration::from_millis(100),
            retry_jitter: Duration::ZERO,
            in_flight: 8,
            identify: false,
            wake: false,
            restart_guard: None,
        };
        let addrs: Vec<ServerAddr> = (0..n)
            .map(|i| ServerAddr::parse(&format!("redis://127.0.0.1:{}", 7000 + i)).unwrap())
            .collect();
        let mut rig = Rig {
            t0,
            now: Duration::ZERO,
            client: Client::new(&addrs, settings, 1, t0),
            masters: (0..n).map(|i| Master::new(i as u64, EPOCH_US)).collect(),
            conns: (0..n).map(|_| None).collect(),
        };
        rig.client.connect(rig.instant());
        for i in 0..n {
            rig.open(i);
        }
        rig
    }

    fn instant(&self) -> Instant {
        self.t0 + self.now
    }

    fn now_us(&self) -> u64 {
        EPOCH_US + self.now.as_micros() as u64
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        let now = self.instant();
        self.client.handle_timeout(now);
    }

    /// Opens the socket master `i`'s session needs, and completes its
    /// connect and handshake.
    fn open(&mut self, i: usize) {
        assert!(self.client.socket(i).is_some());
        self.conns[i] = Some(self.masters[i].connect());
        let now = self.instant();
        self.client.handle_connected(i, now);
        self.exchange(i);
    }

    /// What the client has to write to master `i`, taken off its socket.
    fn take(&mut self, i: usize) -> Vec<u8> {
        let bytes = self.client.transmit(i).to_vec();
        self.client.advance(i, bytes.len());
        bytes
    }

    /// Master `i` runs `bytes` from connection `conn` and the client reads
    /// the replies.
    fn deliver(&mut self, i: usize, conn: &mut Conn, bytes: &[u8]) {
        let mut out = Vec::new();
        let now_us = self.now_us();
        self.masters[i].handle(conn, bytes, now_us, &mut out);
        let now = self.instant();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let buf = self.client.read_buf(i).unwrap();
            let n = buf.len().min(rest.len());
            buf[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            self.client.handle_read(i, n, now).unwrap();
        }
    }

    /// Writes and answers on master `i`'s current socket until nothing is
    /// left to write.
    fn exchange(&mut self, i: usize) {
        loop {
            let bytes = self.take(i);
            if bytes.is_empty() {
                return;
            }
            let mut conn = self.conns[i].take().unwrap();
            self.deliver(i, &mut conn, &bytes);
            self.conns[i] = Some(conn);
        }
    }

    /// How many masters hold `token` under `key` now.
    fn holding(&self, key: &[u8], token: &[u8]) -> usize {
        let now_us = self.now_us();
        self.masters
            .iter()
            .filter(|m| m.get(0, key, now_us) == Some(token))
            .count()
    }
}

/// Three masters. The holder extends to 100 ms; master 0's copy of that
/// extend is delayed (a partition) and the client drops the connection as
/// stalled; masters 1 and 2 apply it, and the extend succeeds. The holder
/// extends again, to 1 s: masters 0 (on a new connection) and 1 apply it,
/// master 2 is paused, and the extend succeeds, the lock valid for about a
/// second. Then master 0 gets the stale extend at last; were it to
/// shorten the key to 100 ms, 120 ms later only master 1 would hold it,
/// and another client would win masters 0 and 2 while the holder still
/// counts on about 850 ms of validity. It changes nothing there.
#[test]
fn a_stale_extend_from_a_dropped_connection_cannot_shorten_a_held_lock() {
    let mut rig = Rig::new(3);
    let names = Names::one(b"res").unwrap();
    let token = [7u8; 20];
    let now = rig.instant();
    let id = rig
        .client
        .begin_acquire(&names, &token, Duration::from_secs(1), None, None, now)
        .unwrap();
    for i in 0..3 {
        rig.exchange(i);
    }
    let (held, _) = rig
        .client
        .end_acquire(id, &names, &token, None, rig.instant());
    let mut held = held.expect("acquired on three masters");

    // The first extend: master 0's copy is held up on the wire.
    rig.advance(Duration::from_millis(5));
    let now = rig.instant();
    let ext1 = rig
        .client
        .begin_extend(&held, Duration::from_millis(100), now)
        .unwrap();
    let stale = rig.take(0);
    let mut old = rig.conns[0].take().unwrap();
    rig.exchange(1);
    rig.exchange(2);
    rig.client
        .end_extend(ext1, &mut held)
        .expect("two of three");
    // The client gives up on master 0's connection (stalled): the master
    // has not seen it close yet.
    let now = rig.instant();
    rig.client.handle_failure(0, NodeError::Stalled, now);

    // The second extend: master 0 on a new connection, master 2 paused.
    rig.advance(Duration::from_millis(5));
    let now = rig.instant();
    let ext2 = rig
        .client
        .begin_extend(&held, Duration::from_secs(1), now)
        .unwrap();
    rig.open(0);
    rig.exchange(1);
    let _paused = rig.take(2);
    rig.client
        .end_extend(ext2, &mut held)
        .expect("two of three");

    // The stale extend reaches master 0 at last.
    rig.advance(Duration::from_millis(1));
    let mut out = Vec::new();
    let now_us = rig.now_us();
    rig.masters[0].handle(&mut old, &stale, now_us, &mut out);

    rig.advance(Duration::from_millis(120));
    let left = held.valid_until().saturating_duration_since(rig.instant());
    let quorum = 2;
    assert!(
        left.is_zero() || rig.holding(b"res", &token) >= quorum,
        "the holder counts on {left:?} more, but only {} of 3 masters hold its key",
        rig.holding(b"res", &token)
    );
}
