//! One master's protocol session, free of I/O: the pipelined handshake,
//! the queue of requests in flight, matching each reply to the oldest
//! request still waiting, `NOSCRIPT` replay, the budgets that keep a broken
//! or hostile server from holding the client, and the connection's timers
//! (connect and handshake deadlines, stall detection, reconnect back-off).
//!
//! A [`Link`] is driven with the time passed in, in the style of sans-I/O
//! protocol crates: the socket owner tells it that a connect started
//! ([`start`](Link::start)) or completed ([`connected`](Link::connected)),
//! hands it the bytes it read ([`read_buf`](Link::read_buf),
//! [`handle_read`](Link::handle_read)), writes what it asks
//! ([`transmit`](Link::transmit), [`advance`](Link::advance)), and closes
//! the socket when it fails ([`close`](Link::close)). The outcomes of lock
//! commands go to a callback, tagged with the round they belong to; what
//! they mean for the lock is decided by [`crate::rules::Round`].
//!
//! This file holds the session and its flow: connecting, queueing, writing,
//! reading, and matching each reply to its request. Its parts:
//! [`handshake`] (the steps' replies and what they teach of the master),
//! [`pushes`] (frames that answer nothing, and wake-ups), [`replay`] (lock
//! commands' replies and `NOSCRIPT` replay), [`limits`] (the budgets and
//! the sizes allocated at build), [`timers`] (connect and stall deadlines,
//! back-off).

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use crate::clock::after;
use crate::commands::{self, Command, HandshakeStep, Outcome, Probe, WakeChannel};
use crate::ids::{RoundId, WaitId, WatchId};
use crate::resp::{Decoder, Status, Token};
use crate::rules::identity::{Found, Info, Sighting, Suspicion};
use crate::rules::{NodeError, Op, Reply};

mod handshake;
mod limits;
mod pushes;
mod replay;
mod timers;

pub(crate) use limits::READ_BUFFER;
use limits::{RELEASE_HEADROOM, REPLAY_PER_REQUEST, REPLY_LIMITS};
pub(crate) use pushes::Invalidated;
use pushes::{Frame, Skip};
use replay::Sent;

/// Where a link hands the outcomes of the rounds in progress. Replies to
/// rounds that are not live are matched to their requests and dropped.
pub(crate) trait Sink {
    /// Whether round `id` is in progress.
    fn is_live(&self, id: RoundId) -> bool;
    /// The outcome of a live round's command: the round's id, the
    /// command's operation, the outcome, and when it was read.
    fn on_reply(&mut self, id: RoundId, op: Op, outcome: Outcome, now: Instant);
    /// Whether wait `id` of this client still waits (its call goes on).
    /// Without a table of waits, every wait is taken to: nothing is left
    /// on its behalf.
    fn is_waiting(&self, id: WaitId) -> bool {
        let _ = id;
        true
    }
    /// A release told waiter `id` of this client that it may try now
    /// (`later` is `None`), or once `later` has passed.
    fn on_wake(&mut self, id: WaitId, later: Option<Duration>, now: Instant) {
        let _ = (id, later, now);
    }
    /// Keys this connection tracks changed (see
    /// [`crate::flights::Watches`]).
    fn on_invalidate(&mut self, what: Invalidated<'_>, now: Instant) {
        let _ = (what, now);
    }
    /// The read of watch `id`'s key ([`Link::queue_read`]) found `read`.
    fn on_read(&mut self, id: WatchId, read: KeyRead<'_>, now: Instant) {
        let _ = (id, read, now);
    }
}

/// What the read of a watched key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyRead<'a> {
    /// The key holds this value.
    Value(&'a [u8]),
    /// No such key, or one of another type: it holds no token.
    Missing,
    /// An error, or a reply of another shape: nothing is known.
    Failed,
}

/// A range of live round ids with a closure for their outcomes.
#[cfg(test)]
impl<F: FnMut(u64, Op, Outcome, Instant)> Sink for (std::ops::Range<u64>, F) {
    fn is_live(&self, id: RoundId) -> bool {
        self.0.contains(&id.get())
    }

    fn on_reply(&mut self, id: RoundId, op: Op, outcome: Outcome, now: Instant) {
        (self.1)(id.get(), op, outcome, now)
    }
}

/// Timing of a connection.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct LinkConfig {
    /// How long a request may take before its reply counts as late.
    pub request_timeout: Duration,
    /// How long a connect may take, and then the handshake.
    pub connect_timeout: Duration,
    /// How long the oldest request may go unanswered before the
    /// connection counts as stalled.
    pub stall_timeout: Duration,
    /// The first back-off after a failure, and the most it doubles to.
    pub backoff_min: Duration,
    /// See `backoff_min`.
    pub backoff_max: Duration,
    /// Ask each server who it is at the handshake (`INFO`).
    pub identify: bool,
    /// Load the fence scripts in the handshake.
    pub fencing: bool,
    /// The most rounds the client keeps in flight: each may have a request
    /// queued here.
    pub in_flight: usize,
    /// The restart guard: how long a suspect master stays quarantined (the
    /// longest TTL in use plus its drift), and the marker value this client
    /// sets. `None`: off.
    pub guard: Option<(Duration, [u8; 31])>,
    /// The deployment's longest TTL in milliseconds, with the restart
    /// guard or fencing on: set on each master unless it has one, and
    /// compared with the one it has.
    pub longest_ttl: Option<u64>,
    /// The client's wake channel: speak RESP3 and subscribe to it, so that
    /// releases tell its waiters (see `crate::rules::free_in`'s module).
    /// `None`: no wake-ups.
    pub wake: Option<WakeChannel>,
}

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket since `since`; a new connect may start at `retry_at`.
    Down { since: Instant, retry_at: Instant },
    /// Connect in progress; the handshake waits in the output buffer.
    Connecting { deadline: Instant },
    /// Connected; handshake replies outstanding.
    Handshaking { deadline: Instant },
    /// Handshake done.
    Ready,
}

/// What answers a request.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A step of the handshake.
    HandshakeStep(HandshakeStep),
    /// A lock command. A script command's byte arguments wait in the
    /// replay arena ([`Sent::kept`] bytes), so that a `NOSCRIPT` reply,
    /// however late, can be answered with `EVAL`.
    Command(Sent),
    /// `CLIENT CACHING YES` before a watch's read: the read that follows
    /// is tracked.
    Caching,
    /// A watch's read of its key.
    Read(WatchId),
}

/// A request written or queued, waiting for its reply.
#[derive(Debug, Clone, Copy)]
struct Request {
    /// What answers it.
    expect: Expect,
    /// When it was queued.
    sent: Instant,
    /// `sent` + the stall timeout: past it, the connection is stalled.
    /// (Kept, not computed at each check: the timers are checked at every
    /// turn of every caller's wait.)
    stall_at: Instant,
}

impl Request {
    /// A request queued at `sent`, stalled past `config`'s stall timeout.
    fn new(expect: Expect, sent: Instant, config: &LinkConfig) -> Request {
        Request {
            expect,
            sent,
            stall_at: after(sent, config.stall_timeout),
        }
    }
}

/// One master's protocol session (see the module docs).
pub(crate) struct Link {
    /// Timing and limits.
    config: LinkConfig,
    /// Where the connection is in its life.
    state: State,
    /// Bytes to write: the handshake, then the commands.
    out: Vec<u8>,
    /// Bytes of `out` already written.
    written: usize,
    /// The read buffer, [`READ_BUFFER`] bytes, allocated once.
    input: Vec<u8>,
    /// Where the bytes read and not yet decoded start in `input`.
    start: usize,
    /// Where they end.
    end: usize,
    /// The RESP decoder, under [`REPLY_LIMITS`].
    decoder: Decoder,
    /// The requests waiting for their replies, oldest first.
    requests: VecDeque<Request>,
    /// The handshake's steps, as encoded at the last connect.
    steps: Vec<HandshakeStep>,
    /// What the tokens being read belong to, if not to a reply.
    skip: Skip,
    /// The back-off before the next connect after a failure.
    backoff: Duration,
    /// Commands queued while the handshake is under way: written only once
    /// it has succeeded, so that nothing runs on a connection whose `AUTH`
    /// or `SELECT` failed.
    held: Vec<u8>,
    /// Resource and token of every script command in flight, in order.
    replay: Vec<u8>,
    /// Why the connection last went down.
    last_error: Option<NodeError>,
    /// Since when the connection has kept missing round deadlines: set by
    /// a round that timed out on it, cleared by any reply that arrives
    /// within the request timeout of its request. A
    /// connection that lost replies (a broken proxy) matches every reply to
    /// an older request of the same kind and so never answers in time;
    /// after the stall timeout it is re-made.
    late_since: Option<Instant>,
    /// Bytes of unsolicited frames since the last reply.
    unsolicited: usize,
    /// Connects started, for statistics.
    connects: u64,
    /// What the handshake under way learned: `INFO`, and what the marker
    /// and the longest TTL key held before it.
    info: Option<Info>,
    marker: Option<Found>,
    longest: Option<Found>,
    /// What this client knows of the server across connections.
    sighting: Sighting,
    /// A handshake completed and its `run_id` has not been compared with
    /// the other masters' yet.
    fresh: bool,
    /// The suspicion found at the last handshake, for the driver to log.
    suspicion: Option<Suspicion>,
    /// A handshake completed on a connection that had been down since
    /// this client began: wake-ups may have been lost meanwhile.
    reconnected: bool,
    /// The connection speaks RESP3 and subscribes to the wake channel
    /// (until a refusal says otherwise; see `handle_wake_step`).
    wakes: bool,
    /// Whether the server tracks the keys this connection reads after
    /// `CLIENT CACHING YES`, and says when they change.
    tracking: Tracking,
}

/// Where a link is with the tracking of keys ([`Link::track`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tracking {
    /// Not wanted: no key is watched.
    Off,
    /// Wanted, and asked at the next handshake.
    Wanted,
    /// Asked on this connection; the reply has yet to come.
    Asked,
    /// The server tracks.
    On,
    /// The server refused, on this connection.
    Refused,
}

impl Tracking {
    /// Whether a read should ask for its key to be tracked: the server
    /// tracks, or was asked to before the read (its answer comes first).
    fn reads_tracked(self) -> bool {
        matches!(self, Tracking::Asked | Tracking::On)
    }
}

impl Link {
    /// A link that is down and may connect at once.
    pub(crate) fn new(config: LinkConfig, now: Instant) -> Link {
        Link {
            config,
            state: State::Down {
                since: now,
                retry_at: now,
            },
            out: Vec::with_capacity(config.output_capacity()),
            written: 0,
            input: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            decoder: Decoder::with_limits(REPLY_LIMITS),
            requests: VecDeque::with_capacity(config.queue_room()),
            steps: Vec::with_capacity(4),
            skip: Skip::No,
            backoff: config.backoff_min,
            held: Vec::with_capacity(config.output_capacity()),
            replay: Vec::with_capacity(config.capacity() * REPLAY_PER_REQUEST),
            last_error: None,
            late_since: None,
            unsolicited: 0,
            connects: 0,
            info: None,
            marker: None,
            longest: None,
            sighting: Sighting::default(),
            fresh: false,
            suspicion: None,
            reconnected: false,
            wakes: config.wake.is_some(),
            tracking: Tracking::Off,
        }
    }

    /// How many connects were started.
    pub(crate) fn connects(&self) -> u64 {
        self.connects
    }

    /// Whether the handshake is done.
    pub(crate) fn is_ready(&self) -> bool {
        self.state == State::Ready
    }

    /// Whether there is no socket.
    pub(crate) fn is_down(&self) -> bool {
        matches!(self.state, State::Down { .. })
    }

    /// Whether a connect is in progress.
    pub(crate) fn is_connecting(&self) -> bool {
        matches!(self.state, State::Connecting { .. })
    }

    /// Why the link is down: its last error.
    pub(crate) fn down_reason(&self) -> NodeError {
        self.last_error.clone().unwrap_or(NodeError::Disconnected)
    }

    /// Why the link is not ready: its last error, or a connect timeout if
    /// it is still connecting. Once ready, why the master refuses this
    /// client, if it does ([`Sighting::refusal`]), else `None`.
    pub(crate) fn failure(&self) -> Option<NodeError> {
        if self.is_ready() {
            return self.sighting.refusal().cloned();
        }
        Some(
            self.last_error
                .clone()
                .unwrap_or(NodeError::Connect(io::ErrorKind::TimedOut)),
        )
    }

    /// Whether a request of `round` is still unanswered.
    #[cfg(test)]
    pub(crate) fn has_request_for(&self, round: u64) -> bool {
        self.requests
            .iter()
            .any(|p| matches!(p.expect, Expect::Command(sent) if sent.round.get() == round))
    }

    /// The rounds of the lock commands still unanswered, oldest first.
    #[cfg(test)]
    pub(crate) fn request_rounds(&self) -> impl Iterator<Item = RoundId> + '_ {
        self.requests.iter().filter_map(|p| match p.expect {
            Expect::Command(sent) => Some(sent.round),
            _ => None,
        })
    }

    /// Queues the read of watch `id`'s `key` (`GET`), tracked if the server
    /// tracks keys for this connection (`CLIENT CACHING YES` first), for a
    /// ready connection only: a handshake under way has yet to say whether
    /// the server tracks. Fails as [`queue`](Self::queue) does for an
    /// acquire, and on a connection that is not ready.
    pub(crate) fn queue_read(
        &mut self,
        id: WatchId,
        key: &[u8],
        now: Instant,
    ) -> Result<(), NodeError> {
        if !self.is_ready() {
            return Err(self.down_reason());
        }
        self.check_stall(now)?;
        self.check_limits(
            self.config.max_requests() - RELEASE_HEADROOM - 1,
            self.config.max_unwritten(),
        )?;
        if self.tracking.reads_tracked() {
            crate::resp::encode_command(
                &mut self.out,
                &[
                    b"CLIENT".as_slice().into(),
                    b"CACHING".as_slice().into(),
                    b"YES".as_slice().into(),
                ],
            );
            self.requests
                .push_back(Request::new(Expect::Caching, now, &self.config));
        }
        crate::resp::encode_command(&mut self.out, &[b"GET".as_slice().into(), key.into()]);
        self.requests
            .push_back(Request::new(Expect::Read(id), now, &self.config));
        Ok(())
    }

    /// A connect has started: queues the handshake behind it.
    pub(crate) fn start(
        &mut self,
        user: Option<&str>,
        password: Option<&str>,
        db: u32,
        now: Instant,
    ) {
        self.connects += 1;
        self.clear_buffers();
        let probe = Probe {
            identify: self.config.identify,
            marker: self.config.guard.as_ref().map(|(_, value)| &value[..]),
            longest_ttl: self.config.longest_ttl,
            fencing: self.config.fencing,
            wake: self.config.wake.as_ref().map(|c| &c[..]),
        };
        commands::encode_handshake(&mut self.out, user, password, db, probe, &mut self.steps);
        for &step in &self.steps {
            self.requests
                .push_back(Request::new(Expect::HandshakeStep(step), now, &self.config));
        }
        self.state = State::Connecting {
            deadline: after(now, self.config.connect_timeout),
        };
    }

    /// The connect completed: the handshake may be written.
    pub(crate) fn connected(&mut self, now: Instant) {
        if self.is_connecting() {
            self.state = State::Handshaking {
                deadline: after(now, self.config.connect_timeout),
            };
        }
    }

    /// Forgets the connection: what it had to write, read and answer, and
    /// what its handshake learned.
    fn clear_buffers(&mut self) {
        self.out.clear();
        self.written = 0;
        self.start = 0;
        self.end = 0;
        self.decoder.reset();
        self.requests.clear();
        self.skip = Skip::No;
        self.held.clear();
        self.replay.clear();
        self.late_since = None;
        self.unsolicited = 0;
        self.info = None;
        self.marker = None;
        self.longest = None;
        self.fresh = false;
        self.wakes = self.config.wake.is_some();
        // Wanted once, asked again on every connection.
        if self.tracking != Tracking::Off {
            self.tracking = Tracking::Wanted;
        }
    }

    /// The socket is gone after `error`: everything in flight is dropped,
    /// and a reconnect may start after the back-off, which doubles up to
    /// its maximum.
    pub(crate) fn close(&mut self, error: NodeError, now: Instant) {
        let retry_at = self.retry_after(&error, now);
        self.clear_buffers();
        self.state = State::Down {
            since: now,
            retry_at,
        };
        self.last_error = Some(error);
    }

    /// Queues `command`, whose encoding is `bytes` (encoded once for all
    /// the masters it goes to), for `round`; nothing is written yet. Fails
    /// if the link is down, or stalled (then the caller closes it), or
    /// lagging (then the command is not queued, and the connection stays),
    /// except for a release that `must_reach` this master (it is in the
    /// command's `reach`): that one is refused only by a link that is down.
    pub(crate) fn queue(
        &mut self,
        command: &Command<'_>,
        bytes: &[u8],
        round: RoundId,
        must_reach: bool,
        now: Instant,
    ) -> Result<(), NodeError> {
        if self.is_down() {
            return Err(self.down_reason());
        }
        if command.op() == Op::Release {
            // A release is queued even on a connection that looks stalled:
            // written, it frees the key, if only once a paused server
            // resumes; refused, the key would stay until its TTL. One that
            // must reach this master (its lock's acquire went out here, so
            // the key may be here) may also use the reserve past the
            // limits: a master behind them takes no new acquire, so only
            // the locks it granted before can still send it one. Past the
            // reserve (more such locks released than rounds may be in
            // flight, while the master stays that far behind), it is
            // refused too: the connection's memory is allocated once and
            // never grows, and the key expires with its TTL.
            if must_reach {
                self.check_limits(self.config.capacity(), self.config.max_unwritten_reserved())?;
            } else {
                self.check_limits(self.config.max_requests(), self.config.max_unwritten())?;
            }
        } else {
            self.check_stall(now)?;
            self.check_limits(
                self.config.max_requests() - RELEASE_HEADROOM,
                self.config.max_unwritten(),
            )?;
        }
        let target = if self.state == State::Ready {
            &mut self.out
        } else {
            &mut self.held
        };
        target.extend_from_slice(bytes);
        let (shape, args) = command.split();
        if shape.is_script() {
            for arg in args {
                self.replay.extend_from_slice(arg);
            }
        }
        self.requests.push_back(Request::new(
            Expect::Command(Sent { round, shape }),
            now,
            &self.config,
        ));
        Ok(())
    }

    /// The bytes to write now: the handshake and the commands, once
    /// connected (commands held back for the handshake excluded).
    pub(crate) fn transmit(&self) -> &[u8] {
        match self.state {
            State::Handshaking { .. } | State::Ready => &self.out[self.written..],
            _ => &[],
        }
    }

    /// `n` bytes of [`transmit`](Self::transmit) were written.
    pub(crate) fn advance(&mut self, n: usize) {
        self.written = (self.written + n).min(self.out.len());
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
        }
    }

    /// Where the next bytes read go. Fails only if a token did not fit the
    /// buffer, which [`REPLY_LIMITS`] rules out.
    pub(crate) fn read_buf(&mut self) -> Result<&mut [u8], NodeError> {
        if self.end == self.input.len() {
            if self.start == 0 {
                // Unreachable: under REPLY_LIMITS every token fits in the
                // buffer. A typed error all the same.
                return Err(NodeError::UnexpectedReply);
            }
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        Ok(&mut self.input[self.end..])
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf) at `now`:
    /// decodes them and passes the outcomes of the commands of the rounds
    /// in progress to `sink`, with their round and `now`.
    /// Replies to other rounds are matched and dropped. An error means the
    /// connection must be closed.
    pub(crate) fn handle_read(
        &mut self,
        n: usize,
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        self.end = (self.end + n).min(self.input.len());
        self.process(now, sink)
    }

    /// Decodes and dispatches every complete token in the read buffer.
    fn process(&mut self, now: Instant, sink: &mut dyn Sink) -> Result<(), NodeError> {
        // The tokens borrow the input while the handlers change the rest of
        // the session: the buffer is lent out for the loop (a move of its
        // pointer, no copy) and always put back.
        let input = std::mem::take(&mut self.input);
        let result = self.process_input(&input, now, sink);
        self.input = input;
        result
    }

    /// The loop of [`process`](Self::process) over the lent `input`.
    fn process_input(
        &mut self,
        input: &[u8],
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        loop {
            let decoded = match self.decoder.decode(&input[self.start..self.end]) {
                Ok(Status::Complete(decoded)) => decoded,
                Ok(Status::Partial) => break,
                Err(e) => return Err(NodeError::Protocol(e)),
            };
            let (token, len, frame_end) = (decoded.token, decoded.len, decoded.frame_end);
            match self.frame(&token, len, frame_end)? {
                Frame::Skipped => {}
                Frame::Invalidated(what) => sink.on_invalidate(what, now),
                Frame::Push(push) => self.handle_push(push, now, sink)?,
                Frame::HelloEnd => self.handle_reply(&Token::Map(0), now, sink)?,
                Frame::Reply if frame_end => self.handle_reply(&token, now, sink)?,
                Frame::Reply if self.expects(HandshakeStep::Hello) => self.skip = Skip::Hello,
                // None of our commands is answered by an aggregate.
                Frame::Reply => return Err(NodeError::UnexpectedReply),
            }
            self.start += len;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(())
    }

    /// A whole reply, to the oldest request unanswered.
    fn handle_reply(
        &mut self,
        token: &Token<'_>,
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        let Some(request) = self.requests.front().copied() else {
            // A reply to a request never sent.
            return Err(NodeError::UnexpectedReply);
        };
        if self.late_since.is_some() && now <= after(request.sent, self.config.request_timeout) {
            // An answer in time: the connection keeps up.
            self.late_since = None;
        }
        // A request sent again (`NOSCRIPT`) is queued once this one is off
        // the queue: a full queue never grows.
        let again = match request.expect {
            Expect::HandshakeStep(step) => {
                self.handle_step(step, token)?;
                None
            }
            Expect::Command(sent) => self
                .handle_command_reply(sent, token, now, sink)?
                .map(|sent| Request::new(Expect::Command(sent), request.sent, &self.config)),
            Expect::Caching => {
                // Refused: the read that follows is not tracked, nor any
                // later one.
                if !matches!(token, Token::Simple(b"OK")) {
                    self.tracking = Tracking::Refused;
                }
                None
            }
            Expect::Read(id) => {
                sink.on_read(id, key_read(token), now);
                None
            }
        };
        self.requests.pop_front();
        if let Some(again) = again {
            self.requests.push_back(again);
        }
        self.handshake_progress(now);
        Ok(())
    }

    /// Tells a live round what this master answered.
    fn deliver(&self, sent: Sent, outcome: Outcome, now: Instant, sink: &mut dyn Sink) {
        let outcome = match outcome {
            // A master that refuses this client (see `Sighting::refusal`)
            // fails every round but releases, which free keys whatever the
            // master thinks of us.
            _ if sent.shape.op() != Op::Release && self.sighting.refusal().is_some() => {
                match self.sighting.refusal() {
                    Some(refusal) => Outcome::Failed(refusal.clone()),
                    None => return,
                }
            }
            // Grants of a quarantined master do not count; its fence
            // counter (if it has one, it kept its data) does.
            Outcome::Reply(Reply::Ok | Reply::Count(_))
                if matches!(sent.shape.op(), Op::Acquire | Op::Extend)
                    && self.sighting.is_quarantined(now) =>
            {
                Outcome::Quarantined
            }
            outcome => outcome,
        };
        sink.on_reply(sent.round, sent.shape.op(), outcome, now);
    }
}

/// What a reply to a watch's `GET` says of the key.
fn key_read<'a>(token: &Token<'a>) -> KeyRead<'a> {
    match token {
        Token::Bulk(value) => KeyRead::Value(value),
        Token::Null(_) => KeyRead::Missing,
        Token::Error(message) | Token::BulkError(message) if message.starts_with(b"WRONGTYPE") => {
            KeyRead::Missing
        }
        _ => KeyRead::Failed,
    }
}

#[cfg(any(test, feature = "fuzzing"))]
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
pub(crate) mod fuzz;
#[cfg(test)]
mod tests;

/// `command`'s encoding, as the driver hands it to [`Link::queue`].
#[cfg(test)]
pub(crate) fn encoded(command: &Command<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    command.encode(&mut out);
    out
}
