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
//!   the release goes to every master but those that refused (they set
//!   nothing), also to those that seemed to fail (a reply can be lost
//!   after the server set the key), and
//!   [`lock`](crate::Redlock::lock) waits (see below) and tries again.
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
//! `mio` poller. Each connection pipelines its handshake (`AUTH`, `HELLO
//! 3`, `SELECT`, `SCRIPT LOAD` of the scripts, checking the SHA-1 the
//! server returns, `INFO` to identify the master, and `SUBSCRIBE` to the
//! client's wake channel once `HELLO` succeeded) with the first command,
//! reconnects with a doubling back-off (10 ms up to
//! [`max_backoff`](crate::Builder::max_backoff)), and is dropped and made
//! again when a request goes unanswered for the
//! [stall timeout](crate::Builder::stall_timeout) (by default twice the
//! request timeout, at least 1 s).
//!
//! Replies are matched to requests by each connection's order. Pushes are
//! read element by element: a message on the client's wake channel tells
//! a waiter; anything else that answers nothing (other pushes, attributes)
//! is skipped. All of them count against a budget between two replies,
//! past which the connection is dropped. Each readiness event
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
//!   its own thread, with no cross-thread wake-up; it looks for its
//!   replies without sleeping, yielding between looks, for up to
//!   [`spin`](crate::Builder::spin) (with remote masters, from the first
//!   reply on), so that no reply has to wake it.
//! - **Tasks** (the `*_async` methods) cannot block in a poll. A task
//!   alone on the client writes its commands at once and polls for the
//!   replies itself, yielding between polls, for up to
//!   [`spin`](crate::Builder::spin). Otherwise a background
//!   thread of the client, started at the first async call, writes what
//!   the tasks of one tick queued (one write per master), polls, wakes each
//!   task when its round is decided or it is told a lock was handed to it,
//!   and keeps the timers of their waits. The library depends on no
//!   runtime.
//! - **The embedded client** ([`EmbeddedRedlock`](crate::EmbeddedRedlock))
//!   registers its sockets with the caller's own `mio` poller and starts no
//!   thread: the caller hands it each poll's events and the time, and
//!   collects what completed. Its
//!   [`lock_until`](crate::EmbeddedRedlock::lock_until) waits as the other
//!   calls that wait do (below): the wake-ups arrive on its connections as
//!   readable events, like replies, and the end of each wait is in
//!   [`next_timeout`](crate::EmbeddedRedlock::next_timeout); each time the
//!   caller hands it events or the time, a call whose round ended or whose
//!   wait is over makes its next move.
//!
//! # Waiting for a contended lock
//!
//! A caller that waits ([`lock`](crate::Redlock::lock),
//! [`lock_until`](crate::Redlock::lock_until),
//! [`lock_all`](crate::Redlock::lock_all), their async forms,
//! [`with_lock`](crate::Redlock::with_lock), the embedded client's
//! [`lock_until`](crate::EmbeddedRedlock::lock_until), `redlock run
//! --wait`) is told
//! when the lock is handed to it, within about a round trip of the
//! release, instead of trying again after a blind delay
//! ([`Builder::wake_on_release`](crate::Builder::wake_on_release), on by
//! default).
//!
//! - **Queued where refused.** Each attempt is a script
//!   ([`WAIT_ACQUIRE_SCRIPT`](crate::scripts::WAIT_ACQUIRE_SCRIPT)): where
//!   the key is free it sets it as `SET NX` would; where it is held, it
//!   enters the caller in the resource's queue on that master
//!   (`redlock-mio:queue:<resource>`, a sorted set) and answers with the
//!   key's `PTTL`. A caller keeps its place (when it began to wait, the
//!   same number on every master) across attempts. A caller for several
//!   resources is queued only on the keys that are held, and leaves the
//!   queues of the others: a key free for it, or handed to it while
//!   another of its keys is held, goes on to whoever waits for it, so that
//!   it never keeps a free resource from others (it takes its resources
//!   when all are free at once, and is not served ahead of a stream of
//!   callers that keep one of them held).
//! - **Handed over by the release.** A release that deletes the key takes
//!   the first waiter off the queue, publishes its id on its client's
//!   channel (`redlock-mio:wake:<client id>`), and, if that client heard
//!   it, reserves the key for the waiter (`reserved <waiter>` for the
//!   waiter's window, four request timeouts by default) and tells the next
//!   live waiter when that window ends. Every connection speaks RESP3 and
//!   subscribes to its client's one channel at its handshake, so the
//!   wake-up arrives on the connection the replies use, before any command
//!   of the client has been sent on it.
//! - **Won by the waiter's own round.** A wake-up is a hint, never a
//!   grant: once a quorum of masters has told it, the waiter runs an
//!   acquire round like any other, and its validity is measured from that
//!   round's start. A master that granted the waiter's last attempt, which
//!   failed elsewhere, counts as having told it: the grant took its queue
//!   entry there (so no release tells it there again), and the key is free
//!   for it. A reservation is a value of the key that no token equals, so
//!   every other acquire (`SET NX`, the fenced acquire) is refused while it
//!   lasts, and no release or extend of another lock touches it.
//! - **No herd, no split votes.** Every master orders its queue by the
//!   same places, so every master hands the lock to the same waiter, and
//!   only that waiter is woken: the next round has one contender where the
//!   key was reserved, and wins. A waiter that finds a key free while
//!   another waiter is first in its queue hands it to that one rather than
//!   taking it, so that waiters woken at once (a holder's key expiring)
//!   still leave one winner. Nobody starves: a waiter's place only moves
//!   forward, and newcomers queue behind it (a client whose wall clock runs
//!   fast by `d` waits behind newcomers of up to `d`, and one that runs
//!   slow goes ahead of earlier waiters by up to `d`, a second at most
//!   either way: each master takes a place within a second of its own
//!   clock; a
//!   [`try_lock`](crate::Redlock::try_lock), which does not wait, takes a
//!   key it finds free, which happens only once a reservation has
//!   expired).
//! - **Told, or its fallback.** A waiter that is not told tries again when
//!   the keys that refused it expire on enough masters for a quorum
//!   (each refusal carries its key's `PTTL`), so a waiter behind a
//!   holder that crashed is served within the holder's remaining TTL and a
//!   round trip (plus a millisecond or two of margin); `lock` also tries
//!   again after its retry delay, to keep its time bound.
//!
//! How the wake-ups can fail, and what each costs:
//!
//! | failure | bound |
//! |---|---|
//! | a release published before the waiter's subscription is live | none: the subscription is confirmed in the handshake, before the connection carries any command |
//! | a connection drops, and the wake-ups sent meanwhile are lost | the client reconnects by itself while a caller waits (at once after a healthy connection dropped, else on its back-off), and every waiter of the client tries again when it has |
//! | the waiter gives up, times out, fails or its future is dropped | its entries leave the queues at once ([`LEAVE_SCRIPT`](crate::scripts::LEAVE_SCRIPT), sent without waiting), and a reservation, a turn or a telling it had passes to the next waiter (a waiter told to come next that leaves has the waiters behind it told in its stead); subscriptions never leak: there is one per connection, whatever the number of waits |
//! | the waiter's process died | nobody hears its channel: the next release skips its entry, however many entries the process left (one step of the server each, once) |
//! | the waiter's client lives but never comes (a stalled process) | one reservation window per waiter of that client ahead, nine at most: the release tells the next waiter, and the first waiter of another client, when their turns come, and a waiter whose turn has come passes over those before it; while that turn runs, the key is kept for the stalled waiters' windows, never handed to one of them again. A second stalled client right behind the first is not covered: the waiters behind both try again when the key that refused them expires, or after their retry delay |
//! | a server or ACL refuses `HELLO 3` or `SUBSCRIBE` | that master tells nobody; waiters fall back to the expiry and retry delay |
//! | a queue, a reservation or a turn left behind | each expires by itself: a reservation after its window, a turn when it ends (the windows of the waiters before it, and its own), a queue after the keys that blocked its waiters plus a margin (the window, the retry delay and jitter, a request timeout) |
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
