//! Tokens never repeat across `fork()`: a child that uses a client it
//! inherited draws tokens from a freshly seeded generator, not the
//! parent's next ones (else a release by one process could delete the
//! other's lock).
//!
//! The child uses the inherited client once, on a one-master cluster,
//! while the parent waits for it: the only way two processes can take
//! turns on the same sockets. (The docs say not to use a client across
//! `fork()` at all; this checks the token generator should it happen.)
//!
//! Its own test binary, not a module of `tests/it`: the child is a copy of
//! the whole process with only the forking thread in it, so no other test
//! may be running on a thread beside it (under `cargo test`) and holding a
//! lock the child would then find held for ever (the allocator's, stdio's).

#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::time::Duration;

use redlock_mio::Redlock;
use support::cluster::Cluster;

const TTL: Duration = Duration::from_secs(30);

#[test]
fn forked_child_draws_other_tokens_than_its_parent() {
    let cluster = Cluster::start(1);
    let redlock = Redlock::builder(cluster.urls())
        .request_timeout(Duration::from_millis(500))
        .build()
        .expect("build a client");
    // Warm the connection up, so that the child's round needs no handshake.
    let mut warm = redlock.try_lock("warm", TTL).expect("acquire");
    redlock.unlock(&mut warm).expect("release");

    // SAFETY: the child only runs the client's round (no locks shared with
    // other threads are taken on its path: it neither allocates in a new
    // arena nor touches stdio) and leaves with `_exit`, skipping the
    // parent's destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match redlock.try_lock("child", TTL) {
            Ok(_) => 0,
            Err(_) => 1,
        };
        // SAFETY: ends the child at once, without unwinding or atexit.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed to lock (status {status})"
    );
    let child_token = cluster.get(0, "child").expect("the child's lock");

    let mut lock = redlock.try_lock("parent", TTL).expect("the parent locks");
    assert_ne!(
        &lock.token()[..],
        &child_token[..],
        "the parent drew the child's token: the generator was not reseeded after fork"
    );
    redlock.unlock(&mut lock).expect("release");
}
