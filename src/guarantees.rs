//! What a lock guarantees, what it assumes, and what it cannot do. (This
//! module holds documentation only.)
//!
//! In short: a lock is held on a quorum of independent masters for its
//! validity, and no other client can win it during that time, provided
//! that the masters keep their keys, the clocks run at about the same rate
//! and the holder stops working when the validity runs out. That last
//! condition is the weak one; a [fence](crate::fencing) lets the protected
//! store enforce it.
//!
//! # Mutual exclusion, within the validity
//!
//! An acquire takes `t0` from the client's monotonic clock, sends
//! `SET resource token NX PX ttl` to every master at once, and wins if a
//! quorum (`N / 2 + 1`) set the key and time is left:
//!
//! ```text
//! drift    = ttl * drift_factor + 2 ms          (drift_factor 0.01 by default)
//! validity = ttl - (now - t0) - drift           held only if validity > 0
//! ```
//!
//! [`Lock::validity`](crate::Lock::validity) and
//! [`Lock::valid_until`](crate::Lock::valid_until) give what is left. No two
//! clients hold a resource with overlapping validities, as long as:
//!
//! - every master keeps the keys it set for their TTL (see
//!   [persistence](crate::operations#persistence), which also asks for
//!   `maxmemory-policy noeviction`, and the
//!   [restart guard](crate::operations#the-restart-guard));
//! - the masters are independent: no replication between them, no server
//!   listed twice. The client refuses a replica, a cluster-mode node and a
//!   server reached through a second address at the handshake
//!   ([`Builder::identify_masters`](crate::Builder::identify_masters), on
//!   by default), and the same address twice at build;
//! - the clocks of the clients and the masters run at rates that differ by
//!   less than the drift factor ([`Builder::drift_factor`](crate::Builder::drift_factor)).
//!   Only rates matter: the wall clocks may disagree by any amount.
//!
//! A lock never claims more than the masters granted. A failed extend caps
//! its validity at what that round would have granted; an extend that
//! finds the token gone, and every unlock, expire it. An extend never
//! shortens a key on a master (`PEXPIRE … GT`): one delayed in the network,
//! on a connection the client gave up, cannot cut a newer one short, and a
//! lock extended to a shorter TTL claims less than the masters hold. The
//! table is in [`Lock`](crate::Lock)'s docs.
//!
//! # A pause can outlive a lock
//!
//! A process pause (garbage collection, a page fault, a stopped VM,
//! scheduling) or a network delay after the lock was granted can let a
//! holder act on a lock that has already expired, and another client may
//! hold it by then. Redlock cannot prevent this; the protected resource
//! can, by checking something with every write:
//!
//! - **The token** ([`Lock::token`](crate::Lock::token)): 20 bytes from a
//!   generator seeded by the operating system, new for every acquisition
//!   (reseeded after `fork()`). A store that keeps the token of the last
//!   writer and refuses another uses it as a compare-and-set guard: it
//!   turns away a holder whose lock was taken over, but it cannot order
//!   two holders.
//! - **The fence** ([`Lock::fence`](crate::Lock::fence), with
//!   [`Builder::fencing`](crate::Builder::fencing)): a number that is
//!   larger for every later holder of the resource. The store keeps the
//!   largest fence it accepted and refuses smaller ones. It costs one more
//!   round trip per acquisition; [`fencing`](crate::fencing) gives the
//!   scheme, its assumptions and the proof.
//!
//! # A suspend counts
//!
//! On Linux and Android the client measures time on `CLOCK_BOOTTIME`,
//! which keeps counting while the host or VM is suspended: after a resume,
//! [`Lock::validity`](crate::Lock::validity) has run down by the time
//! suspended, as the masters' keys have. Elsewhere the clock is
//! [`Instant`](std::time::Instant), which may stop during a suspend: there,
//! treat a resume as the loss of every lock. The instants the API takes
//! and gives ([`Redlock::lock_until`](crate::Redlock::lock_until)'s
//! deadline, [`Lock::valid_until`](crate::Lock::valid_until), the embedded
//! client's timeouts) are [`Instant::now`](std::time::Instant::now)'s,
//! converted at the boundary.
//!
//! # Several resources in one lock
//!
//! [`Redlock::try_lock_all`](crate::Redlock::try_lock_all) and
//! [`lock_all`](crate::Redlock::lock_all) take up to 64 resources at once.
//! On each master one script sets every key or none, so two locks over
//! overlapping sets never both hold, under the assumptions of a single
//! lock; the quorum and the validity are those of one resource. A failed
//! attempt leaves no key.
//!
//! # Kept locks
//!
//! A kept lock ([`Redlock::keep`](crate::Redlock::keep), and the scoped
//! [`with_lock`](crate::Redlock::with_lock) and
//! [`with_lock_async`](crate::Redlock::with_lock_async)) is extended every
//! `ttl / 3` by the rules of [`extend`](crate::Redlock::extend). The keeper sends the lock's
//! extensions and its release one after another, so an extension never
//! races the release and nothing is extended after it; the extend script
//! changes a key only while it holds the lock's token, so an expired key
//! is never recreated. The keeper reports the lock
//! [at risk](crate::Standing::AtRisk) when an extension misses a quorum
//! (it retries after a quarter period), [lost](crate::Standing::Lost) when
//! a quorum says the token is gone (within one period of the key's loss)
//! or its validity runs out (by its end), and
//! [released](crate::Standing::Released), not lost, once it has been
//! released. Its lock is also watched ([`Redlock::watch`](crate::Redlock::watch),
//! unless [`KeepOptions::watch`](crate::KeepOptions::watch) is off): where
//! the masters track keys, a loss on a majority (its keys deleted,
//! flushed, evicted, overwritten, expired early, or their masters restarted
//! empty) is reported lost as soon as their word of the change and a read
//! of the key reach the client, a round trip after the change (a master
//! whose connection dropped, after the reconnect and a read), not at the
//! next extension. A word of change alone never reports a loss, nor does
//! a dropped connection. It cannot stop the holder's own work: check
//! [`Keeper::is_lost`](crate::Keeper::is_lost), or await
//! [`Keeper::lost`](crate::Keeper::lost), before each step, as with
//! `validity()`.
//!
//! # How long a call takes
//!
//! - [`try_lock`](crate::Redlock::try_lock), [`extend`](crate::Redlock::extend)
//!   and [`unlock`](crate::Redlock::unlock) return within one request
//!   timeout ([`Builder::request_timeout`](crate::Builder::request_timeout),
//!   50 ms by default). A round returns as soon as its outcome is certain,
//!   so a paused or dead minority of masters costs nothing, for failed
//!   attempts too: a failed attempt queues its release on every master
//!   that did not refuse it and returns without waiting for it.
//! - [`lock`](crate::Redlock::lock) makes up to
//!   [`retry_count`](crate::Builder::retry_count)` + 1` attempts, waiting
//!   at most a random retry delay between them (less when it is told that
//!   the lock was handed to it, or when the holder's key expires sooner);
//!   [`lock_until`](crate::Redlock::lock_until) returns by its deadline.
//!
//! # Waiting is a hint, never a grant
//!
//! A waiter that a release tells to come
//! ([`how_it_works`](crate::how_it_works#waiting-for-a-contended-lock))
//! still wins the lock by its own acquire round, with its validity measured
//! from that round's start: everything above holds for it unchanged. What
//! the masters keep for the waiters (queue entries, a reservation of a
//! released key) is a value no token equals, which refuses every other
//! acquire and expires by itself.
//! - A master that floods the client with data it never asked for, or
//!   sends a hostile length, never holds a call: its connection is dropped
//!   and made again, the round decides on the others, and the report names
//!   the error. The client allocates nothing toward a length a server
//!   announces.
//!
//! # Dropped futures
//!
//! Every future of the async API may be dropped at any point. Before its
//! first poll nothing was sent. After that, its round is given up (late
//! replies are matched to their requests and dropped; they never count
//! for another round). A dropped acquire's key is released on every
//! master, by a release queued behind the acquire and followed by the
//! client until every master has answered; a dropped extend caps the lock
//! as a failed one does; a dropped unlock expires the lock and its round
//! is followed the same way. The bound: a master whose connection goes
//! down between the acquire and its release keeps the key until its TTL
//! runs out, and no longer.
//! [`Redlock::try_lock_async`](crate::Redlock::try_lock_async) has the
//! details; [`Stats`](crate::Stats) counts the rounds given up and the
//! releases made for them.
//!
//! # One client, many callers
//!
//! A [`Redlock`](crate::Redlock) is `Send` and `Sync` and keeps one
//! connection per master whatever the number of callers: share one among
//! every thread and task of a process. The rounds of its callers are in
//! flight at once over those connections, each reply matched to its
//! round, each round deciding on its own. At most
//! [`Builder::max_in_flight`](crate::Builder::max_in_flight) rounds (256
//! by default) are in flight; past that a call waits for a slot up to a
//! request timeout and then fails with
//! [`Error::TooManyInFlight`](crate::Error::TooManyInFlight), having sent nothing.
//!
//! Do not use a client across `fork()`: parent and child would share its
//! sockets. Should it happen, the token generator notices the new process
//! and reseeds, so tokens still never repeat.
//!
//! # What is not guaranteed
//!
//! - A lock whose holder keeps working past its validity protects nothing
//!   by itself; use fences.
//! - A master that loses acknowledged writes (a crash with
//!   `appendfsync everysec`, a restore from a snapshot) can grant a lock
//!   another client still holds on it, unless it stays out of the quorum
//!   for the longest TTL: [operations](crate::operations#persistence).
//! - A release that cannot reach a master leaves the key there until its
//!   TTL runs out; the other holders wait for it.
//! - Fairness is first come, first served by the waiters' wall clocks, no
//!   better: a caller that waits ([`lock`](crate::Redlock::lock) and the
//!   other waiting calls) is queued on the masters at when it began to
//!   wait by its client's clock, and a release hands the lock to the first
//!   in line ([how it works](crate::how_it_works#waiting-for-a-contended-lock)).
//!   Each master takes that place within a second of its own clock, so a
//!   client whose clock runs fast by `d` waits behind waiters that came
//!   up to `d` (a second at most) after it, and one whose clock runs slow
//!   by `d` goes ahead of waiters that came up to `d` (a second at most)
//!   before it: a wrong clock cannot keep the lock from the others for
//!   longer than that.
//!   [`try_lock`](crate::Redlock::try_lock) does not queue, and neither do
//!   the callers of a client that is not told of releases
//!   ([`wake_on_release(false)`](crate::Builder::wake_on_release), or
//!   masters that refuse `HELLO 3` or `SUBSCRIBE`): they retry after
//!   random delays, and can lose many times in a row.
//!
//! [`limitations`](crate::limitations) lists what the crate does not do
//! yet.
