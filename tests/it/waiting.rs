//! Waiting for a contended lock: a release hands the lock to the first
//! waiter and tells it; a waiter behind a holder that crashed sleeps until
//! the holder's key expires; a waiter that gives up, times out or is
//! dropped leaves nothing behind; a queue entry of a waiter that died costs
//! the others one reservation window. Each is proven by the attempts
//! counter and what the masters hold, with retry delays far longer than
//! any test: a waiter that got the lock without being told would have had
//! to wait for them.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::check::{eventually, integer, kill_clients, queued_on};
use crate::support::cluster::Cluster;
use redlock_mio::{Error, MAX_TIMEOUT, Redlock};

const RESOURCE: &[u8] = b"waited-for";
const QUEUE: &[u8] = b"redlock-mio:queue:waited-for";
/// Far longer than any test: an attempt that comes after a retry delay
/// means the waiter was not told.
const NEVER: Duration = MAX_TIMEOUT;
/// Generous bounds for a busy machine; never reached when things work.
const PATIENCE: Duration = Duration::from_secs(60);

/// A client that only retries when told, or when the key that refused it
/// expires: its retry delay outlasts every test.
fn waiter(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(2))
        .retry_delay(NEVER)
        .retry_jitter(Duration::ZERO)
        .build()
        .expect("client")
}

/// A holder of the resource for an hour, and its lock.
fn hold(cluster: &Cluster) -> (Redlock, redlock_mio::Lock) {
    let holder = waiter(cluster);
    let held = holder
        .try_lock(RESOURCE, Duration::from_secs(3600))
        .expect("held");
    (holder, held)
}

/// Puts `entries` (place, member) in the resource's queue on every master.
fn enqueue(cluster: &Cluster, entries: &[(&[u8], &[u8])]) {
    for i in 0..cluster.len() {
        let mut args: Vec<&[u8]> = vec![b"ZADD", QUEUE];
        for (place, member) in entries {
            args.extend([*place, *member]);
        }
        cluster.command(i, &args);
    }
}

/// `client` waits for the resource on a thread of its own.
fn wait_in_thread(client: &Arc<Redlock>) -> thread::JoinHandle<Result<redlock_mio::Lock, Error>> {
    let client = Arc::clone(client);
    thread::spawn(move || {
        client.lock_until(RESOURCE, Duration::from_secs(30), Instant::now() + PATIENCE)
    })
}

#[test]
fn a_release_hands_the_lock_to_the_waiter_at_once() {
    let cluster = Cluster::start(5);
    let (holder, mut held) = hold(&cluster);
    let client = Arc::new(waiter(&cluster));
    let waiting = wait_in_thread(&client);
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 5),
        "the waiter is queued on every master"
    );
    holder.unlock(&mut held).expect("released");
    let lock = waiting
        .join()
        .expect("thread")
        .expect("the waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    // One refused attempt, then the one it was told to make: the holder's
    // key had an hour left and the retry delay is longer still.
    assert_eq!(client.stats().attempts, 2);
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0),
        "no queue entry is left"
    );
}

#[test]
fn waiters_are_served_in_the_order_they_came() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let mut threads = Vec::new();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..4 {
        let client = waiter(&cluster);
        let order = Arc::clone(&order);
        threads.push(thread::spawn(move || {
            let mut lock = client
                .lock_until(RESOURCE, Duration::from_secs(30), Instant::now() + PATIENCE)
                .expect("served");
            order.lock().expect("order").push(i);
            client.unlock(&mut lock).expect("released");
            client.stats().attempts
        }));
        // The next waiter comes once this one is queued everywhere.
        assert!(eventually(PATIENCE, || queued_on(
            &cluster,
            RESOURCE,
            i + 1
        ) == 3));
    }
    holder.unlock(&mut held).expect("released");
    let attempts: Vec<u64> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(
        *order.lock().expect("order"),
        [0, 1, 2, 3],
        "first come, first served"
    );
    assert_eq!(attempts, [2, 2, 2, 2], "each waiter was told, none polled");
}

#[test]
fn a_waiter_behind_a_crashed_holder_sleeps_until_its_key_expires() {
    let cluster = Cluster::start(3);
    let holder = waiter(&cluster);
    // The holder crashes: its key stays until its TTL runs out.
    let held = holder
        .try_lock(RESOURCE, Duration::from_secs(3))
        .expect("held");
    drop(holder);
    let client = waiter(&cluster);
    let lock = client
        .lock_until(RESOURCE, Duration::from_secs(30), Instant::now() + PATIENCE)
        .expect("served once the key expired");
    assert!(
        Instant::now() >= held.valid_until(),
        "not before the holder's validity ended"
    );
    // The refused attempt learned when the key expires; no polling.
    let attempts = client.stats().attempts;
    assert!((2..=3).contains(&attempts), "{attempts} attempts");
    drop(lock);
}

#[test]
fn a_waiter_that_gives_up_leaves_no_queue_entry() {
    let cluster = Cluster::start(3);
    let (_holder, _held) = hold(&cluster);
    let client = waiter(&cluster);
    let result = client.lock_until(
        RESOURCE,
        Duration::from_secs(30),
        Instant::now() + Duration::from_secs(3),
    );
    assert!(matches!(result, Err(Error::Contended(_))), "{result:?}");
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0),
        "its entries are gone"
    );
}

/// `client` waits for the resource in a task on a runtime of its own, for
/// `patience` at most; returns the runtime and the task once the wait is
/// queued on every master as the `place`-th waiter.
fn queued_async(
    cluster: &Cluster,
    client: &Arc<Redlock>,
    patience: Duration,
    place: i64,
) -> (
    tokio::runtime::Runtime,
    tokio::task::JoinHandle<Result<redlock_mio::Lock, Error>>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let task = {
        let client = Arc::clone(client);
        runtime.spawn(async move {
            client
                .lock_until_async(RESOURCE, Duration::from_secs(30), Instant::now() + patience)
                .await
        })
    };
    runtime.block_on(async {
        while queued_on(cluster, RESOURCE, place) < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (runtime, task)
}

#[test]
fn a_dropped_async_waiter_leaves_no_queue_entry() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let client = Arc::new(waiter(&cluster));
    let (runtime, task) = queued_async(&cluster, &client, PATIENCE, 1);
    task.abort();
    let _ = runtime.block_on(task);
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0),
        "its entries are gone"
    );
    // With nobody queued, a release leaves the key free.
    holder.unlock(&mut held).expect("released");
    assert!((0..3).all(|i| !cluster.exists(i, RESOURCE)));
}

#[test]
fn waiters_that_never_come_cost_at_most_one_reservation_window() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    // First in line, a waiter whose client is gone (nobody hears its
    // channel), then one whose client hears it but never comes (a stalled
    // process), each with a reservation window of 300 ms.
    let gone: &[u8] = b"300|7|redlock-mio:wake:00000000000000dd";
    let stalled: &[u8] = b"300|8|redlock-mio:wake:00000000000000ee";
    let mut listeners = Vec::new();
    for i in 0..3 {
        cluster.command(i, &[b"ZADD", QUEUE, b"1", gone, b"2", stalled]);
        let mut listener = cluster.node(i).connect(PATIENCE).expect("connect");
        listener
            .request(&[b"SUBSCRIBE", b"redlock-mio:wake:00000000000000ee"])
            .expect("subscribed");
        listeners.push(listener);
    }
    let client = Arc::new(waiter(&cluster));
    let waiting = wait_in_thread(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 3) == 3));
    holder.unlock(&mut held).expect("released");
    let lock = waiting
        .join()
        .expect("thread")
        .expect("served after the stalled one's window");
    assert!(lock.validity() > Duration::from_secs(20));
    // The release skipped the one that was gone, reserved the lock for
    // the stalled one and told this waiter to try once its window had
    // passed: one refused attempt, then the one it was told to make (and
    // one more if a master's window outlasted the others' by a moment).
    let attempts = client.stats().attempts;
    assert!((2..=3).contains(&attempts), "{attempts} attempts");
    drop(listeners);
}

#[test]
fn one_subscription_per_connection_however_many_waits() {
    let cluster = Cluster::start(3);
    let (_holder, _held) = hold(&cluster);
    let client = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(2))
        .retry_count(0)
        .build()
        .expect("client");
    for _ in 0..20 {
        assert!(client.lock(RESOURCE, Duration::from_secs(30)).is_err());
    }
    for i in 0..3 {
        let channels = cluster.command(i, &[b"PUBSUB", b"CHANNELS", b"redlock-mio:wake:*"]);
        // Two clients, one channel each, whatever the number of waits.
        assert!(
            channels.starts_with(b"*2\r\n"),
            "{}",
            String::from_utf8_lossy(&channels)
        );
    }
    assert!(
        eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0),
        "no entry is left"
    );
}

#[test]
fn a_fenced_waiter_is_handed_the_lock_with_a_larger_fence() {
    let cluster = Cluster::start(3);
    let fenced = |retry: Duration| {
        Redlock::builder(cluster.urls())
            .request_timeout(Duration::from_secs(2))
            .retry_delay(retry)
            .retry_jitter(Duration::ZERO)
            .fencing(Duration::from_secs(3600))
            .build()
            .expect("client")
    };
    let holder = fenced(NEVER);
    let mut held = holder
        .try_lock(RESOURCE, Duration::from_secs(3600))
        .expect("held");
    let first = held.fence().expect("a fence");
    let client = Arc::new(fenced(NEVER));
    let waiting = wait_in_thread(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 3));
    holder.unlock(&mut held).expect("released");
    let lock = waiting.join().expect("thread").expect("handed over");
    assert!(lock.fence().expect("a fence") > first);
    assert_eq!(client.stats().attempts, 2, "told, not polling");
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0));
}

#[test]
fn an_async_waiter_is_handed_the_lock_under_every_executor() {
    let cluster = Cluster::start(3);
    let holder = waiter(&cluster);
    for (name, run) in crate::executors::all() {
        let mut held = holder
            .try_lock(RESOURCE, Duration::from_secs(3600))
            .expect("held");
        let client = Arc::new(waiter(&cluster));
        let task = {
            let client = Arc::clone(&client);
            move || {
                run(Box::pin(async move {
                    let lock = client
                        .lock_until_async(
                            RESOURCE,
                            Duration::from_secs(30),
                            Instant::now() + PATIENCE,
                        )
                        .await;
                    assert!(lock.is_ok(), "{name}: {lock:?}");
                }));
            }
        };
        let waiting = thread::spawn(task);
        assert!(
            eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 3),
            "{name}"
        );
        holder.unlock(&mut held).expect("released");
        waiting.join().expect("thread");
        assert_eq!(client.stats().attempts, 2, "{name}: told, not polling");
        for i in 0..3 {
            cluster.command(i, &[b"DEL", RESOURCE]);
        }
    }
}

#[test]
fn a_foreign_queue_entry_with_a_window_px_refuses_is_dropped_and_the_release_succeeds() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    // Written by someone else: a window with a leading zero, on a channel
    // somebody hears.
    let odd: &[u8] = b"050|9|redlock-mio:wake:00000000000000aa";
    let mut listeners = Vec::new();
    for i in 0..3 {
        cluster.command(i, &[b"ZADD", QUEUE, b"1", odd]);
        let mut listener = cluster.node(i).connect(PATIENCE).expect("connect");
        listener
            .request(&[b"SUBSCRIBE", b"redlock-mio:wake:00000000000000aa"])
            .expect("subscribed");
        listeners.push(listener);
    }
    holder.unlock(&mut held).expect("the release succeeds");
    for i in 0..3 {
        assert!(!cluster.exists(i, RESOURCE), "master {i}: the key is free");
        assert_eq!(integer(&cluster.command(i, &[b"ZCARD", QUEUE])), 0);
    }
    drop(listeners);
}

#[test]
fn a_blocking_key_that_outlives_any_ttl_is_reported_not_a_protocol_error() {
    let cluster = Cluster::start(3);
    for i in 0..3 {
        // 2e14 ms: a TTL the crate never sets, but another client may.
        cluster.command(
            i,
            &[b"SET", RESOURCE, b"someone", b"PX", b"200000000000000"],
        );
    }
    let client = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(2))
        .retry_count(0)
        .build()
        .expect("client");
    let result = client.lock(RESOURCE, Duration::from_secs(30));
    assert!(matches!(result, Err(Error::Contended(_))), "{result:?}");
    let stats = client.stats();
    assert!(
        stats
            .masters
            .iter()
            .all(|m| m.errors == 0 && m.connects == 1),
        "no master failed or reconnected: {stats:?}"
    );
}

/// The value of the resource's key on master `i`, if it is a reservation
/// for a waiter (`reserved <member>`).
fn reservation(cluster: &Cluster, i: usize) -> Option<String> {
    cluster
        .get(i, RESOURCE)
        .filter(|value| value.starts_with(b"reserved "))
        .map(|value| String::from_utf8_lossy(&value).into_owned())
}

/// A release never reserves the lock for a waiter nobody hears (its
/// client is gone): the entry is dropped and the key is free at once,
/// however long the entry's window.
#[test]
fn a_waiter_nobody_hears_is_dropped_and_never_reserved_for() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let gone: &[u8] = b"999999999|7|redlock-mio:wake:00000000000000dd";
    enqueue(&cluster, &[(b"1", gone)]);
    holder.unlock(&mut held).expect("released");
    for i in 0..3 {
        assert_eq!(reservation(&cluster, i), None, "master {i}");
    }
    let other = waiter(&cluster);
    let _lock = other
        .try_lock(RESOURCE, Duration::from_secs(30))
        .expect("free at once");
}

/// A waiter that gives up leaves the queues before anything its client
/// sends next: the client's own release, right after, finds nobody to
/// hand the lock to.
#[test]
fn a_waiter_that_gives_up_is_never_handed_the_lock() {
    let cluster = Cluster::start(3);
    let client = waiter(&cluster);
    let mut held = client
        .try_lock(RESOURCE, Duration::from_secs(3600))
        .expect("held");
    // The client waits for its own lock (another token), is queued on
    // every master, and gives up.
    let result = client.lock_until(
        RESOURCE,
        Duration::from_secs(30),
        Instant::now() + Duration::from_secs(3),
    );
    assert!(matches!(result, Err(Error::Contended(_))), "{result:?}");
    // The leave went out first on the same connections.
    client.unlock(&mut held).expect("released");
    for i in 0..3 {
        assert_eq!(reservation(&cluster, i), None, "master {i}");
    }
}

/// Longer than any test may take: a waiter given this deadline that is
/// served has been told (or woken by its own reconnect), never reached its
/// last attempt.
const LONG: Duration = Duration::from_secs(3600);

/// A bound for what takes milliseconds when things work (a reconnect, a
/// hand-off and the attempt it wakes): reaching it means that it never
/// happened, and the test fails in seconds, not at a one-minute limit.
const SOON: Duration = Duration::from_secs(20);

/// `client` waits for the resource on a thread of its own, with a deadline
/// far past any test ([`LONG`]); its outcome arrives on the receiver, which
/// the test waits on for [`SOON`] at most, so that a waiter nobody tells
/// fails the test instead of hanging it.
fn wait_long(client: &Arc<Redlock>) -> std::sync::mpsc::Receiver<Result<redlock_mio::Lock, Error>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let client = Arc::clone(client);
    thread::spawn(move || {
        let outcome = client.lock_until(RESOURCE, Duration::from_secs(30), Instant::now() + LONG);
        let _ = tx.send(outcome);
    });
    rx
}

/// The live waiter's outcome: told when its turn comes (within [`SOON`]),
/// it gets the lock.
fn served_at_its_turn(outcome: &std::sync::mpsc::Receiver<Result<redlock_mio::Lock, Error>>) {
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the live waiter is told when its turn comes")
        .expect("the live waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
}

/// Whether `client` has connected to every master more than once.
fn reconnected(client: &Redlock) -> bool {
    client.stats().masters.iter().all(|m| m.connects >= 2)
}

/// A waiter whose connections are dropped reconnects on its own, though it
/// sends nothing while it waits, and is told again: the release that
/// follows hands it the lock.
#[test]
fn a_waiter_whose_connections_drop_reconnects_and_is_handed_the_lock() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 3));
    for i in 0..3 {
        kill_clients(&cluster, i);
    }
    assert!(
        eventually(SOON, || reconnected(&client)),
        "the waiter reconnects by itself: {:?}",
        client.stats().masters
    );
    holder.unlock(&mut held).expect("released");
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the waiter is told, not left to its deadline")
        .expect("the waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    // The refused attempt, those its reconnects woke (one per master at
    // most), and the one it was told to make: no polling.
    let attempts = client.stats().attempts;
    assert!((3..=5).contains(&attempts), "{attempts} attempts");
}

/// A release that comes while a waiter's connections are down finds
/// nobody to tell; the waiter reconnects on its own and, woken by that,
/// finds the key free.
#[test]
fn a_waiter_whose_connections_drop_before_the_release_is_served_when_it_reconnects() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 3));
    for i in 0..3 {
        kill_clients(&cluster, i);
    }
    holder.unlock(&mut held).expect("released");
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the waiter is woken by its reconnect, not left to its deadline")
        .expect("the waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    assert!(reconnected(&client), "{:?}", client.stats().masters);
    let attempts = client.stats().attempts;
    assert!((2..=5).contains(&attempts), "{attempts} attempts");
}

/// Queue entries of waiters whose client is gone (a crashed process with
/// many waiting threads leaves one per thread), first in line on every
/// master: `count` of them, on a channel nobody hears.
fn dead_entries(cluster: &Cluster, count: usize, first_place: usize) {
    for i in 0..cluster.len() {
        for n in 0..count {
            let place = (first_place + n).to_string();
            let member = format!("300|{}|redlock-mio:wake:00000000000000dd", 100 + n);
            cluster.command(i, &[b"ZADD", QUEUE, place.as_bytes(), member.as_bytes()]);
        }
    }
}

/// However many dead entries are ahead of it, the first live waiter is the
/// one a release hands the lock to: each dead one is skipped.
#[test]
fn a_release_skips_any_number_of_dead_waiters_to_the_live_one() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    dead_entries(&cluster, 9, 1);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 10) == 3));
    holder.unlock(&mut held).expect("released");
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the live waiter is told, not left to the holder's TTL")
        .expect("the live waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    assert_eq!(client.stats().attempts, 2, "refused once, then told");
    // Every dead entry was dropped (the third master may answer the
    // release a moment after the quorum).
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 0));
}

/// Behind a waiter that never comes, however many dead entries there are,
/// the next live waiter is told to try once the first one's window has
/// passed.
#[test]
fn the_waiter_told_to_try_next_is_found_behind_any_number_of_dead_ones() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    // First in line, a waiter whose client hears but never comes.
    let stalled: &[u8] = b"300|8|redlock-mio:wake:00000000000000ee";
    let mut listeners = Vec::new();
    for i in 0..3 {
        cluster.command(i, &[b"ZADD", QUEUE, b"0", stalled]);
        let mut listener = cluster.node(i).connect(PATIENCE).expect("connect");
        listener
            .request(&[b"SUBSCRIBE", b"redlock-mio:wake:00000000000000ee"])
            .expect("subscribed");
        listeners.push(listener);
    }
    dead_entries(&cluster, 9, 1);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 11) == 3));
    holder.unlock(&mut held).expect("released");
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the live waiter is told when to try, not left to the holder's TTL")
        .expect("the live waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    // Refused once, then the attempt it was told to make (and one more if
    // a master's window outlasted the others' by a moment).
    let attempts = client.stats().attempts;
    assert!((2..=3).contains(&attempts), "{attempts} attempts");
    drop(listeners);
}

/// Subscribes a connection to each master on the channel of client
/// `client` (16 hex digits), which then hears its waiters' wake-ups but
/// never acts on them: a stalled process. Dropped, it is gone.
fn stalled_client(cluster: &Cluster, client: &str) -> Vec<crate::support::cluster::Connection> {
    let channel = format!("redlock-mio:wake:{client}");
    (0..cluster.len())
        .map(|i| {
            let mut listener = cluster.node(i).connect(PATIENCE).expect("connect");
            listener
                .request(&[b"SUBSCRIBE", channel.as_bytes()])
                .expect("subscribed");
            listener
        })
        .collect()
}

/// A stalled client (`00000000000000ee`, heard by the listeners returned)
/// with `count` waiters first in line on every master, each with a
/// reservation window of `window_ms`.
fn stalled_waiters(
    cluster: &Cluster,
    window_ms: u32,
    count: u32,
) -> Vec<crate::support::cluster::Connection> {
    let listeners = stalled_client(cluster, "00000000000000ee");
    let places: Vec<Vec<u8>> = (1..=count).map(|i| i.to_string().into_bytes()).collect();
    let members: Vec<Vec<u8>> = (1..=count)
        .map(|i| format!("{window_ms}|{}|redlock-mio:wake:00000000000000ee", 7 + i).into_bytes())
        .collect();
    let entries: Vec<(&[u8], &[u8])> = places
        .iter()
        .zip(&members)
        .map(|(p, m)| (p.as_slice(), m.as_slice()))
        .collect();
    enqueue(cluster, &entries);
    listeners
}

/// Two waiters of a stalled process first in line: each costs the live
/// waiter behind them one reservation window, not the holder's TTL. The
/// release reserves the lock for the first and tells the second, both of
/// the stalled client, and also tells the first waiter of another client
/// when its turn comes, should both never come; that waiter then passes
/// over them.
#[test]
fn stalled_waiters_first_in_line_cost_one_window_each() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let listeners = stalled_waiters(&cluster, 300, 2);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 3) == 3));
    holder.unlock(&mut held).expect("released");
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the live waiter is told when its turn comes, not left to the holder's TTL")
        .expect("the live waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    // Refused once, then the attempt its turn called for, which passed
    // over the second stalled waiter (its turn was over) rather than
    // handing it a window of its own again: every master's turn began
    // before the waiter heard of it.
    assert_eq!(client.stats().attempts, 2);
    // The stalled waiters' turns are over: their entries are gone where
    // the lock was granted (a quorum, at least).
    assert!(queued_on(&cluster, RESOURCE, 1) <= 1);
    drop(listeners);
}

/// Two waiters of a stalled client first in line, then one of another
/// client that gives up after the release named it in the key's turn (to
/// try once the stalled ones' windows have passed): its turn passes to the
/// live waiter behind it when it leaves, though it was not first in line,
/// so that the live one is served after those windows, not at the holder's
/// TTL.
#[test]
fn a_waiter_told_to_try_next_that_gives_up_passes_its_turn_on() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let listeners = stalled_waiters(&cluster, 300, 2);
    // Third in line, an async waiter that will give up.
    let quitter = Arc::new(waiter(&cluster));
    let (runtime, task) = queued_async(&cluster, &quitter, LONG, 3);
    // Fourth, the live waiter.
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 4) == 3));
    holder.unlock(&mut held).expect("released");
    // The second gives up (its future is dropped): it leaves the queues.
    task.abort();
    let _ = runtime.block_on(task);
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the live waiter is told when its turn comes, not left to the holder's TTL")
        .expect("the live waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    let attempts = client.stats().attempts;
    assert!((2..=3).contains(&attempts), "{attempts} attempts");
    drop(listeners);
}

/// A locker played by hand on each master: it hears its channel (a
/// stalled listener would too), waits with the crate's own script at a
/// place as far back as its clock runs slow, and releases with the
/// crate's own release.
struct HandLocker {
    /// Kept open for as long as the locker lives: its channel is heard.
    listeners: Vec<crate::support::cluster::Connection>,
    conns: Vec<crate::support::cluster::Connection>,
    token: Vec<u8>,
    member: Vec<u8>,
    slow: Duration,
}

impl HandLocker {
    /// The waiter `id` of client `client`, with a reservation window of
    /// `window_ms`, its wall clock `slow` behind.
    fn new(cluster: &Cluster, client: &str, id: u32, window_ms: u32, slow: Duration) -> HandLocker {
        HandLocker {
            listeners: stalled_client(cluster, client),
            conns: (0..cluster.len())
                .map(|i| cluster.node(i).connect(PATIENCE).expect("connect"))
                .collect(),
            token: format!("hand-token-{client}").into_bytes(),
            member: format!("{window_ms}|{id}|redlock-mio:wake:{client}").into_bytes(),
            slow,
        }
    }

    /// An attempt of a wait that began now by its clock: on how many
    /// masters it won the lock.
    fn attempt(&mut self) -> usize {
        use redlock_mio::scripts::WAIT_ACQUIRE_SHA1;
        let place = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .saturating_sub(self.slow)
            .as_micros()
            .to_string();
        let mut won = 0;
        for conn in &mut self.conns {
            let reply = conn
                .request(&[
                    b"EVALSHA",
                    WAIT_ACQUIRE_SHA1.as_bytes(),
                    b"1",
                    RESOURCE,
                    &self.token,
                    b"30000",
                    &self.member,
                    place.as_bytes(),
                    b"1000",
                ])
                .expect("wait acquire");
            won += usize::from(reply.starts_with(b"+OK"));
        }
        won
    }

    fn release(&mut self) {
        use redlock_mio::scripts::RELEASE_SHA1;
        for conn in &mut self.conns {
            conn.request(&[
                b"EVALSHA",
                RELEASE_SHA1.as_bytes(),
                b"1",
                RESOURCE,
                &self.token,
            ])
            .expect("release");
        }
    }
}

/// Two lockers whose clocks run an hour slow hand the lock to each other,
/// each queueing again while the other holds it: a waiter with a right
/// clock behind them is handed the lock once a second has passed, not
/// after every one of their turns. Each master takes a waiter's place
/// within a second of its own clock, so a slow clock goes ahead by a
/// second at most; without that, the slow lockers keep the lock for as
/// long as they go on (here, until the loop's bound).
/// How slow the slow lockers' clocks run.
const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn lockers_with_slow_clocks_go_ahead_of_a_waiter_by_a_second_at_most() {
    let cluster = Cluster::start(3);
    // A client connects first: its handshakes load the scripts.
    let client = Arc::new(waiter(&cluster));
    client.stats();
    let mut slow = [
        HandLocker::new(&cluster, "00000000000000a1", 1, 300, HOUR),
        HandLocker::new(&cluster, "00000000000000a2", 2, 300, HOUR),
    ];
    assert!(eventually(PATIENCE, || {
        (0..3).all(|i| {
            cluster.command(
                i,
                &[
                    b"SCRIPT",
                    b"EXISTS",
                    redlock_mio::scripts::WAIT_ACQUIRE_SHA1.as_bytes(),
                ],
            ) == b"*1\r\n:1\r\n"
        })
    }));
    assert_eq!(slow[0].attempt(), 3, "the lock is free");
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 1) == 3));
    // The slow lockers take turns for as long as each wins the hand-off,
    // for fifteen seconds at most: the second they may go ahead by, many
    // times over for a busy machine.
    let mut turns = 0;
    let mut holder = 0;
    let mut handed = false;
    let started = Instant::now();
    while !handed && started.elapsed() < Duration::from_secs(15) {
        let next = 1 - holder;
        assert_eq!(slow[next].attempt(), 0, "queued behind the holder");
        slow[holder].release();
        // Less than a quorum: the hand-off went to the waiter whose clock
        // is right.
        handed = slow[next].attempt() < 2;
        if !handed {
            turns += 1;
            holder = next;
        }
    }
    assert!(
        handed,
        "the slow lockers kept the lock for {turns} turns: their places are an hour early"
    );
    let lock = outcome
        .recv_timeout(SOON)
        .expect(
            "the waiter is told within a second of queue, not after the slow lockers' every turn",
        )
        .expect("the waiter gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
    assert!(turns > 0, "the slow lockers went first for a while");
    drop(slow);
}

/// A client that waits for several resources, told at every hand-over:
/// enough attempts for each of them, and no retry delay to fall back on.
/// Its reservation window is four request timeouts, 8 s.
fn waiter_for_several(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(2))
        .retry_count(10)
        .retry_delay(NEVER)
        .retry_jitter(Duration::ZERO)
        .build()
        .expect("client")
}

/// Whether `resource`'s key is missing on a majority of the masters.
fn free_on_a_quorum(cluster: &Cluster, resource: &[u8]) -> bool {
    let free = (0..cluster.len())
        .filter(|&i| cluster.get(i, resource).is_none())
        .count();
    free > cluster.len() / 2
}

/// A caller that waits for several resources never keeps a free one from
/// others: it is queued only where a key is held, and a key handed to it
/// while another of its keys is held goes on to whoever comes. It is
/// served once all its keys are free at once, told each time.
#[test]
fn a_waiter_for_several_resources_never_withholds_a_free_one() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(3600);
    let deadline = Instant::now() + PATIENCE;
    let holder = waiter(&cluster);
    let mut y = holder.try_lock(b"y", ttl).expect("y held");
    let both = Arc::new(waiter_for_several(&cluster));
    let waiting = {
        let both = Arc::clone(&both);
        thread::spawn(move || both.lock_all(&[&b"x"[..], b"y"], Duration::from_secs(30)))
    };
    assert!(eventually(PATIENCE, || queued_on(&cluster, b"y", 1) == 3));
    assert_eq!(queued_on(&cluster, b"x", 1), 0, "not queued where free");
    // Another caller that waits takes the free resource at its first try.
    let second = waiter(&cluster);
    let mut x = second.lock_until(b"x", ttl, deadline).expect("x taken");
    assert_eq!(second.stats().attempts, 1, "x was not kept for the waiter");

    // `y` is handed to the waiter while `x` is held: once its attempt has
    // run on every master (queued for `x`, held everywhere), `y` is free on
    // a quorum. (A release that reaches a master after the waiter's
    // attempt there reserves the key on that master for the waiter: a
    // minority, as the waiter attempts once a quorum told it.)
    holder.unlock(&mut y).expect("y released");
    assert!(eventually(PATIENCE, || queued_on(&cluster, b"x", 1) == 3));
    assert!(free_on_a_quorum(&cluster, b"y"), "y was not kept");
    let third = waiter(&cluster);
    let mut y = third.lock_until(b"y", ttl, deadline).expect("y taken");
    assert_eq!(third.stats().attempts, 1, "y was not kept for the waiter");

    // The same with `x` handed over while `y` is held on a quorum. Where
    // the waiter found both keys free for it, its attempt took them and
    // its failure's release frees them: `x` is free on a quorum well
    // within the waiter's window, which would free a key kept for it.
    second.unlock(&mut x).expect("x released");
    assert!(eventually(Duration::from_secs(4), || {
        queued_on(&cluster, b"y", 1) >= 2 && free_on_a_quorum(&cluster, b"x")
    }));
    let fourth = waiter(&cluster);
    let mut x = fourth.lock_until(b"x", ttl, deadline).expect("x taken");
    assert_eq!(fourth.stats().attempts, 1, "x was not kept for the waiter");
    fourth.unlock(&mut x).expect("x released");

    third.unlock(&mut y).expect("y released");
    // Served, and only ever told to try: its retry delay and the keys'
    // TTLs outlast the test. (How many times it was told depends on the
    // order in which each master saw the releases and its attempts.)
    let lock = waiting.join().expect("thread").expect("served");
    assert_eq!(lock.resources().count(), 2);
}

/// A queue key that holds what the crate never writes there (another
/// type) refuses the waiter, and its expiry is left as it was: the
/// attempt is refused where the key is held, and nothing else changes.
#[test]
fn a_foreign_value_at_a_queue_key_keeps_its_expiry() {
    let cluster = Cluster::start(3);
    for i in 0..cluster.len() {
        cluster.set(i, QUEUE, b"not a queue");
    }
    let (holder, mut held) = hold(&cluster);
    let client = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_secs(2))
        .retry_count(1)
        .build()
        .expect("client");
    assert!(matches!(
        client.lock(RESOURCE, Duration::from_secs(30)),
        Err(Error::Contended(_))
    ));
    for i in 0..cluster.len() {
        assert_eq!(integer(&cluster.command(i, &[b"PTTL", QUEUE])), -1);
        assert_eq!(cluster.get(i, QUEUE).as_deref(), Some(&b"not a queue"[..]));
    }
    holder.unlock(&mut held).expect("released");
}

/// A waiter that leaves hands a free key on: when the key that refused
/// the waiters was deleted (an operator's `DEL`, which hands nothing
/// over) and the first waiter leaves (its future dropped), its leave
/// tells the next one, which would otherwise wait for the deleted key's
/// expiry.
#[test]
fn a_waiter_that_leaves_hands_a_free_key_to_the_next() {
    let cluster = Cluster::start(3);
    let (_holder, _held) = hold(&cluster);
    let first = Arc::new(waiter(&cluster));
    let (runtime, task) = queued_async(&cluster, &first, PATIENCE, 1);
    // The next waits by a number of attempts, with no deadline to make a
    // last one at: it is served only if told.
    let next = Arc::new(waiter(&cluster));
    let (send, done) = std::sync::mpsc::channel();
    {
        let next = Arc::clone(&next);
        thread::spawn(move || {
            let _ = send.send(next.lock(RESOURCE, Duration::from_secs(30)));
        });
    }
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 2) == 3));
    for i in 0..cluster.len() {
        cluster.command(i, &[b"DEL", RESOURCE]);
    }
    task.abort();
    let _ = runtime.block_on(task);
    let lock = done
        .recv_timeout(PATIENCE)
        .expect("the next is told")
        .expect("the next is served");
    assert!(lock.validity() > Duration::from_secs(20));
    // Refused, then told by the leave: no attempt of its own.
    assert_eq!(next.stats().attempts, 2);
}

/// A queue entry of a live client whose waiter is gone (its leave was
/// lost, say in a reset) is first in line: the release reserves the lock
/// for it and tells the client's next waiter, keeping the one after (a
/// stalled client would stall both). When the told waiter gives up, the
/// telling passes to the waiter after it, which is served once the
/// reservation ends, not at the holder's TTL.
#[test]
fn a_told_waiter_that_gives_up_passes_the_telling_to_its_clients_next() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let client = Arc::new(waiter(&cluster));
    let (runtime, quitter) = queued_async(&cluster, &client, LONG, 1);
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 2) == 3));
    // The client's channel, from its first entry; the gone waiter's entry
    // goes ahead of both.
    let first = cluster.command(0, &[b"ZRANGE", QUEUE, b"0", b"0"]);
    let first = String::from_utf8_lossy(&first);
    let channel = first
        .split('|')
        .nth(2)
        .and_then(|rest| rest.split('\r').next())
        .expect("an entry names its client's channel");
    let gone = format!("300|4000000000|{channel}");
    enqueue(&cluster, &[(b"1", gone.as_bytes())]);
    holder.unlock(&mut held).expect("released");
    // The told waiter gives up (its future is dropped): it leaves.
    quitter.abort();
    let _ = runtime.block_on(quitter);
    let lock = outcome
        .recv_timeout(SOON)
        .expect("the client's next waiter is told in the leaver's stead")
        .expect("it gets the lock");
    assert!(lock.validity() > Duration::from_secs(20));
}

/// Two waiters of a stalled client first in line, then a live waiter told
/// when its turn comes, then another client's waiter that tries while the
/// stalled client's second waiter has its window: the free key is not
/// handed to that stalled waiter again with a window of its own (which
/// would push the turn back by up to a window), and the live waiter is
/// served at its turn.
#[test]
fn an_attempt_during_a_stalled_waiters_window_does_not_give_it_another() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let listeners = stalled_waiters(&cluster, 2000, 2);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 3) == 3));
    let mut other = HandLocker::new(&cluster, "00000000000000ff", 7, 2000, Duration::ZERO);
    assert_eq!(other.attempt(), 0, "queued behind the holder");
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 4) == 3));
    holder.unlock(&mut held).expect("released");
    // The first stalled waiter's reservation ends; the second's window runs
    // without one (its client was told once) until the live waiter's turn.
    assert!(eventually(PATIENCE, || (0..3).all(|i| !cluster.exists(i, RESOURCE))));
    other.attempt();
    for i in 0..3 {
        let value = cluster.command(i, &[b"GET", RESOURCE]);
        assert!(
            !value.windows(8).any(|w| w == b"reserved"),
            "master {i} reserved the key again: {}",
            String::from_utf8_lossy(&value)
        );
    }
    served_at_its_turn(&outcome);
    drop(listeners);
}

/// A stalled client with forty waiters first in line (more than the
/// hand-off reads of a queue at once) holds the others up for nine of
/// their windows at most: the release names the live waiter behind them
/// in a turn that ends after those nine windows and the live waiter's
/// own, and that waiter passes over the rest.
#[test]
fn a_stalled_clients_many_waiters_cost_nine_windows_at_most() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let listeners = stalled_waiters(&cluster, 100, 40);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 41) == 3));
    holder.unlock(&mut held).expect("released");
    let turn = [&b"redlock-mio:turn:"[..], RESOURCE].concat();
    for i in 0..3 {
        let left = crate::support::check::integer(&cluster.command(i, &[b"PTTL", &turn]));
        assert!(
            (0..=900 + 8000).contains(&left),
            "master {i}: the turn ends in {left} ms, past nine windows of 100 ms and the live waiter's 8 s"
        );
    }
    served_at_its_turn(&outcome);
    drop(listeners);
}

/// A waiter that comes while a turn runs, placed before the waiter the
/// turn names (its clock runs slow: each master places it a second back),
/// is told to try at once when that turn comes and the named waiter
/// passes over the entries before it, instead of being dropped untold
/// (it would then wait for its own fallback).
#[test]
fn a_waiter_placed_before_a_running_turn_is_told_when_the_turn_comes() {
    let cluster = Cluster::start(3);
    let (holder, mut held) = hold(&cluster);
    let stalled = stalled_waiters(&cluster, 2000, 1);
    let client = Arc::new(waiter(&cluster));
    let outcome = wait_long(&client);
    assert!(eventually(PATIENCE, || queued_on(&cluster, RESOURCE, 2) == 3));
    let mut late = HandLocker::new(&cluster, "00000000000000ff", 7, 300, HOUR);
    // The release reserves the key for the stalled waiter and names the
    // live one in the turn; then the late one comes, placed before it.
    holder.unlock(&mut held).expect("released");
    assert_eq!(late.attempt(), 0, "the key is reserved");
    served_at_its_turn(&outcome);
    // The tellings went out before the grants that made the quorum, on
    // loopback: they are there to read.
    let mut told = 0;
    for listener in &mut late.listeners {
        listener
            .set_timeout(Some(Duration::from_secs(2)))
            .expect("a read timeout");
        if let Ok(message) = listener.read_reply() {
            told += usize::from(message.ends_with(b"$3\r\n7 0\r\n"));
        }
    }
    assert!(told >= 2, "the late waiter was told on {told} masters");
    drop(stalled);
}
