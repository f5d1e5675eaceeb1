//! A session's limits and the frames around replies, with a fake clock
//! and no socket: the largest replies the decoder takes, the requests and
//! unwritten bytes a connection holds before it lags, the budget of frames
//! that answer nothing, attributes and empty pushes, the connect deadline,
//! and a reconnect told apart from the first connect.

#![allow(clippy::unwrap_used, reason = "a test fails loudly")]

use std::time::Instant;

use super::{MS, bulk, command, command_on, config, feed, queue, ready, ready_with, scripts, take};
use crate::commands::{Command, Keys, Outcome};
use crate::link::{Link, LinkConfig, encoded};
use crate::rules::{NodeError, Op, Reply, ServerError};

/// The decoder's limit on a reply's line and bulk string: 8 KiB.
const REPLY_LIMIT: usize = 8 * 1024;

/// The unwritten bytes a connection holds before it lags, for a client
/// with few rounds in flight: 64 KiB.
const MIN_UNWRITTEN: usize = 64 * 1024;

/// `INFO` text of exactly `len` bytes (padded with a comment line).
fn info_text(len: usize) -> String {
    let fields = "# Server\r\nrun_id:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nuptime_in_seconds:3600\r\nrole:master\r\ncluster_enabled:0\r\n#";
    let mut text = fields.to_owned();
    text.push_str(&"x".repeat(len - fields.len() - 2));
    text.push_str("\r\n");
    assert_eq!(text.len(), len);
    text
}

/// A handshake that asks `INFO`, answered with `INFO` text of `len` bytes.
fn identified(len: usize, t0: Instant) -> Result<Link, NodeError> {
    let mut link = Link::new(
        LinkConfig {
            identify: true,
            ..config()
        },
        t0,
    );
    link.start(None, None, 0, t0);
    link.connected(t0);
    take(&mut link);
    let replies = scripts() + &bulk(&info_text(len));
    feed(&mut link, replies.as_bytes(), t0, 0)?;
    Ok(link)
}

#[test]
fn the_largest_bulk_reply_fits_and_a_byte_more_fails() {
    let t0 = Instant::now();
    let link = identified(REPLY_LIMIT, t0).unwrap();
    assert!(link.is_ready());
    assert!(matches!(
        identified(REPLY_LIMIT + 1, t0).map(|_| ()),
        Err(NodeError::Protocol(_))
    ));
}

/// An error line up to the limit reaches its round whole, also when it
/// arrives across the read buffer's end behind other replies (the buffer
/// moves what is left of it to its start); a byte more fails the link.
#[test]
fn the_longest_error_line_fits_across_the_buffers_end() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    for _ in 0..21 {
        queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    }
    take(&mut link);
    let message = format!("ERR {}", "x".repeat(REPLY_LIMIT - 4));
    let replies = "+OK\r\n".repeat(20) + "-" + &message + "\r\n";
    let outcomes = feed(&mut link, replies.as_bytes(), t0, 1).unwrap();
    assert_eq!(outcomes.len(), 21);
    assert_eq!(
        outcomes[20],
        (
            Op::Acquire,
            Outcome::Server(ServerError::new(message.as_bytes()))
        )
    );
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let longer = format!("-{message}x\r\n");
    assert!(matches!(
        feed(&mut link, longer.as_bytes(), t0, 1),
        Err(NodeError::Protocol(_))
    ));
}

/// A command of `op` on a resource whose encoding is exactly `len` bytes.
fn sized(op: Op, name: &mut Vec<u8>, len: usize) -> Command<'_> {
    name.clear();
    name.resize(len, b'n');
    while encoded(&command_on(op, name, b"tok", 30_000)).len() > len {
        name.pop();
    }
    let command = command_on(op, name, b"tok", 30_000);
    assert_eq!(encoded(&command).len(), len, "a size the encoding skips");
    command
}

/// Queues copies of `command` until the link lags; returns how many it
/// took.
fn fill(link: &mut Link, command: Command<'_>, t0: Instant) -> usize {
    let mut queued = 0;
    loop {
        match queue(link, command, 1, t0) {
            Ok(()) if queued < 10_000 => queued += 1,
            Ok(()) => panic!("no limit"),
            Err(NodeError::Lagging) => return queued,
            Err(other) => panic!("{other:?}"),
        }
    }
}

/// A client with few rounds in flight: its connections take commands
/// until 64 KiB wait unwritten (the last one taken may end past it), also
/// while the handshake holds them back; bytes written make room again.
#[test]
fn unwritten_bytes_stop_new_requests_at_64_kib() {
    let t0 = Instant::now();
    // Room for 48 requests: the bytes are what stops them.
    let few = LinkConfig {
        in_flight: 8,
        ..config()
    };
    let mut name = Vec::new();
    // 32 commands of 2 KiB are exactly 64 KiB: a 33rd is still taken.
    let command = sized(Op::Acquire, &mut name, 2048);
    let mut link = ready_with(few, t0);
    assert_eq!(fill(&mut link, command, t0), 33);
    // Written, a command's bytes no longer count.
    link.advance(2048);
    assert_eq!(fill(&mut link, command, t0), 1);
    // Before the handshake is over, the commands wait in another buffer,
    // behind the handshake's bytes, and count the same.
    let mut link = Link::new(few, t0);
    link.start(None, None, 0, t0);
    let handshake = link.out.len();
    assert_eq!(
        fill(&mut link, command, t0),
        (MIN_UNWRITTEN - handshake) / 2048 + 1
    );
}

/// A client with many rounds in flight: its connections hold two
/// requests per round and 40 more (8 of them for releases only), and
/// 288 bytes per request before they lag; releases that must reach the
/// master have a reserve of a request per round and 288 bytes each. No
/// buffer grows, and none is allocated far past what the limits use.
#[test]
fn many_rounds_in_flight_raise_the_limits() {
    let t0 = Instant::now();
    let many = LinkConfig {
        in_flight: 300,
        ..config()
    };
    let mut link = ready_with(many, t0);
    assert_eq!(fill(&mut link, command(Op::Acquire, 30_000), t0), 632);
    assert_eq!(fill(&mut link, command(Op::Release, 0), t0), 8);
    let must = command(Op::Release, 0).reaching(1);
    assert_eq!(fill(&mut link, must, t0), 300);

    let mut link = ready_with(many, t0);
    let capacity = link.out.capacity();
    let mut name = Vec::new();
    let command = sized(Op::Acquire, &mut name, 1020);
    // (32 + 8 + 300) requests of 288 bytes: 96 commands of 1020 bytes.
    assert_eq!(fill(&mut link, command, t0), 97);
    let mut name = Vec::new();
    let release = sized(Op::Release, &mut name, 1020).reaching(1);
    let (unwritten, reserved) = (97 * 1020, 340 * 288 + 300 * 288);
    assert_eq!(
        fill(&mut link, release, t0),
        (reserved - unwritten) / 1020 + 1
    );
    assert_eq!(link.out.capacity(), capacity, "the output grew");
    assert!(capacity < 2 * reserved, "{capacity} bytes allocated");
}

/// Exactly the budget of frames that answer nothing (16 KiB) is skipped
/// between two replies; a byte more fails the link.
#[test]
fn sixteen_kib_of_pushes_between_two_replies_pass() {
    let t0 = Instant::now();
    let push = b">2\r\n+flood\r\n:1\r\n";
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let mut bytes = push.repeat(16 * 1024 / push.len());
    bytes.extend_from_slice(b"+OK\r\n");
    let outcomes = feed(&mut link, &bytes, t0, 1).unwrap();
    assert_eq!(outcomes, [(Op::Acquire, Outcome::Reply(Reply::Ok))]);
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let mut bytes = push.repeat(16 * 1024 / push.len());
    bytes.extend_from_slice(b">0\r\n");
    assert_eq!(feed(&mut link, &bytes, t0, 1), Err(NodeError::Unsolicited));
}

/// An attribute before a reply, nested ones and an empty push are
/// skipped; the reply after them reaches its round. An aggregate as the
/// reply to a lock command fails the link.
#[test]
fn attributes_and_empty_pushes_are_skipped() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    let replies = "|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n+OK\r\n>0\r\n|0\r\n$-1\r\n";
    let outcomes = feed(&mut link, replies.as_bytes(), t0, 1).unwrap();
    assert_eq!(
        outcomes,
        [
            (Op::Acquire, Outcome::Reply(Reply::Ok)),
            (Op::Acquire, Outcome::Reply(Reply::Refused))
        ]
    );
    queue(&mut link, command(Op::Acquire, 30_000), 1, t0).unwrap();
    assert_eq!(
        feed(&mut link, b"*1\r\n+OK\r\n", t0, 1),
        Err(NodeError::UnexpectedReply)
    );
}

/// The connect and the handshake have a deadline of their own, shorter
/// here than the stall timeout.
#[test]
fn a_connect_or_handshake_past_its_deadline_times_out() {
    let t0 = Instant::now();
    let quick = LinkConfig {
        connect_timeout: 100 * MS,
        ..config()
    };
    let mut link = Link::new(quick, t0);
    link.start(None, None, 0, t0);
    assert_eq!(link.next_timer(), Some(t0 + 100 * MS));
    assert_eq!(link.check_timers(t0 + 99 * MS), Ok(()));
    let timed_out = Err(NodeError::Connect(std::io::ErrorKind::TimedOut));
    assert_eq!(link.check_timers(t0 + 100 * MS), timed_out);
    link.connected(t0 + 50 * MS);
    assert_eq!(link.next_timer(), Some(t0 + 150 * MS));
    assert_eq!(link.check_timers(t0 + 149 * MS), Ok(()));
    assert_eq!(link.check_timers(t0 + 150 * MS), timed_out);
}

/// Every connect counts; a handshake after the first connect says the
/// link came back (wake-ups may have been lost meanwhile), once.
#[test]
fn a_reconnect_is_told_once_and_the_first_connect_is_none() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    assert_eq!(link.connects(), 1);
    assert!(!link.take_reconnected());
    for connects in 2..4 {
        link.close(NodeError::Closed, t0);
        link.start(None, None, 0, t0);
        link.connected(t0);
        take(&mut link);
        feed(&mut link, scripts().as_bytes(), t0, 0).unwrap();
        assert_eq!(link.connects(), connects);
        assert!(link.take_reconnected());
        assert!(!link.take_reconnected(), "told once");
    }
}

/// A request sent again with its script and answered `NOSCRIPT` again (a
/// server that lost the script it was just given) is not sent a third
/// time: its round gets the error.
#[test]
fn a_request_sent_again_is_not_sent_a_third_time() {
    let t0 = Instant::now();
    let mut link = ready(t0);
    queue(&mut link, command(Op::Extend, 9_000), 1, t0).unwrap();
    take(&mut link);
    assert_eq!(feed(&mut link, b"-NOSCRIPT x\r\n", t0, 1), Ok(vec![]));
    assert!(take(&mut link).contains("EVAL\r\n"));
    let outcomes = feed(&mut link, b"-NOSCRIPT x\r\n", t0, 1).unwrap();
    assert_eq!(
        outcomes,
        [(Op::Extend, Outcome::Server(ServerError::new(b"NOSCRIPT")))]
    );
    assert_eq!(take(&mut link), "");
}

/// A link filled to its last request with the largest commands of locks
/// kept inline (64-byte names, 20-byte tokens, 80-byte queue members),
/// written as they come, grows neither its queue nor the arena that keeps
/// their arguments.
#[test]
fn a_full_link_of_the_largest_inline_commands_grows_nothing() {
    let t0 = Instant::now();
    let many = LinkConfig {
        in_flight: 300,
        ..config()
    };
    let mut link = ready_with(many, t0);
    let capacities = (link.requests.capacity(), link.replay.capacity());
    let (name, token, member) = ([b'n'; 64], [b't'; 20], [b'm'; 80]);
    let keys = Keys::One(&name[..]);
    let written_fill = |link: &mut Link, command: Command<'_>| {
        let mut queued = 0;
        while queue(link, command, 1, t0).is_ok() {
            take(link);
            queued += 1;
            assert!(queued < 10_000, "no limit");
        }
        queued
    };
    let wait = Command::wait_acquire(keys, &token, 30_000, (&member, 1, 2));
    assert_eq!(written_fill(&mut link, wait), 632);
    let release = Command::release(keys, &token);
    assert_eq!(written_fill(&mut link, release), 8);
    assert_eq!(written_fill(&mut link, release.reaching(1)), 300);
    assert_eq!(
        (link.requests.capacity(), link.replay.capacity()),
        capacities,
        "a buffer grew"
    );
}

/// What a link allocates at build is what its limits need, not much more:
/// a read buffer for one reply at the decoder's limit (with its header),
/// an argument arena of well under 256 bytes per request it may hold.
#[test]
fn a_link_allocates_what_its_limits_need() {
    let link = Link::new(config(), Instant::now());
    assert!(link.input.len() > REPLY_LIMIT && link.input.len() < 2 * REPLY_LIMIT);
    let requests = link.config.capacity();
    assert!(
        link.replay.capacity() < 256 * requests,
        "{}",
        link.replay.capacity()
    );
    assert!(link.requests.capacity() >= requests);
}
