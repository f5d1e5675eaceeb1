//! A fuzz harness for the protocol session: a [`Link`] with requests in
//! flight, fed whatever a hostile server may send, in pieces of any size,
//! at any time, against a fake clock.
//!
//! The input is a little program: a first byte picks the configuration
//! (`AUTH`, `SELECT`, `INFO`, the restart guard, the fence scripts, the
//! rounds in flight, a wake channel), then each step is an opcode byte and
//! its operands: queue a command, hand the link server bytes, send it a
//! push (a wake-up, on this client's channel or another, well formed or
//! not), answer the handshake correctly (so that the fuzzer gets past it at
//! once, then mutates what follows; `HELLO` and `SUBSCRIBE` may be refused,
//! and wake-ups slipped between the replies), let time pass, write, end a
//! round, reconnect. Whatever the input, after every step:
//!
//! - nothing panics, and every failure is a typed [`NodeError`], after
//!   which the link is closed as the driver closes it;
//! - every outcome goes to a live round, for the operation queued under
//!   that id, at most once, with the time passed in (a reply is matched to
//!   exactly one request);
//! - every wake-up was carried by a message on this client's channel, with
//!   that waiter id (and delay), each message telling at most once: found
//!   in the bytes the server sent, in order;
//! - the buffers never grow past what [`Link::new`] allocated (the read
//!   buffer never changes size), and the requests held stay within the
//!   link's capacity (its limit, and the reserve that releases which must
//!   reach the master may use);
//! - the unsolicited bytes stay within their budget, and a ready link
//!   holds nothing back;
//! - the subscription is asked only after `HELLO` succeeded, answered after
//!   the handshake's other steps and before any command, and only while
//!   the link is not ready.
//!
//! When the harness crafts the server's bytes itself (a push, the
//! handshake's replies) and the link is at the start of a frame, it knows
//! what they mean and checks exactly that: the wake-ups, one per message on
//! this client's channel and none for the rest; that a push answers no
//! request and leaves the queue as it was (but the subscription it
//! confirms); that pushes count against the budget byte for byte and fail
//! the link exactly when they exceed it; that a refused `HELLO` or
//! `SUBSCRIBE` never fails the link, and that a handshake answered in full
//! leaves it ready, subscribed or not as the answers said.
//!
//! Compiled for the crate's tests, which replay the committed seeds
//! (`fuzz/seeds/session/`, `fuzz/regressions/session/`), and with the
//! `fuzzing` feature, for the fuzz crate's `session` target.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::limits::UNSOLICITED_BUDGET;
use super::{Expect, Link, LinkConfig, READ_BUFFER, Sink, Skip, State};
use crate::commands::{
    Command, HandshakeStep, Keys, Outcome, TOKEN_LEN, WakeChannel, wake_channel,
};
use crate::ids::{RoundId, WaitId};
use crate::rules::{NodeError, Op};
use frames::{CHANNEL, Fate, Is, Piece, backing, foresee};

mod frames;

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
    /// Wake-ups handed to the sink.
    pub wakes: u64,
    /// Subscriptions to the wake channel that the harness confirmed.
    pub subscriptions: u64,
    /// Refusals of `HELLO` or `SUBSCRIBE` that the harness sent.
    pub refusals: u64,
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
        in_flight: 1 + usize::from((setup >> 5) & 3),
        guard: (setup & 4 != 0).then_some((Duration::from_secs(10), [b'm'; 31])),
        longest_ttl: (setup & 6 != 0).then_some(10_000),
        wake: (setup & 128 != 0).then(|| wake_channel(CHANNEL)),
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
        stream: Vec::new(),
        backed: 0,
        woken: Vec::new(),
        seen: Seen::default(),
    };
    let capacities = run.capacities();
    run.reconnect();
    // Bounded by the input: every step consumes at least its opcode.
    while !input.is_empty() {
        let op = input.byte();
        match op % 8 {
            0 => run.queue(&mut input),
            1 if op & 8 != 0 => run.push(&mut input),
            1 => {
                let len = usize::from(input.byte()) * 4 + usize::from(input.byte() % 4);
                let bytes = input.take(len);
                // A failure is checked by the invariants, whatever it is.
                let _ = run.read(bytes);
            }
            2 => run.answer_handshake(op, &mut input),
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
        run.seen.wakes += run.woken.len() as u64;
        run.woken.clear();
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
    requests: usize,
}

/// A wake-up as the sink received it: the waiter's id, and its delay.
type Wake = (u64, Option<Duration>);

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
    /// The bytes the server sent on this connection, which every wake-up
    /// must be found in.
    stream: Vec<u8>,
    /// Where in `stream` the message of the last wake-up ended.
    backed: usize,
    /// The wake-ups of the current step.
    woken: Vec<Wake>,
    seen: Seen,
}

/// The outcomes and wake-ups of one read, checked against what was queued
/// and what the server sent.
struct Checker<'a> {
    queued: &'a HashMap<u64, Op>,
    live: &'a mut HashMap<u64, bool>,
    now: Instant,
    outcomes: u64,
    channel: Option<WakeChannel>,
    stream: &'a [u8],
    backed: &'a mut usize,
    woken: &'a mut Vec<Wake>,
}

impl Sink for Checker<'_> {
    fn is_live(&self, id: RoundId) -> bool {
        self.live.contains_key(&id.get())
    }

    fn on_reply(&mut self, id: RoundId, op: Op, outcome: Outcome, now: Instant) {
        let id = id.get();
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

    fn on_wake(&mut self, id: WaitId, later: Option<Duration>, now: Instant) {
        let id = id.get();
        assert_eq!(now, self.now, "a wake-up timed otherwise than the read");
        let Some(channel) = self.channel else {
            panic!("wake-up {id} on a link without a wake channel");
        };
        let Some(end) = backing(&self.stream[*self.backed..], &channel, id, later) else {
            panic!(
                "wake-up {id} ({later:?}) that no message on the channel carried since {}",
                self.backed
            );
        };
        *self.backed += end;
        self.woken.push((id, later));
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
            requests: self.link.requests.capacity(),
        }
    }

    fn reconnect(&mut self) {
        if !self.link.is_down() {
            return;
        }
        self.link.start(None, self.password, self.db, self.now);
        self.stream.clear();
        self.backed = 0;
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
        let op = [Op::Acquire, Op::Release, Op::Extend, Op::Raise][usize::from(kind % 4)];
        let keys = Keys::new(&NAMES[..name_len], kind & 8 != 0 && op != Op::Raise);
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
        match self.link.queue(
            &command,
            &bytes,
            RoundId::from_raw(id),
            must_reach,
            self.now,
        ) {
            Ok(()) => {
                self.queued.insert(id, op);
                self.live.insert(id, false);
            }
            Err(NodeError::Lagging) => self.seen.lagging += 1,
            Err(error) => self.fail(error),
        }
    }

    /// Hands the link `bytes` from the server, as much at a time as its
    /// read buffer takes. `Err`: it failed on them, and is closed.
    fn read(&mut self, mut bytes: &[u8]) -> Result<(), NodeError> {
        if self.link.is_connecting() {
            self.link.connected(self.now);
        }
        if self.link.is_down() {
            return Ok(());
        }
        let out_before = self.link.out.len() - self.link.written;
        let handshakes_before = self.seen.handshakes;
        let channel = self.link.config.wake;
        while !bytes.is_empty() {
            let buf = match self.link.read_buf() {
                Ok(buf) => buf,
                Err(error) => return self.failed(error),
            };
            let n = buf.len().min(bytes.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            self.stream.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            let mut checker = Checker {
                queued: &self.queued,
                live: &mut self.live,
                now: self.now,
                outcomes: 0,
                channel,
                stream: &self.stream,
                backed: &mut self.backed,
                woken: &mut self.woken,
            };
            let handled = self.link.handle_read(n, self.now, &mut checker);
            self.seen.outcomes += checker.outcomes;
            if let Err(error) = handled {
                return self.failed(error);
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
        Ok(())
    }

    /// Closes the link that failed on what it read with `error`.
    fn failed(&mut self, error: NodeError) -> Result<(), NodeError> {
        self.fail(error.clone());
        Err(error)
    }

    /// Whether the link reads the next byte the server sends as the start
    /// of a frame: up, with nothing half read.
    fn at_frame_start(&self) -> bool {
        let link = &self.link;
        !link.is_down() && link.start == link.end && link.decoder.is_idle() && link.skip == Skip::No
    }

    /// Sends the crafted `pieces`, in chunks of `chunk` bytes (all at once
    /// for 0). If the link read them from the start of a frame, checks
    /// that it did what they mean ([`foresee`]), and returns what became
    /// of it.
    fn play(&mut self, pieces: &[Piece], chunk: usize) -> Option<Fate> {
        let exact = self.at_frame_start();
        let unsolicited = self.link.unsolicited;
        let woken = self.woken.len();
        let bytes: Vec<u8> = pieces.iter().flat_map(|p| &p.bytes).copied().collect();
        let size = if chunk == 0 { bytes.len() } else { chunk };
        let mut result = Ok(());
        for part in bytes.chunks(size.max(1)) {
            result = self.read(part);
            if result.is_err() {
                break;
            }
        }
        if !exact {
            return None;
        }
        let fate = result.as_ref().map_or_else(Fate::of, |()| Fate::Lives);
        let (wakes, expected) = foresee(pieces, unsolicited);
        assert_eq!(fate, expected, "the link read crafted frames: {result:?}");
        let got = &self.woken[woken..];
        assert!(
            got.len() == wakes.len()
                && got
                    .iter()
                    .zip(&wakes)
                    .all(|(&(id, later), &(want, allowed))| id == want && allowed.allows(later)),
            "wake-ups {got:?}, where the messages said {wakes:?}"
        );
        if fate == Fate::Lives {
            assert!(self.at_frame_start(), "whole frames left one half read");
        }
        Some(fate)
    }

    /// Sends the push that the operands describe ([`frames::craft`]), in one
    /// copy or more, in chunks; read from the start of a frame, it must
    /// answer no request, and leave the requests waiting as they were (but
    /// the subscription it may confirm).
    fn push(&mut self, input: &mut Input<'_>) {
        let [form, id, ms, copies, chunk] = [(); 5].map(|()| input.byte());
        let id = self.pick_id(form & 32 != 0, id);
        let one = frames::craft(form, id, ms, self.link.config.wake.is_some());
        let mut pieces = vec![one; 1 + usize::from(copies)];
        let subscribing = self.link.expects(HandshakeStep::Subscribe);
        for (i, piece) in pieces.iter_mut().enumerate() {
            if let Is::Push { confirms, .. } = &mut piece.is {
                *confirms &= subscribing && i == 0;
            }
        }
        let confirmed = usize::from(matches!(pieces[0].is, Is::Push { confirms: true, .. }));
        let requests = self.link.requests.len();
        let outcomes = self.seen.outcomes;
        let Some(fate) = self.play(&pieces, usize::from(chunk)) else {
            return;
        };
        assert_eq!(self.seen.outcomes, outcomes, "a push answered a request");
        if fate == Fate::Lives {
            assert_eq!(
                self.link.requests.len() + confirmed,
                requests,
                "a push changed the requests waiting"
            );
            self.seen.subscriptions += confirmed as u64;
        }
    }

    /// A waiter's id: a live round's (the `pick`th), or any (small ones,
    /// the largest, and spread between).
    fn pick_id(&self, live: bool, pick: u8) -> u64 {
        match self
            .live_ids()
            .get(usize::from(pick) % self.live.len().max(1))
        {
            Some(&id) if live => id,
            _ => match pick {
                0..128 => u64::from(pick),
                255 => u64::MAX,
                pick => u64::from(pick).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            },
        }
    }

    /// The ids of the rounds in progress, in order.
    fn live_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.live.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Connects, and hands the link the right replies to the handshake
    /// steps it waits for (the `INFO` text and the marker from the input),
    /// then the confirmation of `SUBSCRIBE` if `HELLO` succeeded (the
    /// subscription is answered after the other steps). Flags of `op`: 8
    /// refuses `HELLO`, 16 refuses `SUBSCRIBE`, 32 sends a wake-up after
    /// each reply. Read from the start of a frame, the answers must leave
    /// the link ready (or refused as a replica or a cluster node, as the
    /// `INFO` text says), and subscribed unless a refusal said otherwise.
    fn answer_handshake(&mut self, op: u8, input: &mut Input<'_>) {
        if self.link.is_down() {
            self.reconnect();
        }
        let flavour = input.byte();
        let (refuse_hello, refuse_subscribe) = (op & 8 != 0, op & 16 != 0);
        let steps: Vec<HandshakeStep> = (self.link.requests.iter())
            .map_while(|request| match request.expect {
                Expect::HandshakeStep(step) => Some(step),
                _ => None,
            })
            .collect();
        let hello = steps.contains(&HandshakeStep::Hello);
        // After HELLO 3, INFO answers with a verbatim string.
        let resp3 = self.link.wakes && !(hello && refuse_hello);
        let wakes = self.link.config.wake.is_some();
        let mut pieces = Vec::new();
        for (n, &step) in (1..).zip(&steps) {
            pieces.push(match step {
                HandshakeStep::Hello => frames::hello(refuse_hello.then_some(flavour)),
                HandshakeStep::Subscribe => frames::subscription(refuse_subscribe),
                step => frames::step_reply(step, flavour, resp3),
            });
            if op & 32 != 0 {
                let ms = (n % 2 == 1).then_some(n * 10);
                pieces.push(frames::message(n, ms, wakes));
            }
        }
        let subscription_asked = hello && !refuse_hello;
        if subscription_asked {
            pieces.push(frames::subscription(refuse_subscribe));
        }
        if pieces.is_empty() || self.play(&pieces, 0) != Some(Fate::Lives) {
            return;
        }
        assert!(
            self.link.is_ready(),
            "a handshake answered in full left the link waiting"
        );
        let subscribing = subscription_asked || steps.contains(&HandshakeStep::Subscribe);
        let refused =
            [(hello, refuse_hello), (subscribing, refuse_subscribe)].map(|(asked, no)| asked && no);
        if hello || subscribing {
            assert_eq!(
                self.link.wakes,
                refused == [false; 2],
                "the link's wake-ups after these refusals of HELLO and SUBSCRIBE: {refused:?}"
            );
        }
        if refused != [false; 2] {
            self.seen.refusals += 1;
        } else if subscribing {
            self.seen.subscriptions += 1;
        }
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
        let unwritten = self.link.transmit().len();
        let n = if n == 0 { unwritten } else { n.min(unwritten) };
        self.link.advance(n);
    }

    fn end_round(&mut self, pick: usize) {
        let ids = self.live_ids();
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
            assert!(link.requests.is_empty() && link.out.is_empty() && link.held.is_empty());
        }
        assert_eq!(&self.capacities(), at_first, "a buffer grew");
        assert!(link.requests.len() <= link.config.capacity());
        assert!(self.now >= self.t0);
        if link.config.wake.is_none() {
            assert!(!link.wakes, "wake-ups on a link without a channel");
        }
        let is = |step| move |p: &super::Request| matches!(p.expect, Expect::HandshakeStep(s) if s == step);
        if let Some(at) = link.requests.iter().position(is(HandshakeStep::Subscribe)) {
            assert!(link.wakes, "a subscription asked after a refusal");
            assert_ne!(
                link.state,
                State::Ready,
                "a ready link waits for its subscription"
            );
            assert!(
                !link.requests.iter().any(is(HandshakeStep::Hello)),
                "a subscription asked before HELLO was answered"
            );
            assert!(
                (link.requests.iter().skip(at + 1)).all(|p| matches!(
                    p.expect,
                    Expect::Command(_) | Expect::HandshakeStep(HandshakeStep::Tracking)
                )),
                "a step answered after the subscription but the tracking"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use std::fs;

    use super::{Seen, session};

    /// Every seed and regression of the `session` fuzz target passes, and
    /// together they reach the states worth mutating from: outcomes,
    /// completed handshakes, failures, `NOSCRIPT` replays, a lagging link,
    /// wake-ups, subscriptions confirmed and refused (or `HELLO` refused).
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
            all.wakes += seen.wakes;
            all.subscriptions += seen.subscriptions;
            all.refusals += seen.refusals;
        }
        assert!(
            all.outcomes > 0
                && all.handshakes > 0
                && all.failures > 0
                && all.replays > 0
                && all.lagging > 0
                && all.wakes > 0
                && all.subscriptions > 0
                && all.refusals > 0,
            "the seeds miss a state: {all:?}"
        );
    }

    /// The empty program and a few degenerate ones run.
    #[test]
    fn degenerate_programs() {
        for data in [
            &b""[..],
            &[0xff],
            &[0, 1, 255, 255],
            &[7; 64],
            &[0x80, 9, 0x0f],
        ] {
            session(data);
        }
    }
}
