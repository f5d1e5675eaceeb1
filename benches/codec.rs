//! RESP codec throughput: this crate's `resp` module against `redis-protocol`
//! 6 and redis-rs 0.32's parser, on identical bytes.
//!
//! # What is measured
//!
//! `decode/<input>` parses one complete reply that is already in memory
//! (`decode/pipeline-64*`: one read holding the 64 mixed replies of 64 lock
//! rounds, decoded to the end); `encode/<command>` writes one command into
//! a buffer that is reused (and cleared) across iterations
//! (`encode/pipeline-64-set-nx-px`: 64 commands into one buffer).
//! `encode/set-16k` also has `copy-floor`, copying the 16 KiB value alone.
//! Each group has the functions `redlock-mio`, `redis-protocol` and
//! `redis-rs`, so their lines read side by side. Criterion reports time
//! per iteration (one reply or one command, or a pipelined read or write,
//! so frames/s is its inverse) and, from `Throughput::Bytes`, bytes/s of
//! wire data.
//!
//! The peers do not build the same thing, and that is part of the comparison:
//!
//! * `redlock-mio` decode: one [`Decoder`], reused across iterations as a
//!   connection would, is called until the token marked `frame_end`; every
//!   token goes through [`black_box`], by reference as the peers' frames
//!   do (copying the 24-byte token out of the result to pass it by value
//!   made the loop measure a store-forwarding stall of that copy, not the
//!   decoder). The tokens borrow from the input
//!   buffer: nothing is allocated and no tree is built. (A caller that wants
//!   a tree builds it itself, at its own cost.)
//! * `redis-protocol` decode: `resp2::decode::decode_bytes` (RESP2 inputs)
//!   and `resp3::decode::complete::decode_bytes` (RESP3 inputs), the fastest
//!   documented API that returns a usable frame from a complete reply in a
//!   `Bytes`. It builds a `BytesFrame` tree: a `Vec` per array, a `HashMap`
//!   per RESP3 map, and payloads as ref-counted `Bytes` slices of the input
//!   (no payload copy). Dropping the tree is inside the timed loop.
//! * `redis-rs` decode: a reused `redis::Parser` and `parse_value`, reading
//!   the input through `std::io::Read`. It builds an owned `redis::Value`
//!   tree: each payload is copied into a `Vec<u8>`/`String`, a `Vec` per
//!   aggregate. Dropping the tree is inside the timed loop.
//! * `redlock-mio` encode: [`encode_command`] with borrowed [`Arg`]s (the
//!   integer formatted on the stack) into a reused `Vec<u8>`.
//! * `redis-protocol` encode: a `resp2::types::BorrowedFrame` array built on
//!   the stack from the arguments every iteration (integers as
//!   `BorrowedFrame::Integer` with `int_as_bulkstring`), then
//!   `resp2::encode::extend_encode_borrowed` into a reused `BytesMut`. This
//!   is the zero-copy form of `extend_encode`; the `BytesFrame` form would
//!   add a `Vec` and a `Bytes` per argument.
//! * `redis-rs` encode: `redis::cmd(..).arg(..)` builds a `Cmd` every
//!   iteration (it copies the arguments into its own buffer), then
//!   `write_packed_command` appends to a reused `Vec<u8>`.
//!
//! Before it is measured, every variant checks once that it decoded the
//! input completely and correctly (element count, payload bytes, integer
//! sum) or that all three encoders produce the same bytes, so a broken
//! benchmark fails loudly instead of timing an error path.
//!
//! # Running
//!
//! ```text
//! cargo bench -p redlock-mio-bench --bench codec                    # full run, a few minutes
//! cargo bench -p redlock-mio-bench --bench codec -- decode/token-40  # one group (a regex)
//! cargo bench -p redlock-mio-bench --bench codec -- --test           # smoke run: each once
//! ```
//!
//! Results land in `target/criterion/<group>/<function>/new/estimates.json`
//! (criterion replaces the `/` in group names by `_` in directory names).

#![allow(
    clippy::expect_used,
    reason = "a benchmark must fail loudly on bad setup or a broken decoder"
)]

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use redis_protocol::resp2::types::BorrowedFrame;
use redis_protocol::{resp2, resp3};
use redlock_mio::resp::{Arg, Decoder, Status, Token, encode_command};

/// What a decoded reply must contain; computed while building the input,
/// independently of every decoder.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Shape {
    /// Arrays, maps and other aggregates, nested ones included.
    aggregates: usize,
    /// Non-aggregate values, nulls included (map keys count).
    leaves: usize,
    /// Bytes of string payloads: simple, error and bulk strings.
    payload: usize,
    /// Sum of all integers.
    int_sum: i64,
}

impl Shape {
    fn leaf(&mut self, payload: usize) {
        self.leaves += 1;
        self.payload += payload;
    }

    fn int(&mut self, n: i64) {
        self.leaves += 1;
        self.int_sum += n;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Resp2,
    Resp3,
}

/// A reply on the wire and what it must decode to.
struct Input {
    name: &'static str,
    proto: Proto,
    bytes: Vec<u8>,
    shape: Shape,
    /// Replies in `bytes`, one after another (more than one for a
    /// pipelined read).
    frames: usize,
}

/// Writes RESP replies and records their [`Shape`].
#[derive(Default)]
struct Reply {
    bytes: Vec<u8>,
    shape: Shape,
}

impl Reply {
    fn line(&mut self, prefix: u8, text: &[u8]) -> &mut Self {
        self.bytes.push(prefix);
        self.bytes.extend_from_slice(text);
        self.bytes.extend_from_slice(b"\r\n");
        self
    }

    fn simple(&mut self, text: &str) -> &mut Self {
        self.shape.leaf(text.len());
        self.line(b'+', text.as_bytes())
    }

    fn error(&mut self, text: &str) -> &mut Self {
        self.shape.leaf(text.len());
        self.line(b'-', text.as_bytes())
    }

    fn int(&mut self, n: i64) -> &mut Self {
        self.shape.int(n);
        self.line(b':', n.to_string().as_bytes())
    }

    fn bulk(&mut self, data: &[u8]) -> &mut Self {
        self.shape.leaf(data.len());
        self.line(b'$', data.len().to_string().as_bytes());
        self.bytes.extend_from_slice(data);
        self.bytes.extend_from_slice(b"\r\n");
        self
    }

    fn null_bulk(&mut self) -> &mut Self {
        self.shape.leaf(0);
        self.line(b'$', b"-1")
    }

    fn null3(&mut self) -> &mut Self {
        self.shape.leaf(0);
        self.line(b'_', b"")
    }

    fn array(&mut self, len: usize) -> &mut Self {
        self.shape.aggregates += 1;
        self.line(b'*', len.to_string().as_bytes())
    }

    fn map(&mut self, pairs: usize) -> &mut Self {
        self.shape.aggregates += 1;
        self.line(b'%', pairs.to_string().as_bytes())
    }

    fn input(&mut self, name: &'static str, proto: Proto) -> Input {
        let reply = std::mem::take(self);
        Input {
            name,
            proto,
            bytes: reply.bytes,
            shape: reply.shape,
            frames: 1,
        }
    }

    /// The replies written so far, as one read holding `frames` of them.
    fn pipelined(&mut self, name: &'static str, proto: Proto, frames: usize) -> Input {
        Input {
            frames,
            ..self.input(name, proto)
        }
    }
}

/// A 40-byte lock token, as the lock generates: random bytes in hex here,
/// so that all three codecs see the same printable payload.
const TOKEN: &[u8; 40] = b"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b";
/// The SHA1 of the release script, as `EVALSHA` takes it.
const SHA: &[u8; 40] = b"e0e1f9fabfc9d4800c877a703b823ac0578ff831";
const RESOURCE: &[u8] = b"redlock:orders:42";
const BIG: usize = 16 * 1024;

fn inputs() -> Vec<Input> {
    let mut r = Reply::default();
    let big = vec![b'x'; BIG];
    let mut list = vec![
        r.simple("OK").input("ok", Proto::Resp2),
        r.int(1).input("int", Proto::Resp2),
        r.null_bulk().input("nil", Proto::Resp2),
        r.error("NOSCRIPT No matching script. Please use EVAL.")
            .input("noscript", Proto::Resp2),
        r.bulk(TOKEN).input("token-40", Proto::Resp2),
        r.bulk(&big).input("bulk-16k", Proto::Resp2),
    ];
    r.array(1000);
    for i in 0..1000 {
        r.bulk(format!("member:{i:03}").as_bytes());
    }
    list.push(r.input("array-1000-bulk", Proto::Resp2));
    r.array(1000);
    for i in 0..1000 {
        r.int(i * 1_000_003);
    }
    list.push(r.input("array-1000-int", Proto::Resp2));
    list.push(r.null3().input("resp3-null", Proto::Resp3));
    // HELLO 3 as Redis 7.2 answers it.
    r.map(7);
    r.bulk(b"server").bulk(b"redis");
    r.bulk(b"version").bulk(b"7.2.4");
    r.bulk(b"proto").int(3);
    r.bulk(b"id").int(42);
    r.bulk(b"mode").bulk(b"standalone");
    r.bulk(b"role").bulk(b"master");
    r.bulk(b"modules").array(0);
    list.push(r.input("resp3-hello-map", Proto::Resp3));
    // One read holding the replies of 64 lock rounds, mixed: a `SET NX PX`
    // that won (`+OK`) or lost (null), a release that deleted (`:1`) or
    // found another token (`:0`), an `EVALSHA` after a `SCRIPT FLUSH`.
    for (name, proto) in [
        ("pipeline-64", Proto::Resp2),
        ("pipeline-64-resp3", Proto::Resp3),
    ] {
        for i in 0..PIPELINED {
            match (i * 3) % 5 {
                0 => r.simple("OK"),
                1 if proto == Proto::Resp2 => r.null_bulk(),
                1 => r.null3(),
                2 => r.int(1),
                3 => r.int(0),
                _ => r.error("NOSCRIPT No matching script. Please use EVAL."),
            };
        }
        list.push(r.pipelined(name, proto, PIPELINED));
    }
    list
}

/// Replies in one pipelined read, and commands in one pipelined write.
const PIPELINED: usize = 64;

// ---------------------------------------------------------------- decoders

/// Decodes one reply from the start of `buf`, handing every token to `each`;
/// returns the bytes consumed.
#[inline(always)]
fn ours_frame(decoder: &mut Decoder, buf: &[u8], mut each: impl FnMut(&Token<'_>)) -> usize {
    let mut at = 0;
    loop {
        // The result is looked at where it is, not moved out.
        match &decoder.decode(&buf[at..]) {
            Ok(Status::Complete(item)) => {
                // Length and end flag are read before `each`, as the peers'
                // loops read theirs before `black_box`: `black_box` may write
                // through the reference, so reading them after it would
                // reload them from memory on the loop's dependency chain.
                let (len, frame_end) = (item.len, item.frame_end);
                each(&item.token);
                at += len;
                if frame_end {
                    return at;
                }
            }
            Ok(Status::Partial) => panic!("redlock-mio: reply incomplete after {at} bytes"),
            Err(error) => panic!("redlock-mio: {error}"),
        }
    }
}

/// Decodes `frames` replies from the start of `buf`.
fn ours_shape(decoder: &mut Decoder, buf: &[u8], frames: usize) -> (Shape, usize) {
    let mut shape = Shape::default();
    let mut len = 0;
    for _ in 0..frames {
        len += ours_frame(decoder, &buf[len..], |token| match *token {
            Token::Simple(data) | Token::Error(data) | Token::Bulk(data) => {
                shape.leaf(data.len());
            }
            Token::Integer(n) => shape.int(n),
            Token::Null(_) => shape.leaf(0),
            Token::Array(_) | Token::Map(_) => shape.aggregates += 1,
            other => panic!("redlock-mio: unexpected {other:?}"),
        });
    }
    (shape, len)
}

fn rp2_shape(frame: &resp2::types::BytesFrame, shape: &mut Shape) {
    use resp2::types::BytesFrame as F;
    match frame {
        F::SimpleString(data) | F::BulkString(data) => shape.leaf(data.len()),
        F::Error(text) => shape.leaf(text.len()),
        F::Integer(n) => shape.int(*n),
        F::Null => shape.leaf(0),
        F::Array(items) => {
            shape.aggregates += 1;
            items.iter().for_each(|item| rp2_shape(item, shape));
        }
    }
}

fn rp3_shape(frame: &resp3::types::BytesFrame, shape: &mut Shape) {
    use resp3::types::BytesFrame as F;
    match frame {
        F::SimpleString { data, .. } | F::BlobString { data, .. } => shape.leaf(data.len()),
        F::SimpleError { data, .. } => shape.leaf(data.len()),
        F::Number { data, .. } => shape.int(*data),
        F::Null => shape.leaf(0),
        F::Array { data, .. } => {
            shape.aggregates += 1;
            data.iter().for_each(|item| rp3_shape(item, shape));
        }
        F::Map { data, .. } => {
            shape.aggregates += 1;
            for (key, value) in data {
                rp3_shape(key, shape);
                rp3_shape(value, shape);
            }
        }
        other => panic!("redis-protocol: unexpected {other:?}"),
    }
}

fn rr_shape(value: &redis::Value, shape: &mut Shape) {
    use redis::Value as V;
    match value {
        V::Okay => shape.leaf(2),
        V::SimpleString(text) => shape.leaf(text.len()),
        V::BulkString(data) => shape.leaf(data.len()),
        V::ServerError(error) => {
            shape.leaf(error.code().len() + error.details().map_or(0, |d| 1 + d.len()));
        }
        V::Int(n) => shape.int(*n),
        V::Nil => shape.leaf(0),
        V::Array(items) => {
            shape.aggregates += 1;
            items.iter().for_each(|item| rr_shape(item, shape));
        }
        V::Map(pairs) => {
            shape.aggregates += 1;
            for (key, value) in pairs {
                rr_shape(key, shape);
                rr_shape(value, shape);
            }
        }
        other => panic!("redis-rs: unexpected {other:?}"),
    }
}

/// Decodes `frames` replies with `decode` (redis-protocol's `decode_bytes`
/// for RESP2 or RESP3), each from a `Bytes` slice of the rest of the read,
/// as `decode_bytes` takes the buffer whole; returns the bytes used.
#[inline(always)]
fn rp_decode<F>(
    buf: &Bytes,
    frames: usize,
    decode: impl Fn(&Bytes) -> Result<Option<(F, usize)>, redis_protocol::error::RedisProtocolError>,
    mut each: impl FnMut(&F),
) -> usize {
    let mut at = 0;
    for _ in 0..frames {
        // The first reply straight from `buf`, as for a single reply.
        let decoded = if at == 0 {
            decode(buf)
        } else {
            decode(&buf.slice(at..))
        };
        let (frame, len) = decoded
            .expect("redis-protocol: valid reply")
            .expect("redis-protocol: complete reply");
        each(&frame);
        at += len;
    }
    at
}

/// Decodes `frames` replies through one reader over `buf`.
fn rr_decode(
    parser: &mut redis::Parser,
    buf: &[u8],
    frames: usize,
    mut each: impl FnMut(redis::Value),
) {
    let mut reader = buf;
    for _ in 0..frames {
        each(
            parser
                .parse_value(&mut reader)
                .expect("redis-rs: valid reply"),
        );
    }
}

fn decode_benches(c: &mut Criterion) {
    for input in inputs() {
        let wire: &[u8] = &input.bytes;
        let mut group = c.benchmark_group(format!("decode/{}", input.name));
        group.throughput(Throughput::Bytes(wire.len() as u64));

        // One decoder for the whole run, as one connection has.
        let frames = input.frames;
        let mut decoder = Decoder::new();
        let (shape, len) = ours_shape(&mut decoder, wire, frames);
        assert_eq!(
            (shape, len),
            (input.shape, wire.len()),
            "redlock-mio: {}",
            input.name
        );
        assert!(
            decoder.is_idle(),
            "redlock-mio: not idle after {}",
            input.name
        );
        group.bench_function("redlock-mio", |b| {
            b.iter(|| {
                let wire = black_box(wire);
                let mut at = 0;
                for _ in 0..frames {
                    at += ours_frame(&mut decoder, &wire[at..], |token| {
                        black_box(token);
                    });
                }
                at
            });
        });
        assert!(decoder.is_idle(), "redlock-mio: not idle after the run");

        let bytes = Bytes::copy_from_slice(wire);
        let mut shape = Shape::default();
        match input.proto {
            Proto::Resp2 => {
                let len = rp_decode(&bytes, frames, resp2::decode::decode_bytes, |frame| {
                    rp2_shape(frame, &mut shape)
                });
                assert_eq!((shape, len), (input.shape, wire.len()), "redis-protocol");
                group.bench_function("redis-protocol", |b| {
                    b.iter(|| {
                        rp_decode(
                            black_box(&bytes),
                            frames,
                            resp2::decode::decode_bytes,
                            |frame| {
                                black_box(frame);
                            },
                        )
                    });
                });
            }
            Proto::Resp3 => {
                let len = rp_decode(
                    &bytes,
                    frames,
                    resp3::decode::complete::decode_bytes,
                    |frame| rp3_shape(frame, &mut shape),
                );
                assert_eq!((shape, len), (input.shape, wire.len()), "redis-protocol");
                group.bench_function("redis-protocol", |b| {
                    b.iter(|| {
                        rp_decode(
                            black_box(&bytes),
                            frames,
                            resp3::decode::complete::decode_bytes,
                            |frame| {
                                black_box(frame);
                            },
                        )
                    });
                });
            }
        }

        // One parser for the whole run, as one connection has.
        let mut parser = redis::Parser::new();
        let mut shape = Shape::default();
        rr_decode(&mut parser, wire, frames, |value| {
            rr_shape(&value, &mut shape)
        });
        assert_eq!(shape, input.shape, "redis-rs: {}", input.name);
        group.bench_function("redis-rs", |b| {
            b.iter(|| {
                rr_decode(&mut parser, black_box(wire), frames, |value| {
                    black_box(&value);
                });
            });
        });

        group.finish();
    }
}

// ---------------------------------------------------------------- encoders

/// A command as all three encoders take it.
#[derive(Clone, Copy)]
enum Part<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

/// Encodes `commands` into `out`, one after another.
fn ours_encode<P: AsRef<[Part<'static>]>>(out: &mut Vec<u8>, commands: &[P]) {
    out.clear();
    commands
        .iter()
        .for_each(|parts| ours_append(out, parts.as_ref()));
}

fn ours_append(out: &mut Vec<u8>, parts: &[Part<'_>]) {
    let mut args = [Arg::Int(0); 6];
    let args = &mut args[..parts.len()];
    for (slot, part) in args.iter_mut().zip(parts) {
        *slot = match *part {
            Part::Bytes(data) => Arg::Bytes(data),
            Part::Int(n) => Arg::Int(n),
        };
    }
    encode_command(out, args);
}

/// Encodes `parts`, building the frame from them as a client does per call.
fn rp_encode<P: AsRef<[Part<'static>]>>(out: &mut BytesMut, commands: &[P]) {
    out.clear();
    commands
        .iter()
        .for_each(|parts| rp_append(out, parts.as_ref()));
}

fn rp_append(out: &mut BytesMut, parts: &[Part<'_>]) {
    fn frame(part: Part<'_>) -> BorrowedFrame<'_> {
        match part {
            Part::Bytes(data) => BorrowedFrame::BulkString(data),
            Part::Int(n) => BorrowedFrame::Integer(n),
        }
    }
    let mut frames = [const { BorrowedFrame::Null }; 6];
    let frames = &mut frames[..parts.len()];
    for (slot, part) in frames.iter_mut().zip(parts) {
        *slot = frame(*part);
    }
    resp2::encode::extend_encode_borrowed(out, &BorrowedFrame::Array(frames), true)
        .expect("redis-protocol: encodable frame");
}

fn rr_encode<P: AsRef<[Part<'static>]>>(out: &mut Vec<u8>, commands: &[P]) {
    out.clear();
    commands
        .iter()
        .for_each(|parts| rr_append(out, parts.as_ref()));
}

fn rr_append(out: &mut Vec<u8>, parts: &[Part<'_>]) {
    let Some((Part::Bytes(name), args)) = parts.split_first() else {
        unreachable!("every command starts with its name");
    };
    let mut cmd = redis::cmd(std::str::from_utf8(name).expect("ASCII command name"));
    for arg in args {
        match *arg {
            Part::Bytes(data) => cmd.arg(data),
            Part::Int(n) => cmd.arg(n),
        };
    }
    cmd.write_packed_command(out);
}

fn encode_benches(c: &mut Criterion) {
    // Leaked so that the commands can be `'static` for the generic encoders.
    let big: &'static [u8] = vec![b'x'; BIG].leak();
    let set_nx_px = |resource: &'static [u8]| {
        vec![
            Part::Bytes(b"SET"),
            Part::Bytes(resource),
            Part::Bytes(TOKEN),
            Part::Bytes(b"NX"),
            Part::Bytes(b"PX"),
            Part::Int(30_000),
        ]
    };
    // 64 `SET NX PX` commands (one lock on 64 resources, or 64 rounds) into
    // one buffer, as one pipelined write.
    let pipeline: Vec<Vec<Part<'static>>> = (0..PIPELINED)
        .map(|i| set_nx_px(format!("redlock:orders:{i}").into_bytes().leak()))
        .collect();
    let commands: [(&str, Vec<Vec<Part<'static>>>); 4] = [
        ("set-nx-px", vec![set_nx_px(RESOURCE)]),
        (
            "evalsha-release",
            vec![vec![
                Part::Bytes(b"EVALSHA"),
                Part::Bytes(SHA),
                Part::Int(1),
                Part::Bytes(RESOURCE),
                Part::Bytes(TOKEN),
            ]],
        ),
        (
            "set-16k",
            vec![vec![
                Part::Bytes(b"SET"),
                Part::Bytes(RESOURCE),
                Part::Bytes(big),
            ]],
        ),
        ("pipeline-64-set-nx-px", pipeline),
    ];
    for (name, commands) in &commands {
        let commands = commands.as_slice();
        let mut ours = Vec::new();
        let mut rp = BytesMut::new();
        let mut rr = Vec::new();
        ours_encode(&mut ours, commands);
        rp_encode(&mut rp, commands);
        rr_encode(&mut rr, commands);
        assert_eq!(
            &rp[..],
            &ours[..],
            "redis-protocol encodes {name} differently"
        );
        assert_eq!(rr, ours, "redis-rs encodes {name} differently");
        let mut decoder = Decoder::new();
        let (shape, len) = ours_shape(&mut decoder, &ours, commands.len());
        let args: usize = commands.iter().map(Vec::len).sum();
        assert_eq!(
            (shape.aggregates, shape.leaves, len),
            (commands.len(), args, ours.len())
        );

        let mut group = c.benchmark_group(format!("encode/{name}"));
        group.throughput(Throughput::Bytes(ours.len() as u64));
        group.bench_function("redlock-mio", |b| {
            b.iter(|| {
                ours_encode(&mut ours, black_box(commands));
                black_box(ours.as_ptr());
            });
        });
        group.bench_function("redis-protocol", |b| {
            b.iter(|| {
                rp_encode(&mut rp, black_box(commands));
                black_box(rp.as_ptr());
            });
        });
        group.bench_function("redis-rs", |b| {
            b.iter(|| {
                rr_encode(&mut rr, black_box(commands));
                black_box(rr.as_ptr());
            });
        });
        if let [command] = commands
            && let [.., Part::Bytes(value)] = command.as_slice()
            && value.len() == BIG
        {
            // The floor every encoder stands on: copying the value alone.
            let mut floor = Vec::new();
            group.bench_function("copy-floor", |b| {
                b.iter(|| {
                    floor.clear();
                    floor.extend_from_slice(black_box(value));
                    black_box(floor.as_ptr());
                });
            });
        }
        group.finish();
    }
}

fn config() -> Criterion {
    // 49 benchmarks at ~3.6 s each keep a full run near 3 minutes.
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2500))
        .sample_size(50)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = decode_benches, encode_benches
}
criterion_main!(benches);
