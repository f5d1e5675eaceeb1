//! A rig for directed scenarios driven by hand: the simulator's client
//! (the library's core with the front ends' rules) and master models, the
//! test moving every byte between them and the time.

#![allow(dead_code, reason = "each test binary uses part of the rig")]

use std::time::{Duration, Instant};

use redlock_mio::ServerAddr;
use redlock_mio_sim::client::{Client, Settings};
use redlock_mio_sim::{Conn, Master};

/// The masters' wall clock at the start, in microseconds.
pub(crate) const EPOCH_US: u64 = 1_700_000_000_000_000;

pub(crate) struct Rig {
    pub(crate) t0: Instant,
    /// Time since `t0`.
    pub(crate) now: Duration,
    pub(crate) client: Client,
    pub(crate) masters: Vec<Master>,
    /// How far each master's wall clock is ahead of `EPOCH_US + now`.
    pub(crate) ahead_us: Vec<u64>,
    /// The master's end of the client's current socket to each.
    pub(crate) conns: Vec<Option<Conn>>,
}

/// The settings of the rig's client: one try per call, no wake-ups.
pub(crate) fn settings() -> Settings {
    Settings {
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
        fencing: None,
        max_extensions: None,
    }
}

impl Rig {
    /// `n` masters whose clocks agree, and a client with [`settings`],
    /// connected to each.
    pub(crate) fn new(n: usize) -> Rig {
        Rig::with(settings(), vec![0; n])
    }

    /// A master per entry of `ahead_us` (its clock that far ahead), and a
    /// client with `settings`, connected to each.
    pub(crate) fn with(settings: Settings, ahead_us: Vec<u64>) -> Rig {
        let n = ahead_us.len();
        let t0 = Instant::now();
        let addrs: Vec<ServerAddr> = (0..n)
            .map(|i| ServerAddr::parse(&format!("redis://127.0.0.1:{}", 7000 + i)).unwrap())
            .collect();
        let mut rig = Rig {
            t0,
            now: Duration::ZERO,
            client: Client::new(&addrs, settings, 1, t0),
            masters: (0..n)
                .map(|i| Master::new(i as u64, EPOCH_US + ahead_us[i]))
                .collect(),
            ahead_us,
            conns: (0..n).map(|_| None).collect(),
        };
        rig.client.connect(rig.instant());
        for i in 0..n {
            rig.open(i);
        }
        rig
    }

    pub(crate) fn instant(&self) -> Instant {
        self.t0 + self.now
    }

    /// Master `i`'s wall clock now.
    pub(crate) fn now_us(&self, i: usize) -> u64 {
        EPOCH_US + self.ahead_us[i] + self.now.as_micros() as u64
    }

    pub(crate) fn advance(&mut self, d: Duration) {
        self.now += d;
        let now = self.instant();
        self.client.handle_timeout(now);
    }

    /// Opens the socket master `i`'s session needs, and completes its
    /// connect and handshake.
    pub(crate) fn open(&mut self, i: usize) {
        assert!(self.client.socket(i).is_some());
        self.conns[i] = Some(self.masters[i].connect());
        let now = self.instant();
        self.client.handle_connected(i, now);
        self.exchange(i);
    }

    /// What the client has to write to master `i`, taken off its socket.
    pub(crate) fn take(&mut self, i: usize) -> Vec<u8> {
        let bytes = self.client.transmit(i).to_vec();
        self.client.advance(i, bytes.len());
        bytes
    }

    /// Master `i` runs `bytes` from connection `conn` and the client reads
    /// the replies.
    pub(crate) fn deliver(&mut self, i: usize, conn: &mut Conn, bytes: &[u8]) {
        let mut out = Vec::new();
        let now_us = self.now_us(i);
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
    pub(crate) fn exchange(&mut self, i: usize) {
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

    /// Writes and answers on every master's socket.
    pub(crate) fn exchange_all(&mut self) {
        for i in 0..self.masters.len() {
            self.exchange(i);
        }
    }

    /// How many masters hold `value` under `key` now.
    pub(crate) fn holding(&self, key: &[u8], value: &[u8]) -> usize {
        (0..self.masters.len())
            .filter(|&i| self.masters[i].get(0, key, self.now_us(i)) == Some(value))
            .count()
    }

    /// Master `i`'s fence counter now.
    pub(crate) fn counter(&self, i: usize) -> Option<u64> {
        let value = self.masters[i].get(0, redlock_mio::FENCE_KEY.as_bytes(), self.now_us(i))?;
        std::str::from_utf8(value).ok()?.parse().ok()
    }
}
