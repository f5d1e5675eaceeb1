//! The lone cycle of the latency bench, for `.ci/perf-ab`: one blocking
//! `try_lock` + `unlock` at a time on one client, interleaved in blocks with
//! the quorum floor (the same `SET NX PX` and release, pre-encoded on raw
//! non-blocking sockets, each phase ended at the first quorum of replies).
//!
//! The same source is built against two trees of the library (the base
//! revision and the work tree), so that only the library differs between
//! the two binaries. It uses nothing of the library but the builder,
//! `try_lock` and `unlock`, which every revision it is pointed at has.
//!
//! Usage: `probe CYCLES WARM_UP URL...`. Prints one line:
//! `lib_p50 lib_p99 floor_p50 floor_p99 failures`, in nanoseconds.
//! `PROBE_NO_FLOOR=1` leaves the floor out (its figures print as 0): for a
//! profile of the library's cycle alone.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use redlock_mio::Redlock;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Cycles of one kind before the other kind takes its turn.
const BLOCK: usize = 100;
const TTL: Duration = Duration::from_secs(10);
const TTL_MS: &str = "10000";
/// The classic release script: the floor's server-side cost is the same
/// whatever revision of the library the probe is built against.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("probe: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let cycles: usize = args.next().ok_or("CYCLES missing")?.parse()?;
    let warm: usize = args.next().ok_or("WARM_UP missing")?.parse()?;
    let urls: Vec<String> = args.collect();
    if urls.is_empty() {
        return Err("no URL".into());
    }
    let resource = format!("perf-ab:{}", std::process::id());
    let client = Redlock::builder(&urls).build()?;
    let mut floor = match std::env::var_os("PROBE_NO_FLOOR") {
        Some(_) => None,
        None => Some(Floor::new(&urls, &format!("{resource}:floor"))?),
    };
    let mut failures = 0u64;
    let mut lib = Vec::with_capacity(cycles);
    let mut raw = Vec::with_capacity(cycles);
    for _ in 0..warm {
        lib_cycle(&client, &resource, &mut failures);
        if let Some(floor) = floor.as_mut() {
            floor.cycle()?;
        }
    }
    failures = 0;
    while lib.len() < cycles {
        for _ in 0..BLOCK.min(cycles - lib.len()) {
            lib.push(lib_cycle(&client, &resource, &mut failures));
        }
        let Some(floor) = floor.as_mut() else {
            continue;
        };
        for _ in 0..BLOCK.min(cycles - raw.len()) {
            raw.push(floor.cycle()?);
        }
    }
    if raw.is_empty() {
        raw.push(0);
    }
    let (l50, l99) = percentiles(&mut lib);
    let (f50, f99) = percentiles(&mut raw);
    println!("{l50} {l99} {f50} {f99} {failures}");
    Ok(())
}

/// One `try_lock` + `unlock`, in nanoseconds.
fn lib_cycle(client: &Redlock, resource: &str, failures: &mut u64) -> u64 {
    let start = Instant::now();
    match client.try_lock(resource, TTL) {
        Ok(mut lock) => {
            if client.unlock(&mut lock).is_err() {
                *failures += 1;
            }
        }
        Err(_) => *failures += 1,
    }
    start.elapsed().as_nanos() as u64
}

fn percentiles(samples: &mut [u64]) -> (u64, u64) {
    samples.sort_unstable();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.50), at(0.99))
}

/// RESP encoding of a command.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The quorum floor: pre-encoded commands, written to every master, each
/// phase ended at the first quorum of one-line replies; the late replies
/// are read in a later phase, as a client that decides at the quorum does.
struct Floor {
    poll: mio::Poll,
    events: mio::Events,
    socks: Vec<mio::net::TcpStream>,
    /// Per socket: replies owed from earlier phases.
    owed: Vec<u32>,
    need: usize,
    set: Vec<u8>,
    release: Vec<u8>,
}

impl Floor {
    fn new(urls: &[String], key: &str) -> Result<Floor> {
        let poll = mio::Poll::new()?;
        let mut socks = Vec::new();
        let load = encode(&[b"SCRIPT", b"LOAD", RELEASE.as_bytes()]);
        let mut sha = String::new();
        for (i, url) in urls.iter().enumerate() {
            let host = url.strip_prefix("redis://").ok_or("redis://host:port URLs only")?;
            let addr = host
                .trim_end_matches('/')
                .to_socket_addrs()?
                .next()
                .ok_or("no address")?;
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            stream.write_all(&load)?;
            // `$40\r\n<sha>\r\n`
            let mut reply = [0u8; 47];
            stream.read_exact(&mut reply)?;
            if &reply[..5] != b"$40\r\n" {
                return Err("SCRIPT LOAD: unexpected reply".into());
            }
            sha = String::from_utf8_lossy(&reply[5..45]).into_owned();
            stream.set_nonblocking(true)?;
            let mut stream = mio::net::TcpStream::from_std(stream);
            poll.registry()
                .register(&mut stream, mio::Token(i), mio::Interest::READABLE)?;
            socks.push(stream);
        }
        let token = b"perf-ab-fixed-token";
        let k = key.as_bytes();
        Ok(Floor {
            poll,
            events: mio::Events::with_capacity(16),
            owed: vec![0; socks.len()],
            need: socks.len() / 2 + 1,
            socks,
            set: encode(&[b"SET", k, token, b"NX", b"PX", TTL_MS.as_bytes()]),
            release: encode(&[b"EVALSHA", sha.as_bytes(), b"1", k, token]),
        })
    }

    /// One acquire + release phase pair, in nanoseconds.
    fn cycle(&mut self) -> Result<u64> {
        let start = Instant::now();
        self.phase(true)?;
        self.phase(false)?;
        Ok(start.elapsed().as_nanos() as u64)
    }

    fn phase(&mut self, set: bool) -> Result<()> {
        let cmd = if set { &self.set } else { &self.release };
        for (sock, owed) in self.socks.iter_mut().zip(&mut self.owed) {
            write_all(sock, cmd)?;
            *owed += 1;
        }
        // A socket has answered this phase once it owes nothing.
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.owed.iter().filter(|&&o| o == 0).count() < self.need {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("floor: no quorum of replies in 2 s".into());
            }
            self.poll.poll(&mut self.events, Some(left))?;
            for event in self.events.iter() {
                let i = event.token().0;
                self.owed[i] -= read_lines(&mut self.socks[i])?.min(self.owed[i]);
            }
        }
        Ok(())
    }
}

fn write_all(sock: &mut mio::net::TcpStream, mut buf: &[u8]) -> Result<()> {
    while !buf.is_empty() {
        match sock.write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads what is there and counts the reply lines in it (every reply the
/// floor asks for is one line).
fn read_lines(sock: &mut mio::net::TcpStream) -> Result<u32> {
    let mut buf = [0u8; 512];
    let mut lines = 0;
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return Err("floor: a master closed its connection".into()),
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u32,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(lines),
            Err(e) => return Err(e.into()),
        }
    }
}
