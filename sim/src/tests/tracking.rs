//! Client tracking (`CLIENT TRACKING ON OPTIN NOLOOP`, `CLIENT CACHING
//! YES`), as the loss watch uses it: which reads are remembered, which
//! changes are told, to whom, and once.

use redlock_mio::scripts::{EXTEND_SCRIPT, RELEASE_SCRIPT};

use super::{T0, request};
use crate::{ConnState, Eviction, Master, PushOrder, ScriptReads};

/// What a tracking connection receives when `k` changes.
const INVALIDATE_K: &[u8] = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";
/// What every tracking connection receives at a `FLUSHALL`.
const INVALIDATE_ALL: &[u8] = b">2\r\n$10\r\ninvalidate\r\n_\r\n";

/// A master and a few connections to it.
struct Conns {
    master: Master,
    conns: Vec<crate::Conn>,
}

impl Conns {
    fn new(n: usize) -> Conns {
        let mut master = Master::new(1, T0);
        let conns = (0..n).map(|_| master.connect()).collect();
        Conns { master, conns }
    }

    /// Sends one command on connection `i` at `now`: what it receives.
    fn send(&mut self, i: usize, now: u64, words: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        let state = self
            .master
            .handle(&mut self.conns[i], &request(words), now, &mut out);
        assert_eq!(state, ConnState::Open);
        out
    }

    /// The pushes written to connection `i` since it last received.
    fn pushes(&mut self, i: usize) -> Vec<u8> {
        let mut out = Vec::new();
        self.master.take_pushes(&self.conns[i], &mut out);
        out
    }

    /// Connection `i` speaks RESP3 and tracks with `options`.
    fn track(&mut self, i: usize, options: &[&[u8]]) {
        self.send(i, T0, &[b"HELLO", b"3"]);
        let mut words: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"ON"];
        words.extend(options);
        assert_eq!(self.send(i, T0, &words), b"+OK\r\n");
    }

    /// Connection `i` reads `k` after `CLIENT CACHING YES`: the value.
    fn watch(&mut self, i: usize, now: u64) -> Vec<u8> {
        assert_eq!(
            self.send(i, now, &[b"CLIENT", b"CACHING", b"YES"]),
            b"+OK\r\n"
        );
        self.send(i, now, &[b"GET", b"k"])
    }
}

#[test]
fn optin_remembers_only_the_read_after_caching_yes_and_tells_once() {
    let mut c = Conns::new(2);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.send(1, T0, &[b"SET", b"k", b"a"]);
    // A read without `CLIENT CACHING YES` is not remembered.
    assert_eq!(c.send(0, T0, &[b"GET", b"k"]), b"$1\r\na\r\n");
    c.send(1, T0, &[b"SET", b"k", b"b"]);
    assert_eq!(c.pushes(0), b"");
    // Nor one a command later.
    c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
    c.send(0, T0, &[b"PING"]);
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"c"]);
    assert_eq!(c.pushes(0), b"");
    // The read right after it is.
    assert_eq!(c.watch(0, T0), b"$1\r\nc\r\n");
    assert_eq!(c.send(1, T0, &[b"SET", b"k", b"d"]), b"+OK\r\n");
    assert_eq!(c.pushes(0), INVALIDATE_K);
    // Once: the key is forgotten after it is told.
    c.send(1, T0, &[b"DEL", b"k"]);
    assert_eq!(c.pushes(0), b"");
    // A push waits for the connection's next bytes, before its reply.
    c.watch(0, T0);
    c.send(1, T0, &[b"SET", b"k", b"e"]);
    assert_eq!(
        c.send(0, T0, &[b"PING"]),
        [INVALIDATE_K, b"+PONG\r\n"].concat()
    );
}

#[test]
fn every_change_of_a_remembered_key_is_told() {
    let mut c = Conns::new(2);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    let changes: [&[&[u8]]; 5] = [
        &[b"SET", b"k", b"other", b"PX", b"100000"],
        &[b"PEXPIRE", b"k", b"50000"],
        &[b"SET", b"k", b"v", b"KEEPTTL"],
        &[b"DEL", b"k"],
        // Missing when read: its creation is a change too.
        &[b"SET", b"k", b"v", b"PX", b"1"],
    ];
    for change in changes {
        c.watch(0, T0);
        c.send(1, T0, change);
        assert_eq!(c.pushes(0), INVALIDATE_K, "{change:?}");
    }
    // Expired on access, by another connection's read.
    c.watch(0, T0);
    assert_eq!(c.send(1, T0 + 2_000, &[b"GET", b"k"]), b"$-1\r\n");
    assert_eq!(c.pushes(0), INVALIDATE_K, "expiry");
    // Evicted.
    c.send(1, T0, &[b"SET", b"k", b"v", b"PX", b"100000"]);
    c.watch(0, T0);
    assert_eq!(
        c.master.evict(0, Eviction::Volatile, 0, T0).as_deref(),
        Some(&b"k"[..])
    );
    assert_eq!(c.pushes(0), INVALIDATE_K, "eviction");
    // A command that changes nothing tells nothing: a `SET NX` refused,
    // an `RPUSH` refused (`WRONGTYPE`), a `DEL` of a missing key, another
    // key.
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    c.watch(0, T0);
    c.send(1, T0, &[b"SET", b"k", b"w", b"NX"]);
    c.send(1, T0, &[b"RPUSH", b"k", b"x"]);
    c.send(1, T0, &[b"DEL", b"missing"]);
    c.send(1, T0, &[b"SET", b"k2", b"v"]);
    assert_eq!(c.pushes(0), b"");
    // A key expired in a snapshot is not loaded from it: no access finds
    // it to expire.
    c.send(1, T0, &[b"SET", b"k", b"v", b"PX", b"1"]);
    let snapshot = c.master.snapshot();
    c.master.restore(&snapshot, T0 + 2_000);
    c.conns = (0..2).map(|_| c.master.connect()).collect();
    c.track(0, &[]);
    c.send(0, T0 + 2_000, &[b"GET", b"other"]);
    c.send(0, T0 + 2_000, &[b"GET", b"k"]);
    c.send(1, T0 + 2_000, &[b"GET", b"k"]);
    assert_eq!(c.pushes(0), b"");
}

#[test]
fn noloop_keeps_a_connection_untold_of_its_own_change_but_forgets_the_key() {
    let mut c = Conns::new(3);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.track(1, &[b"OPTIN"]);
    c.send(2, T0, &[b"SET", b"k", b"tok", b"PX", b"1000"]);
    c.watch(0, T0);
    c.watch(1, T0);
    // Connection 0 extends its own key by the extend script.
    let extended = c.send(
        0,
        T0,
        &[
            b"EVAL",
            EXTEND_SCRIPT.as_bytes(),
            b"1",
            b"k",
            b"tok",
            b"5000",
        ],
    );
    assert_eq!(extended, b":1\r\n", "not told of its own change");
    assert_eq!(c.pushes(1), INVALIDATE_K, "another tracker is told");
    // Connection 0 forgot the key: a change after it tells it nothing.
    c.send(2, T0, &[b"DEL", b"k"]);
    assert_eq!(c.pushes(0), b"");
    // Without NOLOOP, a connection is told of its own change, after its
    // reply: servers hold it back until the command is done, whatever
    // their order for publications.
    for order in [PushOrder::BeforeReply, PushOrder::AfterReply] {
        c.master = c.master.with_push_order(order);
        c.watch(1, T0);
        assert_eq!(
            c.send(1, T0, &[b"SET", b"k", b"v"]),
            [b"+OK\r\n", INVALIDATE_K].concat()
        );
    }
}

#[test]
fn flushall_tells_every_tracking_connection_with_a_null() {
    let mut c = Conns::new(3);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.track(1, &[b"OPTIN", b"NOLOOP"]);
    c.send(2, T0, &[b"SET", b"k", b"v"]);
    c.watch(0, T0);
    assert_eq!(c.send(2, T0, &[b"FLUSHALL"]), b"+OK\r\n");
    // Whether it remembered a key or not.
    assert_eq!(c.pushes(0), INVALIDATE_ALL);
    assert_eq!(c.pushes(1), INVALIDATE_ALL);
    assert_eq!(c.pushes(2), b"", "connection 2 does not track");
    // Every key is forgotten.
    c.send(2, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), b"");
    // The connection that flushes is told too, NOLOOP or not, after its
    // reply.
    assert_eq!(
        c.send(0, T0, &[b"FLUSHALL"]),
        [b"+OK\r\n", INVALIDATE_ALL].concat()
    );
}

#[test]
fn tracking_ends_with_tracking_off_a_close_and_a_restart() {
    let mut c = Conns::new(2);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.watch(0, T0);
    c.send(0, T0, &[b"CLIENT", b"TRACKING", b"OFF"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), b"");
    let caching = c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
    assert!(caching.starts_with(b"-ERR CLIENT CACHING can be called only"));

    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.watch(0, T0);
    c.master.restart(T0);
    let mut fresh = c.master.connect();
    let mut out = Vec::new();
    c.master
        .handle(&mut fresh, &request(&[b"SET", b"k", b"v"]), T0, &mut out);
    assert_eq!(out, b"+OK\r\n");
    assert_eq!(c.pushes(0), b"", "a restart closed it");
}

#[test]
fn tracking_off_keeps_the_keys_read_before_for_when_it_is_on_again() {
    let mut c = Conns::new(2);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.watch(0, T0);
    c.send(0, T0, &[b"CLIENT", b"TRACKING", b"OFF"]);
    c.send(0, T0, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), INVALIDATE_K);
}

#[test]
fn the_mode_switches_between_the_default_and_optin() {
    let mut c = Conns::new(2);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), b"", "OPTIN: not tracked");
    // Every read from now on, its own changes told too.
    assert_eq!(c.send(0, T0, &[b"CLIENT", b"TRACKING", b"ON"]), b"+OK\r\n");
    c.send(0, T0, &[b"GET", b"k"]);
    assert_eq!(
        c.send(0, T0, &[b"DEL", b"k"]),
        [b":1\r\n", INVALIDATE_K].concat()
    );
    assert_eq!(
        c.send(0, T0, &[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]),
        b"+OK\r\n"
    );
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), b"", "OPTIN again");
}

#[test]
fn caching_yes_lapses_at_any_command_but_a_client_one() {
    let mut c = Conns::new(2);
    c.track(0, &[b"OPTIN"]);
    c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
    c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), INVALIDATE_K, "held through a CLIENT command");
    // An unknown `CLIENT` subcommand is no `CLIENT` command.
    c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
    c.send(0, T0, &[b"CLIENT", b"NOSUCH"]);
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"w"]);
    assert_eq!(c.pushes(0), b"");
}

#[test]
fn a_scripts_reads_are_tracked_for_its_caller() {
    // The release of `k`, which `k` holds: it reads `k`, deletes it, and
    // reads its wait queue (`EXISTS redlock-mio:queue:k`), which it does
    // not declare.
    let release: &[&[u8]] = &[b"EVAL", RELEASE_SCRIPT.as_bytes(), b"1", b"k", b"tok"];
    let queue = b"redlock-mio:queue:k";
    let invalidate_queue = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$19\r\nredlock-mio:queue:k\r\n";
    // Redis 7.0: each read remembers the keys the script declared.
    let mut c = Conns::new(2);
    c.track(0, &[b"NOLOOP"]);
    c.send(1, T0, &[b"SET", b"k", b"tok"]);
    assert_eq!(c.send(0, T0, release), b":1\r\n");
    c.send(1, T0, &[b"SET", queue, b"v"]);
    assert_eq!(c.pushes(0), b"", "the queue is not remembered");
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), INVALIDATE_K, "remembered again after the DEL");
    // Valkey 8: the keys each command names; under OPTIN, in a script
    // run right after `CLIENT CACHING YES`.
    let mut c = Conns::new(2);
    c.master = c.master.with_script_reads(ScriptReads::CalledKeys);
    c.track(0, &[b"OPTIN", b"NOLOOP"]);
    for caching in [false, true] {
        c.send(1, T0, &[b"DEL", queue]);
        c.send(1, T0, &[b"SET", b"k", b"tok"]);
        if caching {
            c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
        }
        assert_eq!(c.send(0, T0, release), b":1\r\n");
        c.send(1, T0, &[b"SET", b"k", b"v"]);
        c.send(1, T0, &[b"SET", queue, b"v"]);
        let told: &[u8] = if caching { invalidate_queue } else { b"" };
        assert_eq!(c.pushes(0), told, "CACHING YES: {caching}");
    }
}

#[test]
fn a_resp2_connection_tracks_and_is_told_nothing() {
    let mut c = Conns::new(2);
    let on = c.send(0, T0, &[b"CLIENT", b"TRACKING", b"ON"]);
    assert_eq!(on, b"+OK\r\n");
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    c.send(1, T0, &[b"FLUSHALL"]);
    assert_eq!(c.pushes(0), b"");
    // In RESP3 from now on: told.
    c.send(0, T0, &[b"HELLO", b"3"]);
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(1, T0, &[b"SET", b"k", b"v"]);
    assert_eq!(c.pushes(0), INVALIDATE_K);
    // Back to RESP2: a change forgets the key, and tells nothing.
    c.send(0, T0, &[b"GET", b"k"]);
    c.send(0, T0, &[b"HELLO", b"2"]);
    c.send(1, T0, &[b"SET", b"k", b"w"]);
    c.send(0, T0, &[b"HELLO", b"3"]);
    assert_eq!(c.pushes(0), b"");
}

#[test]
fn what_the_model_does_not_track_is_refused() {
    let mut c = Conns::new(1);
    let caching = c.send(0, T0, &[b"CLIENT", b"CACHING", b"YES"]);
    assert!(caching.starts_with(b"-ERR CLIENT CACHING can be called only"));
    // As a server refuses them whatever the connection's mode, and as the
    // model refuses what a server would grant.
    let refused: [&[&[u8]]; 7] = [
        &[b"ON", b"REDIRECT", b"0"],
        &[b"ON", b"REDIRECT"],
        &[b"ON", b"BCAST"],
        &[b"ON", b"OPTOUT"],
        &[b"ON", b"BCAST", b"OPTIN"],
        &[b"ON", b"OPTIN", b"OPTOUT"],
        &[b"ON", b"PREFIX", b"p"],
    ];
    for options in refused {
        let mut words: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING"];
        words.extend(options);
        let reply = c.send(0, T0, &words);
        assert!(reply.starts_with(b"-ERR"), "{}", reply.escape_ascii());
    }
    let off = c.send(0, T0, &[b"CLIENT", b"TRACKING", b"OFF", b"BCAST"]);
    assert_eq!(off, b"+OK\r\n", "OFF ignores the options");
    c.track(0, &[b"OPTIN"]);
    for refused in [&b"BCAST"[..], b"REDIRECT", b"OPTOUT"] {
        let reply = c.send(0, T0, &[b"CLIENT", b"TRACKING", b"ON", refused]);
        assert!(reply.starts_with(b"-ERR"), "{}", reply.escape_ascii());
    }
    let no = c.send(0, T0, &[b"CLIENT", b"CACHING", b"NO"]);
    assert!(no.starts_with(b"-ERR"), "{}", no.escape_ascii());
    let script = c.send(
        0,
        T0,
        &[
            b"EVAL",
            b"return redis.call('client', 'caching', 'yes')",
            b"0",
        ],
    );
    assert!(script.starts_with(b"-"), "{}", script.escape_ascii());
}
