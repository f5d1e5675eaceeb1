//! Fencing tokens: how [`Builder::fencing`](crate::Builder::fencing) gives
//! every lock a number that grows with every holder, what it assumes, and
//! why it holds. (This module holds documentation only.)
//!
//! A lock can outlive its holder's right to it: a holder paused past its
//! validity wakes up and writes, after another client took the lock. The
//! protected store can refuse that write if each lock carries a number
//! that is larger for every later holder (Chubby's sequencer): the store
//! remembers the largest fence it has seen for the resource and refuses
//! smaller ones. [`Lock::fence`](crate::Lock::fence) is that number.
//!
//! # The scheme
//!
//! Each master keeps one counter, the key `redlock-mio:fence`
//! ([`FENCE_KEY`](crate::FENCE_KEY)): an integer without TTL, shared by
//! every resource. A master whose counter key exists is *in sync*.
//!
//! 1. **Acquire** ([`FENCED_ACQUIRE_SCRIPT`](crate::scripts::FENCED_ACQUIRE_SCRIPT),
//!    one round to every master): where none of the lock's keys exists,
//!    set them `PX ttl` to the token, then `INCR` the counter and reply
//!    with its value. A master out of sync does not create the counter: it
//!    replies with minus a *loss id* (its clock in microseconds when it was
//!    first found without a counter, kept in `redlock-mio:fence-lost`), and
//!    its grant does not count. The lock needs a quorum of grants from
//!    masters in sync (and out of quarantine, with the restart guard). The
//!    fence `f` is the largest counter among them.
//! 2. **Raise** ([`RAISE_SCRIPT`](crate::scripts::RAISE_SCRIPT), a second round to
//!    every master): where the lock's keys still hold its token and the
//!    counter exists, set the counter to `max(counter, f)`. The lock and
//!    its fence are given to the caller only once a quorum did so before
//!    the lock's validity ran out; otherwise the acquire fails with
//!    [`Error::Unfenced`](crate::Error::Unfenced) (or `TooSlow`,
//!    `Unavailable`) and the keys are released everywhere.
//! 3. **Sync** ([`FENCE_READ_SCRIPT`](crate::scripts::FENCE_READ_SCRIPT),
//!    [`FENCE_SYNC_SCRIPT`](crate::scripts::FENCE_SYNC_SCRIPT)): a master found out
//!    of sync is put back only after the client has waited the longest TTL
//!    in use (plus drift) since it first saw that loss id. The client then
//!    reads every counter, and if a quorum of masters is in sync, sets the
//!    lost master's counter to the largest value read, on the condition
//!    that its loss id is still the one the client saw. If every master
//!    answered and none is in sync (a new deployment, or every master
//!    lost its data), all are started, without waiting, from one value:
//!    the largest clock (`TIME`, in microseconds) that any of the N
//!    masters reported in that read (or a counter, if one was larger),
//!    never each from its own clock. A read is not one moment, so a start
//!    trusts only losses the client knew when its read began: a read that
//!    reports a loss first seen in it is made once more, and the start
//!    happens only if that second read reports the same losses. (Without
//!    this, a master that lost its data while the read was under way,
//!    after another client had started the counters and raised a fence
//!    there, would be started again below that fence.)
//!
//!    A master started from the clocks keeps its loss id beside the counter
//!    until it raises a fence (the raise deletes it): its counter takes
//!    part in acquires, but a read counts it as out of sync. So a start
//!    that reached only some masters (a fault between the read and the
//!    sync of a new deployment) is finished by a later read (the client
//!    reads again once the longest TTL, plus drift, has passed since it
//!    saw the others' loss), which again finds none in sync; while a
//!    start reached fewer than a quorum, no fence can be issued. A master
//!    that has raised a fence is in sync for good, until it loses its
//!    data.
//!
//! A fenced acquisition costs one more round trip than a plain one (the
//! raise), plus, once per client and after a loss, a read and a sync.
//! (Until a client has seen the counters started, every fenced acquire it
//! begins reads them first, so that acquires made at once while a start is
//! under way all find counters to count.)
//! Releases and extensions are unchanged.
//!
//! # What it guarantees
//!
//! If the acquire of holding `B` of a resource started after holding `A`
//! of it had ended (released, or its validity over; both fenced), then
//! `fence(B) > fence(A)`, as long as the assumptions below hold. That is
//! what a store needs: a holder that comes back after its lock ran out
//! carries a fence below that of every holder that came after it.
//!
//! While no master loses its data, holdings of a resource do not overlap,
//! and the order of their fences is also the order in which they began (a
//! holding begins when the client gets the lock, after the raise). A
//! master that loses its data can, as in plain Redlock, let a second
//! holding begin while the first is still valid elsewhere (the restart
//! guard is the remedy); the fences of two such holdings follow the order
//! in which their acquires started, not the order in which they began.
//!
//! # Assumptions
//!
//! - A master either keeps every write it acknowledged, or loses its
//!   whole data set: run it with `appendonly yes` and `appendfsync
//!   always`, or without persistence. A master that comes back with part
//!   of its writes (`appendfsync everysec` after a crash) may have an old
//!   counter that still exists, and could then lower a fence. (A
//!   `FLUSHALL` is a loss of the whole data set, and is detected.)
//! - Counters are never evicted or changed by anyone else: `maxmemory`
//!   with `noeviction` (a `volatile-*` policy spares the counter, which has
//!   no TTL, but not the locks' keys: see
//!   [operations](crate::operations#persistence)).
//! - `longest_ttl` given to [`Builder::fencing`](crate::Builder::fencing)
//!   is at least the TTL of every fenced acquisition on these masters, and
//!   the clocks of the client and the masters run at rates within the
//!   drift factor (the assumption Redlock makes for validity). Each client
//!   refuses longer TTLs; the first client to meet a master keeps its
//!   value there ([`LONGEST_TTL_KEY`](crate::LONGEST_TTL_KEY)), and a
//!   client given another is refused
//!   ([`ConfigError::LongestTtl`](crate::ConfigError::LongestTtl) at build,
//!   [`NodeError::LongestTtl`](crate::NodeError::LongestTtl) at a
//!   later handshake).
//! - For the start from the clocks only (a new deployment, or every master
//!   lost its data): the masters' wall clocks do not step back. Precisely:
//!   between two such starts, the clock of the master whose clock was the
//!   largest at the first does not go back by more than the time between
//!   them, less one microsecond per fenced acquisition made in between (a
//!   fenced acquisition takes two round trips, far more than a
//!   microsecond). Skew between the masters does no harm: a master an hour
//!   fast starts every counter an hour ahead. No margin added to the start
//!   could excuse a step back (every start would add it, so it cancels
//!   out); only a memory of the last start could, and a loss everywhere
//!   erases it. Slewing (NTP's usual way) is no step back.
//! - The crate's keys ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)) are
//!   its own: resources there are refused
//!   ([`Error::ReservedResource`](crate::Error::ReservedResource)), and a
//!   counter or loss id of another type or form, written by someone else,
//!   makes the scripts change nothing and fail that master alone
//!   ([`NodeError::ForeignKey`](crate::NodeError::ForeignKey)),
//!   until an operator deletes it.
//! - Fences stay below 2^53 (Lua numbers are doubles); counters start
//!   near 1.8 × 10^15 (a clock in microseconds), so that is some 7 × 10^15
//!   acquisitions away.
//!
//! # Why it holds
//!
//! Write `q = N / 2 + 1`; any two sets of `q` masters share one. Call a
//! fence *issued* once its raise reached a quorum `R`. The claim is the
//! invariant:
//!
//! > **(I)** After fence `f` is issued with raise quorum `R`, every master
//! > that is in sync and has a counter below `f` lies outside `R`.
//!
//! Then at most `N - q < q` masters are in sync with a counter below `f`,
//! so every set of `q` masters in sync contains one with counter `>= f`.
//!
//! (I) holds when `f` is issued: every master of `R` raised its counter to
//! at least `f`, and counters only grow (`INCR`, `max`) while a master keeps
//! its data. It stays true through every event:
//!
//! - *A master loses its data*: it is no longer in sync; it leaves the set
//!   (I) speaks of.
//! - *A master `m` of `R` is put back in sync*: it lost its data after its
//!   raise, so after `f`'s lock was acquired; every raise of a lock
//!   acquired before that loss ended within that lock's TTL, and the sync
//!   waits the longest TTL after the loss was first seen, so `f` was
//!   issued (or never will be) before the read. The read found a quorum in
//!   sync, which by (I) contains a master with counter `>= f`: `m` gets at
//!   least `f`. The loss id check makes sure the value read after *this*
//!   loss is the one written: a sync held up (the client paused) until
//!   after a second loss is refused, as is one that arrives after another
//!   client put the master back.
//! - *A master outside `R` is put back in sync*, with any value: it was
//!   outside `R`, so (I) allows it.
//! - *A new deployment or a loss everywhere* starts every counter from
//!   one value `s`: the largest clock in microseconds (or counter, where a
//!   clock start kept one) that the N masters reported in a read every one
//!   of them answered out of sync. Before, no master was in sync but for
//!   earlier clock starts that have raised no fence since, so none of them
//!   lies in the raise quorum of a fence issued after its own start, and
//!   (I) holds for them whatever their value (a start sets the larger of
//!   `s` and a counter it finds). It stays to show that `s` is above every
//!   fence issued before, since a master of an earlier raise quorum may now
//!   get `s`. Every counter value is some start's value plus at most one
//!   per fenced acquisition made since that start (acquires add one;
//!   raises, repairs and starts copy values that exist). An earlier start
//!   took `s'`, the largest clock of the N masters at its read (or a
//!   counter, itself such a value plus acquisitions); `s` is the largest
//!   at a later read, so at least the clock of the master that gave `s'`,
//!   which has moved on by the time between the two reads (the clock
//!   assumption above). So `s` exceeds `s'` by more than the acquisitions
//!   made since, hence every fence that `s'` led to. Each master's own
//!   clock would not do: a master an hour fast hands out fences an hour
//!   ahead; after a loss everywhere the others start an hour below them,
//!   and a holder granted by the others alone (the fast master refusing,
//!   say, for a key a crashed client left there) gets a smaller fence than
//!   an earlier holder. Taking the largest over all N is why a start needs
//!   every master's answer.
//!   (This case alone leans on clocks.) A sync with a read value that finds
//!   a clock start still marked sets the larger of the two: that master
//!   too lies in no raise quorum, so any value will do.
//!
//! Now let `B`'s acquire start after `A` ended, with `f(A)` issued with
//! raise quorum `R`.
//! `B`'s acquire was granted by a quorum `K` of masters in sync (each at
//! the moment it ran `B`'s script); take `m` in `K ∩ R`. `A`'s raise
//! succeeded on `m` before `A` began, so before `B`'s acquire started: it
//! came first, and left `m`'s counter `>= f(A)`. When `B`'s script ran there, either `m`
//! had kept its data since (its counter is still `>= f(A)`), or it had lost
//! it and been put back in sync in between, which by the second case above
//! gave it at least `f(A)`. Its `INCR` made it `> f(A)`, and `f(B)`, the
//! largest over `K`, is `> f(A)`. ∎
//!
//! # What fails instead of lowering a fence
//!
//! A grant from a master out of sync does not count, so a fenced acquire
//! can fail with [`Error::Unfenced`](crate::Error::Unfenced) where a plain
//! one would succeed: while more than `N - q` masters are out of sync or
//! down. That lasts until the lost masters are put back in sync (the
//! longest TTL after the loss, and only while a quorum is in sync). If
//! fewer than a quorum of masters stay in sync, fencing stays unavailable
//! until an operator sets `redlock-mio:fence` on the others to a value
//! above every fence issued (the largest counter on any master plus a
//! margin, say), which this crate will not guess. (Masters started from
//! their clocks that have raised no fence yet are not "in sync" here: the
//! client finishes a start cut short by itself.)
//!
//! # Using a fence
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_mio::Redlock;
//!
//! let redlock = Redlock::builder(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001", "redis://127.0.0.1:7002"])
//!     .fencing(Duration::from_secs(30))
//!     .build()?;
//! let lock = redlock.lock("invoice:42", Duration::from_secs(10))?;
//! let fence = lock.fence().expect("fencing is on");
//! // Send `fence` with every write; the store keeps the largest it has
//! // accepted for "invoice:42" and refuses writes that carry less.
//! # let _ = fence;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/fenced_store.rs` runs a holder that is paused past its
//! validity against a store that checks fences.
