//! Replies to nothing, of the wrong type, out of order; pushes.

use std::thread;

use redlock_mio::Error;
use redlock_mio::{NodeError, NodeState};

use super::{
    BACKOFF_WAIT, HOSTILE, NOTICE, TTL, acquire, always, block, check_failing,
    cycles_through_the_hostile_node, failed, release, rig, timed, unblock, works,
};
use crate::support::check::{eventually, tcp_to};
use crate::support::hostile::{Action, Handshake};

#[test]
fn integer_reply_to_set() {
    check_failing(
        ":1 to SET",
        Handshake::Correct,
        always(b":1\r\n"),
        failed(NodeError::UnexpectedReply),
    );
}

#[test]
fn ok_reply_to_evalsha() {
    // SET is answered properly, the release script with `+OK`.
    let rig = rig(Handshake::Correct, always(b"+OK\r\n"));
    let resource: &[u8] = b"hostile:evalsha";
    // Held on the hostile node and two real masters; the other two real
    // masters hold another token, so the release needs the hostile node.
    block(&rig, resource);
    let mut lock = acquire(&rig.client, resource);
    let report = match timed("release", || rig.client.unlock(&mut lock)) {
        Err(Error::NotHeld(report)) => report,
        other => panic!("release: expected NotHeld, got {other:?}"),
    };
    unblock(&rig, resource);
    assert_eq!(
        report.nodes()[HOSTILE],
        NodeState::Failed(NodeError::UnexpectedReply),
        "{report}"
    );
    assert!(rig.fake.wait_until(NOTICE, |f| f.peer_closed() >= 1));
    thread::sleep(BACKOFF_WAIT);
    let mut lock = acquire(&rig.client, b"hostile:evalsha:2");
    assert!(
        rig.fake.wait_until(NOTICE, |f| f.accepted() >= 2),
        "no reconnect: {:?}",
        rig.fake
    );
    // The hostile node's `+OK` to the release fails it again; the four real
    // masters release.
    release(&rig.client, &mut lock);
    println!("+OK to EVALSHA: {report} / {:?}", rig.fake);
}

#[test]
fn handshake_with_wrong_sha1() {
    check_failing(
        "wrong SHA1",
        Handshake::WrongSha1,
        |req| vec![Action::send(req.healthy_reply())],
        |state| {
            matches!(
                state,
                NodeState::Failed(NodeError::UnexpectedReply | NodeError::Handshake(_))
            )
        },
    );
}

#[test]
fn handshake_replies_swapped() {
    check_failing(
        "SCRIPT LOAD replies swapped",
        Handshake::Swapped,
        |req| vec![Action::send(req.healthy_reply())],
        failed(NodeError::UnexpectedReply),
    );
}

#[test]
fn pushes_before_every_reply_are_skipped() {
    let rig = rig(Handshake::Correct, |req| {
        let mut reply = b">2\r\n$7\r\nmessage\r\n$2\r\nhi\r\n".to_vec();
        reply.extend_from_slice(req.healthy_reply());
        vec![Action::Send(reply)]
    });
    cycles_through_the_hostile_node(&rig, "hostile:push", 20);
    assert_eq!(rig.fake.lock_commands(), 40);
}

#[test]
fn extra_reply_within_a_round() {
    // Two replies to one SET: the first counts, the second answers
    // nothing, so the connection must be dropped.
    let rig = rig(Handshake::Correct, |req| {
        if req.is_set() {
            vec![Action::send(b"+OK\r\n+OK\r\n")]
        } else {
            vec![Action::send(req.healthy_reply())]
        }
    });
    let resource: &[u8] = b"hostile:extra";
    block(&rig, resource);
    let mut lock = acquire(&rig.client, resource);
    assert!(
        rig.fake.wait_until(NOTICE, |f| f.peer_closed() >= 1),
        "the client kept a connection that answered nothing: {:?}",
        rig.fake
    );
    thread::sleep(BACKOFF_WAIT);
    // The release reconnects (the two blocked masters refuse it, the
    // hostile node and two real ones release it).
    release(&rig.client, &mut lock);
    unblock(&rig, resource);
    assert!(
        rig.fake.wait_until(NOTICE, |f| f.accepted() >= 2),
        "no reconnect: {:?}",
        rig.fake
    );
}

/// Fails on the library as of commit 2a6c61f: the driver reads a
/// connection only while a round waits, and a round queues its request
/// before it reads, so bytes that arrived while the client was idle are
/// matched to the new request (src/driver/mod.rs, `Driver::run`). Reading
/// what arrived (a zero-timeout poll) before queuing fixes it.
#[test]
fn unprompted_reply_while_idle() {
    // The first lock command is answered properly; then, while the client
    // is idle, the fake sends `+OK` that answers nothing; the next SET is
    // answered with a null (not acquired). The `+OK` must not be taken as
    // the answer to that SET.
    let rig = rig(Handshake::Correct, |req| match req.seq {
        0 | 1 => vec![Action::send(req.healthy_reply())],
        _ if req.is_set() => vec![Action::send(b"$-1\r\n")],
        _ => vec![Action::send(b":0\r\n")],
    });
    works(&rig, b"hostile:idle:0");
    // The release returns at a quorum: it may reach the fake later.
    rig.fake.wait_until(NOTICE, |f| f.lock_commands() >= 2);
    assert_eq!(rig.fake.lock_commands(), 2, "{:?}", rig.fake);
    assert!(rig.fake.inject(b"+OK\r\n"), "cannot inject: {:?}", rig.fake);
    // The bytes are in the client's socket, unread.
    let port = rig.fake.addr().port();
    assert!(
        eventually(NOTICE, || tcp_to(port).iter().any(|c| c.rx_queue > 0)),
        "the unprompted reply reached the client: {:?}",
        tcp_to(port)
    );
    let resource: &[u8] = b"hostile:idle:1";
    block(&rig, resource);
    let result = timed("acquire after an unprompted reply", || {
        rig.client.try_lock(resource, TTL)
    });
    unblock(&rig, resource);
    match result {
        Err(Error::Contended(report)) => assert_eq!(
            report.nodes()[HOSTILE],
            NodeState::Failed(NodeError::UnexpectedReply),
            "{report}"
        ),
        Ok(lock) => panic!(
            "acquired {lock:?} on two real masters and the hostile node, which answered \
             the SET with a null: the unprompted +OK sent while the client was idle was \
             taken as the reply to the next SET"
        ),
        Err(other) => panic!("expected Contended, got {other}"),
    }
    assert!(rig.fake.wait_until(NOTICE, |f| f.peer_closed() >= 1));
}
