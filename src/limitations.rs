//! Known limitations: what the crate does not do, or does at a cost worth
//! knowing. (This module holds documentation only.)
//!
//! # Locking
//!
//! - **Waiting costs the masters a little.** A caller that waits is queued
//!   in the crate's key space and told on a channel (see
//!   [`how_it_works`](crate::how_it_works#waiting-for-a-contended-lock)):
//!   its attempts are scripts, every release runs a hand-off (one sorted-set
//!   read when nobody waits), and each connection is a subscriber (Redis
//!   counts it in the `pubsub` class of `client-output-buffer-limit` and
//!   `CLIENT KILL TYPE`). Clients with
//!   [`wake_on_release(false)`](crate::Builder::wake_on_release), or whose
//!   ACL refuses `HELLO` or `SUBSCRIBE`, are not told: they wait for the
//!   blocking key's expiry or their retry delay.
//! - **Fairness is first come, first served by the waiters' wall clocks.**
//!   A client whose clock runs fast waits behind waiters that came after
//!   it, by up to its error; one whose clock runs slow goes ahead of
//!   waiters that came before it, by up to its error; each by a second
//!   at most, as each master takes a place within a second of its own
//!   clock (the masters' clocks then order the waiters whose clients'
//!   clocks are further off).
//! - **`try_lock` in a tight loop wins less than a slower client would.**
//!   Under heavy contention, fast back-to-back attempts split the masters
//!   among themselves (each failed attempt holds its keys until its release
//!   lands), and then nobody wins. Retry after a random delay (`lock`,
//!   `lock_until`) with the delay at the scale of a round.
//! - **A release that cannot reach a master leaves the key there until its
//!   TTL runs out**: a master whose connection is down, in its reconnect
//!   back-off, or reset before the bytes left. So does a release queued
//!   behind a reconnect's handshake or a full socket buffer when the client
//!   then stays idle: it is written at the client's next call. And so does
//!   a release that a master refuses with `NOSCRIPT` (its script cache
//!   emptied) after the round reached its quorum, while no call of the
//!   client reads from that master: it is sent again, as `EVAL`, once one
//!   does.
//! - **Limits per call**: up to 64 resources in one lock
//!   ([`try_lock_all`](crate::Redlock::try_lock_all)), up to
//!   [`MAX_BATCH`](crate::MAX_BATCH) locks per batch
//!   ([`try_lock_many`](crate::Redlock::try_lock_many)), up to
//!   [`max_in_flight`](crate::Builder::max_in_flight) rounds in flight per
//!   client (at most [`MAX_IN_FLIGHT`](crate::MAX_IN_FLIGHT)), resource
//!   names up to [`MAX_RESOURCE_LEN`](crate::MAX_RESOURCE_LEN) bytes, TTLs
//!   up to [`MAX_TTL`](crate::MAX_TTL).
//!
//! # Fencing
//!
//! - Fenced acquires fail with [`Error::Unfenced`](crate::Error::Unfenced)
//!   while fewer than a quorum of masters have their fence counter, and
//!   fencing stays unavailable if more than `N - quorum` masters lost it at
//!   once, until an operator sets the counters (see
//!   [`fencing`](crate::fencing)).
//! - The first fenced use of a new deployment needs every master to
//!   answer, twice (a start from the clocks is confirmed by a second read);
//!   a start that reached only some of them is finished by a later read.
//! - The embedded client does not fence
//!   ([`ConfigError::NotEmbeddable`](crate::ConfigError::NotEmbeddable)):
//!   a fenced acquire is several rounds in a row.
//!
//! # Time and clocks
//!
//! - Outside Linux and Android the client's clock may stop while the host
//!   is suspended: there, treat a resume as the loss of every lock (see
//!   [`guarantees`](crate::guarantees#a-suspend-counts)).
//! - The restart guard sees a flush of a master's data while the
//!   connection stays up only at the next reconnect.
//!
//! # Connections
//!
//! - A host name is resolved once, when the client is built, to its first
//!   address, by the system resolver: [`build`](crate::Builder::build)
//!   blocks for as long as the resolver takes, and a later change of the
//!   name's address is not followed.
//! - RESP3 on the wire (`HELLO 3`), so that wake-ups arrive as pushes on
//!   the connections the replies use; RESP2 where the client is not told
//!   of releases ([`wake_on_release(false)`](crate::Builder::wake_on_release))
//!   or the server refuses `HELLO`
//!   ([operations](crate::operations)). Pushes other than the client's
//!   wake-ups and the tracked keys' invalidations are read and skipped.
//! - The loss watch ([`Redlock::watch`](crate::Redlock::watch)) hears a
//!   master only on a RESP3 connection whose server tracks keys
//!   (`CLIENT TRACKING`, Redis 6 or later, an ACL that allows
//!   `client|tracking` and `client|caching`: see [operations](crate::operations)):
//!   elsewhere a loss shows at the lock's reads (when the watch starts,
//!   after each extension, after a reconnect) and at its next extension,
//!   as without a watch. The embedded client's watch
//!   ([`EmbeddedRedlock::watch`](crate::EmbeddedRedlock::watch)) hears the
//!   masters only while its caller's loop hands it their events.
//! - No Redis Cluster, Sentinel or replicas: Redlock needs independent
//!   primaries, and the handshake refuses the others.
//!
//! # CPU
//!
//! - Threads that share one client park while another thread polls, and
//!   are woken per round: a cross-thread wake-up each. The async API
//!   writes what many tasks queued in one tick in one write per master and
//!   goes further under load (the repository's `benches/README.md` has the
//!   figures).
//! - A caller (thread or task) alone on the client looks for its own
//!   replies without sleeping, yielding between looks, for up to
//!   [`Builder::spin`](crate::Builder::spin) (1 ms) per round (a thread
//!   with remote masters from the first reply on): it keeps a core busy
//!   that long in exchange for the wake-ups it saves. Set it to zero to
//!   sleep instead, at the price of a wake-up per reply that finds the
//!   caller asleep (a cross-thread one per round for a task).
//! - A lone blocking caller whose masters all run on the same machine
//!   yields its CPU before it waits for replies
//!   ([`Builder::yield_to_local_masters`](crate::Builder::yield_to_local_masters),
//!   on by default). With other threads ready on the same CPU it may wait
//!   up to a time slice: a service that keeps its CPUs busy next to local
//!   masters should turn it off.
//! - While a lock is watched, the client's background thread polls
//!   whenever no caller does, to hear the masters at once. A lone caller
//!   (a thread, or a task within its spin) takes the poller over, at the
//!   cost of one wake-up of the background thread, and the background
//!   thread leaves it to the callers while one calls again within a
//!   millisecond of the last one's poll; meanwhile they read the watch's
//!   pushes with their own replies. The background thread looks whether
//!   they still call a millisecond after it let go, then at rests that
//!   double up to 16 ms while they do (a thousand looks a second cost a
//!   caller that keeps calling a tenth of its speed on a busy machine): a
//!   push that comes after a lone call waits a millisecond at most, one
//!   that comes after the last of many calls 17 ms at most. With `spin(Duration::ZERO)` the background
//!   thread keeps the poller: it writes that caller's commands, reads its
//!   replies and wakes it, two cross-thread wake-ups per round.
//!
//! # Platforms
//!
//! The library is tested on Linux (x86-64); `unix://` addresses need a
//! Unix system, and the `redlock` command runs on Unix only. On Windows
//! the library builds (CI type-checks it for `x86_64-pc-windows-gnu`) and
//! refuses `unix://` addresses, but no test runs there. The suspend-aware
//! clock (`CLOCK_BOOTTIME`) is Linux and Android's; elsewhere the clock
//! is std's `Instant`.
