//! A session that waiters of its client are told on: `HELLO 3`, then
//! `SUBSCRIBE` to the client's channel once `HELLO` succeeded, pushes read
//! element by element. With a fake clock and no socket.

#![allow(clippy::expect_used, reason = "a test fails loudly")]

use std::time::{Duration, Instant};

use super::{MS, command, config, queue, scripts, take};
use crate::commands::{Outcome, WakeChannel, wake_channel};
use crate::ids::{RoundId, WaitId};
use crate::link::limits::UNSOLICITED_BUDGET;
use crate::link::{Link, LinkConfig, Sink};
use crate::rules::{NodeError, Op, Reply};
use crate::scripts::{LEAVE_SHA1, WAIT_ACQUIRE_SHA1};

const CHANNEL_ID: u64 = 0x00c0_ffee;

fn channel() -> WakeChannel {
    wake_channel(CHANNEL_ID)
}

fn wake_config() -> LinkConfig {
    LinkConfig {
        wake: Some(channel()),
        ..config()
    }
}

/// What a session handed on: replies of round 1, and wake-ups.
#[derive(Default)]
struct Seen {
    replies: Vec<(Op, Outcome)>,
    wakes: Vec<(u64, Option<Duration>)>,
}

impl Sink for Seen {
    fn is_live(&self, id: RoundId) -> bool {
        id.get() == 1
    }

    fn on_reply(&mut self, _: RoundId, op: Op, outcome: Outcome, _: Instant) {
        self.replies.push((op, outcome));
    }

    fn on_wake(&mut self, id: WaitId, later: Option<Duration>, _: Instant) {
        self.wakes.push((id.get(), later));
    }
}

pub(super) fn feed(
    link: &mut Link,
    bytes: &[u8],
    now: Instant,
    sink: &mut dyn Sink,
) -> Result<(), NodeError> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let buf = link.read_buf()?;
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        link.handle_read(n, now, sink)?;
    }
    Ok(())
}

pub(super) fn bulk(bytes: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", bytes.len()).into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
    out
}

/// A RESP3 push of `kind` on `channel` with `payload`.
fn push(kind: &[u8], channel: &[u8], payload: &[u8]) -> Vec<u8> {
    [b">3\r\n".to_vec(), bulk(kind), bulk(channel), bulk(payload)].concat()
}

/// `HELLO 3`'s map, as a server answers it (nested: the modules array).
fn hello() -> Vec<u8> {
    b"%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n".to_vec()
}

/// The handshake's `SCRIPT LOAD` replies, the waiters' scripts included.
fn wake_scripts() -> Vec<u8> {
    let mut replies = scripts().into_bytes();
    for sha1 in [WAIT_ACQUIRE_SHA1, LEAVE_SHA1] {
        replies.extend(bulk(sha1.as_bytes()));
    }
    replies
}

/// A session through its handshake, `SUBSCRIBE` confirmed.
pub(super) fn subscribed(t0: Instant) -> Link {
    let mut link = Link::new(wake_config(), t0);
    let sent = handshake(&mut link, t0, &mut Seen::default());
    assert!(
        sent.contains("HELLO") && sent.contains("SUBSCRIBE"),
        "{sent}"
    );
    assert!(link.is_ready());
    link
}

/// Connects `link` and answers its handshake, `SUBSCRIBE` confirmed (and
/// nothing after it); returns what it sent.
pub(super) fn handshake(link: &mut Link, t: Instant, sink: &mut dyn Sink) -> String {
    link.start(None, None, 0, t);
    link.connected(t);
    feed(link, &[hello(), wake_scripts()].concat(), t, sink).expect("handshake");
    let sent = take(link);
    let confirm = [
        b">3\r\n".to_vec(),
        bulk(b"subscribe"),
        bulk(&channel()),
        b":1\r\n".to_vec(),
    ];
    feed(link, &confirm.concat(), t, sink).expect("subscribed");
    sent
}

#[test]
fn a_command_queued_during_the_handshake_is_answered_after_the_subscribe() {
    let t0 = Instant::now();
    let mut link = Link::new(wake_config(), t0);
    link.start(None, None, 0, t0);
    link.connected(t0);
    let acquire = command(Op::Acquire, 30_000);
    queue(&mut link, acquire, 1, t0).expect("held back for the handshake");
    let handshake = take(&mut link);
    assert!(
        handshake.contains("HELLO") && !handshake.contains("SUBSCRIBE"),
        "{handshake}"
    );
    let mut seen = Seen::default();
    feed(
        &mut link,
        &[hello(), wake_scripts()].concat(),
        t0,
        &mut seen,
    )
    .expect("steps");
    let sent = take(&mut link);
    assert!(
        sent.contains("SUBSCRIBE") && !sent.contains("SET"),
        "only once HELLO succeeded: {sent}"
    );
    assert!(!link.is_ready(), "the handshake waits for the subscription");
    let confirm = [
        b">3\r\n".to_vec(),
        bulk(b"subscribe"),
        bulk(&channel()),
        b":1\r\n".to_vec(),
    ];
    feed(&mut link, &confirm.concat(), t0, &mut seen).expect("subscribed");
    assert!(link.is_ready());
    assert!(
        take(&mut link).contains("SET"),
        "the held command goes out after it"
    );
    feed(&mut link, b"+OK\r\n", t0 + MS, &mut seen).expect("reply");
    assert_eq!(seen.replies, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);
}

#[test]
fn a_refused_hello_leaves_a_resp2_session_that_never_subscribes() {
    let t0 = Instant::now();
    let mut link = Link::new(wake_config(), t0);
    link.start(None, None, 0, t0);
    link.connected(t0);
    take(&mut link);
    let mut seen = Seen::default();
    let refused = b"-NOPERM this user has no permissions to run the 'hello' command\r\n";
    feed(
        &mut link,
        &[&refused[..], &wake_scripts()].concat(),
        t0,
        &mut seen,
    )
    .expect("not fatal");
    assert!(link.is_ready(), "locks are served without wake-ups");
    assert!(!take(&mut link).contains("SUBSCRIBE"));
}

/// A session whose `HELLO` and `SCRIPT LOAD`s were answered: its
/// `SUBSCRIBE` is on its way, the handshake waits for it.
fn subscribing(t0: Instant, seen: &mut Seen) -> Link {
    let mut link = Link::new(wake_config(), t0);
    link.start(None, None, 0, t0);
    link.connected(t0);
    take(&mut link);
    feed(&mut link, &[hello(), wake_scripts()].concat(), t0, seen).expect("steps");
    link
}

#[test]
fn a_refused_subscribe_is_not_fatal() {
    let t0 = Instant::now();
    let mut seen = Seen::default();
    let mut link = subscribing(t0, &mut seen);
    assert!(take(&mut link).contains("SUBSCRIBE"));
    let refused = b"-NOPERM this user has no permissions to access one of the channels\r\n";
    feed(&mut link, refused, t0, &mut seen).expect("not fatal");
    assert!(link.is_ready());
}

#[test]
fn wake_ups_on_the_clients_channel_reach_the_sink_and_the_rest_is_skipped() {
    let t0 = Instant::now();
    let mut link = subscribed(t0);
    let mut seen = Seen::default();
    let other = wake_channel(CHANNEL_ID + 1);
    let bytes = [
        push(b"message", &channel(), b"42"),
        push(b"message", &other, b"43"),
        push(b"message", &channel(), b"44 300"),
        push(b"message", &channel(), b"not a number"),
        push(b"pmessage", &channel(), b"45"),
        // A push with an aggregate inside.
        b">3\r\n$7\r\nmessage\r\n*1\r\n:1\r\n$2\r\n46\r\n".to_vec(),
    ]
    .concat();
    // Split anywhere: byte by byte.
    for byte in &bytes {
        feed(&mut link, std::slice::from_ref(byte), t0, &mut seen).expect("pushes");
    }
    assert_eq!(
        seen.wakes,
        [(42, None), (44, Some(Duration::from_millis(300)))]
    );
    // Replies still match their requests around pushes.
    let extend = command(Op::Extend, 30_000);
    queue(&mut link, extend, 1, t0).expect("queued");
    take(&mut link);
    feed(
        &mut link,
        &[push(b"message", &channel(), b"47"), b":1\r\n".to_vec()].concat(),
        t0,
        &mut seen,
    )
    .expect("reply");
    assert_eq!(seen.replies, [(Op::Extend, Outcome::Reply(Reply::Ok))]);
    assert_eq!(seen.wakes.len(), 3);
}

#[test]
fn a_flood_of_wake_ups_between_two_replies_drops_the_connection() {
    let t0 = Instant::now();
    let mut link = subscribed(t0);
    let mut seen = Seen::default();
    let one = push(b"message", &channel(), b"42");
    let flood: Vec<u8> = one.repeat(UNSOLICITED_BUDGET / one.len() + 1);
    assert_eq!(
        feed(&mut link, &flood, t0, &mut seen),
        Err(NodeError::Unsolicited)
    );
}

/// Only a `subscribe` push on the client's channel with its count, while
/// the handshake waits for it, confirms the subscription: one whose count
/// is an aggregate does not, nor does a confirmation nobody waits for
/// (it would take the place of a command's reply).
#[test]
fn only_the_awaited_subscribe_push_confirms() {
    let t0 = Instant::now();
    let mut seen = Seen::default();
    let mut link = subscribing(t0, &mut seen);
    let confirm = |count: &[u8]| {
        [
            b">3\r\n".to_vec(),
            bulk(b"subscribe"),
            bulk(&channel()),
            count.to_vec(),
        ]
        .concat()
    };
    feed(&mut link, &confirm(b"*0\r\n"), t0, &mut seen).expect("skipped");
    assert!(!link.is_ready(), "an aggregate is no count");
    feed(&mut link, &confirm(b":1\r\n"), t0, &mut seen).expect("subscribed");
    assert!(link.is_ready());
    let acquire = command(Op::Acquire, 30_000);
    queue(&mut link, acquire, 1, t0).expect("queued");
    take(&mut link);
    let late = [confirm(b":1\r\n"), b"+OK\r\n".to_vec()].concat();
    feed(&mut link, &late, t0, &mut seen).expect("the reply matched");
    assert_eq!(seen.replies, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);
}

/// A sink whose round 1 is over and whose wait 7 is `waiting` or not.
struct Late {
    waiting: bool,
}

impl Sink for Late {
    fn is_live(&self, _: RoundId) -> bool {
        false
    }

    fn on_reply(&mut self, _: RoundId, _: Op, _: Outcome, _: Instant) {
        panic!("no round is live");
    }

    fn is_waiting(&self, id: WaitId) -> bool {
        assert_eq!(id.get(), 7, "the wait its member names");
        self.waiting
    }
}

/// The refusal of an acquire that waits, read after its round was
/// decided: the master queued the waiter. Once its wait is over the
/// waiter leaves that queue at once, by the same member (else the entry,
/// first in line, would hold the key for a window, for nobody); while it
/// goes on, the entry stays, for the wait's own leave.
#[test]
fn a_late_refusal_of_a_wait_that_is_over_leaves_the_queue() {
    use crate::commands::{Command, Keys};
    let member = b"4000|7|redlock-mio:wake:00c0ffee";
    let token = [b't'; 20];
    for waiting in [false, true] {
        let t0 = Instant::now();
        let mut link = subscribed(t0);
        let wait = Command::wait_acquire(Keys::One(b"jobs"), &token, 30_000, (member, 1, 2));
        link.queue(
            &wait,
            &super::encoded(&wait),
            RoundId::from_raw(1),
            false,
            t0,
        )
        .expect("queued");
        assert!(take(&mut link).contains(WAIT_ACQUIRE_SHA1));
        feed(&mut link, b"+WAIT 100\r\n", t0, &mut Late { waiting }).expect("read");
        let sent = take(&mut link);
        if waiting {
            assert_eq!(sent, "", "the wait goes on: its entry stays");
        } else {
            assert!(sent.contains(LEAVE_SHA1), "{sent}");
            assert!(sent.contains("jobs") && sent.contains("4000|7|"), "{sent}");
            assert!(!sent.contains("tttt"), "the leave carries no token: {sent}");
            // Its reply is matched and dropped.
            feed(&mut link, b":1\r\n", t0, &mut Late { waiting }).expect("read");
        }
    }
}
