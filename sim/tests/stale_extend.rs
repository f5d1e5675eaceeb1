//! A directed scenario, driven by hand through the client's core and the
//! master model: an extend written on a connection the client then drops
//! can still reach the master later (a socket closed with data unsent
//! keeps retransmitting it), after a newer extend sent on the new
//! connection, and shorten the key under its holder.
//!
//! The extend scripts never shorten a key (`PEXPIRE … GT`), so the stale
//! extend lands without effect.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly"
)]

mod rig;

use std::time::Duration;

use redlock_mio::NodeError;
use redlock_mio_sim::client::Names;

use rig::Rig;

/// Three masters. The holder extends to 100 ms; master 0's copy of that
/// extend is delayed (a partition) and the client drops the connection as
/// stalled; masters 1 and 2 apply it, and the extend succeeds. The holder
/// extends again, to 1 s: masters 0 (on a new connection) and 1 apply it,
/// master 2 is paused, and the extend succeeds, the lock valid for about a
/// second. Then master 0 gets the stale extend at last; were it to
/// shorten the key to 100 ms, 120 ms later only master 1 would hold it,
/// and another client would win masters 0 and 2 while the holder still
/// counts on about 850 ms of validity. It changes nothing there.
#[test]
fn a_stale_extend_from_a_dropped_connection_cannot_shorten_a_held_lock() {
    let mut rig = Rig::new(3);
    let names = Names::one(b"res").unwrap();
    let token = [7u8; 20];
    let now = rig.instant();
    let id = rig
        .client
        .begin_acquire(&names, &token, Duration::from_secs(1), None, None, now)
        .unwrap();
    for i in 0..3 {
        rig.exchange(i);
    }
    let held = rig.client.end_acquire(id, &names, &token, rig.instant());
    let mut held = held.expect("acquired on three masters");

    // The first extend: master 0's copy is held up on the wire.
    rig.advance(Duration::from_millis(5));
    let now = rig.instant();
    let ext1 = rig
        .client
        .begin_extend(&held, Duration::from_millis(100), now)
        .unwrap();
    let stale = rig.take(0);
    let mut old = rig.conns[0].take().unwrap();
    rig.exchange(1);
    rig.exchange(2);
    rig.client
        .end_extend(ext1, &mut held, rig.instant())
        .expect("two of three");
    // The client gives up on master 0's connection (stalled): the master
    // has not seen it close yet.
    let now = rig.instant();
    rig.client.handle_failure(0, NodeError::Stalled, now);

    // The second extend: master 0 on a new connection, master 2 paused.
    rig.advance(Duration::from_millis(5));
    let now = rig.instant();
    let ext2 = rig
        .client
        .begin_extend(&held, Duration::from_secs(1), now)
        .unwrap();
    rig.open(0);
    rig.exchange(1);
    let _paused = rig.take(2);
    rig.client
        .end_extend(ext2, &mut held, rig.instant())
        .expect("two of three");

    // The stale extend reaches master 0 at last.
    rig.advance(Duration::from_millis(1));
    let mut out = Vec::new();
    let now_us = rig.now_us(0);
    rig.masters[0].handle(&mut old, &stale, now_us, &mut out);

    rig.advance(Duration::from_millis(120));
    let left = held.valid_until().saturating_duration_since(rig.instant());
    let quorum = 2;
    assert!(
        left.is_zero() || rig.holding(b"res", &token) >= quorum,
        "the holder counts on {left:?} more, but only {} of 3 masters hold its key",
        rig.holding(b"res", &token)
    );
}
