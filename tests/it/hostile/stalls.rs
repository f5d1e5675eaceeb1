//! Closes and stalls.

use std::thread;
use std::time::{Duration, Instant};

use redlock_mio::{NodeError, NodeState};

use super::{
    BACKOFF_WAIT, HOSTILE, NOTICE, REQUEST_TIMEOUT, STALL_TIMEOUT, TTL, block, check_failing,
    failed, probe, release, rig, timed, unblock, works,
};
use crate::support::hostile::{Action, Handshake};

#[test]
fn close_on_lock_command() {
    check_failing(
        "close on SET",
        Handshake::Correct,
        |_| vec![Action::Close],
        failed(NodeError::Closed),
    );
}

#[test]
fn close_in_the_middle_of_a_reply() {
    check_failing(
        "close mid-reply",
        Handshake::Correct,
        |_| vec![Action::send(b"$5\r\nab"), Action::Close],
        failed(NodeError::Closed),
    );
}

#[test]
fn stall_after_the_handshake() {
    // Lock commands are never answered.
    let rig = rig(Handshake::Correct, |_| Vec::new());
    let started = Instant::now();
    let report = probe(&rig, b"hostile:stall:1");
    assert_eq!(report.nodes()[HOSTILE], NodeState::TimedOut, "{report}");
    assert!(
        started.elapsed() >= REQUEST_TIMEOUT,
        "the round gave up on the silent node before the request timeout"
    );
    // Rounds that do not need it decide on the real masters. They also
    // keep the real masters' replies read, so that only the silent node
    // has requests older than the stall timeout below (see
    // `slow_node_is_not_stalled_after_an_idle_period` for why that
    // matters).
    let mut rounds = 0;
    while started.elapsed() < STALL_TIMEOUT - Duration::from_millis(150) {
        works(&rig, format!("hostile:stall:works:{rounds}").as_bytes());
        rounds += 1;
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(rig.fake.accepted(), 1, "reconnected too early");
    // Once its oldest request is older than the stall timeout, the
    // connection is dropped and re-established.
    thread::sleep(
        (started + STALL_TIMEOUT + BACKOFF_WAIT).saturating_duration_since(Instant::now()),
    );
    let report = probe(&rig, b"hostile:stall:2");
    assert_eq!(
        report.nodes()[HOSTILE],
        NodeState::Failed(NodeError::Stalled),
        "{report}"
    );
    assert!(rig.fake.wait_until(NOTICE, |f| f.peer_closed() >= 1));
    thread::sleep(BACKOFF_WAIT);
    works(&rig, b"hostile:stall:works:last");
    assert!(
        rig.fake.wait_until(NOTICE, |f| f.accepted() >= 2),
        "no reconnect after the stall: {:?}",
        rig.fake
    );
    println!("stall: {rounds} rounds while the node was silent; {report}");
}

/// Fails on the library as of commit 2a6c61f: the stall check
/// (src/driver/conn.rs, `Conn::check_stall`, called from `Conn::send` and
/// `Conn::check_timers`) runs before the connection is read, and a round
/// that returned at quorum leaves the slower nodes' replies unread; after
/// an idle period longer than the stall timeout the healthy connection is
/// dropped as stalled. Reading what arrived (a zero-timeout poll) before
/// queuing fixes it.
#[test]
fn slow_node_is_not_stalled_after_an_idle_period() {
    // A healthy node that answers every command after 50 ms: rounds decide
    // on the real masters first, and its replies arrive after the client
    // returned. A client idle for longer than the stall timeout must not
    // then count the node as stalled: its replies are there, unread.
    let rig = rig(Handshake::Correct, |req| {
        vec![
            Action::Sleep(Duration::from_millis(50)),
            Action::send(req.healthy_reply()),
        ]
    });
    works(&rig, b"hostile:slow:0");
    thread::sleep(STALL_TIMEOUT + Duration::from_millis(100));
    // The next round needs the slow node (two real masters refuse).
    let resource: &[u8] = b"hostile:slow:1";
    block(&rig, resource);
    let result = timed("acquire after an idle period", || {
        rig.client.try_lock(resource, TTL)
    });
    unblock(&rig, resource);
    match result {
        Ok(mut lock) => release(&rig.client, &mut lock),
        Err(error) => panic!(
            "a healthy (slow) node was dropped after the client sat idle for longer than \
             the stall timeout: {error}"
        ),
    }
    assert_eq!(
        rig.fake.accepted(),
        1,
        "the healthy connection was dropped and re-established: {:?}",
        rig.fake
    );
}

#[test]
fn silent_server() {
    // Accepts and never answers anything, not even the handshake. The
    // build waits the connect timeout for it; then the round finds the
    // handshake unanswered: past the connect deadline (`Connect(TimedOut)`)
    // or past the stall timeout (`Stalled`, counted from the connect; both
    // are 500 ms here, so either may fire first), or, on a fresh
    // connection, not answered within the request timeout (`TimedOut`).
    check_failing(
        "silent",
        Handshake::Silent,
        |_| Vec::new(),
        |state| {
            matches!(
                state,
                NodeState::TimedOut
                    | NodeState::Failed(
                        NodeError::Connect(std::io::ErrorKind::TimedOut) | NodeError::Stalled
                    )
            )
        },
    );
}
