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

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use crate::clock::after;
use crate::commands::{self, Command, Outcome, Probe, Shape, Step, WakeChannel};
use crate::resp::{Decoder, Limits, Status, Token};
use crate::rules::identity::{Found, Info, MarkerValue, Sighting, Suspicion};
use crate::rules::{NodeError, Op, Reply, ServerError};

/// The decoder limits for replies to lock commands: all are tiny, so a
/// server that sends more is broken or hostile.
pub(crate) const REPLY_LIMITS: Limits = Limits::DEFAULT
    .with_max_depth(8)
    .with_max_elements(1024)
    .with_max_bulk_len(8 * 1024)
    .with_max_line_len(8 * 1024);

/// The read buffer holds the largest token the limits allow, plus its
/// header and CRLF; it never grows.
pub(crate) const READ_BUFFER: usize = 8 * 1024 + 64;

/// Unanswered requests after which a connection takes no new request
/// ([`NodeError::Lagging`]), beyond two per round the client may have in
/// flight ([`LinkConfig::in_flight`]). A healthy connection has the
/// handshake and the rounds in flight, plus the late replies of rounds
/// decided without it; a stopped server would otherwise collect a request
/// per round until the stall timer fires.
const MAX_PENDING: usize = 32;

/// Requests beyond [`MAX_PENDING`] that releases may still queue.
const RELEASE_HEADROOM: usize = 8;

/// Bytes of replay arena per request: the arguments of a script command on
/// a resource stored inline in a `Lock` (64 bytes) with a 20-byte token,
/// and a waiter's queue member (80 bytes at most).
/// The queue and the arena are allocated for the most requests a
/// connection may hold: a lagging master never makes them grow.
const REPLAY_PER_REQUEST: usize = 64 + commands::TOKEN_LEN + 80;

/// Room in the output and held-back buffers for the handshake, and per
/// request for a command on a resource stored inline in a `Lock` (an
/// `EVALSHA` of the acquire that waits on a 64-byte name is about 280
/// bytes):
/// allocated for the most requests a connection may hold, so that a master
/// that stops answering never makes them grow (past the limits, rounds skip
/// it, and the stall timer drops its connection).
const OUTPUT_BASE: usize = 1024;
const OUTPUT_PER_REQUEST: usize = 288;

/// Unwritten bytes after which a connection takes no new request (at
/// least).
const MAX_UNWRITTEN: usize = 64 * 1024;

/// Bytes of frames that answer nothing (pushes, attributes) accepted
/// between two replies. The client never asks for pushes (it speaks
/// RESP2), so a server that sends more is broken or hostile.
pub(crate) const UNSOLICITED_BUDGET: usize = 16 * 1024;

/// Where a link hands the outcomes of the rounds in progress. Replies to
/// rounds that are not live are matched to their requests and dropped.
pub(crate) trait Sink {
    /// Whether round `id` is in progress.
    fn is_live(&self, id: u64) -> bool;
    /// The outcome of a live round's command: the round's id, the
    /// command's operation, the outcome, and when it was read.
    fn on_reply(&mut self, id: u64, op: Op, outcome: Outcome, now: Instant);
    /// A release told waiter `id` of this client that it may try now
    /// (`later` is `None`), or once `later` has passed.
    fn on_wake(&mut self, id: u64, later: Option<Duration>, now: Instant) {
        let _ = (id, later, now);
    }
}

/// A range of live round ids with a closure for their outcomes.
#[cfg(test)]
impl<F: FnMut(u64, Op, Outcome, Instant)> Sink for (std::ops::Range<u64>, F) {
    fn is_live(&self, id: u64) -> bool {
        self.0.contains(&id)
    }

    fn on_reply(&mut self, id: u64, op: Op, outcome: Outcome, now: Instant) {
        (self.1)(id, op, outcome, now)
    }
}

/// Timing of a connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkConfig {
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) stall_timeout: Duration,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
    /// Ask each server who it is at the handshake (`INFO`).
    pub(crate) identify: bool,
    /// Load the fence scripts in the handshake.
    pub(crate) fencing: bool,
    /// The most rounds the client keeps in flight: each may have a request
    /// queued here.
    pub(crate) in_flight: usize,
    /// The restart guard: how long a suspect master stays quarantined (the
    /// longest TTL in use plus its drift), and the marker value this client
    /// sets. `None`: off.
    pub(crate) guard: Option<(Duration, [u8; 31])>,
    /// The deployment's longest TTL in milliseconds, with the restart
    /// guard or fencing on: set on each master unless it has one, and
    /// compared with the one it has.
    pub(crate) longest_ttl: Option<u64>,
    /// The client's wake channel: speak RESP3 and subscribe to it, so that
    /// releases tell its waiters (see [`crate::rules::free_in`]'s module).
    /// `None`: no wake-ups.
    pub(crate) wake: Option<WakeChannel>,
}

impl LinkConfig {
    /// The most requests a connection holds; past it, new rounds skip the
    /// master ([`NodeError::Lagging`]): one per round in flight, and as
    /// many again for the late replies of rounds decided without this
    /// master. A master behind the others under load is slow, not stalled:
    /// its connection, and the releases it holds, stay; one that stops
    /// answering is caught by the stall timer.
    fn max_requests(&self) -> usize {
        MAX_PENDING + RELEASE_HEADROOM + 2 * self.in_flight
    }

    /// Requests past every limit that releases which must reach this
    /// master may still queue (see [`Link::queue`]): one per round the
    /// client may have in flight, and at least [`MAX_PENDING`].
    fn reserve(&self) -> usize {
        self.in_flight.max(MAX_PENDING)
    }

    /// The most requests a connection ever holds: its limit and the
    /// reserve. The queue and the argument arena are allocated for them.
    pub(crate) fn capacity(&self) -> usize {
        self.max_requests() + self.reserve()
    }

    /// Room allocated for requests: the most a connection holds, and the
    /// `SUBSCRIBE` a handshake adds once `HELLO` succeeded, behind the
    /// steps but before the commands held back for it (which were counted
    /// against the limits without it).
    fn queue_room(&self) -> usize {
        self.capacity() + usize::from(self.wake.is_some())
    }

    /// The most unwritten bytes a release that must reach this master may
    /// find and still be queued: the limit and the reserve's share.
    fn max_unwritten_reserved(&self) -> usize {
        self.max_unwritten() + self.reserve() * OUTPUT_PER_REQUEST
    }

    /// The room allocated for bytes to write (and for those held back
    /// during a handshake): at most the limit of unwritten bytes and the
    /// reserve's share.
    fn output_capacity(&self) -> usize {
        OUTPUT_BASE + self.max_unwritten_reserved()
    }

    /// Unwritten bytes after which a connection takes no new request: room
    /// for a command of every round in flight and more (at least
    /// [`MAX_UNWRITTEN`]).
    fn max_unwritten(&self) -> usize {
        MAX_UNWRITTEN.max((MAX_PENDING + RELEASE_HEADROOM + self.in_flight) * OUTPUT_PER_REQUEST)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No socket; a new connect may start at `retry_at`.
    Down { retry_at: Instant },
    /// Connect in progress; the handshake waits in the output buffer.
    Connecting { deadline: Instant },
    /// Connected; handshake replies outstanding.
    Handshaking { deadline: Instant },
    /// Handshake done.
    Ready,
}

#[derive(Debug, Clone, Copy)]
enum Expect {
    Step(Step),
    /// A lock command. A script command's byte arguments wait in the
    /// replay arena ([`Sent::kept`] bytes), so that a `NOSCRIPT` reply,
    /// however late, can be answered with `EVAL`.
    Command(Sent),
}

/// What is kept of a lock command sent, to classify its reply and to send
/// it again with its script.
#[derive(Debug, Clone, Copy)]
struct Sent {
    round: u64,
    /// The command without its byte arguments.
    shape: Shape,
}

impl Sent {
    /// Bytes of the command's arguments in the replay arena: those of a
    /// script command, which may have to be sent again.
    fn kept(&self) -> usize {
        if self.shape.is_script() {
            self.shape.args_len()
        } else {
            0
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    expect: Expect,
    sent: Instant,
    /// `sent` + the stall timeout: past it, the connection is stalled.
    /// (Kept, not computed at each check: the timers are checked at every
    /// turn of every caller's wait.)
    stall_at: Instant,
}

impl Pending {
    fn new(expect: Expect, sent: Instant, config: &LinkConfig) -> Pending {
        Pending {
            expect,
            sent,
            stall_at: after(sent, config.stall_timeout),
        }
    }
}

/// Tokens of a top-level frame that is not a reply, or of a reply that
/// is an aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    No,
    /// A push, read element by element up to the frame's end.
    Push(PushRead),
    /// An attribute: skip its pairs; the value after it is the reply.
    Attribute,
    /// The map that answers `HELLO`: skip to the frame's end, then it is
    /// the step's reply.
    Hello,
}

/// What a push said, so far: `>3 message <channel> <id>` tells a waiter
/// of this client, `>3 subscribe <channel> <count>` confirms the
/// handshake's `SUBSCRIBE`; any other push is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PushRead {
    /// Elements read.
    seen: u8,
    kind: PushKind,
    /// Its channel is this client's wake channel.
    ours: bool,
    /// A message's payload: a waiter's id, and a delay in ms when the
    /// waiter is told to try once it has passed (see the hand-off in
    /// [`crate::scripts`]).
    id: Option<u64>,
    later: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushKind {
    Unknown,
    Message,
    Subscribe,
    Other,
}

impl PushRead {
    const NEW: PushRead = PushRead {
        seen: 0,
        kind: PushKind::Unknown,
        ours: false,
        id: None,
        later: None,
    };

    /// Reads one more token of the push; `nested`: it is an aggregate, or
    /// inside one.
    fn read(&mut self, token: &Token<'_>, nested: bool, channel: Option<&[u8]>) {
        let element = self.seen;
        self.seen = self.seen.saturating_add(1);
        if nested || self.kind == PushKind::Other {
            self.kind = PushKind::Other;
            return;
        }
        let Token::Bulk(bytes) = token else {
            if element != 2 || self.kind != PushKind::Subscribe {
                self.kind = PushKind::Other;
            }
            return;
        };
        match element {
            0 => {
                self.kind = match *bytes {
                    b"message" => PushKind::Message,
                    b"subscribe" => PushKind::Subscribe,
                    _ => PushKind::Other,
                }
            }
            1 => self.ours = channel == Some(*bytes),
            2 => {
                let mut numbers = bytes.splitn(2, |&b| b == b' ').map(|field| {
                    std::str::from_utf8(field)
                        .ok()
                        .and_then(|n| n.parse::<u64>().ok())
                });
                self.id = numbers.next().flatten();
                self.later = numbers.next().flatten();
            }
            _ => self.kind = PushKind::Other,
        }
    }
}

/// What a top-level frame turned out to be.
enum Frame {
    /// A reply (or the first token of one).
    Reply,
    /// Part of a frame that answers nothing, skipped.
    Skipped,
    /// The end of a push.
    Push(PushRead),
    /// The end of the map that answers `HELLO`.
    HelloEnd,
}

/// One master's protocol session (see the module docs).
pub(crate) struct Link {
    config: LinkConfig,
    state: State,
    out: Vec<u8>,
    written: usize,
    input: Vec<u8>,
    start: usize,
    end: usize,
    decoder: Decoder,
    pending: VecDeque<Pending>,
    steps: Vec<Step>,
    skip: Skip,
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
}

impl Link {
    /// A link that is down and may connect at once.
    pub(crate) fn new(config: LinkConfig, now: Instant) -> Link {
        Link {
            config,
            state: State::Down { retry_at: now },
            out: Vec::with_capacity(config.output_capacity()),
            written: 0,
            input: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            decoder: Decoder::with_limits(REPLY_LIMITS),
            pending: VecDeque::with_capacity(config.queue_room()),
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
        }
    }

    /// Whether a handshake completed after a reconnect since the last
    /// call (the first connect is no reconnect).
    pub(crate) fn take_reconnected(&mut self) -> bool {
        std::mem::take(&mut self.reconnected)
    }

    /// What this client knows of the server: its `run_id`, quarantine.
    pub(crate) fn sighting(&self) -> &Sighting {
        &self.sighting
    }

    /// The `run_id` of a handshake completed since the last call, for the
    /// driver to compare with the other masters'.
    pub(crate) fn take_fresh_run_id(&mut self) -> Option<[u8; 40]> {
        if !std::mem::take(&mut self.fresh) || !self.is_ready() {
            return None;
        }
        self.sighting.run_id().copied()
    }

    /// The suspicion that quarantined the server at the last handshake,
    /// once.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    pub(crate) fn take_suspicion(&mut self) -> Option<Suspicion> {
        self.suspicion.take()
    }

    /// How many connects were started.
    pub(crate) fn connects(&self) -> u64 {
        self.connects
    }

    pub(crate) fn is_ready(&self) -> bool {
        self.state == State::Ready
    }

    pub(crate) fn is_down(&self) -> bool {
        matches!(self.state, State::Down { .. })
    }

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

    /// When a link that is down may connect again (its back-off's end);
    /// `None` while it is up or connecting.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        match self.state {
            State::Down { retry_at } => Some(retry_at),
            _ => None,
        }
    }

    /// Whether the link is up, or down with its back-off expired (so that
    /// a connect may start now).
    pub(crate) fn may_send(&self, now: Instant) -> bool {
        match self.state {
            State::Down { retry_at } => now >= retry_at,
            _ => true,
        }
    }

    /// Whether a request of `round` is still unanswered.
    #[cfg(test)]
    pub(crate) fn has_pending_for(&self, round: u64) -> bool {
        self.pending
            .iter()
            .any(|p| matches!(p.expect, Expect::Command(sent) if sent.round == round))
    }

    /// The rounds of the lock commands still unanswered, oldest first.
    #[cfg(test)]
    pub(crate) fn pending_rounds(&self) -> impl Iterator<Item = u64> + '_ {
        self.pending.iter().filter_map(|p| match p.expect {
            Expect::Command(sent) => Some(sent.round),
            Expect::Step(_) => None,
        })
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
            self.pending
                .push_back(Pending::new(Expect::Step(step), now, &self.config));
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

    fn clear_buffers(&mut self) {
        self.out.clear();
        self.written = 0;
        self.start = 0;
        self.end = 0;
        self.decoder.reset();
        self.pending.clear();
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
    }

    /// The socket is gone after `error`: everything in flight is dropped,
    /// and a reconnect may start after the back-off, which doubles up to
    /// its maximum.
    pub(crate) fn close(&mut self, error: NodeError, now: Instant) {
        // A healthy connection that was closed, reset or stalled is re-made
        // at once (the next round reconnects and waits for the handshake):
        // servers restart, middleboxes drop idle connections. A server
        // that broke the protocol, and repeated failures, back off,
        // doubling up to the maximum.
        let benign = matches!(
            error,
            NodeError::Closed | NodeError::Io(_) | NodeError::Stalled
        );
        let retry_at = if self.state == State::Ready && benign {
            now
        } else {
            let at = after(now, self.backoff);
            self.backoff = (self.backoff * 2).min(self.config.backoff_max);
            at
        };
        self.clear_buffers();
        self.state = State::Down { retry_at };
        self.last_error = Some(error);
    }

    /// The round that started at `started` reached its deadline without a
    /// reply from this link.
    pub(crate) fn note_late(&mut self, started: Instant) {
        self.late_since.get_or_insert(started);
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
        round: u64,
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
        self.pending.push_back(Pending::new(
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

    /// Refuses a request to a connection that holds `requests` requests or
    /// more than `unwritten` unwritten bytes ([`NodeError::Lagging`]: the
    /// request is not queued, the connection stays).
    fn check_limits(&self, requests: usize, unwritten: usize) -> Result<(), NodeError> {
        let held = self.out.len() - self.written + self.held.len();
        if self.pending.len() >= requests || held > unwritten {
            return Err(NodeError::Lagging);
        }
        Ok(())
    }

    /// Fails a connection that stopped answering: its oldest request, or
    /// its late replies, older than the stall timeout.
    fn check_stall(&self, now: Instant) -> Result<(), NodeError> {
        if let Some(since) = self.late_since {
            if now.saturating_duration_since(since) > self.config.stall_timeout {
                return Err(NodeError::Stalled);
            }
        }
        match self.pending.front() {
            Some(oldest) if now > oldest.stall_at => Err(NodeError::Stalled),
            _ => Ok(()),
        }
    }

    /// Fails the connection whose connect or handshake ran out of time, or
    /// whose oldest request went unanswered past the stall limit.
    pub(crate) fn check_timers(&self, now: Instant) -> Result<(), NodeError> {
        match self.state {
            State::Connecting { deadline } | State::Handshaking { deadline } if now >= deadline => {
                Err(NodeError::Connect(io::ErrorKind::TimedOut))
            }
            _ => self.check_stall(now),
        }
    }

    /// The next instant at which [`check_timers`](Self::check_timers) may
    /// fail.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        let stall = self.pending.front().map(|oldest| oldest.stall_at);
        let connect = match self.state {
            State::Connecting { deadline } | State::Handshaking { deadline } => Some(deadline),
            _ => None,
        };
        match (stall, connect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
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
                Frame::Push(push) => self.handle_push(push, now, sink)?,
                Frame::HelloEnd => self.handle_reply(&Token::Map(0), now, sink)?,
                Frame::Reply if frame_end => self.handle_reply(&token, now, sink)?,
                Frame::Reply if self.expects(Step::Hello) => self.skip = Skip::Hello,
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

    /// Sorts a token: a reply, or part of what answers nothing (pushes and
    /// attributes, counted against their budget), or of an aggregate reply
    /// (`HELLO`'s map, handed on at its end). Fails once what answers
    /// nothing exceeds its budget.
    fn frame(
        &mut self,
        token: &Token<'_>,
        len: usize,
        frame_end: bool,
    ) -> Result<Frame, NodeError> {
        if self.skip == Skip::Hello {
            if !frame_end {
                return Ok(Frame::Skipped);
            }
            self.skip = Skip::No;
            return Ok(Frame::HelloEnd);
        }
        let reply = self.skip == Skip::No && !matches!(token, Token::Push(_) | Token::Attribute(_));
        if reply {
            self.unsolicited = 0;
            return Ok(Frame::Reply);
        }
        self.unsolicited += len;
        if self.unsolicited > UNSOLICITED_BUDGET {
            return Err(NodeError::Unsolicited);
        }
        match &mut self.skip {
            Skip::Push(push) => {
                let depth = self.decoder.depth();
                push.read(
                    token,
                    is_aggregate(token) || depth > 1,
                    self.config.wake.as_ref().map(|c| &c[..]),
                );
                if frame_end {
                    let push = *push;
                    self.skip = Skip::No;
                    return Ok(Frame::Push(push));
                }
            }
            Skip::Attribute if self.decoder.depth() == 0 => self.skip = Skip::No,
            Skip::Attribute | Skip::Hello => {}
            Skip::No => match token {
                Token::Push(_) if !frame_end => self.skip = Skip::Push(PushRead::NEW),
                Token::Attribute(_) if self.decoder.depth() > 0 => self.skip = Skip::Attribute,
                _ => {}
            },
        }
        Ok(Frame::Skipped)
    }

    /// Whether the oldest request unanswered is handshake step `step`.
    fn expects(&self, step: Step) -> bool {
        matches!(self.pending.front(), Some(Pending { expect: Expect::Step(s), .. }) if *s == step)
    }

    /// A whole push: a wake-up for a waiter of this client goes to `sink`;
    /// the confirmation of the handshake's `SUBSCRIBE` is that step's
    /// reply; anything else was skipped.
    fn handle_push(
        &mut self,
        push: PushRead,
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        match (push.kind, push.ours, push.id) {
            (PushKind::Message, true, Some(id)) => {
                sink.on_wake(id, push.later.map(Duration::from_millis), now)
            }
            (PushKind::Subscribe, true, _) if self.expects(Step::Subscribe) => {
                self.unsolicited = 0;
                self.pending.pop_front();
                self.handshake_progress(now);
            }
            _ => {}
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
        let Some(pending) = self.pending.front().copied() else {
            // A reply to a request never sent.
            return Err(NodeError::UnexpectedReply);
        };
        if self.late_since.is_some() && now <= after(pending.sent, self.config.request_timeout) {
            // An answer in time: the connection keeps up.
            self.late_since = None;
        }
        // A request sent again (`NOSCRIPT`) is queued once this one is off
        // the queue: a full queue never grows.
        let again = match pending.expect {
            Expect::Step(step) => {
                self.handle_step(step, token)?;
                None
            }
            Expect::Command(sent) => self
                .handle_command_reply(sent, token, now, sink)?
                .map(|sent| Pending::new(Expect::Command(sent), pending.sent, &self.config)),
        };
        self.pending.pop_front();
        if let Some(again) = again {
            self.pending.push_back(again);
        }
        self.handshake_progress(now);
        Ok(())
    }

    /// The reply to a step of the handshake: what it teaches about the
    /// master is kept; a refusal fails the connection.
    fn handle_step(&mut self, step: Step, token: &Token<'_>) -> Result<(), NodeError> {
        if matches!(step, Step::Hello | Step::Subscribe) {
            self.handle_wake_step(step, token);
            return Ok(());
        }
        match commands::handshake_ok(step, token) {
            Ok(true) => learn(
                &mut self.info,
                [&mut self.marker, &mut self.longest],
                step,
                token,
            ),
            Ok(false) => Err(NodeError::UnexpectedReply),
            Err(error) => Err(NodeError::Handshake(error)),
        }
    }

    /// The reply to `HELLO 3` or an error in answer to `SUBSCRIBE` (which
    /// is confirmed by a push). Neither refusal fails the connection: a
    /// server that will not speak RESP3 or let this user subscribe (an ACL
    /// without those permissions) serves locks all the same, and its
    /// releases tell nobody. `SUBSCRIBE` goes out only once `HELLO` has
    /// succeeded: on a RESP2 connection it would take over the connection.
    fn handle_wake_step(&mut self, step: Step, token: &Token<'_>) {
        let refused = matches!(token, Token::Error(_) | Token::BulkError(_));
        match (step, &self.config.wake) {
            (Step::Hello, Some(channel)) if !refused => {
                crate::resp::encode_command(
                    &mut self.out,
                    &[b"SUBSCRIBE".as_slice().into(), channel.as_slice().into()],
                );
                // Its reply comes after the handshake's other steps and
                // before the commands held back for the handshake, which
                // are written once it is over.
                let sent = self
                    .pending
                    .front()
                    .map_or_else(crate::clock::now, |p| p.sent);
                let at = self
                    .pending
                    .iter()
                    .position(|p| matches!(p.expect, Expect::Command(_)))
                    .unwrap_or(self.pending.len());
                let step = Pending::new(Expect::Step(Step::Subscribe), sent, &self.config);
                self.pending.insert(at, step);
            }
            _ => self.wakes = false,
        }
    }

    /// The reply to lock command `sent`: told to its round if the round
    /// still waits; the request sent again with its script if the reply
    /// is `NOSCRIPT` and that is safe (returned, to queue).
    fn handle_command_reply(
        &mut self,
        sent: Sent,
        token: &Token<'_>,
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<Option<Sent>, NodeError> {
        let mut outcome = commands::classify(&sent.shape, token);
        let args = 0..sent.kept();
        if self.replay.len() < args.end {
            return Err(NodeError::UnexpectedReply);
        }
        if outcome == Outcome::NoScript && sent.shape.is_eval() {
            // EVAL carries the script: it cannot be missing.
            outcome = Outcome::Server(ServerError::new(b"NOSCRIPT"));
        }
        let live = sink.is_live(sent.round);
        let again = match outcome {
            Outcome::Unexpected => return Err(NodeError::UnexpectedReply),
            // An extend of a round that is over is never replayed: newer
            // commands (a later extend of the same lock, with another TTL)
            // may already have been applied on this master, and this one
            // must not overtake them. The lock's validity already assumes
            // the worst of this round. Nor is an acquire (of several keys):
            // its release may be queued already, and must come after it.
            Outcome::NoScript if sent.shape.op() != Op::Release && !live => None,
            // The script cache was emptied: the same request again with the
            // script, for this round, or a release of a finished one (it
            // frees a key; with its own token it cannot touch a newer lock).
            Outcome::NoScript => Some(self.resend_with_script(sent, args.end)?),
            _ if live => {
                self.deliver(sent, outcome, now, sink);
                None
            }
            _ => None,
        };
        // Drop the consumed arguments now: with early decision a connection
        // may never be idle, so waiting for an empty arena could grow it
        // without bound. What is left is a request or two, cheap to move.
        // (A request sent again took them to the arena's end.)
        if args.end > 0 && again.is_none() {
            self.replay.drain(..args.end);
        }
        Ok(again)
    }

    /// Encodes `sent` again as `EVAL` with its script; its arguments (the
    /// arena's first `used` bytes) move to the arena's end, where the
    /// request sent again (last in the queue) finds them: a full arena
    /// never grows. Fails if the arena does not hold them.
    fn resend_with_script(&mut self, sent: Sent, used: usize) -> Result<Sent, NodeError> {
        let shape = sent.shape.with_script();
        let args = self.replay.get(..used).ok_or(NodeError::UnexpectedReply)?;
        let command = Command::join(shape, args).ok_or(NodeError::UnexpectedReply)?;
        command.encode(&mut self.out);
        self.replay.rotate_left(used);
        Ok(Sent { shape, ..sent })
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

    fn handshake_progress(&mut self, now: Instant) {
        if let State::Handshaking { .. } = self.state {
            let waiting = matches!(
                self.pending.front(),
                Some(Pending {
                    expect: Expect::Step(_),
                    ..
                })
            );
            if !waiting {
                let (guard, ours) = match &self.config.guard {
                    Some((guard, ours)) => (Some(*guard), &ours[..]),
                    None => (None, &[][..]),
                };
                self.suspicion = self.sighting.handle_handshake(
                    self.info.as_ref(),
                    self.marker.as_ref(),
                    ours,
                    self.longest.as_ref().zip(self.config.longest_ttl),
                    guard,
                    now,
                );
                self.fresh = true;
                self.reconnected = self.connects > 1;
                self.state = State::Ready;
                self.backoff = self.config.backoff_min;
                self.last_error = None;
                self.out.extend_from_slice(&self.held);
                self.held.clear();
            }
        }
    }
}

/// Whether `token` opens an aggregate.
fn is_aggregate(token: &Token<'_>) -> bool {
    matches!(
        token,
        Token::Array(_)
            | Token::Set(_)
            | Token::Push(_)
            | Token::Map(_)
            | Token::Attribute(_)
            | Token::StreamedString
            | Token::StreamedArray
            | Token::StreamedSet
            | Token::StreamedMap
    )
}

/// Keeps what a handshake reply says of the server; refuses a replica and
/// a cluster-mode node.
fn learn(
    info: &mut Option<Info>,
    [marker, longest]: [&mut Option<Found>; 2],
    step: Step,
    token: &Token<'_>,
) -> Result<(), NodeError> {
    match (step, token) {
        (Step::Identify, Token::Bulk(text) | Token::Verbatim { text, .. }) => {
            let parsed = Info::parse(text);
            if parsed.replica {
                return Err(NodeError::Replica);
            }
            if parsed.cluster {
                return Err(NodeError::ClusterMode);
            }
            *info = Some(parsed);
        }
        (Step::Marker | Step::LongestTtl, _) => {
            let found = match token {
                Token::Bulk(value) => Found::Holds(MarkerValue::from_slice(value)),
                Token::Null(_) => Found::Missing,
                // `WRONGTYPE` (`handshake_ok` let no other error through).
                _ => Found::Foreign,
            };
            let slot = if step == Step::Marker {
                marker
            } else {
                longest
            };
            *slot = Some(found);
        }
        _ => {}
    }
    Ok(())
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
