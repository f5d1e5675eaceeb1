//! An acquire whose event poller fails mid-round still releases what it
//! may have set: the error is returned, and the release is queued on every
//! master.
//!
//! The poller's file descriptor is replaced by `/dev/null` while the round
//! waits (its `epoll_wait` in progress still completes), so the next poll
//! fails with `EINVAL`.
//!
//! Its own test binary, not a module of `tests/it`: the test finds its
//! client's pollers as the epoll descriptors that appear while the client
//! is built, and replaces them by number; another test building a client
//! at that time on a thread of the same process (under `cargo test`) would
//! have its poller counted and broken.

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::collections::HashSet;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::Duration;

use redlock_mio::{Error, Redlock, Require};
use support::check::{assert_gone, eventually};
use support::cluster::Cluster;
use support::proxy::{Dir, Proxies, Proxy};

const TTL: Duration = Duration::from_secs(30);

/// The descriptors of this process that are epoll instances.
fn epoll_fds() -> HashSet<i32> {
    fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let target = fs::read_link(entry.path()).ok()?;
            (target.to_str()? == "anon_inode:[eventpoll]")
                .then(|| entry.file_name().to_str()?.parse().ok())
                .flatten()
        })
        .collect()
}

#[test]
fn poll_error_during_an_acquire_still_releases() {
    let cluster = Cluster::start(3);
    let proxies = Proxies::front(&cluster);
    let before = epoll_fds();
    let redlock = Redlock::builder(proxies.urls())
        .request_timeout(Duration::from_secs(2))
        .stall_timeout(Duration::from_secs(5))
        // Connections and handshakes done first: only the round's SETs
        // are sent once masters 1 and 2 are paused.
        .require_handshakes(Require::All)
        .build()
        .expect("build a client");
    // The poller's descriptor and the registry's clone of it (the driver
    // registers sockets while another caller may be polling).
    let ours: Vec<i32> = epoll_fds().difference(&before).copied().collect();
    assert_eq!(ours.len(), 2, "the poller's and the registry's: {ours:?}");

    // Master 0 answers after 300 ms, masters 1 and 2 are paused: the round
    // is still waiting when the poller breaks, with every SET written (the
    // poller breaks once they are).
    let proxy = proxies.iter().next().expect("proxy 0");
    proxy.latency(Dir::ToClient, Duration::from_millis(300));
    cluster.pause(1);
    cluster.pause(2);
    let null = File::open("/dev/null").expect("open /dev/null");
    let sent = |p: &Proxy| p.stats().to_server;
    let before: Vec<u64> = proxies.iter().map(sent).collect();
    let result = thread::scope(|s| {
        s.spawn(|| {
            // Master 0 applied the SET, and the SETs to the paused 1 and 2
            // went through their proxies: the round is under way, and with
            // two masters paused it cannot be decided.
            let written = eventually(Duration::from_secs(5), || {
                cluster.exists(0, "broken")
                    && proxies
                        .iter()
                        .map(sent)
                        .zip(&before)
                        .all(|(now, was)| now > *was)
            });
            assert!(written, "the round's SETs went out");
            for &epfd in &ours {
                // SAFETY: replaces the poller's descriptors with /dev/null;
                // the client's next epoll_wait fails with EINVAL.
                let replaced = unsafe { libc::dup2(null.as_raw_fd(), epfd) };
                assert_eq!(replaced, epfd, "dup2");
            }
        });
        redlock.try_lock("broken", TTL)
    });
    match result {
        Err(Error::Io(_)) => {}
        other => panic!("expected the poller's error, got {other:?}"),
    }

    // Master 0 applied the SET; 1 and 2 will when they resume. The
    // release queued behind it must remove the key everywhere.
    cluster.resume(1);
    cluster.resume(2);
    proxy.latency(Dir::ToClient, Duration::ZERO);
    assert_gone(&cluster, &[0, 1, 2], b"broken", Duration::from_secs(5));
}
