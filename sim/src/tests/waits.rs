//! The wait queue and the wake-ups, without a server: a hand-off from end
//! to end, and what the model's API promises about pushes and
//! connections.

use redlock_mio::scripts::{FENCED_WAIT_ACQUIRE_SCRIPT, RELEASE_SCRIPT, WAIT_ACQUIRE_SCRIPT};
use redlock_mio::{FENCE_KEY, FENCE_LOST_KEY};

use super::{Client, T0, request};
use crate::{ConnState, Master, PushOrder};

const CHANNEL: &[u8] = b"redlock-mio:wake:00000000000000aa";
const MEMBER: &[u8] = b"250|7|redlock-mio:wake:00000000000000aa";
/// The waiter's place: when it began to wait, 17 µs after the master's
/// clock at [`T0`] (the time `TIME` gives there, 1,700,000,000 s).
const PLACE: &[u8] = b"1700000000000017";

/// `WAIT_ACQUIRE` of `key` for [`MEMBER`], by `EVAL`.
fn wait_acquire<'a>(key: &'a [u8], token: &'a [u8]) -> [&'a [u8]; 9] {
    let script = WAIT_ACQUIRE_SCRIPT.as_bytes();
    [
        b"EVAL", script, b"1", key, token, b"1000", MEMBER, PLACE, b"500",
    ]
}

/// `FENCED_WAIT_ACQUIRE` of `k` for [`MEMBER`], by `EVAL`.
fn fenced_wait_acquire(token: &[u8]) -> [&[u8]; 11] {
    let script = FENCED_WAIT_ACQUIRE_SCRIPT.as_bytes();
    let (counter, lost) = (FENCE_KEY.as_bytes(), FENCE_LOST_KEY.as_bytes());
    [
        b"EVAL", script, b"3", counter, lost, b"k", token, b"1000", MEMBER, PLACE, b"500",
    ]
}

/// `RELEASE` of `k` with `token`, by `EVAL`: the reply.
fn release(client: &mut Client, token: &[u8]) -> Vec<u8> {
    client.send(T0, &[b"EVAL", RELEASE_SCRIPT.as_bytes(), b"1", b"k", token])
}

/// The queue of `k`.
fn queue(master: &Master) -> Vec<(&[u8], f64)> {
    master.members(0, b"redlock-mio:queue:k", T0)
}

/// A connection that speaks RESP3 and listens to [`CHANNEL`].
fn listener(master: &mut Master) -> crate::Conn {
    let mut conn = master.connect();
    let mut out = Vec::new();
    let mut input = request(&[b"HELLO", b"3"]);
    input.extend(request(&[b"SUBSCRIBE", CHANNEL]));
    master.handle(&mut conn, &input, T0, &mut out);
    assert!(
        out.ends_with(
            b">3\r\n$9\r\nsubscribe\r\n$33\r\nredlock-mio:wake:00000000000000aa\r\n:1\r\n"
        )
    );
    conn
}

/// A master where `tok` holds `k` for 3 s, and a connection to it that
/// listens to [`CHANNEL`].
fn held() -> (Client, crate::Conn) {
    let mut holder = Client::new(Master::new(1, T0));
    let listening = listener(&mut holder.master);
    holder.send(T0, &[b"SET", b"k", b"tok", b"PX", b"3000"]);
    (holder, listening)
}

#[test]
fn a_release_hands_the_key_to_the_first_waiter_and_tells_it() {
    let (mut holder, listening) = held();
    assert_eq!(
        holder.send(T0, &wait_acquire(b"k", b"mine")),
        b"+WAIT 3000\r\n"
    );
    assert_eq!(release(&mut holder, b"tok"), b":1\r\n");
    let mut pushes = Vec::new();
    holder.master.take_pushes(&listening, &mut pushes);
    assert_eq!(
        pushes,
        b">3\r\n$7\r\nmessage\r\n$33\r\nredlock-mio:wake:00000000000000aa\r\n$1\r\n7\r\n"
    );
    let reserved = [&b"reserved "[..], MEMBER].concat();
    assert_eq!(holder.master.get(0, b"k", T0), Some(&reserved[..]));
    // The reservation keeps others out for the waiter's window, and lets
    // the waiter in.
    assert_eq!(holder.send(T0, &[b"SET", b"k", b"x", b"NX"]), b"$-1\r\n");
    assert_eq!(holder.send(T0, &wait_acquire(b"k", b"mine")), b"+OK\r\n");
    assert_eq!(holder.master.get(0, b"k", T0), Some(&b"mine"[..]));
    assert!(queue(&holder.master).is_empty());
}

#[test]
fn a_fenced_waiter_handed_the_key_counts_a_fence() {
    let (mut holder, listening) = held();
    assert_eq!(
        holder.send(T0, &fenced_wait_acquire(b"mine")),
        b"+WAIT 3000\r\n"
    );
    assert_eq!(queue(&holder.master), [(MEMBER, 1_700_000_000_000_017.0)]);
    assert_eq!(release(&mut holder, b"tok"), b":1\r\n");
    holder.master.take_pushes(&listening, &mut Vec::new());
    // No counter: minus the loss id, which is the master's clock in µs.
    assert_eq!(
        holder.send(T0, &fenced_wait_acquire(b"mine")),
        b":-1700000000000000\r\n"
    );
    assert_eq!(holder.master.get(0, b"k", T0), Some(&b"mine"[..]));
    assert!(queue(&holder.master).is_empty());
    // A counter: counted.
    holder.send(T0, &[b"SET", FENCE_KEY.as_bytes(), b"41"]);
    holder.send(T0, &[b"DEL", b"k"]);
    assert_eq!(holder.send(T0, &fenced_wait_acquire(b"again")), b":42\r\n");
}

#[test]
fn a_waiter_nobody_hears_is_dropped_and_the_key_freed() {
    let mut holder = Client::new(Master::new(1, T0));
    holder.send(T0, &[b"SET", b"k", b"tok"]);
    assert_eq!(
        holder.send(T0, &wait_acquire(b"k", b"mine")),
        b"+WAIT -1\r\n"
    );
    assert_eq!(queue(&holder.master), [(MEMBER, 1_700_000_000_000_017.0)]);
    assert_eq!(release(&mut holder, b"tok"), b":1\r\n");
    assert_eq!(holder.master.get(0, b"k", T0), None);
    assert!(queue(&holder.master).is_empty());
}

#[test]
fn a_push_to_the_publisher_goes_where_the_push_order_says() {
    for (order, expected) in [
        (PushOrder::BeforeReply, b">3\r\n$7\r\nmessage\r\n$33\r\nredlock-mio:wake:00000000000000aa\r\n$2\r\nhi\r\n:1\r\n".as_slice()),
        (PushOrder::AfterReply, b":1\r\n>3\r\n$7\r\nmessage\r\n$33\r\nredlock-mio:wake:00000000000000aa\r\n$2\r\nhi\r\n"),
    ] {
        let mut master = Master::new(1, T0).with_push_order(order);
        let mut conn = listener(&mut master);
        let mut out = Vec::new();
        master.handle(&mut conn, &request(&[b"PUBLISH", CHANNEL, b"hi"]), T0, &mut out);
        assert_eq!(out, expected, "{order:?}");
    }
}

#[test]
fn a_closed_connection_listens_no_more() {
    let mut master = Master::new(1, T0);
    let conn = listener(&mut master);
    assert_eq!(master.channels(&conn), [CHANNEL]);
    let mut publisher = Client::new(master);
    assert_eq!(publisher.send(T0, &[b"PUBLISH", CHANNEL, b"1"]), b":1\r\n");
    publisher.master.close(conn);
    assert_eq!(publisher.send(T0, &[b"PUBLISH", CHANNEL, b"1"]), b":0\r\n");
}

#[test]
fn a_resp2_connection_that_listens_runs_only_the_pub_sub_commands() {
    let mut client = Client::new(Master::new(1, T0));
    let subscribed = client.send(T0, &[b"SUBSCRIBE", CHANNEL]);
    assert!(subscribed.starts_with(b"*3\r\n$9\r\nsubscribe\r\n"));
    assert!(
        client
            .send(T0, &[b"GET", b"k"])
            .starts_with(b"-ERR Can't execute 'get'")
    );
    assert_eq!(
        client.send(T0, &[b"PING"]),
        b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    );
    client.send(T0, &[b"UNSUBSCRIBE"]);
    assert_eq!(client.send(T0, &[b"GET", b"k"]), b"$-1\r\n");
    assert_eq!(client.state, ConnState::Open);
}

/// A place more than a second from the master's clock (a client whose
/// wall clock runs an hour slow, or an hour fast) is taken a second from
/// it.
#[test]
fn a_place_far_from_the_masters_clock_is_taken_within_a_second() {
    for (place, taken) in [
        (&b"1699996400000000"[..], 1_699_999_999_000_000.0),
        (&b"1700003600000000"[..], 1_700_000_001_000_000.0),
    ] {
        let mut holder = Client::new(Master::new(1, T0));
        holder.send(T0, &[b"SET", b"k", b"tok"]);
        let script = WAIT_ACQUIRE_SCRIPT.as_bytes();
        let request: [&[u8]; 9] = [
            b"EVAL", script, b"1", b"k", b"mine", b"1000", MEMBER, place, b"500",
        ];
        assert_eq!(holder.send(T0, &request), b"+WAIT -1\r\n");
        assert_eq!(queue(&holder.master), [(MEMBER, taken)]);
    }
}
