//! A master that takes its requests slowly: what its socket would not take
//! is written as soon as the socket can take it, while a caller waits, even
//! when no reply comes to prompt the driver (it asks for writable events
//! only while bytes wait, so that every send does not end the wait for
//! replies early).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use crate::support::cluster::Cluster;
use crate::support::hostile::{Action, Handshake, Hostile};
use redlock_mio::{Error, Redlock};

const TTL: Duration = Duration::from_secs(60);

#[test]
fn bytes_the_socket_would_not_take_go_out_when_it_can() {
    let cluster = Cluster::start(2);
    // The fake master reads its first lock command, then waits for the
    // test before it reads on, and answers nothing: what the client sends
    // meanwhile fills the socket's buffers, and the rest waits in the
    // client.
    let read_on = Arc::new(AtomicBool::new(false));
    let fake = Hostile::start(Handshake::Correct, {
        let read_on = Arc::clone(&read_on);
        move |req| match req.seq {
            0 => vec![Action::WaitFor(Arc::clone(&read_on))],
            _ => Vec::new(),
        }
    });
    let urls = vec![cluster.node(0).url(), cluster.node(1).url(), fake.url()];
    let timeout = Duration::from_secs(4);
    let redlock = Arc::new(
        Redlock::builder(urls)
            .request_timeout(timeout)
            .stall_timeout(Duration::from_secs(30))
            // Room for megabytes of unwritten requests before the
            // connection would count as stalled.
            .max_in_flight(redlock_mio::MAX_IN_FLIGHT)
            .retry_count(0)
            .build()
            .expect("build"),
    );
    // Batches of 256 locks on 1 KiB names, and their releases, decided by
    // the two real masters: about 8 MB for the fake, more than the socket
    // buffers of a loopback connection hold (about 6 MB here).
    let mut sent = 0;
    for batch in 0..14 {
        let names: Vec<Vec<u8>> = (0..256)
            .map(|i| {
                let mut name = format!("backpressure:{batch}:{i}:").into_bytes();
                name.resize(1024, b'x');
                name
            })
            .collect();
        let mut locks: Vec<_> = redlock
            .try_lock_many(&names, TTL)
            .expect("a valid batch")
            .into_iter()
            .map(|r| r.expect("the real masters grant it"))
            .collect();
        for released in redlock.unlock_many(&mut locks).expect("a valid batch") {
            released.expect("the real masters release it");
        }
        sent += 2 * names.len();
    }
    // With node 0 paused, a quorum needs the fake, whose reply never comes:
    // the probe waits for its whole request timeout, polling meanwhile.
    cluster.node(0).pause();
    let client = Arc::clone(&redlock);
    let probe = thread::spawn(move || client.try_lock("backpressure:probe", TTL));
    // Every batch is done (decided by the real masters) while the fake has
    // not read on: now it does.
    read_on.store(true, Ordering::SeqCst);
    let all = sent + 1;
    // Once the fake reads again, and well before the probe's deadline (when
    // a driver that waited for no writable event would write the rest),
    // every command reached it.
    let within = timeout - Duration::from_secs(1);
    let arrived = fake.wait_until(within, |f| f.lock_commands() >= all);
    let seen = fake.lock_commands();
    let result = probe.join().expect("the probe thread");
    cluster.node(0).resume();
    assert!(
        arrived,
        "{seen} of {all} commands reached the fake within {within:?} of the probe; \
         the rest waited in the client"
    );
    assert!(matches!(result, Err(Error::Unavailable(_))), "{result:?}");
    assert_eq!(fake.peer_closed(), 0, "the connection was dropped");
}

/// A master behind the others takes no new acquire past its limits, but
/// still every release of a lock whose acquire it took: that key is there
/// (or will be, once the master reads on), and without its release it
/// would hold the resource on that master until its TTL.
#[test]
fn a_lagging_master_still_gets_the_releases_of_the_keys_it_holds() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder(cluster.urls())
        // Rounds end at the quorum of nodes 0 and 1: no timeout is waited.
        .request_timeout(Duration::from_secs(2))
        // Small limits: 34 requests unanswered before a master lags.
        .max_in_flight(1)
        .stall_timeout(Duration::from_secs(30))
        .retry_count(0)
        .build()
        .expect("build");
    let mut kept = redlock.try_lock("lagging:kept", TTL).expect("acquire");
    assert!(cluster.exists(2, "lagging:kept"));

    // Node 2 stops reading: the next cycles go on with nodes 0 and 1, and
    // node 2 collects requests until it lags (its acquires then skip it).
    cluster.pause(2);
    let cycles = 60;
    for i in 0..cycles {
        let mut lock = redlock
            .try_lock(format!("lagging:other:{i}"), TTL)
            .expect("nodes 0 and 1 grant it");
        redlock.unlock(&mut lock).expect("nodes 0 and 1 release it");
    }
    let skipped = redlock.stats().masters[2].errors;
    redlock.unlock(&mut kept).expect("nodes 0 and 1 release it");
    cluster.resume(2);
    assert!(
        skipped > 0,
        "node 2 never lagged: the test needs it behind its limits"
    );

    // Node 2 reads on, and finds the release of every key it was given.
    let settle = Duration::from_secs(5);
    crate::support::check::assert_gone(&cluster, &[0, 1, 2], b"lagging:kept", settle);
    for i in 0..cycles {
        let key = format!("lagging:other:{i}");
        crate::support::check::assert_gone(&cluster, &[0, 1, 2], key.as_bytes(), settle);
    }
}
