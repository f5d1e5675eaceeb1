//! [`Keeper`]: a lock kept alive in the background, which tells its holder
//! at once when the lock is at risk or lost, and says released, not lost,
//! at the end of a normal holding.
//!
//! The keeper thread owns the lock and a handle of the client: it alone
//! sends the lock's commands, one at a time, so an extension and the
//! release can never race (a release asked for during an extension is
//! sent after it), and nothing is sent after the release. Extensions use
//! the extend script, which changes a key only while it still holds the
//! lock's token: an expired key is never recreated. The lock is watched
//! for a loss ([`Redlock::watch`]) unless [`KeepOptions::watch`] says
//! otherwise: a loss the watch finds wakes the keeper's thread at once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{Lock, Redlock};
use crate::calls::{Keeping, KeepingStep, Validity};
use crate::error::Error;
pub use crate::rules::keep::Standing;

/// A callback told of every change of [`Standing`], from the keeper's
/// thread.
pub type OnChange = Box<dyn Fn(Standing) + Send + 'static>;

/// How a [`Keeper`] keeps its lock. Made with [`KeepOptions::new`].
///
/// ```
/// use std::time::Duration;
/// use redlock_mio::{KeepOptions, Standing};
///
/// let options = KeepOptions::new(Duration::from_secs(30)) // extend to 30 s each time
///     .period(Duration::from_secs(5))                      // every 5 s, not every 10 s
///     .max_hold(Duration::from_secs(3600))                 // and for an hour at most
///     .on_change(|standing| {
///         if standing == Standing::AtRisk {
///             eprintln!("extensions are failing");
///         }
///     });
/// // then: redlock.with_lock("backup", options, |keeper| ...) or redlock.keep(lock, options)
/// # drop(options);
/// ```
pub struct KeepOptions {
    ttl: Duration,
    period: Option<Duration>,
    max_hold: Option<Duration>,
    on_change: Option<OnChange>,
    watch: bool,
}

impl fmt::Debug for KeepOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepOptions")
            .field("ttl", &self.ttl)
            .field("period", &self.period)
            .field("max_hold", &self.max_hold)
            .field("on_change", &self.on_change.is_some())
            .field("watch", &self.watch)
            .finish()
    }
}

impl KeepOptions {
    /// Extend to `ttl` each time, every `ttl / 3`, with no hold limit,
    /// the lock watched for a loss.
    pub fn new(ttl: Duration) -> KeepOptions {
        KeepOptions {
            ttl,
            period: None,
            max_hold: None,
            on_change: None,
            watch: true,
        }
    }

    /// Whether the lock is watched for a loss while it is kept
    /// ([`Redlock::watch`]; default on): a loss on a majority of the
    /// masters (its keys deleted, flushed, evicted, overwritten, or their
    /// masters restarted empty) is then reported as soon as the masters
    /// say so, not at the next extension. Off, a loss shows at the next
    /// extension, and the lock costs the masters no read beyond its
    /// extensions.
    pub fn watch(mut self, on: bool) -> KeepOptions {
        self.watch = on;
        self
    }

    /// Extend every `period` instead of every `ttl / 3`. After a failed
    /// extension the keeper tries again after a quarter of that.
    pub fn period(mut self, period: Duration) -> KeepOptions {
        self.period = Some(period);
        self
    }

    /// Stop extending once the lock has been held this long (from when the
    /// keeper started): it then expires, and is reported lost, at the end
    /// of its last validity. The builder's
    /// [`max_extensions`](crate::Builder::max_extensions) stops it too.
    pub fn max_hold(mut self, max_hold: Duration) -> KeepOptions {
        self.max_hold = Some(max_hold);
        self
    }

    /// Calls `on_change` with every change of standing, from the keeper's
    /// thread (keep it short), before [`Keeper::wait_lost`] and
    /// [`Keeper::lost`] see the change. The last call is with a final
    /// standing: [`Standing::Released`] at the end of a normal holding,
    /// [`Standing::Lost`] after a loss (and nothing more at its release).
    ///
    /// A callback that panics ends the keeper's thread: the lock is no
    /// longer extended nor released (its keys expire at their TTL), it is
    /// reported lost, and [`Keeper::release`] passes the panic on.
    pub fn on_change(mut self, on_change: impl Fn(Standing) + Send + 'static) -> KeepOptions {
        self.on_change = Some(Box::new(on_change));
        self
    }

    /// The TTL each extension sets.
    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// What the keeper's thread and the holder share.
struct Shared {
    standing: AtomicU8,
    state: Mutex<State>,
    /// The standing changed (for [`Keeper::wait_lost`]).
    changed: Condvar,
    /// The holder asked for the release (for the keeper's thread).
    asked: Condvar,
}

struct State {
    valid_until: Instant,
    /// Woken when the standing becomes final, and when the thread ends.
    wakers: Vec<Waker>,
    /// The holder asked for the release, or is gone.
    release: bool,
    /// The lock's loss watch found it lost, and the keeper's thread has
    /// yet to hear of it.
    lost: bool,
    /// The keeper's thread is done: the release was sent and its round is
    /// over (or the thread ended early).
    finished: bool,
}

impl Shared {
    fn new(valid_until: Instant) -> Shared {
        Shared {
            standing: AtomicU8::new(Standing::Held.code()),
            state: Mutex::new(State {
                valid_until,
                wakers: Vec::new(),
                release: false,
                lost: false,
                finished: false,
            }),
            changed: Condvar::new(),
            asked: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    fn standing(&self) -> Standing {
        Standing::from_code(self.standing.load(Ordering::Acquire))
    }

    /// Asks the keeper's thread to release the lock and end.
    fn ask_release(&self) {
        self.lock().release = true;
        self.asked.notify_all();
    }

    /// The lock's loss watch found it lost: wakes the keeper's thread.
    fn tell_lost(&self) {
        self.lock().lost = true;
        self.asked.notify_all();
    }

    /// Waits until the holder asks for the release, the loss watch finds
    /// the lock lost (said once), or `until` passes; without `until`, only
    /// for the first two.
    fn wait_release(&self, until: Option<Instant>) -> Woken {
        let mut state = self.lock();
        loop {
            if state.release {
                return Woken::Asked;
            }
            if std::mem::take(&mut state.lost) {
                return Woken::Lost;
            }
            state = match until {
                None => self
                    .asked
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(at) => {
                    let left = at.saturating_duration_since(crate::clock::now());
                    if left.is_zero() {
                        return Woken::Time;
                    }
                    self.asked
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Records the standing and validity (nothing changes once the
    /// standing is final); wakes whoever waits for a final one.
    fn set(&self, standing: Standing, valid_until: Instant, on_change: Option<&OnChange>) {
        let before = self.standing();
        if before.is_final() {
            return;
        }
        let wakers = WakeAll({
            let mut state = self.lock();
            state.valid_until = valid_until;
            self.standing.store(standing.code(), Ordering::Release);
            if standing.is_final() {
                std::mem::take(&mut state.wakers)
            } else {
                Vec::new()
            }
        });
        // The callback runs before any waiter wakes: whoever saw the loss
        // or the release through `wait_lost` or `lost()` finds the
        // callback done. (If it panics, the waiters wake all the same.)
        if standing != before {
            if let Some(on_change) = on_change {
                on_change(standing);
            }
        }
        self.changed.notify_all();
        drop(wakers);
    }

    /// The keeper's thread is done: wakes whoever waits for it. A thread
    /// that ends without a final standing (its callback panicked) no
    /// longer extends the lock: it is reported lost (without the
    /// callback).
    fn finish(&self) {
        if !self.standing().is_final() {
            let valid_until = self.lock().valid_until;
            self.set(Standing::Lost, valid_until, None);
        }
        let wakers = WakeAll({
            let mut state = self.lock();
            state.finished = true;
            std::mem::take(&mut state.wakers)
        });
        self.changed.notify_all();
        drop(wakers);
    }

    /// Ready once `done` holds of the state; else registers the waker.
    fn poll_until(&self, cx: &Context<'_>, done: impl Fn(&State) -> bool) -> Poll<()> {
        let mut state = self.lock();
        // Checked under the lock: the keeper's thread changes the standing
        // and the state, and takes the wakers, under it.
        if done(&state) {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Why the keeper's thread stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// The holder asked for the release.
    Asked,
    /// The loss watch found the lock lost.
    Lost,
    /// Its time came.
    Time,
}

/// Wakers woken when dropped: also when a callback panics before they
/// are.
struct WakeAll(Vec<Waker>);

impl Drop for WakeAll {
    fn drop(&mut self) {
        self.0.drain(..).for_each(Waker::wake);
    }
}

/// A lock kept alive by a background thread: see
/// [`Redlock::keep`](crate::Redlock::keep).
///
/// A keeper is `Send` and `Sync`, and never blocks when dropped, so it can
/// be held across `.await` in async code as the guard of its lock, with
/// [`lost`](Keeper::lost) as the future that completes on loss.
///
/// Dropping the keeper asks its thread to release the lock and returns at
/// once: the thread sends the release and exits (within one request
/// timeout), reporting [`Standing::Released`]. [`release`](Keeper::release)
/// waits for it and returns the outcome.
///
/// ```no_run
/// use std::time::Duration;
/// use redlock_mio::{KeepOptions, Redlock, Standing};
///
/// let redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]).build()?;
/// let ttl = Duration::from_secs(30);
/// let keeper = redlock.keep(redlock.lock("ledger", ttl)?, KeepOptions::new(ttl))?;
/// for _entry in 0..100 {
///     match keeper.standing() {
///         Standing::Held => {}
///         Standing::AtRisk => eprintln!("extensions failing, {:?} left", keeper.validity()),
///         _ => break, // lost: another client may hold it now
///     }
///     // ... write one entry ...
/// }
/// keeper.release()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping the Keeper releases its lock at once: keep it for as long as the work runs"]
pub struct Keeper {
    shared: Arc<Shared>,
    resource: Vec<u8>,
    token: [u8; super::TOKEN_LEN],
    fence: Option<u64>,
    thread: Option<JoinHandle<Result<(), Error>>>,
}

impl fmt::Debug for Keeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keeper")
            .field(
                "resource",
                &format_args!("b\"{}\"", self.resource.escape_ascii()),
            )
            .field("standing", &self.standing())
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl Keeper {
    /// How the lock stands now. A cheap atomic load.
    pub fn standing(&self) -> Standing {
        self.shared.standing()
    }

    /// Whether the lock is lost (see [`Standing::Lost`]). A cheap atomic
    /// load: check it before each step of the protected work. When the
    /// validity runs out it turns true as soon as the keeper's thread wakes
    /// (scheduling latency after the end); [`validity`](Self::validity) is
    /// zero from the end itself, so check that where the bound must be hard.
    /// A release is not a loss: it stays false then.
    pub fn is_lost(&self) -> bool {
        self.standing() == Standing::Lost
    }

    /// What is left of the lock's validity now: zero once lost or
    /// released.
    pub fn validity(&self) -> Duration {
        if self.standing().is_final() {
            return Duration::ZERO;
        }
        self.shared
            .lock()
            .valid_until
            .saturating_duration_since(crate::clock::now())
    }

    /// The lock's resource (the first, for a lock over several).
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The lock's token.
    pub fn token(&self) -> &[u8; super::TOKEN_LEN] {
        &self.token
    }

    /// The kept lock's fence ([`Lock::fence`](crate::Lock::fence)); the
    /// same for the whole holding, extensions included.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Blocks until the lock is lost (`true`) or `timeout` has passed
    /// (`false`). It returns early only for a loss: while the keeper is
    /// borrowed, nobody can release it.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = crate::clock::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            let standing = self.standing();
            if standing.is_final() {
                return standing == Standing::Lost;
            }
            let left = match deadline {
                Some(at) => at.saturating_duration_since(crate::clock::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// A future that completes with the final standing: at once when the
    /// lock is lost ([`Standing::Lost`]), or, when the keeper released the
    /// lock first (or was dropped), with [`Standing::Released`] once the
    /// release's round is over: a future kept after the keeper is gone
    /// never hangs. It needs no runtime: the keeper's thread wakes it.
    ///
    /// While the keeper is borrowed (next to the work it protects, in a
    /// `select!`) nobody can release it, so there it completes only on a
    /// loss. Where it may outlive the keeper (a task of its own), look at
    /// the standing it gives: only `Lost` is a loss.
    ///
    /// ```no_run
    /// # async fn work() {}
    /// # async fn demo(keeper: &redlock_mio::Keeper) {
    /// use redlock_mio::Standing;
    ///
    /// let lost = keeper.lost();
    /// // (with tokio: `tokio::select! { Standing::Lost = lost => ..., _ = work() => ... }`)
    /// if lost.await == Standing::Lost {
    ///     eprintln!("lost the lock: stop");
    /// }
    /// # }
    /// ```
    pub fn lost(&self) -> LossSignal {
        LossSignal {
            shared: self.shared.clone(),
        }
    }

    /// Releases the lock (after an extension in flight, if any), stops the
    /// keeper and returns the release's outcome, once its round is over.
    /// The standing is then [`Released`](Standing::Released), or stays
    /// [`Lost`](Standing::Lost) if the lock was lost first (or the release
    /// found it gone).
    ///
    /// # Errors
    ///
    /// As for [`Redlock::unlock`]: [`Error::NotHeld`] after a loss.
    ///
    /// # Panics
    ///
    /// If the [`on_change`](KeepOptions::on_change) callback panicked, on
    /// the keeper's thread: the panic is passed on.
    pub fn release(mut self) -> Result<(), Error> {
        match self.join() {
            Some(Ok(result)) => result,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            // The thread is always there until this call or drop.
            None => Ok(()),
        }
    }

    /// Asks the keeper's thread to release and waits for it to end; `None`
    /// if it was already joined.
    pub(super) fn join(&mut self) -> Option<thread::Result<Result<(), Error>>> {
        let thread = self.thread.take()?;
        self.shared.ask_release();
        Some(thread.join())
    }

    /// Asks the keeper's thread to release, and lets it finish on its own.
    pub(super) fn detach(&mut self) {
        if self.thread.take().is_some() {
            self.shared.ask_release();
        }
    }

    /// Completes when the keeper's thread is done: its release's round is
    /// over. Ask for the release first ([`detach`](Self::detach)).
    pub(super) fn finished(&self) -> Finished {
        Finished {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Keeper {
    /// Asks the thread to release and returns without waiting: the thread
    /// is detached and finishes on its own.
    fn drop(&mut self) {
        self.detach();
    }
}

/// The loss signal of a kept lock, a future that completes with its final
/// standing: see [`Keeper::lost`].
///
/// It needs no runtime (the keeper's thread wakes it), and it is `Clone`
/// and `Send`: a watcher elsewhere can wait for the loss.
///
/// ```no_run
/// use redlock_mio::{Keeper, Standing};
///
/// fn watch(keeper: &Keeper) {
///     let lost = keeper.lost();
///     std::thread::spawn(move || {
///         if futures_executor::block_on(lost) == Standing::Lost {
///             eprintln!("lost the lock: stop the writers");
///         }
///     });
/// }
/// ```
#[derive(Clone)]
#[must_use = "futures do nothing unless awaited"]
pub struct LossSignal {
    shared: Arc<Shared>,
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("standing", &self.shared.standing())
            .finish()
    }
}

impl Future for LossSignal {
    type Output = Standing;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Standing> {
        let standing = self.shared.standing();
        if standing.is_final() {
            return Poll::Ready(standing);
        }
        let shared = &self.shared;
        match shared.poll_until(cx, |_| shared.standing().is_final()) {
            Poll::Ready(()) => Poll::Ready(shared.standing()),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Completes when a keeper's thread is done: see [`Keeper::finished`].
pub(super) struct Finished {
    shared: Arc<Shared>,
}

impl Future for Finished {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.shared.poll_until(cx, |state| state.finished)
    }
}

impl Redlock {
    /// Hands `lock` to a background thread that extends it to `options`'
    /// TTL every `ttl / 3` (same quorum and validity rules as
    /// [`extend`](Self::extend)) until it is released, lost, or held for
    /// `max_hold`. The returned [`Keeper`] says at once when the lock is
    /// [at risk](Standing::AtRisk) (an extension missed a quorum; the
    /// keeper retries after a quarter period) or [lost](Standing::Lost) (the
    /// lock's watch found its keys gone from a majority: a round trip and a
    /// read after the masters' word, see [`watch`](Self::watch); or an
    /// extension's quorum said the token is gone: within one period of the
    /// key's loss; or its validity ran out: by the end of it), through
    /// [`Keeper::is_lost`], [`Keeper::wait_lost`], the future
    /// [`Keeper::lost`] and an optional callback; at the end of a normal
    /// holding it says [released](Standing::Released), not lost.
    ///
    /// The client stays the caller's: the thread holds a handle of it (a
    /// [clone](Clone)) until it has sent the release, and one thread sends
    /// every command of the lock, so an extension never races the release,
    /// and nothing is extended after it. A client shared between threads
    /// (borrowed, in an `Arc`, or cloned) keeps serving them meanwhile.
    /// [`with_lock`](Self::with_lock) and
    /// [`with_lock_async`](Self::with_lock_async) acquire, keep and release
    /// around a closure or a future.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use redlock_mio::{KeepOptions, Redlock};
    ///
    /// let client = Arc::new(Redlock::builder(["redis://h1:6379", "redis://h2:6379", "redis://h3:6379"]).build()?);
    /// let ttl = Duration::from_secs(30);
    /// let lock = client.lock("reports:daily", ttl)?;
    /// let keeper = client.keep(lock, KeepOptions::new(ttl))?;
    /// for step in 0..10 {
    ///     if keeper.is_lost() {
    ///         return Err("lost the lock".into());
    ///     }
    ///     // ... step `step` of the work; `client` serves other threads meanwhile ...
    /// }
    /// keeper.release()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`] for a TTL that [`extend`](Self::extend) would
    /// refuse (the lock is released first); [`Error::Expired`] for a lock
    /// already expired, or [`Error::Io`] if the thread cannot be started
    /// (the lock is dropped: its keys expire at their TTL).
    pub fn keep(&self, mut lock: Lock, options: KeepOptions) -> Result<Keeper, Error> {
        if lock.is_expired() {
            return Err(Error::Expired);
        }
        if let Err(error) = self.check_ttl(options.ttl) {
            // The caller gave the lock away: nobody else can release it.
            let _ = self.unlock(&mut lock);
            return Err(error);
        }
        let keeping = Keeping::new(
            options.ttl,
            options.period,
            options.max_hold,
            lock.valid_until_here(),
            crate::clock::now(),
        );
        let shared = Arc::new(Shared::new(lock.valid_until_here()));
        if options.watch {
            let told = Arc::downgrade(&shared);
            let on_loss = move || {
                if let Some(shared) = told.upgrade() {
                    shared.tell_lost();
                }
            };
            self.watch_telling(&mut lock, Some(Box::new(on_loss)));
        }
        let resource = lock.resource().to_vec();
        let token = *lock.token();
        let fence = lock.fence();
        let mut job = Job {
            client: self.clone(),
            lock,
            shared: shared.clone(),
            ttl: options.ttl,
            keeping,
            on_change: options.on_change,
        };
        let thread = thread::Builder::new()
            .name("redlock-keeper".into())
            .spawn(move || job.run())
            .map_err(|e| Error::Io(e.kind()))?;
        Ok(Keeper {
            shared,
            resource,
            token,
            fence,
            thread: Some(thread),
        })
    }
}

/// The keeper thread's work: a thin driver of the lock's [`Keeping`],
/// which takes every decision. It waits, sends the lock's commands, hands
/// their results in with the clock, and reports the standings the
/// keeping gives.
struct Job {
    client: Redlock,
    lock: Lock,
    shared: Arc<Shared>,
    ttl: Duration,
    keeping: Keeping,
    on_change: Option<OnChange>,
}

impl Job {
    /// Does what the keeping says until it is over (the release's end);
    /// says the thread is done however it ends (a panicking callback
    /// included). Returns the release's result.
    fn run(&mut self) -> Result<(), Error> {
        struct Done<'a>(&'a Shared);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.finish();
            }
        }
        let shared = Arc::clone(&self.shared);
        let _done = Done(&shared);
        let mut released = Ok(());
        loop {
            let standing = match self.keeping.poll() {
                KeepingStep::Wait { until } => {
                    let woken = self.shared.wait_release(until);
                    let (now, valid_until) = (crate::clock::now(), self.lock.valid_until_here());
                    match woken {
                        Woken::Asked => self.keeping.handle_asked(now, valid_until),
                        Woken::Lost => {
                            // No validity is left to a lock found lost.
                            self.lock.apply(Validity::Capped(now));
                            self.keeping.handle_lost()
                        }
                        Woken::Time => self.keeping.handle_wake(now, valid_until),
                    }
                }
                KeepingStep::Extend => {
                    let result = self.client.extend(&mut self.lock, self.ttl);
                    let now = crate::clock::now();
                    self.keeping
                        .handle_extended(&result, now, self.lock.valid_until_here())
                }
                KeepingStep::Release => {
                    released = self.client.unlock(&mut self.lock);
                    self.keeping.handle_released(&released)
                }
                // The thread hands every result in before it polls again,
                // so nothing is ever in flight here.
                KeepingStep::InFlight | KeepingStep::Done(_) => return released,
            };
            if let Some(standing) = standing {
                self.set(standing);
            }
        }
    }

    fn set(&self, standing: Standing) {
        self.shared.set(
            standing,
            self.lock.valid_until_here(),
            self.on_change.as_ref(),
        );
    }
}
