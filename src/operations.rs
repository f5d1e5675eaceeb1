//! The operator's guide: how to run the masters, what the client needs
//! from them, and how to watch it. (This module holds documentation
//! only.)
//!
//! # Masters
//!
//! Redlock wants N independent primaries: separate servers (or at least
//! separate processes on separate machines), no replication between them,
//! not in cluster mode. The quorum is `N / 2 + 1`:
//!
//! | masters | quorum | failures tolerated |
//! |--:|--:|--:|
//! | 1 | 1 | 0 |
//! | 2 | 2 | 0 |
//! | 3 | 2 | 1 |
//! | 4 | 3 | 1 |
//! | 5 | 3 | 2 |
//!
//! Use an odd number: an even one adds a master without adding tolerance.
//!
//! Addresses are `redis://[[user]:password@]host[:port][/db]`,
//! `rediss://…` (TLS, feature `tls`) and
//! `unix:///path/to/redis.sock[?db=N&user=U&pass=P]`; schemes are read in
//! any case. A host name is resolved once, when the client is built, by the
//! system resolver (not bounded by the connect timeout): give IP addresses
//! where start-up time matters. Passwords never appear in `Debug`,
//! `Display` or errors.
//!
//! At every (re)connect the handshake asks each server
//! `INFO server replication cluster`, pipelined with the rest of the
//! handshake, and refuses a replica, a cluster-mode node, or one server
//! reached through a second address (the same `run_id`), each with a
//! typed, non-retryable error naming the master. Managed services that
//! refuse `INFO` need
//! [`Builder::identify_masters(false)`](crate::Builder::identify_masters);
//! the client then cannot check, and the restart guard is unavailable.
//!
//! What [`build`](crate::Builder::build) refuses is what it can see:
//! settings out of range, addresses that do not parse or name one master
//! twice, and masters that answer but cannot take part
//! ([`ConfigError::Misconfigured`](crate::ConfigError::Misconfigured): a
//! wrong password, a missing ACL permission, a replica, a cluster-mode
//! node, one server under two addresses, a refused TLS certificate) or
//! that keep another longest TTL. Masters that are down or slow are not a
//! configuration error: by default `build` succeeds and later calls retry
//! them; [`Builder::require_handshakes`](crate::Builder::require_handshakes)
//! makes it fail unless a quorum (or every master) completed its
//! handshake, naming each master that did not and why. A master that goes
//! wrong on a running client (a password changed, a master turned into a
//! replica) fails its rounds with
//! [`Error::Misconfigured`](crate::Error::Misconfigured) once it keeps a
//! quorum out of reach.

//! # Persistence
//!
//! A master that comes back from a crash without the keys it had set can
//! grant a lock that another client still holds on it. One of these keeps
//! plain locks safe:
//!
//! - `appendonly yes` with `appendfsync always`: a master keeps every
//!   write it acknowledged;
//! - a crashed master kept down for longer than the longest TTL in use
//!   before it rejoins;
//! - the [restart guard](#the-restart-guard), which applies that rule in
//!   the client, whatever the persistence.
//!
//! [Fencing](crate::fencing) needs more: a master either keeps every write
//! it acknowledged or loses its whole data set. Run fenced masters with
//! `appendfsync always`, or with no persistence at all; never with
//! `appendfsync everysec` or snapshots alone, after which a master can come
//! back with an old fence counter that still exists.
//!
//! | persistence | plain locks | with the restart guard | fencing |
//! |---|---|---|---|
//! | `appendonly yes`, `appendfsync always` | safe | safe | safe |
//! | none | restart late | safe | safe |
//! | `appendfsync everysec`, or RDB snapshots | restart late | safe | **not safe** |
//!
//! Memory: a master must never evict what the client writes there. Use
//! `maxmemory-policy noeviction`: a master out of memory then refuses the
//! writes (an error; its grant does not count) instead of dropping a lock
//! that someone holds. A `volatile-*` policy spares the crate's own keys,
//! which have no TTL, but evicts the locks' keys and the wait queues,
//! which have one: a lock's key evicted is a grant lost, as in a crash
//! without persistence, which no restart guard sees, and enough of them
//! let two clients hold the lock at once. An `allkeys-*` policy evicts
//! the fence counters too.
//!
//! # The restart guard
//!
//! [`Builder::restart_guard(longest_ttl)`](crate::Builder::restart_guard)
//! quarantines a master that may have lost its keys for `longest_ttl` plus
//! its drift: its grants do not count toward a quorum, its refusals do,
//! and releases still go to it. A master is suspect, at a (re)connect,
//! when its `run_id` changed (it restarted), when the marker key
//! `redlock-mio:marker` is missing or was replaced (its data was flushed or
//! lost), or, the first time this client sees it, when it has been up for
//! less than `longest_ttl`. A flush while the connection stays up is seen
//! at the next reconnect.
//!
//! Freshly started masters are therefore quarantined at first. To skip
//! that, provision the marker on each new master before it grants any lock
//! (a new master, or one kept out for the longest TTL):
//!
//! ```text
//! SET redlock-mio:marker 1
//! ```
//!
//! Any value that does not start with `client:` (clients write such
//! values) says that an operator set it: while it is there, the master has
//! lost nothing since, so a short uptime is a restart that kept its data.
//!
//! # The deployment's longest TTL
//!
//! The restart guard and fencing both rely on one value for the whole
//! deployment: the longest TTL any client uses on these masters. The first
//! guarded or fenced client to meet a master keeps its value there
//! (`redlock-mio:longest-ttl`); a client given another is refused
//! ([`ConfigError::LongestTtl`](crate::ConfigError::LongestTtl) at build,
//! a configuration error for that master at a later handshake), and each
//! client refuses TTLs longer than its own. To change it, set the key to
//! the new value (in milliseconds) on every master and restart the
//! clients with it; before lowering it, let every lock taken with a longer
//! TTL run out.
//!
//! # The crate's keys
//!
//! The crate keeps its own keys on the masters under `redlock-mio:`, and
//! no resource may start with that prefix
//! ([`Error::ReservedResource`](crate::Error::ReservedResource)):
//!
//! | key | written by | holds |
//! |---|---|---|
//! | `redlock-mio:marker` | restart guard | a marker, set once, no TTL |
//! | `redlock-mio:longest-ttl` | restart guard, fencing | the deployment's longest TTL in ms, no TTL |
//! | `redlock-mio:fence` | fencing | the fence counter, no TTL |
//! | `redlock-mio:fence-lost` | fencing | the loss id of a master whose counter is being put back |
//! | `redlock-mio:queue:<resource>` | waiting callers | the waiters of a resource, a sorted set by when each began to wait; it expires by itself |
//! | `redlock-mio:turn:<resource>` | waiting callers | the waiter a release told to try when its turn comes, should the waiters before it never come; it expires when that turn ends |
//!
//! A value there that the crate never writes (another type, a number out
//! of range) fails that master alone, with its connection up, until an
//! operator deletes it.
//!
//! # ACL permissions
//!
//! On the lock's keys the client needs `SET` (acquire), `EVALSHA` and
//! `EVAL` (release and extend; `EVAL` after a `NOSCRIPT`), and, inside
//! those scripts, `GET`, `DEL` and `PEXPIRE`. At each (re)connect it needs
//! `SCRIPT LOAD`, `INFO` (unless `identify_masters(false)`), and `SELECT`
//! when a database other than 0 is given. A least-privilege user for locks
//! under `lock:`:
//!
//! ```text
//! ACL SETUSER locker reset on >password ~lock:* resetchannels -@all +set +evalsha +eval +script|load +get +del +pexpire +info
//! ```
//!
//! with `redis://locker:password@host:6379` as the address. With the
//! restart guard or fencing, add `~redlock-mio:*`; with fencing, also
//! `+incr +exists +time` (run inside its scripts). A key outside the
//! pattern, or a missing command, fails with
//! [`Error::Misconfigured`](crate::Error::Misconfigured) and the server's
//! `NOPERM` message, and is not retried.
//!
//! For waiters to be told when a lock is released
//! ([`Builder::wake_on_release`](crate::Builder::wake_on_release)), add
//! `+hello +subscribe +publish +pttl +exists +zadd +zrange +zrem +zrank +time`, the keys
//! `~redlock-mio:*` and the channels `&redlock-mio:wake:*`:
//!
//! ```text
//! ACL SETUSER locker reset on >password ~lock:* ~redlock-mio:* resetchannels &redlock-mio:wake:* -@all +set +evalsha +eval +script|load +get +del +pexpire +info +hello +subscribe +publish +pttl +exists +zadd +zrange +zrem +zrank +time
//! ```
//!
//! Without them nothing fails: a master that refuses `HELLO 3` or
//! `SUBSCRIBE` serves locks all the same and tells nobody, and the
//! scripts run their queue commands under `pcall`, so a release still
//! frees its key. Waiters then try again when the key that refused them
//! expires, or after their retry delay.
//!
//! For the loss watch ([`Redlock::watch`](crate::Redlock::watch), and the
//! keepers' and `with_lock`'s own), add `+client|tracking
//! +client|caching` to the user above (its reads are `GET`s of the lock's
//! keys, over RESP3, which needs `+hello`):
//!
//! ```text
//! ACL SETUSER locker reset on >password ~lock:* ~redlock-mio:* resetchannels &redlock-mio:wake:* -@all +set +evalsha +eval +script|load +get +del +pexpire +info +hello +subscribe +publish +pttl +exists +zadd +zrange +zrem +zrank +time +client|tracking +client|caching
//! ```
//!
//! Without them nothing fails either: the master refuses to track, and a
//! lock's loss there shows at its watch's reads (when the watch starts,
//! after each extension, after a reconnect) and at its next extension, as
//! without a watch.
//!
//! Each connection is a subscriber: `CLIENT KILL TYPE pubsub` (not `TYPE
//! normal`) closes it, and its output buffer falls under the `pubsub`
//! class of `client-output-buffer-limit`, which the client's small replies
//! never approach.
//!
//! # TLS
//!
//! With the `tls` feature, `rediss://host:port` addresses are spoken over
//! TLS with rustls (ring as the crypto provider), on the same non-blocking
//! sockets as plain ones; the TLS handshake runs under the connect timeout,
//! pipelined with the Redis handshake. The server's certificate must name
//! the host as written in the address. By default the system's root
//! certificates are trusted; `Builder::tls_config` takes any rustls
//! `ClientConfig` (a private CA, a client certificate for
//! `--tls-auth-clients yes`, protocol versions), built with the rustls
//! this crate re-exports (`redlock_mio::rustls`). A refused certificate is
//! a configuration error with rustls's message.
//!
//! # Watching it
//!
//! [`Redlock::stats`](crate::Redlock::stats) copies the client's counters:
//! attempts and their outcomes, extends, releases, the rounds given up by
//! dropped futures and the releases run for them, and per master the rounds
//! it failed or timed out in, the connects made to it and its quarantines.
//! It costs a few relaxed atomic additions per round.
//!
//! Feature `tracing`: a `redlock.round` span (debug level) per round with
//! the fields `op`, `resource_len` (resource names stay out of traces),
//! `outcome` (`acquired`, `extended`, `released`, `contended`,
//! `unavailable`, `too_slow`, `misconfigured`, `unfenced`, `not_held`,
//! `error`), `elapsed_us` and `masters` (each master's state); events
//! `connecting` (debug), `connection dropped` (warn for stalls, protocol
//! errors, refused handshakes and floods; debug for plain closes) and
//! `master quarantined` (warn, with why), each with the master's address.
//!
//! Feature `metrics` (the `metrics` facade; install any recorder):
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `redlock_acquire_seconds`, `redlock_extend_seconds`, `redlock_release_seconds` | histogram | `outcome` |
//! | `redlock_attempts_total` | counter | `outcome` |
//! | `redlock_master_errors_total`, `redlock_master_timeouts_total`, `redlock_connects_total` | counter | `master` (address, password masked) |
//! | `redlock_rounds_in_flight` | gauge | |
//!
//! Names are static and no label carries a resource. With both features
//! off (the default) none of this is compiled in.
//!
//! # Supported servers and platforms
//!
//! | server | versions | tested |
//! |---|---|---|
//! | Redis | 7.0 and later | the whole suite, on Redis 7.0 |
//! | Valkey | 8 | every integration test but TLS, on Valkey 8.1 (the binary CI uses has no TLS) |
//!
//! Older servers are not supported: the restart guard and fencing use
//! `SET … NX GET`, which Redis 7.0 introduced. The client speaks RESP3 on
//! the wire (`HELLO 3`), so that wake-ups arrive as pushes; with
//! [`wake_on_release(false)`](crate::Builder::wake_on_release), or a server
//! that refuses `HELLO`, it speaks RESP2. The library
//! is tested on Linux; the `redlock` command runs on Unix only.
//!
//! # The `redlock` command
//!
//! `redlock run RESOURCE -- COMMAND` (the `redlock-cli` crate of the
//! repository) takes the lock, runs the command with the lock kept alive,
//! and releases it once nothing of the command is left: a distributed
//! `flock(1)` for cron jobs and shell scripts. The command runs in a
//! process group of its own; SIGINT, SIGTERM and SIGHUP to `redlock` are
//! sent on to that group, and a lost lock sends it SIGTERM, with SIGKILL
//! after `--grace`. `redlock --help` lists the options, the environment
//! (`REDLOCK_SERVERS`, `REDLOCK_PASSWORD`, …) and the exit statuses.
