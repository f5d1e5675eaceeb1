//! The model's own behaviour, without a server: its API (connections,
//! restarts, snapshots) and a few replies pinned byte for byte. What a
//! real server replies is the differential test's job
//! (`tests/differential`).

use redlock_mio::resp::{Arg, encode_command};
use redlock_mio::scripts::{RELEASE_SCRIPT, RELEASE_SHA1};

use crate::{ConnState, Master};

mod tracking;
mod waits;

const T0: u64 = 1_700_000_000_000_000;

/// `words` as a client sends them (the library's own encoder).
pub(crate) fn request(words: &[&[u8]]) -> Vec<u8> {
    let args: Vec<Arg<'_>> = words.iter().map(|w| Arg::Bytes(w)).collect();
    let mut out = Vec::new();
    encode_command(&mut out, &args);
    out
}

/// A master and one connection to it.
struct Client {
    master: Master,
    conn: crate::Conn,
    /// The connection's state after the last command.
    state: ConnState,
}

impl Client {
    fn new(master: Master) -> Client {
        let mut master = master;
        let conn = master.connect();
        Client {
            master,
            conn,
            state: ConnState::Open,
        }
    }

    /// Sends one command at `now` and returns the reply's bytes.
    fn send(&mut self, now: u64, words: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        self.state = self
            .master
            .handle(&mut self.conn, &request(words), now, &mut out);
        out
    }
}

#[test]
fn replies_to_pipelined_requests_split_at_every_byte() {
    let mut master = Master::new(1, T0);
    let mut conn = master.connect();
    let mut input = request(&[b"SET", b"k", b"v", b"NX", b"PX", b"100"]);
    input.extend(request(&[b"SET", b"k", b"w", b"NX", b"PX", b"100"]));
    input.extend(request(&[b"GET", b"k"]));
    let mut out = Vec::new();
    for byte in input.chunks(1) {
        assert_eq!(
            master.handle(&mut conn, byte, T0, &mut out),
            ConnState::Open
        );
    }
    assert_eq!(out, b"+OK\r\n$-1\r\n$1\r\nv\r\n");
}

#[test]
fn a_key_lives_through_its_last_millisecond() {
    let mut client = Client::new(Master::new(1, T0));
    client.send(T0, &[b"SET", b"k", b"v", b"PX", b"2"]);
    let last = T0 + 2_999;
    assert_eq!(client.send(last, &[b"PTTL", b"k"]), b":0\r\n");
    assert_eq!(client.send(last + 1, &[b"GET", b"k"]), b"$-1\r\n");
}

#[test]
fn a_restart_closes_connections_forgets_scripts_and_changes_the_run_id() {
    let mut client = Client::new(Master::new(1, T0));
    let loaded = client.send(T0, &[b"SCRIPT", b"LOAD", RELEASE_SCRIPT.as_bytes()]);
    assert_eq!(loaded, format!("$40\r\n{RELEASE_SHA1}\r\n").into_bytes());
    let first = client.master.run_id().to_owned();
    client.master.restart(T0 + 1);
    assert_eq!(client.send(T0 + 1, &[b"PING"]), b"");
    assert_eq!(client.state, ConnState::Closed);
    assert_ne!(client.master.run_id(), first);
    let mut client = Client::new(client.master);
    let evalsha = client.send(
        T0 + 1,
        &[b"EVALSHA", RELEASE_SHA1.as_bytes(), b"1", b"k", b"t"],
    );
    assert!(
        evalsha.starts_with(b"-NOSCRIPT"),
        "{}",
        evalsha.escape_ascii()
    );
}

#[test]
fn a_restore_brings_back_the_snapshot_and_its_expiry() {
    let mut client = Client::new(Master::new(1, T0));
    client.send(T0, &[b"SET", b"kept", b"1", b"PX", b"5000"]);
    let snapshot = client.master.snapshot();
    client.send(T0, &[b"SET", b"later", b"2"]);
    let master = &mut client.master;
    master.restore(&snapshot, T0 + 1_000_000);
    assert_eq!(master.get(0, b"kept", T0 + 1_000_000), Some(&b"1"[..]));
    assert_eq!(master.get(0, b"later", T0 + 1_000_000), None);
    assert_eq!(master.get(0, b"kept", T0 + 6_000_000), None);
}

#[test]
fn run_ids_come_from_the_seed() {
    let ids = |seed| {
        let mut master = Master::new(seed, T0);
        let first = master.run_id().to_owned();
        master.restart(T0);
        (first, master.run_id().to_owned())
    };
    assert_eq!(ids(5), ids(5));
    assert_ne!(ids(5), ids(6));
    let (first, _) = ids(5);
    assert!(first.len() == 40 && first.bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn hello_3_switches_nulls_and_info_to_resp3() {
    let mut client = Client::new(Master::new(1, T0));
    let hello = client.send(T0, &[b"HELLO", b"3"]);
    assert!(hello.starts_with(b"%7\r\n"), "{}", hello.escape_ascii());
    assert_eq!(client.send(T0, &[b"GET", b"missing"]), b"_\r\n");
    assert!(client.send(T0, &[b"INFO"]).starts_with(b"="));
}

#[test]
fn a_password_keeps_commands_out_until_auth() {
    let mut client = Client::new(Master::new(1, T0).with_password("secret"));
    assert!(client.send(T0, &[b"GET", b"k"]).starts_with(b"-NOAUTH"));
    assert!(
        client
            .send(T0, &[b"AUTH", b"wrong"])
            .starts_with(b"-WRONGPASS")
    );
    assert_eq!(client.send(T0, &[b"AUTH", b"secret"]), b"+OK\r\n");
    assert_eq!(client.send(T0, &[b"GET", b"k"]), b"$-1\r\n");
}

#[test]
fn an_unknown_script_is_an_error_not_a_guess() {
    let mut client = Client::new(Master::new(1, T0));
    let reply = client.send(T0, &[b"EVAL", b"return 1", b"0"]);
    assert!(reply.starts_with(b"-ERR"), "{}", reply.escape_ascii());
}

#[test]
fn inline_commands_close_the_connection() {
    let mut client = Client::new(Master::new(1, T0));
    let mut out = Vec::new();
    let state = client
        .master
        .handle(&mut client.conn, b"PING\r\n", T0, &mut out);
    assert_eq!(state, ConnState::Closed);
    assert!(out.starts_with(b"-ERR Protocol error"));
}

/// An eviction takes only what the policy lets it: under a `volatile-*`
/// policy the keys with an expiry, never the permanent ones; under an
/// `allkeys-*` policy any key. Expired keys are not there to evict.
#[test]
fn an_eviction_takes_only_what_its_policy_lets_it() {
    use crate::Eviction;
    let mut client = Client::new(Master::new(1, T0));
    client.send(T0, &[b"SET", b"redlock-mio:fence", b"42"]);
    client.send(T0, &[b"SET", b"lock", b"tok", b"PX", b"100"]);
    client.send(T0, &[b"SET", b"gone", b"x", b"PX", b"1"]);
    let later = T0 + 2_000;
    let master = &mut client.master;
    for pick in 0..4 {
        let mut copy = master.clone();
        let evicted = copy.evict(0, Eviction::Volatile, pick, later);
        assert_eq!(evicted.as_deref(), Some(&b"lock"[..]), "pick {pick}");
        assert_eq!(copy.get(0, b"redlock-mio:fence", later), Some(&b"42"[..]));
    }
    let mut evicted = Vec::new();
    while let Some(key) = master.evict(0, Eviction::AllKeys, 1, later) {
        evicted.push(key);
    }
    assert_eq!(evicted, [b"redlock-mio:fence".to_vec(), b"lock".to_vec()]);
    assert_eq!(master.evict(0, Eviction::Volatile, 0, later), None);
}
