//! How the client works: the rounds, the connections, and how many
//! callers share them. (This module holds documentation only; the
//! repository's `ARCHITECTURE.md` maps the same ground onto the source.)
//!
//! # A round
//!
//! Every operation is one or more *rounds*: one command sent to all N
//! masters, and the replies that decide it.
//!
//! - **Acquire**: `SET resource token NX PX ttl` (a script for several
//!   resources, or for a fenced acquire). Held if a quorum set the key and
//!   validity is left (see [`guarantees`](crate::guarantees)); otherwise
//!   the release goes to every master, also to those that seemed to fail
//!   (a reply can be lost after the server set the key), and
//!   [`lock`](crate::Redlock::lock) tries again after a random delay.
//! - **Extend** and **release**: Lua scripts that act only while the key
//!   holds the lock's token, sent by SHA-1 (`EVALSHA`), and sent again as
//!   `EVAL` within the same round when a master answers `NOSCRIPT`.
//!
//! A round's command is encoded once and written to every master in the
//! same event-loop tick. The round ends as soon as its outcome is certain:
//! a quorum agreed, or so many masters refused or failed that a quorum is
//! impossible, or the request timeout passed. A paused or dead minority
//! therefore costs nothing. Replies the round did not wait for are read
//! later, matched to their requests and dropped: a late reply never counts
//! for another round.
//!
//! # Connections
//!
//! The client keeps one non-blocking connection per master, driven by a
//! `mio` poller. Each connection pipelines its handshake (`AUTH`,
//! `SELECT`, `SCRIPT LOAD` of the scripts, checking the SHA-1 the server
//! returns, and `INFO` to identify the master) with the first command,
//! reconnects with a doubling back-off (10 ms up to
//! [`max_backoff`](crate::Builder::max_backoff)), and is dropped and made
//! again when a request goes unanswered for the
//! [stall timeout](crate::Builder::stall_timeout) (by default twice the
//! request timeout, at least 1 s).
//!
//! Replies are matched to requests by each connection's order. Anything a
//! master sends that answers nothing (pushes, attributes) is skipped up to
//! a budget, past which the connection is dropped. Each readiness event
//! reads at most 64 KiB from a connection before the client checks its
//! deadlines again, and the time used for a decision is taken after the
//! read that brought the reply.
//!
//! After a round is over, a `NOSCRIPT` release is still replayed (it frees
//! a key), but an extend never is: a newer extend of the same lock may
//! have been applied there since, and the old one must not overtake it.
//!
//! # Many callers, one client
//!
//! Every round carries an id that is never reused; a connection hands each
//! reply to the round of the request it answers, if that round is still in
//! flight. So the rounds of many callers share the same N connections, and
//! a batch ([`try_lock_many`](crate::Redlock::try_lock_many)) sends all of
//! its acquires to each master in one write.
//!
//! - **Threads** take turns at the poller. A caller writes its commands at
//!   once; if nobody polls, it polls for everyone, hands each reply to its
//!   round, and wakes the callers whose rounds are decided; otherwise it
//!   parks until woken. A lone caller therefore writes, polls and reads on
//!   its own thread, with no cross-thread wake-up.
//! - **Tasks** (the `*_async` methods) cannot block in a poll. A task
//!   alone on the client writes its commands at once and polls for the
//!   replies itself, yielding between polls, for up to
//!   [`async_spin`](crate::Builder::async_spin). Otherwise a background
//!   thread of the client, started at the first async call, writes what
//!   the tasks of one tick queued (one write per master), polls, wakes each
//!   task when its round is decided, and keeps the timers of their retry
//!   delays. The library depends on no runtime.
//! - **The embedded client** ([`EmbeddedRedlock`](crate::EmbeddedRedlock))
//!   registers its sockets with the caller's own `mio` poller and starts no
//!   thread: the caller hands it each poll's events and the time, and
//!   collects what completed.
//!
//! # Costs
//!
//! An acquire and a release allocate nothing once the client is warm:
//! commands are encoded into buffers allocated at build for the cap of
//! rounds in flight, replies are decoded into tokens borrowed from the read
//! buffer, and resource names up to 64 bytes live inside the
//! [`Lock`](crate::Lock). A failed attempt allocates its error's report.
//! Per round the client makes one `sendto` per master, about one
//! `recvfrom` per reply, and about one or two `epoll_wait`s.
//!
//! # The codec
//!
//! [`resp`](crate::resp) is a hand-written RESP2/RESP3 codec: incremental
//! (bytes already examined are never examined again, however the input is
//! split), allocation-free (replies come out as a flat stream of tokens
//! borrowed from the input), strict (exactly the grammar, every CRLF
//! checked), and bounded (nesting depth, element counts and lengths have
//! hard limits, and a violation is a typed error). It is fuzzed, checked
//! against the `redis-protocol` crate, and against what a real server
//! sends for every `DEBUG PROTOCOL` type.
