//! The front ends as the matrix drives them: one [`Client`] per caller,
//! whose calls (acquire, extend, release) go through the cell's front end
//! (blocking, async under an executor, embedded in a `mio` loop) and
//! shape (one lock, several resources, a batch, kept, scoped). Every call
//! returns what the library returned; the cell decides what was due.

use std::future::Future;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::support::executor::BlockOn;
use crate::support::gate::Gate;
use crate::support::holdings::Holding;
use redlock_mio::{
    Builder, ConfigError, Error, KeepOptions, Keeper, Lock, Redlock, Standing, Stats,
};

use super::embedded::Looped;
use super::{Front, KEEP_PERIOD, LONGEST, PATIENCE, Shape, TTL, Tuning};

/// How an acquire waits: not at all (`try_lock`, `try_lock_all`,
/// `try_lock_many`), or as the shape's call that waits does (`lock_until`,
/// `lock_all`, `lock` before `keep`, `with_lock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    Try,
    Wait,
}

/// The builder of every client of a cell: no stall detection within a
/// cell (a paused master's connection stays, and gets its releases once
/// resumed), the tuning's timeouts and retries, fencing and the restart
/// guard with the one longest TTL the deployment uses.
pub(super) fn builder(urls: &[String], fenced: bool, tuning: &Tuning) -> Builder {
    let mut builder = Redlock::builder(urls)
        .request_timeout(tuning.request_timeout)
        .stall_timeout(PATIENCE)
        .retry_count(tuning.retry_count)
        .retry_delay(tuning.retry_delay)
        .retry_jitter(tuning.retry_jitter);
    if fenced {
        builder = builder.fencing(LONGEST);
    }
    if tuning.guard {
        builder = builder.restart_guard(LONGEST);
    }
    builder
}

/// Runs `future` to completion under `run`, on this thread.
pub(super) fn block<T>(run: BlockOn, future: impl Future<Output = T>) -> T {
    let mut out = None;
    run(Box::pin(async {
        out = Some(future.await);
    }));
    out.unwrap_or_else(|| panic!("the executor returned before the future completed"))
}

enum Inner {
    /// A `Redlock`: its blocking calls (`run` is `None`), or its async
    /// ones under that executor.
    Engine {
        redlock: Arc<Redlock>,
        run: Option<BlockOn>,
    },
    Embedded(Box<Looped>),
}

/// One caller: a client of one front end, acquiring in one shape.
pub(super) struct Client {
    pub(super) shape: Shape,
    /// Its number in the holdings.
    pub(super) who: usize,
    /// A batch must win every lock or none (a cell's), or may win some (a
    /// campaign's).
    pub(super) all_or_nothing: bool,
    inner: Inner,
}

/// What an acquire won, until its release.
pub(super) struct Held {
    /// Right after the acquire returned (for a scope: when its closure
    /// began).
    start: Instant,
    what: What,
}

enum What {
    Lock(Lock),
    Batch(Vec<Lock>),
    Kept(Keeper),
    Scoped(Scope),
}

/// A `with_lock` (or `with_lock_async`) on a thread of its own, its
/// closure holding until the gate opens.
struct Scope {
    gate: Arc<Gate>,
    token: [u8; redlock_mio::TOKEN_LEN],
    fence: Option<u64>,
    events: Receiver<ScopeEvent>,
    thread: JoinHandle<()>,
}

enum ScopeEvent {
    /// The closure began: the lock is held.
    Entered {
        start: Instant,
        token: [u8; redlock_mio::TOKEN_LEN],
        fence: Option<u64>,
    },
    /// The call returned: when the closure ended (the lock still valid
    /// then), or the acquire's error.
    Ended(Result<Instant, Error>),
}

impl Client {
    /// A client of `front` for `shape`; the embedded front end refuses
    /// fencing at build.
    pub(super) fn new(
        front: Front,
        shape: Shape,
        fenced: bool,
        tuning: &Tuning,
        urls: &[String],
        who: usize,
    ) -> Result<Client, ConfigError> {
        let builder = builder(urls, fenced, tuning);
        let inner = if front == Front::Embedded {
            Inner::Embedded(Box::new(Looped::build(builder)?))
        } else {
            Inner::Engine {
                redlock: Arc::new(builder.build()?),
                run: front.executor(),
            }
        };
        Ok(Client {
            shape,
            who,
            all_or_nothing: true,
            inner,
        })
    }

    /// Whether this client's shape has `call`.
    pub(super) fn has(&self, call: Call) -> bool {
        self.shape.has(call)
    }

    /// The client's counters; `None` for the embedded one, which keeps
    /// none.
    pub(super) fn stats(&self) -> Option<Stats> {
        match &self.inner {
            Inner::Engine { redlock, .. } => Some(redlock.stats()),
            Inner::Embedded(_) => None,
        }
    }

    /// Acquire attempts so far (0 for the embedded client).
    pub(super) fn attempts(&self) -> u64 {
        self.stats().map_or(0, |s| s.attempts)
    }

    /// Calls in flight on the embedded client (0 for the others).
    pub(super) fn in_flight(&self) -> usize {
        match &self.inner {
            Inner::Embedded(looped) => looped.in_flight(),
            Inner::Engine { .. } => 0,
        }
    }

    /// Acquires `names` (the first only, for the shapes of one lock) by
    /// `call`, a call that waits giving up at `deadline`.
    pub(super) fn acquire(
        &mut self,
        call: Call,
        names: &[Vec<u8>],
        deadline: Instant,
    ) -> Result<Held, Error> {
        assert!(self.has(call), "{:?} has no {call:?}", self.shape);
        let name = &names[0];
        let what = match (&mut self.inner, self.shape) {
            (Inner::Embedded(looped), _) => What::Lock(looped.acquire(call, name, deadline)?),
            (Inner::Engine { redlock, run }, Shape::Single) => {
                What::Lock(single(redlock, *run, call, name, deadline)?)
            }
            (Inner::Engine { redlock, .. }, Shape::Multi) => What::Lock(match call {
                Call::Try => redlock.try_lock_all(names, TTL)?,
                Call::Wait => redlock.lock_all(names, TTL)?,
            }),
            (Inner::Engine { redlock, .. }, Shape::Batch) => {
                What::Batch(batch(redlock, names, self.all_or_nothing)?)
            }
            (Inner::Engine { redlock, run }, Shape::Kept) => {
                let lock = match (call, *run) {
                    (Call::Try, None) => redlock.try_lock(name, TTL)?,
                    (Call::Wait, None) => redlock.lock(name, TTL)?,
                    (Call::Try, Some(run)) => block(run, redlock.try_lock_async(name, TTL))?,
                    (Call::Wait, Some(run)) => block(run, redlock.lock_async(name, TTL))?,
                };
                What::Kept(redlock.keep(lock, keep_options())?)
            }
            (Inner::Engine { redlock, run }, Shape::Scoped) => {
                let (start, scope) = scoped(redlock, *run, name)?;
                return Ok(Held {
                    start,
                    what: What::Scoped(scope),
                });
            }
        };
        Ok(Held {
            start: Instant::now(),
            what,
        })
    }

    /// Extends what `held` holds, where the caller does it (one lock, a
    /// lock over several, a batch's locks); `None` where it has no such
    /// call (the embedded client) or a keeper does it.
    pub(super) fn extend(&mut self, held: &mut Held) -> Option<Result<(), Error>> {
        let Inner::Engine { redlock, run } = &self.inner else {
            return None;
        };
        match (&mut held.what, *run) {
            (What::Lock(lock), None) => Some(redlock.extend(lock, TTL)),
            (What::Lock(lock), Some(run)) => Some(block(run, redlock.extend_async(lock, TTL))),
            (What::Batch(locks), _) => Some(
                locks
                    .iter_mut()
                    .try_for_each(|lock| redlock.extend(lock, TTL)),
            ),
            (What::Kept(_) | What::Scoped(_), _) => None,
        }
    }

    /// Releases what `held` holds: its holdings (each ending right before
    /// the release, or at its validity's end if that came first) and the
    /// release's outcome.
    pub(super) fn release(
        &mut self,
        held: Held,
        names: &[Vec<u8>],
    ) -> (Vec<Holding>, Result<(), Error>) {
        let index = |name: &[u8]| {
            names
                .iter()
                .position(|n| n == name)
                .unwrap_or_else(|| panic!("a lock of a name the cell did not give"))
        };
        let who = self.who;
        let of_lock = |lock: &Lock| -> Vec<Holding> {
            lock.resources()
                .map(|name| Holding::of(index(name), who, lock, held.start))
                .collect()
        };
        match (held.what, &mut self.inner) {
            (What::Lock(mut lock), Inner::Embedded(looped)) => {
                let holdings = of_lock(&lock);
                (holdings, looped.release(&mut lock))
            }
            (What::Lock(mut lock), Inner::Engine { redlock, run }) => {
                let holdings = of_lock(&lock);
                let result = match run {
                    None => redlock.unlock(&mut lock),
                    Some(run) => block(*run, redlock.unlock_async(&mut lock)),
                };
                (holdings, result)
            }
            (What::Batch(mut locks), Inner::Engine { redlock, .. }) => {
                let holdings = locks.iter().flat_map(of_lock).collect();
                let result = redlock
                    .unlock_many(&mut locks)
                    .and_then(|each| each.into_iter().collect());
                (holdings, result)
            }
            (What::Kept(keeper), Inner::Engine { run, .. }) => {
                let holding = kept(&keeper, index(keeper.resource()), who, held.start);
                let result = match run {
                    None => keeper.release(),
                    Some(run) => {
                        // The async way: the keeper dropped releases, and
                        // its loss signal completes once that is over.
                        let lost = keeper.lost();
                        drop(keeper);
                        match block(*run, lost) {
                            Standing::Released => Ok(()),
                            other => panic!("a dropped keeper ended {other:?}"),
                        }
                    }
                };
                (vec![holding], result)
            }
            (What::Scoped(scope), Inner::Engine { .. }) => {
                scope.gate.open();
                let end = scope.events.recv_timeout(PATIENCE);
                if let Err(panic) = scope.thread.join() {
                    std::panic::resume_unwind(panic);
                }
                let end = match end {
                    Ok(ScopeEvent::Ended(end)) => end,
                    Ok(ScopeEvent::Entered { .. }) => panic!("a scope entered twice"),
                    Err(e) => panic!("the scope did not end: {e}"),
                };
                let holding = |end| Holding {
                    resource: 0,
                    thread: who,
                    token: scope.token,
                    start: held.start,
                    end,
                    fence: scope.fence,
                };
                match end {
                    Ok(end) => (vec![holding(end)], Ok(())),
                    Err(e) => (Vec::new(), Err(e)),
                }
            }
            (_, Inner::Embedded(_)) => unreachable!("the embedded client holds single locks"),
        }
    }
}

/// How the matrix keeps a lock: extended every `KEEP_PERIOD`, so that a
/// cell sees extensions within its length.
fn keep_options() -> KeepOptions {
    KeepOptions::new(TTL).period(KEEP_PERIOD)
}

/// The holding of a kept lock, from `start` to now, which it must still
/// hold.
pub(super) fn kept(keeper: &Keeper, resource: usize, who: usize, start: Instant) -> Holding {
    let end = Instant::now();
    assert!(
        !keeper.validity().is_zero(),
        "a kept lock ended before its release: {keeper:?}"
    );
    Holding {
        resource,
        thread: who,
        token: *keeper.token(),
        start,
        end,
        fence: keeper.fence(),
    }
}

fn single(
    redlock: &Redlock,
    run: Option<BlockOn>,
    call: Call,
    name: &[u8],
    deadline: Instant,
) -> Result<Lock, Error> {
    match (call, run) {
        (Call::Try, None) => redlock.try_lock(name, TTL),
        (Call::Wait, None) => redlock.lock_until(name, TTL, deadline),
        (Call::Try, Some(run)) => block(run, redlock.try_lock_async(name, TTL)),
        (Call::Wait, Some(run)) => block(run, redlock.lock_until_async(name, TTL, deadline)),
    }
}

/// A batch's locks won (some may be missing, unless `all_or_nothing`),
/// or the first error if none was. With `all_or_nothing`, elements whose
/// outcomes differ fail the cell: no situation of the matrix makes them.
fn batch(redlock: &Redlock, names: &[Vec<u8>], all_or_nothing: bool) -> Result<Vec<Lock>, Error> {
    let results = redlock.try_lock_many(names, TTL)?;
    let kinds: Vec<String> = results.iter().map(|r| kind(r.as_ref().err())).collect();
    assert!(
        !all_or_nothing || kinds.iter().all(|k| *k == kinds[0]),
        "a batch's elements ended differently: {kinds:?}"
    );
    let mut won = Vec::new();
    let mut first = None;
    for result in results {
        match result {
            Ok(lock) => won.push(lock),
            Err(error) => {
                first.get_or_insert(error);
            }
        }
    }
    match first {
        Some(error) if won.is_empty() => Err(error),
        _ => Ok(won),
    }
}

/// The kind of an outcome, for messages: "ok" or the error's variant.
pub(super) fn kind(error: Option<&Error>) -> String {
    match error {
        None => "ok".to_owned(),
        Some(e) => format!("{e:?}")
            .split(['(', ' ', '{'])
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

/// Starts `with_lock` (or `with_lock_async` under `run`) on `name` on a
/// thread of its own; returns once its closure runs (the lock held), or
/// with the acquire's error.
fn scoped(
    redlock: &Arc<Redlock>,
    run: Option<BlockOn>,
    name: &[u8],
) -> Result<(Instant, Scope), Error> {
    let gate = Arc::new(Gate::new());
    let (send, events) = mpsc::channel();
    let thread = {
        let (redlock, gate, name) = (Arc::clone(redlock), Arc::clone(&gate), name.to_vec());
        thread::spawn(move || {
            let entered = |keeper: &Keeper| ScopeEvent::Entered {
                start: Instant::now(),
                token: *keeper.token(),
                fence: keeper.fence(),
            };
            let ended = |keeper: &Keeper| {
                let end = Instant::now();
                assert!(!keeper.validity().is_zero(), "lost in scope: {keeper:?}");
                end
            };
            let result = match run {
                None => redlock.with_lock(&name, keep_options(), |keeper| {
                    let _ = send.send(entered(keeper));
                    assert!(gate.wait(PATIENCE), "the scope was never closed");
                    ended(keeper)
                }),
                Some(run) => block(
                    run,
                    redlock.with_lock_async(&name, keep_options(), async |keeper| {
                        let _ = send.send(entered(keeper));
                        gate.opened().await;
                        ended(keeper)
                    }),
                ),
            };
            let _ = send.send(ScopeEvent::Ended(result));
        })
    };
    match events.recv_timeout(PATIENCE) {
        Ok(ScopeEvent::Entered {
            start,
            token,
            fence,
        }) => Ok((
            start,
            Scope {
                gate,
                token,
                fence,
                events,
                thread,
            },
        )),
        Ok(ScopeEvent::Ended(Err(error))) => {
            thread.join().expect("the scope's thread");
            Err(error)
        }
        Ok(ScopeEvent::Ended(Ok(_))) => panic!("a scope ended before it began"),
        Err(RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("the scope's thread ended without a word"),
        },
        Err(RecvTimeoutError::Timeout) => {
            panic!("with_lock neither ran its closure nor returned within {PATIENCE:?}")
        }
    }
}
