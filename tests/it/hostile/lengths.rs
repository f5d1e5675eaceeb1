//! Garbage, oversized lengths and counts, deep nesting, endless lines.

use redlock_mio::NodeError;
use redlock_mio::resp::Error as RespError;

use super::{
    BULK_LIMIT, DEPTH_LIMIT, ELEMENT_LIMIT, LINE_LIMIT, always, broke_protocol, check_failing,
    cycles_through_the_hostile_node, failed, protocol, rig,
};
use crate::support::hostile::{Action, Handshake, Request};

#[test]
fn garbage_type_byte() {
    check_failing(
        "@@@",
        Handshake::Correct,
        always(b"@@@\r\n"),
        protocol(RespError::UnknownType(b'@')),
    );
}

#[test]
fn random_bytes() {
    // 4 KiB from a fixed xorshift sequence: whatever the first bytes parse
    // as, the stream breaks the protocol long before it ends.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    check_failing(
        "random bytes",
        Handshake::Correct,
        move |_| vec![Action::Send(bytes.clone())],
        broke_protocol,
    );
}

#[test]
fn bulk_length_2_pow_62() {
    check_failing(
        "$2^62",
        Handshake::Correct,
        always(b"$4611686018427387904\r\n"),
        protocol(RespError::BulkTooLong { limit: BULK_LIMIT }),
    );
}

#[test]
fn bulk_length_512_mib_plus_1() {
    check_failing(
        "$536870913",
        Handshake::Correct,
        always(b"$536870913\r\n"),
        protocol(RespError::BulkTooLong { limit: BULK_LIMIT }),
    );
}

#[test]
fn bulk_length_just_over_the_limit() {
    // A complete bulk string of 8 KiB + 1 bytes.
    let mut reply = format!("${}\r\n", BULK_LIMIT + 1).into_bytes();
    reply.resize(reply.len() + BULK_LIMIT as usize + 1, b'a');
    reply.extend_from_slice(b"\r\n");
    check_failing(
        "$8193",
        Handshake::Correct,
        move |_| vec![Action::Send(reply.clone())],
        protocol(RespError::BulkTooLong { limit: BULK_LIMIT }),
    );
}

#[test]
fn bulk_at_the_limit_fits_the_read_buffer() {
    // A push carrying a bulk string of exactly 8 KiB, then the real reply:
    // the largest token the limits allow must fit the fixed read buffer,
    // be skipped, and the node must count as acquired.
    let mut push = format!(">1\r\n${BULK_LIMIT}\r\n").into_bytes();
    push.resize(push.len() + BULK_LIMIT as usize, b'p');
    push.extend_from_slice(b"\r\n");
    let rig = rig(Handshake::Correct, move |req| {
        let mut reply = push.clone();
        reply.extend_from_slice(req.healthy_reply());
        vec![Action::Send(reply)]
    });
    cycles_through_the_hostile_node(&rig, "hostile:max-push", 3);
}

/// A master that streams pushes without end (16 MiB per request, in one
/// write after another) is dropped once it exceeds the client's budget
/// for unsolicited data, and holds no call: each returns within the
/// round's bounds.
#[test]
fn endless_pushes() {
    let chunk = b">2\r\n+flood\r\n:1\r\n".repeat(4096);
    check_failing(
        "endless pushes",
        Handshake::Correct,
        move |_| vec![Action::Send(chunk.clone()); 256],
        failed(NodeError::Unsolicited),
    );
}

#[test]
fn array_count_2_pow_32() {
    check_failing(
        "*2^32",
        Handshake::Correct,
        always(b"*4294967296\r\n"),
        protocol(RespError::TooManyElements {
            limit: ELEMENT_LIMIT,
        }),
    );
}

#[test]
fn deep_nesting_as_a_reply() {
    // No lock reply is an aggregate: the first `*1` is already wrong.
    check_failing(
        "1000 x *1",
        Handshake::Correct,
        move |_| vec![Action::Send(b"*1\r\n".repeat(1000))],
        failed(NodeError::UnexpectedReply),
    );
}

#[test]
fn deep_nesting_inside_a_push() {
    // Pushes are skipped token by token, so the decoder itself must stop
    // the nesting at its depth limit.
    let mut bytes = b">1\r\n".to_vec();
    bytes.extend_from_slice(&b"*1\r\n".repeat(1000));
    check_failing(
        ">1 then 1000 x *1",
        Handshake::Correct,
        move |_| vec![Action::Send(bytes.clone())],
        protocol(RespError::TooDeep { limit: DEPTH_LIMIT }),
    );
}

/// `+` and then up to 10 MB of `x`, never a CRLF.
pub(super) fn endless_line(_: &Request<'_>) -> Vec<Action> {
    vec![Action::Stream {
        head: b"+".to_vec(),
        fill: b'x',
        total: 10 << 20,
    }]
}

/// `-ERR ` and 1 MiB of text, then the CRLF.
pub(super) fn huge_error(_: &Request<'_>) -> Vec<Action> {
    vec![
        Action::Stream {
            head: b"-ERR ".to_vec(),
            fill: b'e',
            total: 1 << 20,
        },
        Action::send(b"\r\n"),
    ]
}

#[test]
fn endless_line_without_crlf() {
    let rig = check_failing(
        "endless line",
        Handshake::Correct,
        endless_line,
        protocol(RespError::LineTooLong { limit: LINE_LIMIT }),
    );
    // The client stopped reading long before the stream's end: the fake
    // could not write it all (a few socket buffers at most).
    let lock_commands = rig.fake.lock_commands();
    assert!(
        rig.fake.bytes_sent() < lock_commands * (10 << 20),
        "the client read every endless line to its end: {:?}",
        rig.fake
    );
}

#[test]
fn huge_error_string() {
    check_failing(
        "-ERR + 1 MiB",
        Handshake::Correct,
        huge_error,
        protocol(RespError::LineTooLong { limit: LINE_LIMIT }),
    );
}

#[test]
fn number_with_endless_leading_zeros() {
    // `:` and 20 000 zeros: the number never overflows, so only the read
    // buffer's size stops it. Any typed error will do, as long as the
    // connection is dropped and memory stays bounded.
    let mut bytes = b":".to_vec();
    bytes.resize(20_001, b'0');
    bytes.extend_from_slice(b"1\r\n");
    check_failing(
        ": and 20000 zeros",
        Handshake::Correct,
        move |_| vec![Action::Send(bytes.clone())],
        broke_protocol,
    );
}
