//! A fuzz harness for the protocol session: a [`Link`] with requests in
//! flight, fed whatever a hostile server may send, in pieces of any size,
//! at any time, against a fake clock.
//!
//! The input is a little program: a first byte picks the configuration
//! (`AUTH`, `SELECT`, `INFO`, the restart guard, the fence scripts, the
//! rounds in flight), then each step is an opcode byte and its operands:
//! queue a command, hand the link server bytes, answer the handshake
//! correctly (so that the fuzzer gets past it at once, then mutates what
//! follows), let time pass, write, end a round, reconnect. Whatever the
//! input, after every step:
//!
//! - nothing panics, and every failure is a typed [`NodeError`], after
//!   which the link is closed as the driver closes it;
//! - every outcome goes to a live round, for the operation queued under
//!   that id, at most once, with the time passed in (a reply is matched to
//!   exactly one request);
//! - the buffers never grow past what [`Link::new`] allocated (the read
//!   buffer never changes size), and the requests held stay within the
//!   link's capacity (its limit, and the reserve that releases which must
//!   reach the master may use);
//! - the unsolicited bytes stay within their budget, and a ready link
//!   holds nothing back.
//!
//! Compiled for the crate's tests, which replay the committed seeds
//! (`fuzz/seeds/session/`, `fuzz/regressions/session/`), and with the
//! `fuzzing` feature, for the fuzz crate's `session` target.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Expect, Link, LinkConfig, READ_BUFFER, Sink, State, UNSOLICITED_BUDGET};
use crate::commands::{Command, Keys, Outcome, Step, TOKEN_LEN};
use crate::rules::{NodeError, Op};

/// What a run saw, so that a replay can tell that its seeds reach the
/// interesting states (and is not vacuous).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Outcomes handed to live rounds.
    pub outcomes: u64,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Failures that closed the link.
    pub failures: u64,
    /// Requests sent again as `EVAL` after a `NOSCRIPT`.
    pub replays: u64,
    /// Commands refused because the link lags.
    pub lagging: u64,
}

/// Runs the program `data` (see the module docs), panicking when an
/// invariant breaks; returns what it saw.
pub fn session(data: &[u8]) -> Seen {
    let mut input = Input { data, at: 0 };
    let setup = input.byte();
    let config = LinkConfig {
        request_timeout: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(1000),
        stall_timeout: Duration::from_millis(500),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(80),
        identify: setup & 1 != 0,
        fencing: setup & 2 != 0,
        in_flight: 1 + usize::from(setup >> 5),
        guard: (setup & 4 != 0).then_some((Duration::from_secs(10), [b'm'; 31])),
        longest_ttl: (setup & 6 != 0).then_some(10_000),
        wake: None,
    };
    let password = (setup & 8 != 0).then_some("secret");
    let db = u32::from(setup & 16 != 0);
    let t0 = Instant::now();
    let mut run = Run {
        link: Link::new(config, t0),
        t0,
        now: t0,
        password,
        db,
        next_id: 1,
        queued: HashMap::new(),
        live: HashMap::new(),
        seen: Seen::default(),
    };
    let capacities = run.capacities();
    run.reconnect();
    // Bounded by the input: every step consumes at least its opcode.
    while !input.is_empty() {
        let op = input.byte();
        match op % 8 {
            0 => run.queue(&mut input),
            1 => {
                let len = usize::from(input.byte()) * 4 + usize::from(input.byte() % 4);
                let bytes = input.take(len);
                run.read(bytes);
            }
            2 => run.answer_handshake(&mut input),
            3 => {
                let step = u64::from(input.byte());
                let unit = if op & 8 != 0 { 10 } else { 1 };
                run.advance(Duration::from_millis(step * unit));
            }
            4 => {
                let n = usize::from(input.byte()) * 16;
                run.write(n);
            }
            5 => {
                let pick = usize::from(input.byte());
                run.end_round(pick);
            }
            6 => {
                let ago = Duration::from_millis(u64::from(input.byte()));
                let started = run.now.checked_sub(ago).unwrap_or(run.now);
                run.link.note_late(started);
            }
            _ => {
                run.fail(NodeError::Closed);
                run.reconnect();
            }
        }
        run.check(&capacities);
    }
    run.seen
}

/// The program's bytes; past their end, zeros.
struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn take(&mut self, len: usize) -> &'a [u8] {
        let start = self.at.min(self.data.len());
        let end = (start + len).min(self.data.len());
        self.at = start + len;
        &self.data[start..end]
    }
}

/// What the link allocated at first: what it must never grow past.
#[derive(Debug, PartialEq, Eq)]
struct Capacities {
    out: usize,
    held: usize,
    replay: usize,
    pending: usize,
}

struct Run {
    link: Link,
    t0: Instant,
    now: Instant,
    password: Option<&'static str>,
    db: u32,
    next_id: u64,
    /// Every command queued: its round id, and its operation.
    queued: HashMap<u64, Op>,
    /// Rounds still in progress, and whether their outcome came.
    live: HashMap<u64, bool>,
    seen: Seen,
}

/// The outcomes of one read, checked against what was queued.
struct Checker<'a> {
    queued: &'a HashMap<u64, Op>,
    live: &'a mut HashMap<u64, bool>,
    now: Instant,
    outcomes: u64,
}

impl Sink for Checker<'_> {
    fn is_live(&self, id: u64) -> bool {
        self.live.contains_key(&id)
    }

    fn on_reply(&mut self, id: u64, op: Op, outcome: Outcome, now: Instant) {
        assert_eq!(now, self.now, "an outcome timed otherwise than the read");
        assert_eq!(
            self.queued.get(&id),
            Some(&op),
            "round {id}: wrong operation"
        );
        assert!(
            !matches!(outcome, Outcome::NoScript | Outcome::Unexpected),
            "round {id}: {outcome:?} reached the round"
        );
        let answered = self.live.get_mut(&id);
        let Some(answered) = answered else {
            panic!("an outcome for round {id}, which is not live");
        };
        assert!(!*answered, "round {id} answered twice");
        *answered = true;
        self.outcomes += 1;
    }
}

/// The 20-byte token of every command.
const TOKEN: &[u8; TOKEN_LEN] = b"fuzz-token-000000001";

/// Resource names of every length up to the inline size of a `Lock`.
const NAMES: &[u8; 64] = b"resource:0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS";

impl Run {
    fn capacities(&self) -> Capacities {
        Capacities {
            out: self.link.out.capacity(),
            held: self.link.held.capacity(),
            replay: self.link.replay.capacity(),
            pending: self.link.pending.capacity(),
        }
    }

    fn reconnect(&mut self) {
        if !self.link.is_down() {
            return;
        }
        self.link.start(None, self.password, self.db, self.now);
    }

    /// Closes the link after `error`, as the driver does.
    fn fail(&mut self, error: NodeError) {
        if !self.link.is_down() {
            self.seen.failures += 1;
            self.link.close(error, self.now);
        }
    }

    fn queue(&mut self, input: &mut Input<'_>) {
        let kind = input.byte();
        let name_len = usize::from(input.byte() % 65);
        let ttl_ms = u64::from(input.byte()) * 100;
        let op = [Op::Acquire, Op::Release, Op::Extend, Op::Fence][usize::from(kind % 4)];
        let keys = Keys::new(&NAMES[..name_len], kind & 8 != 0 && op != Op::Fence);
        let command = match op {
            Op::Acquire if kind & 16 != 0 => Command::fenced_acquire(keys, TOKEN, ttl_ms),
            Op::Acquire => Command::acquire(keys, TOKEN, ttl_ms),
            Op::Release => Command::release(keys, TOKEN).reaching(u64::from(kind & 32 != 0)),
            Op::Extend => Command::extend(keys, TOKEN, ttl_ms),
            _ => Command::raise(keys, TOKEN, ttl_ms),
        };
        let command = if kind & 4 != 0 {
            command.with_script()
        } else {
            command
        };
        let must_reach = command.must_reach(0);
        if self.link.is_down() && self.link.may_send(self.now) {
            self.reconnect();
        }
        let mut bytes = Vec::new();
        command.encode(&mut bytes);
        let id = self.next_id;
        self.next_id += 1;
        match self.link.queue(&command, &bytes, id, must_reach, self.now) {
            Ok(()) => {
                self.queued.insert(id, op);
                self.live.insert(id, false);
            }
            Err(NodeError::Lagging) => self.seen.lagging += 1,
            Err(error) => self.fail(error),
        }
    }

    fn read(&mut self, mut bytes: &[u8]) {
        if self.link.is_connecting() {
            self.link.connected(self.now);
        }
        if self.link.is_down() {
            return;
        }
        let out_before = self.link.out.len() - self.link.written;
        let handshakes_before = self.seen.handshakes;
        while !bytes.is_empty() {
            let buf = match self.link.read_buf() {
                Ok(buf) => buf,
                Err(error) => return self.fail(error),
            };
            let n = buf.len().min(bytes.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            let mut checker = Checker {
                queued: &self.queued,
                live: &mut self.live,
                now: self.now,
                outcomes: 0,
            };
            let handled = self.link.handle_read(n, self.now, &mut checker);
            self.seen.outcomes += checker.outcomes;
            if let Err(error) = handled {
                return self.fail(error);
            }
            if self.link.is_ready() && self.link.fresh {
                self.seen.handshakes += 1;
                self.link.fresh = false;
            }
        }
        // A read that queued bytes to write without completing a
        // handshake (which releases the commands held back) sent a request
        // again as `EVAL`.
        let out_after = self.link.out.len() - self.link.written;
        if self.link.is_ready()
            && out_after > out_before
            && self.seen.handshakes == handshakes_before
        {
            self.seen.replays += 1;
        }
    }

    /// Connects, and hands the link the right replies to the handshake
    /// steps it waits for (the `INFO` text and the marker from the input).
    fn answer_handshake(&mut self, input: &mut Input<'_>) {
        if self.link.is_down() {
            self.reconnect();
        }
        let flavour = input.byte();
        let mut replies = Vec::new();
        for pending in &self.link.pending {
            let Expect::Step(step) = pending.expect else {
                break;
            };
            match step {
                Step::Auth | Step::Select => replies.extend_from_slice(b"+OK\r\n"),
                Step::Identify => {
                    let run_id = char::from(b'a' + flavour % 6);
                    let role = if flavour & 64 != 0 { "slave" } else { "master" };
                    let uptime = u64::from(flavour >> 3);
                    let text = format!(
                        "# Server\r\nrun_id:{}\r\nuptime_in_seconds:{uptime}\r\n\r\n\
                         # Replication\r\nrole:{role}\r\n\r\n# Cluster\r\ncluster_enabled:{}\r\n",
                        run_id.to_string().repeat(40),
                        u8::from(flavour & 128 != 0),
                    );
                    bulk(&mut replies, text.as_bytes());
                }
                Step::Marker if flavour & 32 != 0 => replies.extend_from_slice(b"_\r\n"),
                Step::Marker => bulk(&mut replies, &[b'm'; 32]),
                script => {
                    let sha = script.script().map_or("", |(_, sha)| sha);
                    bulk(&mut replies, sha.as_bytes());
                }
            }
        }
        self.read(&replies);
    }

    fn advance(&mut self, by: Duration) {
        self.now = self.now.checked_add(by).unwrap_or(self.now);
        if let Err(error) = self.link.check_timers(self.now) {
            self.fail(error);
        }
    }

    /// Writes up to `n` bytes of what the link has to send (all of it for
    /// `n` = 0).
    fn write(&mut self, n: usize) {
        if self.link.is_connecting() {
            self.link.connected(self.now);
        }
        let pending = self.link.transmit().len();
        let n = if n == 0 { pending } else { n.min(pending) };
        self.link.advance(n);
    }

    fn end_round(&mut self, pick: usize) {
        let mut ids: Vec<u64> = self.live.keys().copied().collect();
        ids.sort_unstable();
        if let Some(&id) = ids.get(pick % ids.len().max(1)) {
            self.live.remove(&id);
        }
    }

    fn check(&self, at_first: &Capacities) {
        let link = &self.link;
        assert_eq!(
            link.input.len(),
            READ_BUFFER,
            "the read buffer changed size"
        );
        assert!(link.start <= link.end && link.end <= link.input.len());
        assert!(link.written <= link.out.len());
        assert!(link.unsolicited <= UNSOLICITED_BUDGET);
        if link.state == State::Ready {
            assert!(link.held.is_empty(), "a ready link holds commands back");
        }
        if link.is_down() {
            assert!(link.pending.is_empty() && link.out.is_empty() && link.held.is_empty());
        }
        assert_eq!(&self.capacities(), at_first, "a buffer grew");
        assert!(link.pending.len() <= link.config.capacity());
        assert!(self.now >= self.t0);
    }
}

/// `text` as a RESP bulk string, appended to `out`.
fn bulk(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use std::fs;

    use super::{Seen, session};

    /// Every seed and regression of the `session` fuzz target passes, and
    /// together they reach the states worth mutating from: outcomes,
    /// completed handshakes, failures, `NOSCRIPT` replays, a lagging link.
    #[test]
    fn session_corpus() {
        let files = crate::fuzz_inputs("session");
        assert!(files.len() >= 5, "too few session seeds: {files:?}");
        let mut all = Seen::default();
        for path in &files {
            let seen = session(&fs::read(path).unwrap());
            eprintln!("{}: {seen:?}", path.display());
            all.outcomes += seen.outcomes;
            all.handshakes += seen.handshakes;
            all.failures += seen.failures;
            all.replays += seen.replays;
            all.lagging += seen.lagging;
        }
        assert!(
            all.outcomes > 0
                && all.handshakes > 0
                && all.failures > 0
                && all.replays > 0
                && all.lagging > 0,
            "the seeds miss a state: {all:?}"
        );
    }

    /// The empty program and a few degenerate ones run.
    #[test]
    fn degenerate_programs() {
        for data in [&b""[..], &[0xff], &[0, 1, 255, 255], &[7; 64]] {
            session(data);
        }
    }
}
