//! The async API: the same operations as futures, under any executor, with
//! no runtime in the library.
//!
//! A future starts its rounds on the shared engine when first polled. Alone
//! on the client, it writes them at once and polls for the replies itself
//! each time it is polled (it wakes itself, yielding between polls) for up
//! to [`Builder::spin`](crate::Builder::spin). Otherwise, and
//! after that, the engine's background thread writes the commands (with
//! what other tasks queued in the same tick, one write per master), polls,
//! and wakes the task once its rounds are decided. Retry delays are the
//! background thread's timers. A fenced acquire awaits its rounds (a read
//! and a sync of the counters when due, the acquire, the raise) one after
//! another in the same way: nothing blocks the executor's thread.
//!
//! Cancellation (see [`Redlock::try_lock_async`]): a future dropped with
//! its rounds in flight gives them up (their late replies are matched and
//! dropped, and can never count for another round). An acquire's slot
//! passes to its release, queued on every master behind the acquire (a
//! fenced one's also behind its raise) and followed by the driver until
//! every master has answered it, failed or timed out; an unlock's round is
//! followed the same way. An extend's lock is capped at what the extend
//! could have granted, and an unlock's lock is expired, as if the round
//! had failed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::fence::FencedAcquire;
use super::rounds::{Ends, Rounds, Spans, spans};
use super::{Lock, Redlock, TOKEN_LEN};
use crate::calls::{Acquire, Extend, Holding, Pursue, Release, Step, Validity, release_behind};
use crate::commands::{Command, Keys};
use crate::driver::{Engine, Polling};
use crate::error::Error;
use crate::ids::WaitId;
use crate::rules::wait::Terms;
use crate::rules::{self, Op};

/// The rounds of one async call, started when first polled.
struct RoundsFuture<'a, 'c> {
    client: &'a Redlock,
    commands: &'a [Command<'c>],
    cap: Option<Instant>,
    spans: Option<Spans>,
    /// The rounds in flight, once started.
    ids: Option<crate::driver::Ids>,
    /// Until when this task polls for its rounds itself (it started them
    /// alone on the client; see [`Builder::spin`]).
    ///
    /// [`Builder::spin`]: crate::Builder::spin
    spin_until: Option<Instant>,
    /// Dropped in flight: queue each command's release (acquires).
    release_on_drop: bool,
}

impl<'a, 'c> RoundsFuture<'a, 'c> {
    fn new(
        client: &'a Redlock,
        commands: &'a [Command<'c>],
        cap: Option<Instant>,
        release_on_drop: bool,
    ) -> Self {
        RoundsFuture {
            client,
            commands,
            cap,
            spans: Some(spans(commands)),
            ids: None,
            spin_until: None,
            release_on_drop,
        }
    }
}

impl Future for RoundsFuture<'_, '_> {
    type Output = Ends;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ends> {
        let this = self.get_mut();
        let client = this.client;
        let n = this.commands.len();
        let Some(spans) = this.spans.take() else {
            // Polled after it completed: nothing is left to give.
            return Poll::Ready(Ends::new());
        };
        let spin_for = client.config.spin;
        let ids = match &this.ids {
            Some(ids) => ids,
            None => {
                let now = crate::clock::now();
                let restart = client.restarter(this.cap, now);
                let may_spin = !spin_for.is_zero();
                match client
                    .engine
                    .start(this.commands, restart, cx.waker(), may_spin)
                {
                    Ok((ids, spin)) => {
                        this.spin_until = spin.then(|| now.checked_add(spin_for)).flatten();
                        this.ids.insert(ids)
                    }
                    Err(_full) => {
                        return Poll::Ready(client.ends(n, Rounds::new(), spans, now, Ok(())));
                    }
                }
            }
        };
        let polling = match this.spin_until {
            Some(until) if crate::clock::now() >= until => {
                this.spin_until = None;
                Polling::HandOver
            }
            Some(_) => Polling::Myself,
            None => Polling::Background,
        };
        let checked = client
            .engine
            .check(ids, cx.waker(), polling, |driver, ids| {
                let rounds: Rounds = ids
                    .iter()
                    .map(|&id| driver.core.flights.round(id).cloned())
                    .collect();
                (rounds, crate::clock::now())
            });
        match checked {
            Some((rounds, ended)) => {
                this.ids = None;
                this.spin_until = None;
                Poll::Ready(client.ends(n, rounds, spans, ended, Ok(())))
            }
            None => {
                this.spans = Some(spans);
                if polling == Polling::Myself {
                    // Nothing wakes a task that polls for itself: it asks
                    // again once the executor has run the others. Its
                    // thread lets other threads run meanwhile (the masters,
                    // if they share the machine).
                    std::thread::yield_now();
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for RoundsFuture<'_, '_> {
    fn drop(&mut self) {
        let Some(ids) = self.ids.take() else {
            return;
        };
        let (commands, release) = (self.commands, self.release_on_drop);
        let counters = &self.client.counters;
        self.client.engine.abandon(|driver| {
            let now = crate::clock::now();
            for (command, &id) in commands.iter().zip(ids.iter()) {
                counters.abandoned(command.op());
                let behind = release_behind(command, driver.core.flights.round(id));
                if let Some(undo) = behind.filter(|_| release) {
                    // Its slot passes to the release, queued behind it on
                    // every connection: it frees the key wherever the
                    // acquire set it, and is followed until every master
                    // has answered.
                    if driver.release_after(id, &undo, now) {
                        counters.drop_release();
                    }
                } else if command.op() == Op::Release {
                    // An unlock's round is its release: followed to its end.
                    if driver.core.flights.orphan(id) {
                        counters.drop_release();
                    }
                } else {
                    driver.core.abandon(&[id]);
                }
            }
        });
    }
}

/// A delay, kept by the engine's background thread.
struct Sleep<'a> {
    engine: &'a Arc<Engine>,
    until: Instant,
    timer: u64,
}

impl Future for Sleep<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.engine.timer(&mut this.timer, this.until, cx.waker()) {
            this.timer = 0;
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        if self.timer != 0 {
            self.engine.cancel_timer(self.timer);
        }
    }
}

/// A wait for a release to tell a caller it may try (see
/// [`crate::flights::Waits`]), or its fallback, a timer.
struct Told<'a> {
    engine: &'a Arc<Engine>,
    id: WaitId,
    until: Instant,
    timer: u64,
}

impl Future for Told<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let this = self.get_mut();
        match this.engine.check_told(this.id, cx.waker()) {
            Ok(()) => return Poll::Ready(true),
            Err(Some(hinted)) if hinted < this.until => {
                // A master told it to try sooner: the timer moves.
                this.until = hinted;
                if this.timer != 0 {
                    this.engine.cancel_timer(this.timer);
                    this.timer = 0;
                }
            }
            Err(_) => {}
        }
        if this.engine.timer(&mut this.timer, this.until, cx.waker()) {
            this.timer = 0;
            this.engine.forget_told(this.id);
            return Poll::Ready(false);
        }
        Poll::Pending
    }
}

impl Drop for Told<'_> {
    fn drop(&mut self) {
        self.engine.forget_told(self.id);
        if self.timer != 0 {
            self.engine.cancel_timer(self.timer);
        }
    }
}

/// Ends a call that waits when it ends, returned or dropped: its queue
/// entries go, its slot is freed.
struct EndWait<'a, 'k> {
    client: &'a Redlock,
    call: Pursue<&'k [u8]>,
}

impl Drop for EndWait<'_, '_> {
    fn drop(&mut self) {
        self.client.end_pursuit(&mut self.call);
    }
}

/// Releases what a fenced acquire won, should its future be dropped while
/// it waits for a round (see [`FencedAcquire::abandon`]); forgotten once
/// the round has ended.
struct Abandon<'a, 'r> {
    client: &'a Redlock,
    attempt: &'a FencedAcquire<'r>,
}

impl Drop for Abandon<'_, '_> {
    fn drop(&mut self) {
        self.attempt.abandon(self.client);
    }
}

/// Caps (or expires) a lock whose extend (or release) future is dropped
/// with its round in flight.
struct OnDrop<'l> {
    client: &'l Redlock,
    lock: &'l mut Lock,
    /// The lock's validity should the future be dropped now.
    armed: Option<Validity>,
    /// The command in flight: its watch, if it has one, must hear of it
    /// should the future be dropped now.
    op: Op,
}

impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        if let Some(validity) = self.armed {
            self.lock.apply(validity);
            // The call may have reached the masters (`Rewatch`).
            self.client.rewatch(self.op, self.lock);
        }
    }
}

/// What an extend or a release reads of a lock, copied out of it so that
/// the future can hold the lock itself.
struct Copied {
    resource: SmallVec<[u8; 128]>,
    many: bool,
    token: [u8; TOKEN_LEN],
    valid_until: Instant,
    extensions: u32,
    reach: u64,
}

impl Copied {
    fn of(lock: &Lock) -> Copied {
        let (resource, many) = lock.keys().parts();
        Copied {
            resource: SmallVec::from_slice(resource),
            many,
            token: *lock.token(),
            valid_until: lock.valid_until_here(),
            extensions: lock.extensions(),
            reach: lock.reach(),
        }
    }

    fn holding(&self) -> Holding<'_> {
        Holding {
            keys: Keys::new(&self.resource, self.many),
            token: &self.token,
            valid_until: self.valid_until,
            extensions: self.extensions,
            reach: self.reach,
        }
    }
}

impl Redlock {
    /// [`try_lock`](Self::try_lock) as a future, for any executor.
    ///
    /// # Cancellation
    ///
    /// The futures of every async call may be dropped at any point:
    ///
    /// - Before its first poll, nothing was sent.
    /// - With its round in flight, the round is given up and counted in
    ///   [`Stats::abandoned`] (and in `attempts`, `extends` or `releases`).
    ///   An acquire's slot passes at once to the release of its key, queued
    ///   behind the acquire on every master (behind a connect or handshake
    ///   still under way, too) and followed by the client, waited for by
    ///   nobody, until every master has answered it, failed or timed out
    ///   ([`Stats::drop_releases`], [`Stats::drop_releases_ended`]). A
    ///   dropped unlock's round is followed the same way; a dropped
    ///   extend caps the lock at what the extend could have granted, a
    ///   dropped unlock expires it.
    /// - The bound: a master that applied the acquire but whose connection
    ///   goes down before the release gets through (closed by the server,
    ///   or dropped as stalled, then waiting out its reconnect back-off or
    ///   failing its new handshake) keeps the key until its TTL runs out,
    ///   counted from when that master applied the acquire, and no longer;
    ///   the release's round counts that master as failed or timed out. A
    ///   release is not sent again on a new connection (nor is an
    ///   [`unlock`](Self::unlock)'s).
    /// - A call that waits ([`lock_async`](Self::lock_async),
    ///   [`lock_until_async`](Self::lock_until_async)) leaves the queues
    ///   the masters keep for waiters, as one that returns does: the leave
    ///   is sent to every master without waiting.
    /// - A future that completed has handed its [`Lock`] to the caller,
    ///   whose to release: dropping a `Lock` releases nothing (an
    ///   [`AsyncLockGuard`] does).
    ///
    /// [`Stats::abandoned`]: crate::Stats::abandoned
    /// [`Stats::drop_releases`]: crate::Stats::drop_releases
    /// [`Stats::drop_releases_ended`]: crate::Stats::drop_releases_ended
    ///
    /// # Errors
    ///
    /// As for [`try_lock`](Self::try_lock); [`Error::TooManyInFlight`] at once when
    /// the client is at its cap of rounds in flight.
    pub async fn try_lock_async(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        self.attempt_async(resource, ttl_ms, None).await
    }

    /// [`lock`](Self::lock) as a future: the waits between attempts are
    /// the engine's timers and wake-ups, not sleeping threads. Dropped, it
    /// is cancelled as the Cancellation section of
    /// [`try_lock_async`](Self::try_lock_async) says (between attempts, no
    /// round is in flight), and leaves the masters' queues (without
    /// waiting).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{Error, Redlock};
    ///
    /// async fn ship(redlock: &Redlock, order: u64) -> Result<(), Error> {
    ///     let mut lock = redlock.lock_async(format!("orders:{order}"), Duration::from_secs(10)).await?;
    ///     // ... ship it, while lock.validity() lasts ...
    ///     redlock.unlock_async(&mut lock).await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// The last attempt's error, as for
    /// [`try_lock_async`](Self::try_lock_async): [`Error::Contended`] when
    /// another client still held the resource at the last attempt.
    pub async fn lock_async(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        let terms = Terms::Retries(self.config.retry_count);
        let started = crate::clock::now();
        super::waited(self.pursue_async(resource, ttl_ms, terms).await, started)
    }

    /// [`lock_until`](Self::lock_until) as a future: completes by
    /// `deadline`. Dropped, it is cancelled as the Cancellation section of
    /// [`try_lock_async`](Self::try_lock_async) says.
    ///
    /// # Errors
    ///
    /// As for [`lock_until`](Self::lock_until).
    pub async fn lock_until_async(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Lock, Error> {
        let resource = resource.as_ref();
        let (ttl_ms, deadline, started) = self.check_until(resource, ttl, deadline)?;
        let result = self
            .pursue_async(resource, ttl_ms, Terms::Deadline(deadline))
            .await;
        super::waited(result, started)
    }

    /// [`pursue`](Self::pursue) as a future: the waits between attempts
    /// are the engine's timers and wake-ups. Dropped, it leaves its
    /// queues as a finished call does.
    async fn pursue_async(
        &self,
        resource: &[u8],
        ttl_ms: u64,
        terms: Terms,
    ) -> Result<Lock, Error> {
        let mut place = EndWait {
            client: self,
            call: self.pursuing(Keys::One(resource), ttl_ms, terms),
        };
        let call = &mut place.call;
        loop {
            match call.poll() {
                Step::Attempt { arm, cap } => {
                    self.arm(arm);
                    if self.config.fencing.is_some() {
                        // Boxed, as a fenced attempt is: its state would
                        // make every plain attempt's future several times
                        // larger.
                        let attempt = self.fenced_waiting(call.fenced(), cap);
                        let (waited, results) = Box::pin(self.run_fenced_async(attempt)).await;
                        self.fence_attempted(call, waited, results);
                    } else {
                        let token = self.tokens().token();
                        let command = call.command(token);
                        let mut ends =
                            RoundsFuture::new(self, std::slice::from_ref(&command), cap, true)
                                .await;
                        let end = self.first(&mut ends);
                        self.attempted(call, end);
                    }
                }
                Step::Wait { told, until } => {
                    let told = match told {
                        Some(id) => self.told(id, until).await,
                        None => {
                            self.sleep_until(until).await;
                            false
                        }
                    };
                    self.resume(call, told);
                }
                Step::InFlight | Step::Done => break,
            }
        }
        call.result().unwrap_or_else(|| Err(self.busy()))
    }

    /// [`extend`](Self::extend) as a future. Dropped with its round in
    /// flight, it caps the lock's validity at what the extend could have
    /// granted, as a failed extend does (see the Cancellation section of
    /// [`try_lock_async`](Self::try_lock_async)).
    ///
    /// # Errors
    ///
    /// As for [`extend`](Self::extend).
    pub async fn extend_async(&self, lock: &mut Lock, ttl: Duration) -> Result<(), Error> {
        let copied = Copied::of(lock);
        let call = Extend::new(&self.limits(), copied.holding(), ttl, crate::clock::now())?;
        let command = call.command();
        let mut guard = OnDrop {
            client: self,
            lock,
            armed: Some(call.dropped(crate::clock::now())),
            op: Op::Extend,
        };
        let mut ends = RoundsFuture::new(self, std::slice::from_ref(&command), None, false).await;
        guard.armed = None;
        let end = self.first(&mut ends)?;
        let (result, validity) = self.extended(&end);
        guard.lock.apply(validity);
        self.rewatch(Op::Extend, guard.lock);
        result
    }

    /// [`unlock`](Self::unlock) as a future. Dropped with its round in
    /// flight, it leaves the lock expired (the release may have been
    /// applied), and the client follows the round until every master has
    /// answered it (see the Cancellation section of
    /// [`try_lock_async`](Self::try_lock_async)).
    ///
    /// # Errors
    ///
    /// As for [`unlock`](Self::unlock).
    pub async fn unlock_async(&self, lock: &mut Lock) -> Result<(), Error> {
        let copied = Copied::of(lock);
        let command = Release::new(copied.holding()).command();
        let mut guard = OnDrop {
            client: self,
            lock,
            armed: Some(Release::begun(crate::clock::now())),
            op: Op::Release,
        };
        let mut ends = RoundsFuture::new(self, std::slice::from_ref(&command), None, false).await;
        guard.armed = None;
        let end = self.first(&mut ends)?;
        self.unlocked(guard.lock, &end)
    }

    /// Acquires `resource` as [`lock_async`](Self::lock_async) does and
    /// returns a guard that releases it when dropped, without blocking or
    /// awaiting (the release is queued on every master). The guard holds
    /// the client, so that it can live in a spawned task.
    ///
    /// # Errors
    ///
    /// As for [`lock_async`](Self::lock_async).
    pub async fn lock_guard_async(
        self: &Arc<Self>,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<AsyncLockGuard, Error> {
        let lock = self.lock_async(resource, ttl).await?;
        Ok(AsyncLockGuard::new(Arc::clone(self), lock))
    }

    /// Acquires `resource` as [`lock_until_async`](Self::lock_until_async)
    /// does, waiting for it until `deadline`, and returns a guard that
    /// releases it when dropped (as [`lock_guard_async`](Self::lock_guard_async)'s
    /// does): "wait up to this long, release however the task ends" in one
    /// call.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// use redlock_mio::{Error, Redlock};
    ///
    /// async fn ship(redlock: Arc<Redlock>, order: u64) -> Result<(), Error> {
    ///     let deadline = Instant::now() + Duration::from_millis(500);
    ///     let guard = redlock
    ///         .lock_guard_until_async(format!("orders:{order}"), Duration::from_secs(2), deadline)
    ///         .await?; // Err(Error::Contended(_)) if still held after 500 ms
    ///     // ... ship it while guard.validity() lasts; a `?` here still releases ...
    ///     guard.release().await
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`lock_until`](Self::lock_until): [`Error::Contended`] when
    /// another client still held the resource at the deadline.
    pub async fn lock_guard_until_async(
        self: &Arc<Self>,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<AsyncLockGuard, Error> {
        let lock = self.lock_until_async(resource, ttl, deadline).await?;
        Ok(AsyncLockGuard::new(Arc::clone(self), lock))
    }

    /// One async acquire attempt.
    async fn attempt_async(
        &self,
        resource: &[u8],
        ttl_ms: u64,
        deadline: Option<Instant>,
    ) -> Result<Lock, Error> {
        if self.config.fencing.is_some() {
            // Boxed: its state (several rounds' ends) would otherwise make
            // every plain acquire's future several times larger.
            return Box::pin(self.fenced_attempt_async(resource, ttl_ms, deadline)).await;
        }
        let call = Acquire::new(Keys::One(resource), self.tokens().token(), ttl_ms);
        let command = call.command();
        let mut ends =
            RoundsFuture::new(self, std::slice::from_ref(&command), deadline, true).await;
        let end = self.first(&mut ends)?;
        self.acquired(call.claim(), &end)
    }

    /// One fenced acquire attempt: the rounds of a [`FencedAcquire`] (the
    /// blocking attempt's state machine), each awaited as the plain
    /// acquire's round is. Dropped during its acquire round, the release
    /// is queued behind it; during its raise, the lock won is released.
    async fn fenced_attempt_async(
        &self,
        resource: &[u8],
        ttl_ms: u64,
        deadline: Option<Instant>,
    ) -> Result<Lock, Error> {
        let attempt = FencedAcquire::new(self, [resource], false, ttl_ms, deadline);
        let (_, mut results) = self.run_fenced_async(attempt).await;
        results.drain(..).next().unwrap_or_else(|| Err(self.busy()))
    }

    /// Runs the rounds of `attempt` as a future until it has ended; how
    /// its acquire ended for a caller that waits, and each lock's result.
    async fn run_fenced_async(
        &self,
        mut attempt: FencedAcquire<'_>,
    ) -> (
        Option<(rules::Round, Option<Duration>)>,
        SmallVec<[Result<Lock, Error>; 1]>,
    ) {
        loop {
            let ends = {
                let Some(next) = attempt.next() else {
                    break;
                };
                let abandon = Abandon {
                    client: self,
                    attempt: &attempt,
                };
                let ends =
                    RoundsFuture::new(self, &next.commands, next.cap, next.release_on_drop).await;
                std::mem::forget(abandon);
                ends
            };
            attempt.handle(self, ends);
        }
        (attempt.waited.take(), attempt.finish(self))
    }

    /// The end of a call's only round.
    fn first(&self, ends: &mut Ends) -> Result<super::RoundEnd, Error> {
        ends.drain(..).next().unwrap_or(Err(Error::TooManyInFlight {
            limit: self.config.max_in_flight,
        }))
    }

    /// Waits until `until` on the engine's timers.
    fn sleep_until(&self, until: Instant) -> Sleep<'_> {
        Sleep {
            engine: &self.engine,
            until,
            timer: 0,
        }
    }

    /// Waits until wait `id` is told or until `until`; `true` if told.
    fn told(&self, id: WaitId, until: Instant) -> Told<'_> {
        Told {
            engine: &self.engine,
            id,
            until,
            timer: 0,
        }
    }
}

/// A lock held by async code: released when dropped, without blocking or
/// awaiting (the release is queued on every master and, if the client has
/// a slot free for it, followed until every master has answered it:
/// [`Stats::drop_releases`](crate::Stats::drop_releases)), or explicitly
/// with [`release`](Self::release) for the outcome.
/// It holds the client (an `Arc`), so that it can move into a spawned
/// task. Made by [`Redlock::lock_guard_async`] and
/// [`Redlock::lock_guard_until_async`], or from a lock already taken with
/// [`AsyncLockGuard::new`].
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use redlock_mio::{Error, Redlock};
///
/// async fn rebuild_index(redlock: Arc<Redlock>) -> Result<(), Error> {
///     let mut guard = redlock.lock_guard_async("index:rebuild", Duration::from_secs(10)).await?;
///     // ... the first half of the work, while guard.validity() lasts ...
///     guard.extend(Duration::from_secs(10)).await?;
///     // ... the second half; dropping the guard would release it too ...
///     guard.release().await
/// }
/// ```
#[must_use = "a guard dropped at once releases its lock at once: bind it to a name for as long as the lock is needed"]
pub struct AsyncLockGuard {
    client: Arc<Redlock>,
    lock: Lock,
    /// Set by [`release`](Self::release): from then on the release is
    /// that call's (a dropped `unlock_async` follows its own release), and
    /// the drop has nothing to do.
    released: bool,
}

impl std::fmt::Debug for AsyncLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AsyncLockGuard").field(&self.lock).finish()
    }
}

impl AsyncLockGuard {
    /// Guards `lock`, taken by `client` (with
    /// [`try_lock_async`](Redlock::try_lock_async), a batch, …): `client`
    /// releases it when the guard is dropped, without blocking or awaiting.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use redlock_mio::{AsyncLockGuard, Error, Redlock};
    ///
    /// async fn once(redlock: Arc<Redlock>) -> Result<(), Error> {
    ///     let lock = redlock.try_lock_async("cron:cleanup", Duration::from_secs(60)).await?;
    ///     let guard = AsyncLockGuard::new(Arc::clone(&redlock), lock);
    ///     // ... the job; released on every way out ...
    ///     guard.release().await
    /// }
    /// ```
    pub fn new(client: Arc<Redlock>, lock: Lock) -> AsyncLockGuard {
        AsyncLockGuard {
            client,
            lock,
            released: false,
        }
    }

    /// Gives the lock back without releasing it: from then on the caller
    /// releases it.
    pub fn into_lock(mut self) -> Lock {
        self.released = true;
        std::mem::replace(&mut self.lock, Lock::gone())
    }

    /// Extends the lock as [`Redlock::extend_async`] does.
    ///
    /// # Errors
    ///
    /// As for [`Redlock::extend`].
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.client.extend_async(&mut self.lock, ttl).await
    }

    /// Releases the lock and waits for the outcome.
    ///
    /// # Errors
    ///
    /// As for [`Redlock::unlock`].
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        self.client.unlock_async(&mut self.lock).await
    }
}

impl std::ops::Deref for AsyncLockGuard {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}

impl Drop for AsyncLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let counters = &self.client.counters;
        let release = self.lock.release();
        self.client.engine.abandon(|driver| {
            // Followed until every master has answered, if a slot is
            // free; else only queued.
            if driver.release_orphan(&release, crate::clock::now()) {
                counters.drop_release();
            }
        });
    }
}
