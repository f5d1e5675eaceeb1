//! The client against a hostile master: five masters, four of them real
//! `redis-server`s and one (at index [`HOSTILE`]) a fake that answers the
//! handshake correctly and then sends what no real server sends: garbage,
//! lengths and counts far over the client's limits, endless lines, replies
//! to nothing, replies of the wrong type, pushes, a wrong SHA1, or nothing.
//!
//! For every behaviour the test checks that the client
//! - reports a typed error for that node (`NodeState::Failed(NodeError::…)`
//!   in the round's report, made visible by a round that needs the hostile
//!   node: the resource is held by another token on two real masters);
//! - drops the connection (the fake sees the client close it) and
//!   reconnects in a later round (the fake accepts a new connection);
//! - still decides on the other nodes: an acquire reaches quorum on the
//!   real masters, the lock is valid, and the release works;
//! - never hangs: every call returns within [`CALL_LIMIT`];
//! - keeps its memory bounded: a counting allocator counts the bytes the
//!   client allocates on the test thread during hostile rounds.

// The tests, by theme; the rig and the checks they share are below.
mod lengths;
mod memory;
mod replies;
mod stalls;

use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::eventually;
use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::counting::counted;
use crate::support::hostile::{Action, Handshake, Hostile, Request};
use redlock_mio::resp::Error as RespError;
use redlock_mio::{Error, Lock, Redlock};
use redlock_mio::{NodeError, NodeState, Report};

// ---------------------------------------------------------------------------
// The rig: four real masters and the fake, one client
// ---------------------------------------------------------------------------

const TTL: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(200);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const STALL_TIMEOUT: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// The fake's position among the five masters.
const HOSTILE: usize = 2;

/// The client's limits for replies (`REPLY_LIMITS` in src/link/limits.rs).
const BULK_LIMIT: u64 = 8 * 1024;
const LINE_LIMIT: usize = 8 * 1024;
const ELEMENT_LIMIT: u64 = 1024;
const DEPTH_LIMIT: usize = 8;

/// Longest any client call may take: a round (request timeout), the
/// release everywhere after a failed acquire (request timeout), a connect
/// timeout (`build`), and a generous margin for a loaded machine.
const CALL_LIMIT: Duration = Duration::from_millis(
    2 * REQUEST_TIMEOUT.as_millis() as u64 + CONNECT_TIMEOUT.as_millis() as u64 + 2000,
);

/// More than the reconnect back-off after one failure (10 ms).
const BACKOFF_WAIT: Duration = Duration::from_millis(30);

/// How long the fake may take to notice a close or accept a connection.
const NOTICE: Duration = Duration::from_secs(3);

/// The value two real masters hold for a probed resource.
const OTHER_TOKEN: &[u8] = b"held-by-another-client";

/// Bytes the client may allocate in one hostile cycle (a failing probe,
/// an acquire and a release, with a reconnect): far below any of the
/// hostile lengths (512 MiB, 1 MiB, 10 MB), and below what a read buffer
/// grown past its 8 KiB limit would take.
const CYCLE_BYTES: u64 = 64 * 1024;

struct Rig {
    cluster: Cluster,
    fake: Hostile,
    client: Redlock,
}

fn rig<F>(handshake: Handshake, behaviour: F) -> Rig
where
    F: Fn(&Request<'_>) -> Vec<Action> + Send + Sync + 'static,
{
    let cluster = Cluster::start(4);
    let fake = Hostile::start(handshake, behaviour);
    let mut urls = cluster.urls();
    urls.insert(HOSTILE, fake.url());
    let client = timed("build", || {
        one_try(urls, REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .stall_timeout(STALL_TIMEOUT)
            .max_backoff(MAX_BACKOFF)
            .build()
    })
    .expect("build the client");
    Rig {
        cluster,
        fake,
        client,
    }
}

/// Runs `f` and checks it returned within [`CALL_LIMIT`] (allocates only
/// on failure).
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let result = f();
    let elapsed = start.elapsed();
    assert!(
        elapsed < CALL_LIMIT,
        "{what} took {elapsed:?}, more than {CALL_LIMIT:?}: the client hung"
    );
    result
}

/// The real masters' positions among the five: cluster node `i` is
/// client node `real(i)`.
fn real(i: usize) -> usize {
    if i < HOSTILE { i } else { i + 1 }
}

/// Makes the next acquire of `resource` need the hostile node: two real
/// masters hold it for another token.
fn block(rig: &Rig, resource: &[u8]) {
    for i in 0..2 {
        rig.cluster.set(i, resource, OTHER_TOKEN);
    }
}

fn unblock(rig: &Rig, resource: &[u8]) {
    for i in 0..2 {
        rig.cluster.command(i, &[b"DEL", resource]);
    }
}

/// `rounds` acquire + release cycles on resources `<prefix>:<round>` that
/// two real masters hold for another token: each cycle reaches quorum only
/// if the hostile node counts. Its connection must stay the first one.
fn cycles_through_the_hostile_node(rig: &Rig, prefix: &str, rounds: usize) {
    for round in 0..rounds {
        let resource = format!("{prefix}:{round}");
        block(rig, resource.as_bytes());
        let mut lock = acquire(&rig.client, resource.as_bytes());
        release(&rig.client, &mut lock);
        unblock(rig, resource.as_bytes());
    }
    assert_eq!(rig.fake.accepted(), 1, "the connection was dropped");
    assert_eq!(rig.fake.peer_closed(), 0, "the connection was dropped");
}

/// One acquire of a blocked resource: it must fail as `Contended` (two
/// real masters refuse, two agree, the hostile node fails), and its report
/// is returned. Allocates only the error's report (and on failure).
fn probe_call(client: &Redlock, resource: &[u8]) -> Report {
    match timed("probe try_lock", || client.try_lock(resource, TTL)) {
        Err(Error::Contended(report)) => *report,
        Err(other) => panic!("probe: expected Contended, got {other:?}"),
        Ok(lock) => panic!(
            "probe: acquired {lock:?} although two real masters hold the resource \
             and the hostile node should have failed"
        ),
    }
}

/// [`probe_call`] on a blocked resource; also checks the real masters'
/// states.
fn probe(rig: &Rig, resource: &[u8]) -> Report {
    probe_measured(rig, resource).0
}

/// [`probe`], and the bytes the client allocated in the call.
fn probe_measured(rig: &Rig, resource: &[u8]) -> (Report, u64) {
    block(rig, resource);
    let (report, _, bytes) = counted(|| probe_call(&rig.client, resource));
    unblock(rig, resource);
    // A round ends as soon as its outcome is certain: some real masters
    // may still be pending, but none failed.
    for i in 0..4 {
        let (state, allowed) = if i < 2 {
            (report.nodes()[real(i)].clone(), NodeState::Refused)
        } else {
            (report.nodes()[real(i)].clone(), NodeState::Ok)
        };
        assert!(
            state == allowed || state == NodeState::Pending,
            "real master #{}: {state:?}: {report}",
            real(i)
        );
    }
    (report, bytes)
}

/// An acquire that must succeed on the real masters, with a valid lock.
fn acquire(client: &Redlock, resource: &[u8]) -> Lock {
    let lock = timed("acquire", || client.try_lock(resource, TTL))
        .unwrap_or_else(|e| panic!("acquire despite the hostile node: {e}"));
    let validity = lock.validity();
    assert!(
        !lock.is_expired() && validity > TTL / 2 && validity <= TTL,
        "lock validity {validity:?} out of range"
    );
    lock
}

fn release(client: &Redlock, lock: &mut Lock) {
    timed("release", || client.unlock(lock))
        .unwrap_or_else(|e| panic!("release despite the hostile node: {e}"));
}

/// How many real masters hold `resource` with `token`.
fn holders(cluster: &Cluster, resource: &[u8], token: &[u8]) -> usize {
    (0..cluster.len())
        .filter(|&i| cluster.get(i, resource).as_deref() == Some(token))
        .count()
}

/// Acquire (quorum on the real masters, checked on the servers), then
/// release (checked on the servers).
fn works(rig: &Rig, resource: &[u8]) {
    works_measured(rig, resource);
}

/// [`works`], and the bytes the client allocated in its two calls.
fn works_measured(rig: &Rig, resource: &[u8]) -> u64 {
    let (mut lock, _, acquired) = counted(|| acquire(&rig.client, resource));
    assert!(
        holders(&rig.cluster, resource, lock.token()) >= 3,
        "the lock is not on a quorum of real masters"
    );
    let ((), _, released) = counted(|| release(&rig.client, &mut lock));
    assert!(
        eventually(NOTICE, || holders(&rig.cluster, resource, lock.token())
            == 0),
        "the release did not reach every real master"
    );
    acquired + released
}

/// The whole check for a behaviour that makes the hostile node fail every
/// lock command: its typed error, the dropped connection, the reconnect,
/// and rounds that still decide on the real masters.
fn check_failing(
    name: &str,
    handshake: Handshake,
    behaviour: impl Fn(&Request<'_>) -> Vec<Action> + Send + Sync + 'static,
    expected: impl Fn(&NodeState) -> bool,
) -> Rig {
    let rig = rig(handshake, behaviour);
    // The connections before the probe's: the one it fails is the last of
    // them, or the first one, made for the probe. Read now, before the
    // client can reconnect.
    let before = rig.fake.accepted().max(1);
    let report = probe(&rig, b"hostile:probe:1");
    let state = &report.nodes()[HOSTILE].clone();
    assert!(
        expected(state),
        "{name}: unexpected state {state:?}: {report}"
    );
    // Dropped: the client closed it (or, for `Action::Close`, the fake did).
    assert!(
        rig.fake
            .wait_until(NOTICE, |f| f.peer_closed() + f.closed_by_fake() >= 1),
        "{name}: the client kept the connection: {:?}",
        rig.fake
    );
    thread::sleep(BACKOFF_WAIT);
    works(&rig, b"hostile:works:1");
    assert!(
        rig.fake.wait_until(NOTICE, |f| f.accepted() > before),
        "{name}: no reconnect after the failure: {:?}",
        rig.fake
    );
    // The new connection fails in the same way; the client's memory stays
    // bounded (the first connection allocated what it keeps).
    thread::sleep(BACKOFF_WAIT);
    let (again, probe_bytes) = probe_measured(&rig, b"hostile:probe:2");
    let state = &again.nodes()[HOSTILE].clone();
    assert!(
        expected(state),
        "{name}, again: unexpected state {state:?}: {again}"
    );
    thread::sleep(BACKOFF_WAIT);
    let works_bytes = works_measured(&rig, b"hostile:works:2");
    println!(
        "{name}: {report} / {:?} / allocated: failing probe {probe_bytes} B, \
         acquire + release {works_bytes} B",
        rig.fake
    );
    assert!(
        probe_bytes + works_bytes < CYCLE_BYTES,
        "{name}: the client allocated {probe_bytes} B + {works_bytes} B in a hostile cycle"
    );
    rig
}

fn failed(expected: NodeError) -> impl Fn(&NodeState) -> bool {
    move |state| matches!(state, NodeState::Failed(e) if *e == expected)
}

fn protocol(expected: RespError) -> impl Fn(&NodeState) -> bool {
    failed(NodeError::Protocol(expected))
}

/// The node failed because its bytes broke the protocol, however.
fn broke_protocol(state: &NodeState) -> bool {
    matches!(
        state,
        NodeState::Failed(NodeError::Protocol(_) | NodeError::UnexpectedReply)
    )
}

/// Answers every lock command with `bytes`.
fn always(bytes: &'static [u8]) -> impl Fn(&Request<'_>) -> Vec<Action> + Send + Sync + 'static {
    move |_| vec![Action::send(bytes)]
}
