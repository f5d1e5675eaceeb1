//! The core with a fake clock and no socket: two addresses of one server.

#![allow(clippy::unwrap_used, reason = "a test fails loudly")]

use std::time::{Duration, Instant};

use super::Core;
use crate::addr::ServerAddr;
use crate::commands::{Command, Keys};
use crate::link::LinkConfig;
use crate::rules::{NodeError, Round};
use crate::scripts::{
    ACQUIRE_MANY_SHA1, EXTEND_MANY_SHA1, EXTEND_SHA1, RELEASE_MANY_SHA1, RELEASE_SHA1,
};

const MS: Duration = Duration::from_millis(1);

fn config() -> LinkConfig {
    LinkConfig {
        request_timeout: 50 * MS,
        connect_timeout: 1000 * MS,
        stall_timeout: 1000 * MS,
        backoff_min: 10 * MS,
        backoff_max: 80 * MS,
        identify: true,
        fencing: false,
        in_flight: 4,
        guard: None,
        longest_ttl: None,
        wake: None,
    }
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

/// What a master with `run_id` answers to the handshake: the scripts'
/// SHA-1s, then `INFO`.
fn handshake_replies(run_id: char) -> String {
    let run_id: String = std::iter::repeat_n(run_id, 40).collect();
    let info = format!(
        "# Server\r\nrun_id:{run_id}\r\nuptime_in_seconds:3600\r\n\r\n# Replication\r\nrole:master\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n"
    );
    let shas = [
        RELEASE_SHA1,
        EXTEND_SHA1,
        ACQUIRE_MANY_SHA1,
        RELEASE_MANY_SHA1,
        EXTEND_MANY_SHA1,
    ]
    .map(bulk)
    .concat();
    shas + &bulk(&info)
}

/// Master `i` sends `bytes`, read at `now`.
fn answer(core: &mut Core<()>, i: usize, bytes: &str, now: Instant) -> Result<(), NodeError> {
    let mut rest = bytes.as_bytes();
    while !rest.is_empty() {
        let buf = core.read_buf(i)?;
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
        core.handle_read(i, n, now)?;
    }
    Ok(())
}

/// What master `i`'s socket would write now.
fn written(core: &mut Core<()>, i: usize) -> String {
    let text = String::from_utf8_lossy(core.transmit(i)).into_owned();
    let n = core.transmit(i).len();
    core.advance(i, n);
    text
}

/// A core of two addresses, connected at `t0`, each with its handshake
/// written.
fn two_addresses(t0: Instant) -> Core<()> {
    let addrs = [
        ServerAddr::parse("redis://127.0.0.1:7000").unwrap(),
        ServerAddr::parse("redis://127.0.0.2:7000").unwrap(),
    ];
    let mut core: Core<()> = Core::new(&addrs, config(), t0);
    core.connect(t0);
    for i in 0..2 {
        core.handle_connected(i, t0);
        assert!(written(&mut core, i).contains("INFO"));
    }
    core
}

/// One server under two addresses: the second handshake to complete is
/// refused by the read that completes it, so that what its session held
/// back for the handshake (here an extend) is never written to the server
/// a second time. (Written, an
/// extend of a round over by then could overtake a newer one sent through
/// the first address, and shorten the key under its holder.)
#[test]
fn a_server_reached_twice_gets_nothing_held_for_the_second_handshake() {
    let t0 = Instant::now();
    let mut core = two_addresses(t0);
    answer(&mut core, 0, &handshake_replies('a'), t0).unwrap();
    // An extend goes to both: the first session writes it, the second
    // holds it back for its handshake.
    let extend = Command::extend(Keys::One(b"res"), b"token", 1000);
    let restart = |round: &mut Round, command: &Command<'_>, now: Instant| {
        round.restart(
            command.op(),
            2,
            Duration::from_secs(1),
            12 * MS,
            50 * MS,
            now,
        );
    };
    let mut ids: Vec<crate::ids::RoundId> = Vec::new();
    core.submit(&[extend], restart, &mut ids, true, t0 + MS);
    assert!(core.take_write_due(0) && written(&mut core, 0).contains("EVALSHA"));
    // The handshake's last reply is the read that must fail the socket,
    // before the socket writes what the session held back.
    let error = answer(&mut core, 1, &handshake_replies('a'), t0 + 2 * MS).unwrap_err();
    assert!(
        matches!(error, NodeError::SameServer { other: 0, .. }),
        "{error:?}"
    );
    core.handle_failure(1, error, t0 + 2 * MS);
    assert!(core.socket(1).is_none());
    assert!(
        core.transmit(1).is_empty(),
        "the extend held back would go to the same server again"
    );
}

/// A session that is down reconnects by its timer, without a round,
/// while a caller waits to be told; an idle client keeps no such timer.
#[test]
fn a_session_that_is_down_reconnects_by_itself_while_a_caller_waits() {
    let t0 = Instant::now();
    let addrs = [ServerAddr::parse("redis://127.0.0.1:7000").unwrap()];
    let mut core: Core<()> = Core::new(&addrs, config(), t0);
    core.connect(t0);
    assert!(core.socket(0).is_some());
    // The connect fails: down, with a back-off.
    core.handle_failure(0, NodeError::Closed, t0);
    assert!(core.socket(0).is_none());
    assert_eq!(core.next_timer(), None, "nobody waits: no timer");
    core.handle_timeout(t0 + Duration::from_secs(1));
    assert!(core.socket(0).is_none(), "nobody waits: stays down");
    let id = core.waits.begin().unwrap();
    let t1 = t0 + Duration::from_secs(1);
    let due = core.next_timer().unwrap();
    assert!(due <= t0 + 10 * MS, "due at the back-off's end: {due:?}");
    core.handle_timeout(t1);
    assert_eq!(core.socket(0), Some(2), "a new start of the session");
    core.waits.end(id);
}

/// A command queued for some masters ([`Command::only_to`]) is written to
/// those alone, and one for none is written nowhere.
#[test]
fn a_queued_command_goes_only_to_its_masters() {
    let t0 = Instant::now();
    let mut core = two_addresses(t0);
    for (i, run_id) in [(0, 'a'), (1, 'b')] {
        answer(&mut core, i, &handshake_replies(run_id), t0).unwrap();
    }
    let release = Command::release(Keys::One(b"res"), b"token").with_script();
    core.queue(&release.only_to(0b10), t0 + MS);
    assert_eq!(written(&mut core, 0), "");
    assert!(written(&mut core, 1).contains("EVAL"));
    core.queue(&release.only_to(0), t0 + 2 * MS);
    assert_eq!(
        (written(&mut core, 0), written(&mut core, 1)),
        (String::new(), String::new())
    );
    core.queue(&release, t0 + 3 * MS);
    assert!(written(&mut core, 0).contains("EVAL") && written(&mut core, 1).contains("EVAL"));
}
