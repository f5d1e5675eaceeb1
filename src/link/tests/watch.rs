//! A session that watches held keys: `CLIENT TRACKING` asked only once a
//! key is watched (at once on a ready connection, else in the handshake
//! after `HELLO 3`), each read tracked (`CLIENT CACHING YES` before its
//! `GET`) and answered to the sink, and invalidation pushes handed on key
//! by key. With a fake clock and no socket.

#![allow(clippy::expect_used, reason = "a test fails loudly")]

use std::time::Instant;

use super::take;
use super::wake::{bulk, feed, handshake, subscribed};
use crate::commands::Outcome;
use crate::ids::{RoundId, WatchId};
use crate::link::{Invalidated, KeyRead, Sink};
use crate::rules::{NodeError, Op};

/// What a session handed on: reads and invalidations, owned.
#[derive(Default, Debug)]
struct Seen {
    reads: Vec<(u64, Option<Vec<u8>>, bool)>,
    invalidated: Vec<Option<Vec<u8>>>,
}

impl Sink for Seen {
    fn is_live(&self, _: RoundId) -> bool {
        false
    }

    fn on_reply(&mut self, _: RoundId, _: Op, _: Outcome, _: Instant) {}

    fn on_invalidate(&mut self, what: Invalidated<'_>, _: Instant) {
        self.invalidated.push(match what {
            Invalidated::Key(key) => Some(key.to_vec()),
            Invalidated::All => None,
        });
    }

    fn on_read(&mut self, id: WatchId, read: KeyRead<'_>, _: Instant) {
        self.reads.push(match read {
            KeyRead::Value(value) => (id.0, Some(value.to_vec()), false),
            KeyRead::Missing => (id.0, None, false),
            KeyRead::Failed => (id.0, None, true),
        });
    }
}

/// An invalidation push of `keys`.
fn invalidate(keys: &[&[u8]]) -> Vec<u8> {
    let mut out = [b">2\r\n".to_vec(), bulk(b"invalidate")].concat();
    out.extend(format!("*{}\r\n", keys.len()).into_bytes());
    for key in keys {
        out.extend(bulk(key));
    }
    out
}

#[test]
fn nothing_is_tracked_until_a_key_is_watched_then_reads_are_tracked() {
    let t0 = Instant::now();
    let mut link = subscribed(t0);
    let mut seen = Seen::default();
    link.queue_read(WatchId(1), b"k", t0).expect("queued");
    let sent = take(&mut link);
    assert!(
        !sent.contains("TRACKING") && !sent.contains("CACHING"),
        "{sent}"
    );
    assert!(sent.contains("GET"), "{sent}");
    feed(&mut link, &bulk(b"tok"), t0, &mut seen).expect("read");
    assert_eq!(seen.reads, [(1, Some(b"tok".to_vec()), false)]);

    link.track(t0);
    link.queue_read(WatchId(2), b"k", t0).expect("queued");
    let sent = take(&mut link);
    let tracking = sent.find("TRACKING").expect("tracking asked");
    let caching = sent.find("CACHING").expect("the read is tracked");
    assert!(
        tracking < caching && sent.contains("OPTIN") && sent.contains("NOLOOP"),
        "{sent}"
    );
    feed(&mut link, b"+OK\r\n+OK\r\n_\r\n", t0, &mut seen).expect("read");
    assert_eq!(seen.reads[1], (2, None, false), "a missing key");
    // Asked once per connection.
    link.track(t0);
    assert!(take(&mut link).is_empty());
}

#[test]
fn a_link_that_wants_tracking_asks_again_in_every_handshake() {
    let t0 = Instant::now();
    let mut link = subscribed(t0);
    link.track(t0);
    let _ = take(&mut link);
    link.close(NodeError::Closed, t0);
    let t1 = t0 + std::time::Duration::from_secs(1);
    let mut seen = Seen::default();
    let sent = handshake(&mut link, t1, &mut seen);
    assert!(
        sent.contains("SUBSCRIBE") && sent.contains("TRACKING"),
        "{sent}"
    );
    assert!(!link.is_ready(), "the tracking step is still out");
    feed(&mut link, b"+OK\r\n", t1, &mut seen).expect("tracking");
    assert!(link.is_ready());
}

#[test]
fn invalidations_are_handed_on_key_by_key_and_a_flush_as_every_key() {
    let t0 = Instant::now();
    let mut link = subscribed(t0);
    let mut seen = Seen::default();
    let frames = [
        invalidate(&[b"a", b"b"]),
        invalidate(&[]),
        [b">2\r\n".to_vec(), bulk(b"invalidate"), b"_\r\n".to_vec()].concat(),
        // Another shape: taken at its widest, once.
        [b">2\r\n".to_vec(), bulk(b"invalidate"), b":7\r\n".to_vec()].concat(),
        [
            b">3\r\n".to_vec(),
            bulk(b"invalidate"),
            b"*1\r\n".to_vec(),
            b"*1\r\n".to_vec(),
            bulk(b"x"),
            bulk(b"y"),
        ]
        .concat(),
    ]
    .concat();
    // One byte at a time too: a key may arrive in pieces.
    for chunk in frames.chunks(1) {
        feed(&mut link, chunk, t0, &mut seen).expect("pushes are no error");
    }
    assert_eq!(
        seen.invalidated,
        [Some(b"a".to_vec()), Some(b"b".to_vec()), None, None, None]
    );
    assert!(link.is_ready(), "nothing was answered by the pushes");
}

#[test]
fn a_refused_tracking_leaves_the_reads_untracked_and_a_read_error_says_nothing() {
    let t0 = Instant::now();
    let mut link = subscribed(t0);
    link.track(t0);
    let _ = take(&mut link);
    let mut seen = Seen::default();
    feed(&mut link, b"-NOPERM no CLIENT for you\r\n", t0, &mut seen).expect("refused, not fatal");
    for id in [3, 4] {
        link.queue_read(WatchId(id), b"k", t0).expect("queued");
    }
    let sent = take(&mut link);
    assert!(!sent.contains("CACHING"), "{sent}");
    feed(&mut link, b"-WRONGTYPE x\r\n-ERR busy\r\n", t0, &mut seen).expect("answered");
    assert_eq!(
        seen.reads,
        [(3, None, false), (4, None, true)],
        "a key of another type holds no token; an error says nothing"
    );
}
