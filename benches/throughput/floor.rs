//! The pipelined floor: raw sockets, no lock logic, K cycles in flight
//! per connection.

use redlock_mio::resp::{Arg, encode_command};

use super::*;

/// A command pre-encoded once, before the clock starts (by this crate's
/// encoder: what the floor times is the sockets, not the encoding).
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let args: Vec<Arg<'_>> = args.iter().map(|a| Arg::Bytes(a)).collect();
    let mut out = Vec::new();
    encode_command(&mut out, &args);
    out
}

/// How the floor releases: with the compare-and-delete script every
/// Redlock client must use, or with a bare `DEL` (no lock can release
/// that way safely; shown for reference).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    Script,
    Del,
}

/// The floor: `k` cycles in flight per connection, one thread.
pub(crate) fn run(urls: &[String], k: usize, release: Release, run: Duration) -> Cell {
    let mut conns: Vec<(TcpStream, BufReader<TcpStream>)> = urls
        .iter()
        .map(|url| {
            let addr = url.trim_start_matches("redis://");
            let stream = TcpStream::connect(addr).expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let reader = BufReader::new(stream.try_clone().expect("clone"));
            (stream, reader)
        })
        .collect();
    let token = b"floor-token-of-20-by";
    let ttl = b"10000";
    let mut sets = Vec::new();
    let mut releases = Vec::new();
    for i in 0..k {
        let resource = format!("tp:floor:{i}");
        sets.extend(encode(&[
            b"SET",
            resource.as_bytes(),
            token,
            b"NX",
            b"PX",
            ttl,
        ]));
        releases.extend(match release {
            Release::Script => encode(&[
                b"EVALSHA",
                RELEASE_SHA1.as_bytes(),
                b"1",
                resource.as_bytes(),
                token,
            ]),
            Release::Del => encode(&[b"DEL", resource.as_bytes()]),
        });
    }
    let mut line = String::new();
    for (stream, reader) in &mut conns {
        stream
            .write_all(&encode(&[b"SCRIPT", b"LOAD", RELEASE_SCRIPT.as_bytes()]))
            .expect("write");
        line.clear();
        reader.read_line(&mut line).expect("read");
        line.clear();
        reader.read_line(&mut line).expect("read");
        assert_eq!(line.trim_end(), RELEASE_SHA1, "the release script's SHA1");
    }
    let mut exchange = |bytes: &[u8], conns: &mut Vec<(TcpStream, BufReader<TcpStream>)>| -> bool {
        for (stream, _) in conns.iter_mut() {
            stream.write_all(bytes).expect("write");
        }
        let mut ok = true;
        for (_, reader) in conns.iter_mut() {
            for _ in 0..k {
                line.clear();
                reader.read_line(&mut line).expect("read");
                ok &= line.starts_with('+') || line.starts_with(':');
            }
        }
        ok
    };
    let mut latency = histogram();
    let mut failed = 0;
    let started = Instant::now();
    while started.elapsed() < run {
        let t0 = Instant::now();
        let ok = exchange(&sets, &mut conns) & exchange(&releases, &mut conns);
        let took = nanos(t0.elapsed());
        for _ in 0..k {
            latency.saturating_record(took);
        }
        if !ok {
            failed += k as u64;
        }
    }
    Cell {
        cycles: latency.len(),
        failed,
        elapsed: started.elapsed(),
        latency,
    }
}
