//! The engine's budget for a lone caller's cycle, against five real
//! masters: what a `try_lock` + `unlock` (and the same through `lock`, a
//! call that may wait) costs in writes, reads, polls, wake-ups and scans
//! of the client's tables, read from the client's own counters
//! ([`redlock_mio::EngineStats`]), with the lone caller's spin
//! ([`redlock_mio::Builder::spin`]) off, on with the masters on this
//! machine, and on as with remote masters (the client yields nothing to
//! them). The counts do not depend on timing (how many looks a spin takes
//! does, so each is held to a yield, or to the first reply, before it), so
//! an extra system call or an extra pass over a table fails here on any
//! machine, where a timed benchmark would need a quiet one.

use std::time::Duration;

use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use redlock_mio::{Redlock, Stats};

const MASTERS: u64 = 5;
const WARM_UP: u64 = 100;
const CYCLES: u64 = 1000;
/// Long enough that no lock expires while a busy machine holds a cycle up.
const TTL: Duration = Duration::from_secs(120);

/// The difference of the engine's counters between two snapshots.
struct Cost {
    writes: u64,
    reads: u64,
    polls: u64,
    idle_polls: u64,
    looks: u64,
    idle_looks: u64,
    wakes: u64,
    rests: u64,
    scanned: u64,
    yields: u64,
}

fn cost(client: &Redlock, cycle: impl Fn()) -> Cost {
    for _ in 0..WARM_UP {
        cycle();
    }
    let before: Stats = client.stats();
    for _ in 0..CYCLES {
        cycle();
    }
    let after = client.stats();
    let (a, b) = (after.engine, before.engine);
    let cost = Cost {
        writes: a.writes - b.writes,
        reads: a.reads - b.reads,
        polls: a.polls - b.polls,
        idle_polls: a.idle_polls - b.idle_polls,
        looks: a.looks - b.looks,
        idle_looks: a.idle_looks - b.idle_looks,
        wakes: a.wakes - b.wakes,
        rests: a.rests - b.rests,
        scanned: a.scanned - b.scanned,
        yields: after.yields - before.yields,
    };
    println!(
        "per cycle: {:.2} writes, {:.2} reads, {:.2} polls ({:.3} idle), {:.3} looks ({:.3} idle), {:.2} wakes, {:.2} slots scanned, {:.2} yields",
        cost.writes as f64 / CYCLES as f64,
        cost.reads as f64 / CYCLES as f64,
        cost.polls as f64 / CYCLES as f64,
        cost.idle_polls as f64 / CYCLES as f64,
        cost.looks as f64 / CYCLES as f64,
        cost.idle_looks as f64 / CYCLES as f64,
        cost.wakes as f64 / CYCLES as f64,
        cost.scanned as f64 / CYCLES as f64,
        cost.yields as f64 / CYCLES as f64,
    );
    cost
}

/// How a lone caller waits for its replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// In the poll (`spin(Duration::ZERO)`).
    Sleeping,
    /// Looking without waiting from the start, yielding to the masters on
    /// this machine between looks.
    Spinning,
    /// As with remote masters: in the poll until the first reply, then
    /// looking without waiting.
    SpinningFromTheFirstReply,
}

/// The budget of `rounds` rounds per cycle of a lone caller, whose calls
/// use `tables` of the client's tables (the rounds in flight; the waits
/// too for a call that may wait), and that waits as `waits` says.
fn assert_within_budget(cost: &Cost, rounds: u64, tables: u64, waits: Waits, what: &str) {
    let rounds = rounds * CYCLES;
    // One write per master per round: the round's command, in one write.
    assert_eq!(cost.writes, MASTERS * rounds, "{what}: writes");
    // At most one read per reply: a short read ends each readable event's
    // reading (edge-triggered readiness raises a new one for what comes
    // later), and every event is an arrival.
    assert!(
        cost.reads <= MASTERS * rounds,
        "{what}: {} reads",
        cost.reads
    );
    // A poll that waits and returns no event is a wasted system call:
    // the deadlines are a second away, and only a stalled machine lets one
    // run out.
    assert!(
        cost.idle_polls <= CYCLES / 100,
        "{what}: {} idle polls",
        cost.idle_polls
    );
    // Every other poll or look returned an event, and every event here is
    // a reply that a read takes.
    let found = (cost.polls - cost.idle_polls) + (cost.looks - cost.idle_looks);
    assert!(
        found <= cost.reads,
        "{what}: {found} polls and looks that returned events, {} reads",
        cost.reads
    );
    match waits {
        Waits::Spinning => {
            // A caller that may spin until its deadlines never sleeps in
            // the poll: its replies find it looking.
            assert!(
                cost.polls <= CYCLES / 100,
                "{what}: {} polls that waited",
                cost.polls
            );
            // It yields its CPU before each look, so that the masters
            // answer meanwhile: a look without a yield before it would be
            // a wasted system call.
            assert!(
                cost.idle_looks <= cost.yields,
                "{what}: {} idle looks, {} yields",
                cost.idle_looks,
                cost.yields
            );
        }
        Waits::SpinningFromTheFirstReply => {
            // A sleep per round at least, until the first reply: a spin
            // before it would burn a remote master's whole round trip of
            // CPU. (A late reply to the round before, which the quorum did
            // not wait for, may end a sleep too: then the caller sleeps
            // again, as it must, its own replies still a round trip away.)
            let woke = cost.polls - cost.idle_polls;
            assert!(
                woke >= rounds,
                "{what}: {woke} polls that returned events in {rounds} rounds"
            );
        }
        Waits::Sleeping => {
            // A look without waiting comes at most once per call, and only
            // after a pause of a millisecond (a busy machine's doing).
            assert!(
                cost.looks <= rounds,
                "{what}: {} looks in {rounds} calls",
                cost.looks
            );
        }
    }
    // A lone caller polls for itself: nobody wakes it, it wakes nobody.
    assert_eq!(cost.wakes, 0, "{what}: wake-ups");
    // A scan stops at the highest slot in use, one slot for a lone
    // caller, never the whole table. A caller that leaves looks at each
    // table it used twice (for a thread to hand the poller to, for tasks
    // to poll for), and each poll at the rounds' deadlines twice (the
    // timeouts due, the next one): an extra pass over a table shows here.
    let scans = 2 * tables * rounds + 2 * (cost.polls + cost.looks);
    assert!(
        cost.scanned <= scans,
        "{what}: {} slots scanned, budget {scans}",
        cost.scanned
    );
    // A lone caller on local masters yields its CPU before each poll or
    // look and once more per round (as with remote ones, never).
    assert!(
        cost.yields <= rounds + cost.polls + cost.looks,
        "{what}: {} yields, {} polls",
        cost.yields,
        cost.polls
    );
}

/// A lone caller's client that waits as `waits` says; a spin lasts as
/// long as a round may take, so that a busy machine does not end it.
fn client(cluster: &Cluster, waits: Waits) -> Redlock {
    // Deadlines far away: on a busy machine a round may wait for a core
    // longer than the default request timeout, and this test counts.
    let request_timeout = Duration::from_secs(1);
    let spin = match waits {
        Waits::Sleeping => Duration::ZERO,
        Waits::Spinning | Waits::SpinningFromTheFirstReply => request_timeout,
    };
    one_try(cluster.urls(), request_timeout)
        .stall_timeout(Duration::from_secs(2))
        .spin(spin)
        // Not yielding to them is what the client does with remote masters.
        .yield_to_local_masters(waits != Waits::SpinningFromTheFirstReply)
        .build()
        .expect("build the client")
}

const ALL_WAITS: [Waits; 3] = [
    Waits::Sleeping,
    Waits::Spinning,
    Waits::SpinningFromTheFirstReply,
];

#[test]
fn a_lone_try_lock_and_unlock_stay_within_the_engines_budget() {
    let cluster = Cluster::start(MASTERS as usize);
    for waits in ALL_WAITS {
        let client = client(&cluster, waits);
        let cost = cost(&client, || {
            let mut lock = client.try_lock("budget:try", TTL).expect("acquire");
            client.unlock(&mut lock).expect("release");
        });
        let what = format!("try_lock + unlock, {waits:?}");
        assert_within_budget(&cost, 2, 1, waits, &what);
    }
}

#[test]
fn a_lone_lock_that_need_not_wait_stays_within_the_engines_budget() {
    let cluster = Cluster::start(MASTERS as usize);
    for waits in ALL_WAITS {
        let client = client(&cluster, waits);
        let cost = cost(&client, || {
            let mut lock = client.lock("budget:lock", TTL).expect("acquire");
            client.unlock(&mut lock).expect("release");
        });
        let what = format!("lock + unlock, {waits:?}");
        assert_within_budget(&cost, 2, 2, waits, &what);
    }
}

/// Five masters, a spinning client of them, and a lock of that client
/// under its watch.
fn beside_a_watched_lock() -> (Cluster, Redlock, redlock_mio::Lock) {
    let cluster = Cluster::start(MASTERS as usize);
    let client = client(&cluster, Waits::Spinning);
    let mut watched = client.try_lock("budget:watched", TTL).expect("acquire");
    client.watch(&mut watched);
    (cluster, client, watched)
}

/// A lock watched on the client keeps its background thread polling for
/// the masters' pushes; a lone caller of that client takes the poller
/// over and reads its own replies, as a lone caller does, rather than
/// have the background thread read them and wake it (two wake-ups per
/// round). The background thread leaves the polling to the caller while
/// it keeps coming back, so at most one wake-up per round is left (when
/// a busy machine held a cycle up past the background thread's patience).
#[test]
fn a_lone_caller_beside_a_watched_lock_reads_its_own_replies() {
    let (_cluster, client, mut watched) = beside_a_watched_lock();
    let cost = cost(&client, || {
        let mut lock = client.try_lock("budget:beside", TTL).expect("acquire");
        client.unlock(&mut lock).expect("release");
    });
    let rounds = 2 * CYCLES;
    assert_eq!(cost.writes, MASTERS * rounds, "writes");
    // The caller looks for itself: with the background thread keeping
    // the poller, it never would. (How often depends on the machine: a
    // round the background thread decides before it lets go needs no
    // look.)
    assert!(cost.looks > 0, "the caller never held the poller");
    // At most its ask for the poller per round, where the background
    // thread would wake twice per round.
    assert!(
        cost.wakes <= rounds,
        "{} wake-ups in {rounds} rounds",
        cost.wakes
    );
    assert!(!watched.is_lost(), "the watched lock is still held");
    client.unlock(&mut watched).expect("release");
}

/// While a lone caller keeps calling beside a watched lock, the background
/// thread looks whether it still does at rests that double from a
/// millisecond to 16 ms, rather than every millisecond: a thousand looks
/// a second cost the caller about a tenth of its speed on a busy machine.
/// Each time the background thread took the poller back (a cycle held up
/// past a millisecond; the caller's ask to have it again is a wake-up),
/// the rests start again from a millisecond: five rests to reach 16 ms.
/// The time the cycles took is the yardstick, so a slower machine only
/// loosens the bound.
#[test]
fn a_lone_caller_beside_a_watched_lock_wakes_the_background_thread_rarely() {
    let (_cluster, client, mut watched) = beside_a_watched_lock();
    let started = std::time::Instant::now();
    let cost = cost(&client, || {
        for _ in 0..3 {
            let mut lock = client.try_lock("budget:beside", TTL).expect("acquire");
            client.unlock(&mut lock).expect("release");
        }
    });
    let elapsed = started.elapsed();
    let longest = elapsed.as_millis() as u64 / 16 + 1;
    let bound = 5 * (cost.wakes + 1) + longest;
    println!(
        "{} rests in {elapsed:?}, {} wake-ups: at most {bound}",
        cost.rests, cost.wakes
    );
    assert!(
        cost.rests <= bound,
        "{} rests in {elapsed:?} ({} wake-ups)",
        cost.rests,
        cost.wakes
    );
    assert!(!watched.is_lost(), "the watched lock is still held");
    client.unlock(&mut watched).expect("release");
}
