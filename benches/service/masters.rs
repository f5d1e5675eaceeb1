//! The masters' side: their memory and keys (`INFO memory`, `DBSIZE`,
//! `SCAN`) on connections of their own, and the pipelined floor.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redlock_mio::scripts::{RELEASE_SCRIPT, RELEASE_SHA1};

use super::support::cluster::Cluster;
use super::support::cluster::{Connection, encode_command};

/// What the masters hold, summed over them.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Held {
    /// `used_memory` of `INFO memory`, bytes.
    pub(crate) used_memory: u64,
    /// `DBSIZE`: every key.
    pub(crate) keys: u64,
}

/// What is left on the masters once the callers stopped, summed over them.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Leftovers {
    /// Lock keys holding a holder's token.
    pub(crate) held: u64,
    /// Lock keys reserved for a waiter (`reserved …`).
    pub(crate) reserved: u64,
    /// Waiters' queues.
    pub(crate) queues: u64,
}

/// A connection to each master.
pub(crate) struct Probe {
    conns: Vec<Connection>,
}

fn integer(reply: &[u8]) -> Option<u64> {
    std::str::from_utf8(reply)
        .ok()?
        .trim_end()
        .strip_prefix(':')?
        .parse()
        .ok()
}

impl Probe {
    pub(crate) fn new(cluster: &Cluster) -> Probe {
        let conns = cluster
            .nodes()
            .iter()
            .map(|n| {
                n.connect_authenticated(Duration::from_secs(2))
                    .expect("a probe connection")
            })
            .collect();
        Probe { conns }
    }

    /// The masters' memory and key count now.
    pub(crate) fn held(&mut self) -> Held {
        let mut held = Held::default();
        for conn in &mut self.conns {
            if let Ok(reply) = conn.request(&[b"INFO", b"memory"]) {
                let text = String::from_utf8_lossy(&reply);
                held.used_memory += text
                    .lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
            if let Ok(reply) = conn.request(&[b"DBSIZE"]) {
                held.keys += integer(&reply).unwrap_or(0);
            }
        }
        held
    }

    /// The lock keys and queues on the masters now.
    pub(crate) fn leftovers(&mut self) -> Leftovers {
        let mut out = Leftovers {
            queues: self.count("redlock-mio:queue:*"),
            ..Leftovers::default()
        };
        for i in 0..self.conns.len() {
            for key in self.keys(i, "svc:*") {
                let value = self.conns[i].request(&[b"GET", &key]).unwrap_or_default();
                // `$N\r\nreserved …\r\n`, or the holder's token.
                if value.windows(9).any(|w| w == b"reserved ") {
                    out.reserved += 1;
                } else if value.first() == Some(&b'$') && value != b"$-1\r\n" {
                    out.held += 1;
                }
            }
        }
        out
    }

    /// The keys matching `pattern` on master `i` (`SCAN`).
    fn keys(&mut self, i: usize, pattern: &str) -> Vec<Vec<u8>> {
        let conn = &mut self.conns[i];
        let mut keys = Vec::new();
        let mut cursor = b"0".to_vec();
        while let Ok(reply) = conn.request(&[
            b"SCAN",
            &cursor,
            b"MATCH",
            pattern.as_bytes(),
            b"COUNT",
            b"1000",
        ]) {
            // *2\r\n$N\r\n<cursor>\r\n*M\r\n$L\r\n<key>\r\n...
            let text = String::from_utf8_lossy(&reply);
            let lines: Vec<&str> = text.split("\r\n").collect();
            let next = lines.get(2).copied().unwrap_or("0").to_owned();
            keys.extend(
                lines
                    .iter()
                    .skip(4)
                    .filter(|l| !l.starts_with('$') && !l.is_empty())
                    .map(|l| l.as_bytes().to_vec()),
            );
            if next == "0" {
                break;
            }
            cursor = next.into_bytes();
        }
        keys
    }

    /// The keys matching `pattern` on every master, summed (`SCAN`).
    pub(crate) fn count(&mut self, pattern: &str) -> u64 {
        let mut total = 0;
        for conn in &mut self.conns {
            let mut cursor = b"0".to_vec();
            let scan = |conn: &mut Connection, cursor: &[u8]| {
                conn.request(&[
                    b"SCAN",
                    cursor,
                    b"MATCH",
                    pattern.as_bytes(),
                    b"COUNT",
                    b"1000",
                ])
            };
            while let Ok(reply) = scan(conn, &cursor) {
                // *2\r\n$N\r\n<cursor>\r\n*M\r\n$..\r\nkey\r\n...
                let text = String::from_utf8_lossy(&reply);
                let lines: Vec<&str> = text.split("\r\n").collect();
                let next = lines.get(2).copied().unwrap_or("0");
                total += lines
                    .get(3)
                    .and_then(|l| l.strip_prefix('*'))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                if next == "0" {
                    break;
                }
                cursor = next.as_bytes().to_vec();
            }
        }
        total
    }

    /// Waits until no key of the bench's (`svc:*`) nor any queue is left,
    /// up to `limit`; how long that took, or `None`.
    pub(crate) fn wait_empty(&mut self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if self.count("svc:*") + self.count("redlock-mio:queue:*") == 0 {
                return Some(start.elapsed());
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The pipelined floor: `k` cycles in flight per connection, no lock
/// logic: `k` pre-encoded `SET NX PX` to every master, their replies, then
/// `k` `EVALSHA` releases likewise, over and over for `run`; cycles/s.
pub(crate) fn floor(urls: &[String], k: usize, run: Duration) -> f64 {
    let mut conns: Vec<(TcpStream, BufReader<TcpStream>)> = urls
        .iter()
        .map(|url| {
            let stream = TcpStream::connect(url.trim_start_matches("redis://")).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let reader = BufReader::new(stream.try_clone().expect("clone"));
            (stream, reader)
        })
        .collect();
    let mut line = String::new();
    for (stream, reader) in &mut conns {
        stream
            .write_all(&encode_command(&[
                b"SCRIPT",
                b"LOAD",
                RELEASE_SCRIPT.as_bytes(),
            ]))
            .expect("write");
        line.clear();
        reader.read_line(&mut line).expect("read");
        line.clear();
        reader.read_line(&mut line).expect("read");
        assert_eq!(line.trim_end(), RELEASE_SHA1, "the release script's SHA1");
    }
    let token = b"floor-token-of-20-by";
    let (mut sets, mut releases) = (Vec::new(), Vec::new());
    for i in 0..k {
        let resource = format!("svc:floor:{i}");
        sets.extend(encode_command(&[
            b"SET",
            resource.as_bytes(),
            token,
            b"NX",
            b"PX",
            b"5000",
        ]));
        releases.extend(encode_command(&[
            b"EVALSHA",
            RELEASE_SHA1.as_bytes(),
            b"1",
            resource.as_bytes(),
            token,
        ]));
    }
    let mut exchange = |bytes: &[u8], conns: &mut Vec<(TcpStream, BufReader<TcpStream>)>| {
        for (stream, _) in conns.iter_mut() {
            stream.write_all(bytes).expect("write");
        }
        for (_, reader) in conns.iter_mut() {
            for _ in 0..k {
                line.clear();
                reader.read_line(&mut line).expect("read");
                assert!(
                    line.starts_with('+') || line.starts_with(':'),
                    "floor: reply {line:?}"
                );
            }
        }
    };
    let started = Instant::now();
    let mut cycles = 0u64;
    while started.elapsed() < run {
        exchange(&sets, &mut conns);
        exchange(&releases, &mut conns);
        cycles += k as u64;
    }
    cycles as f64 / started.elapsed().as_secs_f64()
}
