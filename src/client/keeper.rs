//! [`Keeper`]: a lock kept alive in the background, which tells its holder
//! at once when the lock is at risk or lost.
//!
//! The keeper thread owns the client and the lock: it alone sends their
//! commands, one at a time, so an extension and the release can never
//! race (a release asked for during an extension is sent after it), and
//! nothing is sent after the release. Extensions use the extend script,
//! which changes a key only while it still holds the lock's token: an
//! expired key is never recreated.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{Lock, Redlock};
use crate::clock::after;
use crate::error::Error;

/// How a kept lock stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Standing {
    /// The last extension reached a quorum.
    Held,
    /// The last extension missed a quorum (masters unreachable or too
    /// slow): the lock still has validity left, and the keeper keeps
    /// trying, but the holder should get ready to stop.
    AtRisk,
    /// The lock is gone: a quorum said its token no longer owns the
    /// resource, its validity ran out, the hold limit was reached, or it
    /// was released. Final.
    Lost,
}

impl Standing {
    fn code(self) -> u8 {
        match self {
            Standing::Held => 0,
            Standing::AtRisk => 1,
            Standing::Lost => 2,
        }
    }

    fn from_code(code: u8) -> Standing {
        match code {
            0 => Standing::Held,
            1 => Standing::AtRisk,
            _ => Standing::Lost,
        }
    }
}

/// A callback told of every change of [`Standing`], from the keeper's
/// thread.
pub type OnChange = Box<dyn Fn(Standing) + Send + 'static>;

/// How a [`Keeper`] keeps its lock. Made with [`KeepOptions::new`].
pub struct KeepOptions {
    ttl: Duration,
    period: Option<Duration>,
    max_hold: Option<Duration>,
    on_change: Option<OnChange>,
}

impl fmt::Debug for KeepOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepOptions")
            .field("ttl", &self.ttl)
            .field("period", &self.period)
            .field("max_hold", &self.max_hold)
            .field("on_change", &self.on_change.is_some())
            .finish()
    }
}

impl KeepOptions {
    /// Extend to `ttl` each time, every `ttl / 3`, with no hold limit.
    pub fn new(ttl: Duration) -> KeepOptions {
        KeepOptions {
            ttl,
            period: None,
            max_hold: None,
            on_change: None,
        }
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
    /// [`Keeper::lost`] see the change.
    pub fn on_change(mut self, on_change: impl Fn(Standing) + Send + 'static) -> KeepOptions {
        self.on_change = Some(Box::new(on_change));
        self
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
    wakers: Vec<Waker>,
    /// The holder asked for the release, or is gone.
    release: bool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn standing(&self) -> Standing {
        Standing::from_code(self.standing.load(Ordering::Acquire))
    }

    /// Waits until the holder asks for the release (`true`) or `until`
    /// passes (`false`); without `until`, only for the release.
    fn wait_release(&self, until: Option<Instant>) -> bool {
        let mut state = self.lock();
        loop {
            if state.release {
                return true;
            }
            state = match until {
                None => self
                    .asked
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(at) => {
                    let left = at.saturating_duration_since(crate::clock::now());
                    if left.is_zero() {
                        return false;
                    }
                    self.asked
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Records the standing and validity; wakes whoever waits for a loss.
    fn set(&self, standing: Standing, valid_until: Instant, on_change: Option<&OnChange>) {
        let before = self.standing();
        if before == Standing::Lost {
            return;
        }
        let wakers = {
            let mut state = self.lock();
            state.valid_until = valid_until;
            self.standing.store(standing.code(), Ordering::Release);
            if standing == Standing::Lost {
                std::mem::take(&mut state.wakers)
            } else {
                Vec::new()
            }
        };
        // The callback runs before any waiter wakes: whoever saw the loss
        // through `wait_lost` or `lost()` finds the callback done.
        if standing != before {
            if let Some(on_change) = on_change {
                on_change(standing);
            }
        }
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
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
/// timeout), dropping the client. [`release`](Keeper::release) waits for
/// it, returns the outcome and gives the client back.
pub struct Keeper {
    shared: Arc<Shared>,
    resource: Vec<u8>,
    token: [u8; super::TOKEN_LEN],
    fence: Option<u64>,
    thread: Option<JoinHandle<(Redlock, Result<(), Error>)>>,
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
    pub fn is_lost(&self) -> bool {
        self.standing() == Standing::Lost
    }

    /// What is left of the lock's validity now: zero once lost.
    pub fn validity(&self) -> Duration {
        if self.is_lost() {
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

    /// Blocks until the lock is lost or `timeout` has passed; `true` if
    /// lost.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = crate::clock::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            if self.is_lost() {
                return true;
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

    /// A future that completes when the lock is lost. It needs no runtime:
    /// the keeper's thread wakes it.
    pub fn lost(&self) -> Lost {
        Lost {
            shared: self.shared.clone(),
        }
    }

    /// Releases the lock (after an extension in flight, if any), stops the
    /// keeper and gives the client back, with the release's outcome.
    ///
    /// # Errors
    ///
    /// As for [`Redlock::unlock`]; the client comes back either way.
    pub fn release(mut self) -> (Redlock, Result<(), Error>) {
        // The thread is always there until this call or drop.
        match self.stop() {
            Some(done) => done,
            None => unreachable_keeper(),
        }
    }

    fn stop(&mut self) -> Option<(Redlock, Result<(), Error>)> {
        let thread = self.thread.take()?;
        self.shared.lock().release = true;
        self.shared.asked.notify_all();
        match thread.join() {
            Ok(done) => Some(done),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

#[cold]
fn unreachable_keeper() -> ! {
    panic!("Keeper::release after the keeper stopped: not possible through the public API")
}

impl Drop for Keeper {
    /// Asks the thread to release and returns without waiting: the thread
    /// is detached and finishes on its own.
    fn drop(&mut self) {
        if self.thread.take().is_some() {
            self.shared.lock().release = true;
            self.shared.asked.notify_all();
        }
    }
}

/// Completes when a kept lock is lost: see [`Keeper::lost`].
#[derive(Clone)]
pub struct Lost {
    shared: Arc<Shared>,
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lost")
            .field("lost", &(self.shared.standing() == Standing::Lost))
            .finish()
    }
}

impl Future for Lost {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.shared.standing() == Standing::Lost {
            return Poll::Ready(());
        }
        let mut state = self.shared.lock();
        // Checked again under the lock: the keeper sets Lost under it.
        if self.shared.standing() == Standing::Lost {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Redlock {
    /// Hands `lock` and this client to a background thread that extends
    /// the lock to `options`' TTL every `ttl / 3` (same quorum and validity
    /// rules as [`extend`](Self::extend)) until it is released, lost, or
    /// held for `max_hold`. The returned [`Keeper`] says at once when the
    /// lock is [at risk](Standing::AtRisk) (an extension missed a quorum;
    /// the keeper retries after a quarter period) or
    /// [lost](Standing::Lost) (a quorum said the token is gone: within one
    /// period of the key's loss; or its validity ran out: by the end of
    /// it), through [`Keeper::is_lost`], [`Keeper::wait_lost`], the future
    /// [`Keeper::lost`] and an optional callback.
    ///
    /// The client is the keeper's until [`Keeper::release`] gives it back:
    /// one thread sends every command, so an extension never races the
    /// release, and nothing is extended after it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`] for a TTL that [`extend`](Self::extend) would
    /// refuse, [`Error::Expired`] for a lock already expired (the lock and
    /// client are dropped then: the key expires at its TTL), or
    /// [`Error::Io`] if the thread cannot be started.
    pub fn keep(self, lock: Lock, options: KeepOptions) -> Result<Keeper, Error> {
        self.check_ttl(options.ttl)?;
        if lock.is_expired() {
            return Err(Error::Expired);
        }
        let period = options
            .period
            .unwrap_or(options.ttl / 3)
            .max(Duration::from_millis(1));
        let started = crate::clock::now();
        let hold_until = options.max_hold.and_then(|d| started.checked_add(d));
        let shared = Arc::new(Shared {
            standing: AtomicU8::new(Standing::Held.code()),
            state: Mutex::new(State {
                valid_until: lock.valid_until_here(),
                wakers: Vec::new(),
                release: false,
            }),
            changed: Condvar::new(),
            asked: Condvar::new(),
        });
        let resource = lock.resource().to_vec();
        let token = *lock.token();
        let fence = lock.fence();
        let thread_shared = shared.clone();
        let thread = thread::Builder::new()
            .name("redlock-keeper".into())
            .spawn(move || {
                let mut job = Job {
                    client: self,
                    lock,
                    shared: thread_shared,
                    ttl: options.ttl,
                    period,
                    hold_until,
                    on_change: options.on_change,
                };
                let result = job.run();
                (job.client, result)
            })
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

/// The keeper thread's work.
struct Job {
    client: Redlock,
    lock: Lock,
    shared: Arc<Shared>,
    ttl: Duration,
    period: Duration,
    hold_until: Option<Instant>,
    on_change: Option<OnChange>,
}

impl Job {
    /// Extends on schedule until the holder asks for the release (then
    /// releases).
    fn run(&mut self) -> Result<(), Error> {
        let mut next = after(crate::clock::now(), self.period);
        loop {
            let lost = self.shared.standing() == Standing::Lost;
            // Once lost, only a release (or the holder's departure) is left.
            let wake = if lost {
                None
            } else {
                Some(next.min(self.lock.valid_until_here()))
            };
            if self.shared.wait_release(wake) {
                let result = self.client.unlock(&mut self.lock);
                self.set(Standing::Lost);
                return result;
            }
            let now = crate::clock::now();
            if self.lock.is_expired() {
                self.set(Standing::Lost);
                continue;
            }
            if now < next || self.hold_until.is_some_and(|end| now >= end) {
                // Woken for the validity's end, or past the hold limit:
                // wait for the end without extending.
                next = self.lock.valid_until_here();
                continue;
            }
            next = match self.client.extend(&mut self.lock, self.ttl) {
                Ok(()) => {
                    self.set(Standing::Held);
                    after(now, self.period)
                }
                Err(Error::NotHeld(_) | Error::Expired) => {
                    self.set(Standing::Lost);
                    now
                }
                Err(Error::ExtensionLimit { .. }) => self.lock.valid_until_here(),
                Err(_) => {
                    let standing = if self.lock.is_expired() {
                        Standing::Lost
                    } else {
                        Standing::AtRisk
                    };
                    self.set(standing);
                    after(now, self.period / 4)
                }
            };
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
