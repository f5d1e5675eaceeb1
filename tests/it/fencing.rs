//! Fencing tokens against real `redis-server`s: fences
//! grow with every holder; a master that lost its counter never lowers a
//! fence (its grants stay out until it is put back in sync); a store that
//! checks fences turns away a holder paused past its validity; and the
//! scripts' contracts, one by one. Why the scheme holds:
//! `redlock_mio::fencing`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use crate::support::check::{eventually, integer};
use crate::support::clients::{fenced, one_try};
use crate::support::cluster::{Cluster, ClusterOptions, Node};
use crate::support::proxy::{Dir, Proxies};
use redlock_mio::NodeState;
use redlock_mio::scripts::{
    FENCE_READ_SCRIPT, FENCE_SYNC_SCRIPT, FENCED_ACQUIRE_SCRIPT, RAISE_SCRIPT,
};
use redlock_mio::{Error, FENCE_KEY, FENCE_LOST_KEY, Redlock, Require};

const LONGEST: Duration = Duration::from_millis(500);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(100);

fn counter(node: &Node) -> Option<u64> {
    node.get(FENCE_KEY).map(|v| {
        String::from_utf8_lossy(&v)
            .parse()
            .expect("the counter is an integer")
    })
}

#[test]
fn fences_grow_with_every_holder() {
    let cluster = Cluster::start(3);
    let a = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    let b = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    let ttl = Duration::from_millis(400);
    let mut last = 0;
    let mut fences = Vec::new();
    for i in 0..20 {
        let client = if i % 3 == 0 { &b } else { &a };
        let resource = if i % 2 == 0 { "fence:x" } else { "fence:y" };
        let mut lock = client.try_lock(resource, ttl).expect("free");
        let fence = lock.fence().expect("fencing is on");
        assert!(fence > last, "holding {i}: fence {fence} after {last}");
        last = fence;
        fences.push((i, fence));
        client.unlock(&mut lock).expect("unlock");
    }
    // A new deployment starts from the clocks (microseconds since 1970).
    assert!(last > 1_000_000_000_000_000, "{last}");
    // Every master got a counter, started from the clocks. One may be
    // ahead of the last fence: a master whose release of a resource lags
    // refuses that resource's next holder (no count there, and no raise),
    // and while two masters that each missed a count make the quorum, the
    // one that missed none is ahead of their fences. Fences grow all the
    // same: each is the largest count of a quorum, which meets the quorum
    // the last raise reached.
    for node in cluster.nodes() {
        let counter = counter(node);
        assert!(
            counter.is_some_and(|c| c > 1_000_000_000_000_000),
            "node {}: counter {counter:?}, last fence {last}",
            node.index()
        );
    }
    // A plain client has no fence; fences also cover several resources.
    let plain = Redlock::builder(cluster.urls()).build().expect("build");
    let mut lock = plain.try_lock("fence:z", ttl).expect("free");
    assert_eq!(lock.fence(), None);
    plain.unlock(&mut lock).expect("unlock");
    let mut many = a.try_lock_all(&["fence:x", "fence:z"], ttl).expect("free");
    assert!(many.fence().expect("fenced") > last);
    a.unlock(&mut many).expect("unlock");
    // A TTL longer than the one fencing was configured for is refused.
    assert!(matches!(
        a.try_lock("fence:x", LONGEST + Duration::from_millis(1)),
        Err(Error::InvalidTtl { .. })
    ));
}

/// A new deployment's first fenced acquires, made at once by many threads
/// of one client, are all fenced: an acquire that begins while another's
/// start of the counters is under way reads them too, rather than find no
/// counter to count.
#[test]
fn a_new_deployments_first_acquires_at_once_are_all_fenced() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(2);
    let client = fenced(cluster.urls(), Duration::from_millis(500), ttl);
    let failures = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for t in 0..16 {
            let (client, failures) = (&client, &failures);
            scope.spawn(move || {
                for i in 0..4 {
                    match client.try_lock(format!("first:{t}:{i}"), ttl) {
                        Ok(mut lock) => {
                            assert!(lock.fence().is_some(), "fencing is on");
                            client.unlock(&mut lock).expect("unlock");
                        }
                        Err(e) => failures.lock().expect("no panic").push(e.to_string()),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().expect("no panic");
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(client.stats().unfenced, 0);
}

/// Node 1 misses a series of locks (its proxy swallows them), so its
/// counter lags; node 2 then loses its data. With node 0 paused, the only
/// quorum left is {1, 2}: a scheme that counted node 2's fresh counter
/// would hand out a fence below the last one. Here that acquire fails
/// `Unfenced` until node 2 is put back in sync, which needs the longest
/// TTL to pass and a quorum of counters to read; afterwards the same
/// quorum gives a larger fence.
#[test]
fn a_master_that_lost_its_counter_never_lowers_a_fence() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let redlock = fenced(proxies.urls(), REQUEST_TIMEOUT, LONGEST);
    let ttl = Duration::from_millis(400);
    let mut lock = redlock.try_lock("fence:r", ttl).expect("free");
    redlock.unlock(&mut lock).expect("unlock");

    proxies[1].stall(Dir::ToServer);
    // The locks go on until the last fence has passed node 1's counter
    // (+1: the first acquire's increment may reach it after this read), so
    // that node 1 truly lags.
    let ahead = counter(cluster.node(1)).expect("in sync") + 1;
    let (mut last, mut cycles) = (0, 0);
    while cycles < 5 || last <= ahead {
        assert!(
            cycles < 20_000,
            "fences stayed at {last}, node 1 at {ahead}"
        );
        let mut lock = redlock.try_lock("fence:r", ttl).expect("nodes 0 and 2");
        last = lock.fence().expect("fenced");
        redlock.unlock(&mut lock).expect("unlock");
        cycles += 1;
    }
    // What node 1 was sent is thrown away: it lags.
    proxies[1].reset_connections();
    proxies[1].heal();
    let lagging = counter(cluster.node(1)).expect("in sync");
    assert!(lagging < last, "node 1 at {lagging}, last fence {last}");
    // The client meets the reset at its next call, and only once the
    // proxy's threads have closed the old sockets (the RST leaves then): a
    // cycle through the new connection first, so that the attempts below
    // see the loss of node 2's counter and nothing else.
    let reconnected = eventually(Duration::from_secs(2), || {
        let Ok(mut lock) = redlock.try_lock("fence:r", ttl) else {
            return false;
        };
        let fence = lock.fence().expect("fenced");
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        redlock.unlock(&mut lock).expect("unlock");
        true
    });
    assert!(reconnected, "no cycle through node 1's new connection");

    cluster.flushall(2);
    cluster.pause(0);
    let unfenced = |what: &str| match redlock.try_lock("fence:r", ttl) {
        Err(Error::Unfenced(report)) => {
            assert_eq!(report.nodes()[2], NodeState::Unsynced, "{what}: {report}");
        }
        other => panic!("{what}: {other:?}"),
    };
    let counted = redlock.stats().unfenced;
    unfenced("right after the loss");
    assert_eq!(redlock.stats().unfenced, counted + 1, "counted");
    assert_eq!(counter(cluster.node(2)), None, "never created by a grant");
    // Past the wait (and the second between reads), node 2 still cannot be
    // put back: only node 1 answers the read.
    thread::sleep(LONGEST + Duration::from_millis(1100));
    unfenced("with no quorum to read");
    assert_eq!(counter(cluster.node(2)), None);

    // Node 0 back: the next read (a second after the last) finds a quorum
    // in sync and puts node 2 back; every fence meanwhile is larger.
    cluster.resume(0);
    let before = last;
    let mut repaired = false;
    for _ in 0..50 {
        match redlock.try_lock("fence:r", ttl) {
            Ok(mut lock) => {
                let fence = lock.fence().expect("fenced");
                assert!(fence > last, "{fence} after {last}");
                last = fence;
                redlock.unlock(&mut lock).expect("unlock");
            }
            Err(Error::Unfenced(_) | Error::Unavailable(_)) => {}
            Err(other) => panic!("{other}"),
        }
        if let Some(c) = counter(cluster.node(2)) {
            assert!(c >= before, "node 2 put back at {c}, below fence {before}");
            repaired = true;
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert!(repaired, "node 2 not put back in sync within 5 s");

    cluster.pause(0);
    let mut lock = redlock.try_lock("fence:r", ttl).expect("nodes 1 and 2");
    let fence = lock.fence().expect("fenced");
    assert!(fence > last, "{fence} after {last}");
    redlock.unlock(&mut lock).expect("unlock");
    cluster.resume(0);
}

/// Node `i` refuses every write (`maxmemory` 1 byte, `noeviction`), or
/// takes them again; reads and scripts that write nothing still run.
fn refuse_writes(cluster: &Cluster, i: usize, refuse: bool) {
    let limit: &[u8] = if refuse { b"1" } else { b"0" };
    let reply = cluster.command(i, &[b"CONFIG", b"SET", b"maxmemory", limit]);
    assert_eq!(reply, b"+OK\r\n", "{}", String::from_utf8_lossy(&reply));
}

/// A new deployment whose first sync reached fewer than a quorum of
/// masters is not stuck for good: the master it reached was started from
/// its clock and has raised no fence, so a later read counts it as not yet
/// in sync, finds none in sync, and starts the others from their clocks
/// too, the longest TTL after their loss was first seen at the latest.
#[test]
fn a_first_sync_cut_short_is_finished_later() {
    let cluster = Cluster::start(3);
    // Connected first: a master that refuses writes refuses the handshake
    // too (it sets the deployment's longest TTL).
    let redlock = one_try(cluster.urls(), REQUEST_TIMEOUT)
        .fencing(LONGEST)
        .require_handshakes(Require::All)
        .build()
        .expect("build");
    // Nodes 1 and 2 are first found without a counter (their loss ids are
    // set), then refuse writes: the client's read passes there, its sync,
    // which writes the counter, does not.
    for i in [1, 2] {
        let read = eval(
            cluster.node(i),
            FENCE_READ_SCRIPT,
            &[FENCE_KEY, FENCE_LOST_KEY],
            &[],
        );
        assert!(read_reply(&read).is_err(), "no counter yet");
        refuse_writes(&cluster, i, true);
    }
    let ttl = Duration::from_millis(400);
    let first = redlock.try_lock("fence:boot", ttl);
    assert!(first.is_err(), "{first:?}");
    let started = counter(cluster.node(0)).expect("node 0 started from its clock");
    assert_eq!(
        (counter(cluster.node(1)), counter(cluster.node(2))),
        (None, None)
    );

    for i in [1, 2] {
        refuse_writes(&cluster, i, false);
    }
    // The wait (the longest TTL plus drift), a second between reads, and
    // room for a loaded machine.
    let mut fence = 0;
    let finished = eventually(LONGEST + Duration::from_secs(5), || {
        match redlock.try_lock("fence:boot", ttl) {
            Ok(mut lock) => {
                fence = lock.fence().expect("fenced");
                redlock.unlock(&mut lock).expect("unlock");
                true
            }
            Err(Error::Unfenced(_) | Error::Unavailable(_)) => false,
            Err(other) => panic!("{other}"),
        }
    });
    assert!(finished, "fencing never came back");
    assert!(
        fence > started,
        "fence {fence}, node 0 started at {started}"
    );
    for i in 0..3 {
        assert!(counter(cluster.node(i)).is_some(), "node {i} in sync");
    }
    // Once each master raised a fence, a later read finds them in sync.
    let mut lock = redlock.try_lock("fence:boot", ttl).expect("in sync");
    assert!(lock.fence().expect("fenced") > fence);
    redlock.unlock(&mut lock).expect("unlock");
}

/// Where fences were issued, a majority that lost its counters is not
/// started again from the clocks: fenced locks stay refused, reads or not,
/// until an operator sets the counters (as `redlock_mio::fencing` says).
#[test]
fn a_majority_lost_after_fences_waits_for_an_operator() {
    let cluster = Cluster::start(3);
    let redlock = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    let ttl = Duration::from_millis(400);
    let mut last = 0;
    for _ in 0..3 {
        let mut lock = redlock.try_lock("fence:major", ttl).expect("free");
        last = lock.fence().expect("fenced");
        redlock.unlock(&mut lock).expect("unlock");
    }
    cluster.flushall(1);
    cluster.flushall(2);
    let refused = |what: &str| match redlock.try_lock("fence:major", ttl) {
        Err(Error::Unfenced(_)) => {}
        other => panic!("{what}: {other:?}"),
    };
    refused("right after the loss");
    // Past the wait and the second between reads: read, and still refused.
    thread::sleep(LONGEST + Duration::from_millis(1100));
    refused("after the wait");
    refused("after a read");
    assert_eq!(
        (counter(cluster.node(1)), counter(cluster.node(2))),
        (None, None)
    );

    // The operator: the largest counter anywhere plus a margin, on the
    // masters without one, and their loss ids gone.
    let start = (counter(cluster.node(0)).expect("node 0 kept its counter") + 1_000).to_string();
    for i in [1, 2] {
        cluster.command(i, &[b"SET", FENCE_KEY.as_bytes(), start.as_bytes()]);
        cluster.command(i, &[b"DEL", FENCE_LOST_KEY.as_bytes()]);
    }
    let mut lock = redlock.try_lock("fence:major", ttl).expect("in sync again");
    let fence = lock.fence().expect("fenced");
    assert!(fence > last, "{fence} after {last}");
    redlock.unlock(&mut lock).expect("unlock");
}

/// The store of the docs: it keeps the largest fence it accepted per key
/// and refuses smaller ones.
#[derive(Default)]
struct Store {
    fences: Mutex<HashMap<String, u64>>,
}

impl Store {
    fn write(&self, key: &str, fence: u64) -> bool {
        let mut fences = self.fences.lock().expect("not poisoned");
        let seen = fences.entry(key.to_owned()).or_default();
        if fence <= *seen {
            return false;
        }
        *seen = fence;
        true
    }
}

#[test]
fn store_turns_away_a_holder_paused_past_its_validity() {
    let cluster = Cluster::start(3);
    let store = Store::default();
    let ttl = Duration::from_millis(300);
    let slow = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    let fast = fenced(cluster.urls(), REQUEST_TIMEOUT, LONGEST);
    let old = slow.try_lock("fence:doc", ttl).expect("free");
    let old_fence = old.fence().expect("fenced");
    // The holder is paused past its validity; the key expires.
    thread::sleep(ttl + Duration::from_millis(100));
    assert!(old.is_expired());
    let mut new = fast.try_lock("fence:doc", ttl).expect("expired");
    let new_fence = new.fence().expect("fenced");
    assert!(new_fence > old_fence);
    assert!(store.write("doc", new_fence), "the new holder writes");
    assert!(
        !store.write("doc", old_fence),
        "the paused holder is turned away"
    );
    fast.unlock(&mut new).expect("unlock");
}

fn eval(node: &Node, script: &str, keys: &[&str], args: &[&str]) -> Vec<u8> {
    let numkeys = keys.len().to_string();
    let mut command: Vec<&[u8]> = vec![b"EVAL", script.as_bytes(), numkeys.as_bytes()];
    command.extend(keys.iter().map(|k| k.as_bytes()));
    command.extend(args.iter().map(|a| a.as_bytes()));
    node.command(&command)
}

/// What a fence read said: `Ok(counter)` for a master in sync, else
/// `Err((loss id, server time in µs, counter or 0))`.
fn read_reply(reply: &[u8]) -> Result<u64, (u64, u64, u64)> {
    if reply.first() == Some(&b':') {
        return Ok(u64::try_from(integer(reply)).expect("a positive counter"));
    }
    let text = String::from_utf8_lossy(reply);
    let body = text.split("\r\n").nth(1).expect("a bulk reply");
    let fields: Vec<u64> = body
        .split(' ')
        .map(|f| f.parse().expect("numbers"))
        .collect();
    assert_eq!(fields.len(), 3, "{text:?}");
    Err((fields[0], fields[1], fields[2]))
}

#[test]
fn the_scripts_do_what_the_docs_say() {
    let cluster = ClusterOptions::new(1).start();
    let node = cluster.node(0);
    let fence_keys = [FENCE_KEY, FENCE_LOST_KEY];
    let acquire = |resource: &str, token: &str| {
        eval(
            node,
            FENCED_ACQUIRE_SCRIPT,
            &[FENCE_KEY, FENCE_LOST_KEY, resource],
            &[token, "10000"],
        )
    };
    let read = || read_reply(&eval(node, FENCE_READ_SCRIPT, &fence_keys, &[]));
    // No counter: the grant is made, the counter is not, and the reply is
    // minus the loss id, the same every time until the loss is repaired.
    let first = integer(&acquire("r1", "t1"));
    assert!(first < 0, "{first}");
    let lost = first.unsigned_abs();
    assert_eq!(node.get("r1").as_deref(), Some(&b"t1"[..]));
    assert_eq!(node.get(FENCE_KEY), None);
    assert_eq!(integer(&acquire("r2", "t2")), first);
    // A read says so with the server's time, which a clock start needs.
    let Err((id, time, held)) = read() else {
        panic!("out of sync")
    };
    assert_eq!((id, held), (lost, 0));
    assert!(time >= lost, "time {time}, lost at {lost}");
    // Held: nil, nothing counted.
    assert_eq!(acquire("r1", "t9"), b"$-1\r\n");
    // A raise finds no counter: -1, nothing created.
    let raise = |resource: &str, token: &str, fence: &str| {
        integer(&eval(
            node,
            RAISE_SCRIPT,
            &[FENCE_KEY, FENCE_LOST_KEY, resource],
            &[token, fence],
        ))
    };
    assert_eq!(raise("r1", "t1", "5"), -1);
    assert_eq!(node.get(FENCE_KEY), None);
    // A repair for another loss id does nothing; for this one, it sets.
    let sync = |value: &str, mode: &str, id: &str| {
        integer(&eval(
            node,
            FENCE_SYNC_SCRIPT,
            &fence_keys,
            &[value, mode, "1", id],
        ))
    };
    let lost = lost.to_string();
    assert_eq!(sync("40", "repair", "123"), 0);
    assert_eq!(node.get(FENCE_KEY), None);
    assert_eq!(sync("40", "repair", &lost), 1);
    assert_eq!(counter(node), Some(40));
    assert_eq!(node.get(FENCE_LOST_KEY), None);
    // Once in sync, a later sync changes nothing.
    assert_eq!(sync("7", "repair", &lost), 1);
    assert_eq!(sync("900", "start", &lost), 1);
    assert_eq!(counter(node), Some(40));
    // Counting, raising where the token holds, never lowering.
    assert_eq!(integer(&acquire("r3", "t3")), 41);
    assert_eq!(raise("r3", "t3", "100"), 1);
    assert_eq!(counter(node), Some(100));
    assert_eq!(raise("r3", "t3", "50"), 1);
    assert_eq!(counter(node), Some(100));
    assert_eq!(raise("r3", "other", "500"), 0);
    assert_eq!(counter(node), Some(100));
    assert_eq!(read(), Ok(100));
    // A flush is a new loss, with a new id; the old id no longer repairs.
    cluster.flushall(0);
    thread::sleep(Duration::from_millis(2));
    let Err((second, _, 0)) = read() else {
        panic!("out of sync after a flush")
    };
    assert_ne!(second.to_string(), lost);
    assert_eq!(sync("100", "repair", &lost), 0);
    assert_eq!(node.get(FENCE_KEY), None);
    // A start sets the value it is given (the largest clock of all the
    // masters) and keeps the loss id beside the counter: a read still says
    // "out of sync" with the same id, now with the counter, and a fenced
    // acquire counts as usual.
    let second_id = second.to_string();
    let start = 1_795_000_000_000_000u64;
    assert_eq!(sync(&start.to_string(), "start", &second_id), 1);
    assert_eq!(counter(node), Some(start));
    let Err((id, _, held)) = read() else {
        panic!("a clock start reads as out of sync")
    };
    assert_eq!((id, held), (second, start));
    assert_eq!(
        node.get(FENCE_LOST_KEY),
        Some(second_id.clone().into_bytes())
    );
    let counted = i64::try_from(start + 1).expect("< 2^63");
    assert_eq!(integer(&acquire("r4", "t4")), counted);
    // Another start never lowers it, may raise it (the master lies in no
    // raise quorum yet); a raise where the token does not hold keeps the
    // mark; one where it holds deletes it.
    assert_eq!(sync("5", "start", &second_id), 1);
    assert_eq!(counter(node), Some(start + 1));
    assert_eq!(sync(&(start + 10).to_string(), "start", &second_id), 1);
    assert_eq!(counter(node), Some(start + 10));
    assert_eq!(integer(&acquire("r5", "t5")), counted + 10);
    assert_eq!(raise("r5", "other", "1"), 0);
    assert!(read().is_err());
    assert_eq!(raise("r5", "t5", "1"), 1);
    assert_eq!(counter(node), Some(start + 11));
    assert_eq!(node.get(FENCE_LOST_KEY), None);
    assert_eq!(read(), Ok(start + 11));
    // A clock start put back by a repair: the larger of the two, and the
    // mark gone.
    for bump in [0, 1_000_000] {
        cluster.flushall(0);
        thread::sleep(Duration::from_millis(2));
        let Err((id, _, _)) = read() else {
            panic!("out of sync after a flush")
        };
        let id = id.to_string();
        assert_eq!(sync(&start.to_string(), "start", &id), 1);
        let value = if bump == 0 { 5 } else { start + bump };
        assert_eq!(sync(&value.to_string(), "repair", &id), 1);
        assert_eq!(counter(node), Some(start.max(value)), "{start}, {value}");
        assert_eq!(node.get(FENCE_LOST_KEY), None);
    }
}

/// Every fence script refuses a fence counter or loss id that this crate
/// never writes (another type; not a positive integer below 2^53): it
/// changes nothing and replies `FOREIGNKEY <key>`, never a value the client
/// would take for a broken protocol. (The loss id is read where the
/// counter is missing, as here; beside a counter, the acquire does not
/// look at it.)
#[test]
fn the_scripts_refuse_foreign_values_and_change_nothing() {
    let cluster = ClusterOptions::new(1).start();
    let node = cluster.node(0);
    let foreign: [(&str, &[&[u8]]); 7] = [
        ("not a number", &[b"SET", b"{key}", b"abc"]),
        ("zero", &[b"SET", b"{key}", b"0"]),
        ("negative", &[b"SET", b"{key}", b"-5"]),
        ("a fraction", &[b"SET", b"{key}", b"1.5"]),
        ("2^53", &[b"SET", b"{key}", b"9007199254740992"]),
        ("a hash", &[b"HSET", b"{key}", b"f", b"v"]),
        ("a list", &[b"RPUSH", b"{key}", b"v"]),
    ];
    for key in [FENCE_KEY, FENCE_LOST_KEY] {
        for (what, command) in foreign {
            cluster.flushall(0);
            let command: Vec<&[u8]> = command
                .iter()
                .map(|a| if *a == b"{key}" { key.as_bytes() } else { *a })
                .collect();
            node.command(&command);
            node.set("held", "t");
            let state =
                || [FENCE_KEY, FENCE_LOST_KEY].map(|k| node.command(&[b"DUMP", k.as_bytes()]));
            let before = state();
            let keys = [FENCE_KEY, FENCE_LOST_KEY];
            let with_resource = [FENCE_KEY, FENCE_LOST_KEY, "held"];
            let replies = [
                (
                    "acquire",
                    eval(
                        node,
                        FENCED_ACQUIRE_SCRIPT,
                        &[FENCE_KEY, FENCE_LOST_KEY, "free"],
                        &["t", "10000"],
                    ),
                ),
                (
                    "raise",
                    eval(node, RAISE_SCRIPT, &with_resource, &["t", "99"]),
                ),
                ("read", eval(node, FENCE_READ_SCRIPT, &keys, &[])),
                (
                    "sync",
                    eval(
                        node,
                        FENCE_SYNC_SCRIPT,
                        &keys,
                        &["99", "repair", "1", "abc"],
                    ),
                ),
            ];
            for (script, reply) in replies {
                let expected = format!("-FOREIGNKEY {key}");
                assert!(
                    reply.starts_with(expected.as_bytes()),
                    "{script} with {what} in {key}: {}",
                    String::from_utf8_lossy(&reply)
                );
            }
            // The acquire checks before it writes.
            assert!(!node.exists("free"), "{what} in {key}: acquired");
            assert_eq!(state(), before, "{what} in {key}: changed");
        }
    }
}
