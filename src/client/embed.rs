//! [`EmbeddedRedlock`]: a client driven by the caller's own `mio` event
//! loop. Its user-facing docs are on the type; its `lock_until` calls are
//! driven in `pursue.rs`.

mod pursue;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Events;
use mio::{Registry, Token};
use smallvec::SmallVec;

use super::builder::{Builder, Config};
use super::token::TokenSource;
use super::{Lock, TOKEN_LEN};
use crate::calls::{self, Acquire, Acquired, Claim, Extend, Release};
use crate::commands::{Command, Keys};
use crate::driver::{Driver, Holders};
use crate::error::{ConfigError, Error};
use crate::ids::RoundId;
use crate::rules::{Op, Report, Round};
use pursue::LockUntil;

/// Names an operation started on an [`EmbeddedRedlock`], in its
/// [`Completion`].
///
/// Completions come in the order the rounds end, not the order they were
/// started: keep what each ticket stands for.
///
/// ```no_run
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use redlock_mio::{Completion, EmbeddedRedlock, Error, Ticket};
///
/// fn start(redlock: &mut EmbeddedRedlock, orders: &mut HashMap<Ticket, u64>, order: u64) -> Result<(), Error> {
///     let ticket = redlock.try_lock(format!("orders:{order}"), Duration::from_secs(10))?;
///     orders.insert(ticket, order);
///     Ok(())
/// }
///
/// fn collect(redlock: &mut EmbeddedRedlock, orders: &mut HashMap<Ticket, u64>) {
///     while let Some(completion) = redlock.poll_completion() {
///         if let Completion::Acquired { ticket, result: Ok(_lock) } = completion {
///             println!("order {:?} is ours", orders.remove(&ticket));
///         }
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

/// What an operation of an [`EmbeddedRedlock`] came to, from
/// [`poll_completion`](EmbeddedRedlock::poll_completion).
///
/// ```no_run
/// use redlock_mio::{Completion, EmbeddedRedlock, Error};
///
/// fn after_poll(redlock: &mut EmbeddedRedlock) -> Result<(), Error> {
///     while let Some(completion) = redlock.poll_completion() {
///         match completion {
///             Completion::Acquired { result: Ok(mut lock), .. } => {
///                 // ... work while lock.validity() lasts, then:
///                 redlock.unlock(&mut lock)?;
///             }
///             Completion::Acquired { ticket, result: Err(error) } => eprintln!("{ticket:?}: {error}"),
///             Completion::Released { result, .. } => result?,
///             Completion::Extended { lock, result, .. } => {
///                 // Renewed on success; expired if a quorum lost it.
///                 if result.is_err() && !lock.is_expired() {
///                     redlock.unlock(&mut { lock })?;
///                 }
///             }
///             _ => {} // more kinds may come
///         }
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Completion {
    /// An acquire: the lock, or why not (as for
    /// [`Redlock::try_lock`](crate::Redlock::try_lock); after an error its
    /// release is already on its way to every master).
    Acquired {
        /// The acquire's ticket.
        ticket: Ticket,
        /// The lock, or why not.
        result: Result<Lock, Error>,
    },
    /// An extend, as for [`Redlock::extend`](crate::Redlock::extend): the
    /// lock comes back, its validity renewed on success; after an error
    /// no longer than the extend may have left it on the masters (expired
    /// when a quorum said the token no longer owns it).
    Extended {
        /// The extend's ticket.
        ticket: Ticket,
        /// The lock given to [`extend`](EmbeddedRedlock::extend).
        lock: Lock,
        /// Whether a quorum extended it.
        result: Result<(), Error>,
    },
    /// A watched lock was found lost (see
    /// [`EmbeddedRedlock::watch`]): [`Lock::is_lost`] says so too.
    Lost {
        /// The watch's ticket.
        ticket: Ticket,
    },
    /// A release, as for [`Redlock::unlock`](crate::Redlock::unlock).
    Released {
        /// The release's ticket.
        ticket: Ticket,
        /// Whether a quorum released it.
        result: Result<(), Error>,
    },
}

/// An operation in flight.
struct Started {
    id: RoundId,
    op: Op,
    resource: SmallVec<[u8; 64]>,
    many: bool,
    token: [u8; TOKEN_LEN],
    /// The lock an extend holds until its completion gives it back.
    extending: Option<Lock>,
}

impl Started {
    /// The keys of its command.
    fn keys(&self) -> Keys<&[u8]> {
        Keys::new(&self.resource, self.many)
    }
}

/// What every operation of the embedded client uses: the connections and
/// the rounds in flight, the configuration, the masters' names, the
/// tokens.
struct Base {
    driver: Driver,
    config: Config,
    masters: Arc<[String]>,
    tokens: TokenSource,
    /// Boxes of the reports of waits' errors that were not the outcome of
    /// their call, for the next reports (room for one per call, allocated
    /// at build): a wait allocates nothing once the client is warm.
    #[allow(
        clippy::vec_box,
        reason = "the boxes are what is kept: each goes back into an error"
    )]
    spare_reports: Vec<Box<Report>>,
}

impl Base {
    /// Starts the round of `command` at `now`, waiting for the masters at
    /// most `timeout`: written to every master now (or once the
    /// handshakes are done). Its id.
    ///
    /// # Errors
    ///
    /// [`Error::TooManyInFlight`] at the cap of rounds in flight (nothing was sent).
    fn start(
        &mut self,
        command: &Command<'_>,
        timeout: Duration,
        now: Instant,
    ) -> Result<RoundId, Error> {
        let restart = calls::restarter(self.config.drift_factor, self.masters.len(), timeout);
        let mut ids: SmallVec<[RoundId; 1]> = SmallVec::new();
        self.driver
            .submit(std::slice::from_ref(command), restart, &mut ids, true, now);
        ids.first().copied().ok_or(Error::TooManyInFlight {
            limit: self.config.max_in_flight,
        })
    }

    /// Takes round `id` out of the table of rounds in flight, as it ended.
    fn take(&mut self, id: RoundId) -> Option<Round> {
        let round = self.driver.core.flights.round(id).cloned();
        self.driver.core.finish(&[id]);
        round
    }

    /// The per-node report of `round`, the masters named by their
    /// addresses (allocates: for errors only).
    fn report(&mut self, round: &Round) -> Box<Report> {
        report(&self.masters, &mut self.spare_reports, round)
    }

    /// `error` was dropped by a call that goes on: the box of its report
    /// is kept for the next one.
    fn recycle(&mut self, error: Error) {
        if let Some(report) = error.into_report() {
            if self.spare_reports.len() < self.spare_reports.capacity() {
                self.spare_reports.push(report);
            }
        }
    }

    /// After an acquire (of `claim`) whose round ended as `round` (`None`:
    /// gone from the table): the lock, or the error, after which its
    /// release is queued on every master without waiting (as `try_lock`
    /// does).
    fn acquired(&mut self, claim: Claim<'_>, round: Option<&Round>) -> Result<Lock, Error> {
        let acquired = match round {
            Some(round) => {
                claim.handle(round, calls::decision(round, Ok(())), || self.report(round))
            }
            None => claim.handle_lost(),
        };
        match acquired {
            Acquired::Won(lock) => Ok(lock),
            Acquired::Lost { error, release } => {
                self.driver.queue(&release, crate::clock::now());
                Err(error)
            }
        }
    }

    /// After an extend of `lock` whose round ended as `round` (`None`:
    /// gone from the table): whether a quorum extended it, the lock's
    /// validity set by the outcome.
    fn extended(&mut self, lock: &mut Lock, round: Option<&Round>) -> Result<(), Error> {
        let (result, validity) = match round {
            Some(round) => {
                let decision = calls::decision(round, Ok(()));
                Extend::handle(round, decision, || self.report(round))
            }
            None => Extend::handle_lost(crate::clock::now()),
        };
        lock.apply(validity);
        result
    }

    /// After a release whose round ended as `round` (`None`: gone from
    /// the table): whether a quorum released it.
    fn released(&mut self, round: Option<&Round>) -> Result<(), Error> {
        let Some(round) = round else {
            return Err(calls::unknown());
        };
        let decision = calls::decision(round, Ok(()));
        let (result, _expired) = Release::handle(round, decision, || self.report(round));
        result
    }
}

/// The per-node report of `round`, the masters named by `masters`, in a
/// box of `spares` if one is left (allocates: for errors only).
#[allow(
    clippy::vec_box,
    reason = "the boxes are what is kept: each goes back into an error"
)]
fn report(masters: &Arc<[String]>, spares: &mut Vec<Box<Report>>, round: &Round) -> Box<Report> {
    let report = round.report().with_masters(masters.clone());
    match spares.pop() {
        Some(mut spare) => {
            *spare = report;
            spare
        }
        None => Box::new(report),
    }
}

/// A Redlock client driven by the caller's own `mio` event loop: no
/// thread, no poller of its own, no blocking call. Made by
/// [`Builder::build_embedded`]. It is `Send`; it needs `&mut` for every
/// call.
///
/// The client registers its sockets with the caller's [`Registry`] under a
/// range of tokens the caller sets aside. The caller starts operations
/// ([`try_lock`](Self::try_lock), [`lock_until`](Self::lock_until),
/// [`extend`](Self::extend), [`unlock`](Self::unlock),
/// [`watch`](Self::watch)), hands it the
/// events of each poll ([`handle_events`](Self::handle_events)), polls no
/// longer than [`next_timeout`](Self::next_timeout), tells it the time
/// ([`handle_timeout`](Self::handle_timeout)), and collects what completed
/// ([`poll_completion`](Self::poll_completion)). The rounds are the same
/// as the other APIs': written to every master at once, decided early both
/// ways, released after a failed acquire wherever it may have set its key.
///
/// ```no_run
/// use std::time::{Duration, Instant};
/// use mio::{Events, Poll, Token};
/// use redlock_mio::{Completion, Redlock};
///
/// let mut poll = Poll::new()?;
/// let mut redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
///     .build_embedded(poll.registry(), Token(1000))?; // tokens 1000..1003
/// let ticket = redlock.try_lock("orders:42", Duration::from_secs(10))?;
/// let mut events = Events::with_capacity(64);
/// loop {
///     let timeout = redlock.next_timeout().map(|at| at.saturating_duration_since(Instant::now()));
///     poll.poll(&mut events, timeout)?;
///     // ... the caller's own events ...
///     redlock.handle_events(&events);
///     redlock.handle_timeout(Instant::now());
///     if let Some(Completion::Acquired { ticket: done, result }) = redlock.poll_completion() {
///         assert_eq!(done, ticket);
///         let mut lock = result?;
///         // ... work, then release: its completion comes the same way ...
///         redlock.unlock(&mut lock)?;
///         break;
///     }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EmbeddedRedlock {
    base: Base,
    /// The acquires and releases in flight.
    started: Vec<Started>,
    /// The [`lock_until`](Self::lock_until) calls in progress.
    pursuits: Vec<LockUntil>,
    /// The last `lock_until` ticket's number.
    last_pursuit: u64,
    /// The watched locks' holders, each with its watch's ticket (see
    /// [`watch`](Self::watch)).
    holders: Holders<Ticket>,
    /// The tickets of the watches that found their lock lost, not yet
    /// collected.
    lost: Vec<Ticket>,
}

impl fmt::Debug for EmbeddedRedlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedRedlock")
            .field("servers", &self.base.masters)
            .field("tokens", &self.base.driver.tokens())
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Builds a client driven by the caller's own `mio` loop: its sockets
    /// are registered with `registry` under the tokens from `first` on, one
    /// per master (`first.0..first.0 + N`), which the caller must leave to
    /// it. Connecting starts now and goes on as the caller hands the
    /// client its events; operations started meanwhile wait for the
    /// handshakes. [`require_handshakes`](Self::require_handshakes) does
    /// not apply (nothing is waited for here).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] as for [`build`](Self::build);
    /// [`ConfigError::NotEmbeddable`] with
    /// [`fencing`](Self::fencing) (an acquire runs several rounds in
    /// order).
    pub fn build_embedded(
        self,
        registry: &Registry,
        first: Token,
    ) -> Result<EmbeddedRedlock, ConfigError> {
        if self.fencing_on() {
            return Err(ConfigError::NotEmbeddable("fencing"));
        }
        let (addrs, conn, tls) = self.prepare()?;
        if first.0.checked_add(addrs.len()).is_none() {
            return Err(ConfigError::NotEmbeddable("tokens past usize::MAX"));
        }
        let mut driver = Driver::embedded(&addrs, conn, &tls, registry, first.0)
            .map_err(|e| ConfigError::Io(e.kind()))?;
        driver.connect();
        let masters = driver.core.addrs().map(ToString::to_string).collect();
        let config = self.config(&conn);
        Ok(EmbeddedRedlock {
            // Room for every round and every wait, allocated now.
            started: Vec::with_capacity(config.max_in_flight),
            pursuits: Vec::with_capacity(config.max_in_flight),
            last_pursuit: 0,
            holders: Holders::default(),
            lost: Vec::new(),
            base: Base {
                spare_reports: super::rounds::spare_reports(config.max_in_flight),
                driver,
                config,
                masters,
                tokens: TokenSource::new(),
            },
        })
    }
}

impl EmbeddedRedlock {
    /// The poller tokens the client's sockets use.
    pub fn tokens(&self) -> std::ops::Range<usize> {
        self.base.driver.tokens()
    }

    /// Operations started and not yet collected by
    /// [`poll_completion`](Self::poll_completion).
    pub fn in_flight(&self) -> usize {
        self.started.len() + self.pursuits.len()
    }

    /// Starts one attempt to acquire `resource` for `ttl`: its command is
    /// written to every master now (or once the handshakes are done). The
    /// outcome comes from [`poll_completion`](Self::poll_completion), by
    /// the request timeout.
    ///
    /// # Errors
    ///
    /// Without sending anything: [`Error::InvalidResource`],
    /// [`Error::InvalidTtl`], or [`Error::TooManyInFlight`] at the cap of rounds in
    /// flight ([`Builder::max_in_flight`]).
    pub fn try_lock(&mut self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Ticket, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.base.config.limits().acquire(resource, ttl)?;
        let token = self.base.tokens.token();
        let keys = Keys::One(resource);
        self.start(&Acquire::new(keys, token, ttl_ms).command(), keys, token)
    }

    /// Starts acquiring `resource` for `ttl`, trying again until
    /// `deadline`, as [`Redlock::lock_until`](crate::Redlock::lock_until)
    /// does: the ticket completes (from
    /// [`poll_completion`](Self::poll_completion), as
    /// [`Completion::Acquired`]) with the lock, or with the last attempt's
    /// error, by `deadline`.
    ///
    /// Between attempts the call waits, with no thread and no timer of
    /// its own: until the release that frees the lock hands it over and
    /// tells it (waiters are served first come, first served; see
    /// [`Builder::wake_on_release`]), until the holder's key expires, or,
    /// when neither is known, a random retry delay. The wake-ups arrive on
    /// the client's connections as readable events, like replies, and its
    /// waits' times are in [`next_timeout`](Self::next_timeout): a loop
    /// that hands the client its events and the time drives it. Every
    /// attempt waits for the masters until its request timeout or the
    /// deadline, whichever comes first; when the call ends, it leaves the
    /// queues the masters keep for waiters (without waiting).
    ///
    /// ```no_run
    /// use std::time::{Duration, Instant};
    /// use mio::{Events, Poll, Token};
    /// use redlock_mio::{Completion, Redlock};
    ///
    /// let mut poll = Poll::new()?;
    /// let mut redlock = Redlock::builder(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    ///     .build_embedded(poll.registry(), Token(1000))?;
    /// // Wait for the lock at most 5 s.
    /// let ticket = redlock.lock_until("orders:42", Duration::from_secs(10), Instant::now() + Duration::from_secs(5))?;
    /// let mut events = Events::with_capacity(64);
    /// let mut lock = loop {
    ///     let timeout = redlock.next_timeout().map(|at| at.saturating_duration_since(Instant::now()));
    ///     poll.poll(&mut events, timeout)?;
    ///     redlock.handle_events(&events);
    ///     redlock.handle_timeout(Instant::now());
    ///     if let Some(Completion::Acquired { ticket: done, result }) = redlock.poll_completion() {
    ///         assert_eq!(done, ticket);
    ///         break result?;
    ///     }
    /// };
    /// // ... work while lock.validity() lasts, then release it ...
    /// redlock.unlock(&mut lock)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Without sending anything: [`Error::InvalidResource`],
    /// [`Error::InvalidTtl`], [`Error::DeadlinePassed`] if `deadline` is
    /// not in the future, or [`Error::TooManyInFlight`] when
    /// [`Builder::max_in_flight`] calls are under way or its first
    /// attempt meets the cap of rounds in flight.
    pub fn lock_until(
        &mut self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Ticket, Error> {
        let resource = resource.as_ref();
        let ttl_ms = self.base.config.limits().acquire(resource, ttl)?;
        let deadline = crate::clock::from_std(deadline);
        if crate::clock::now() >= deadline {
            return Err(Error::DeadlinePassed);
        }
        if self.pursuits.len() == self.pursuits.capacity() {
            return Err(Error::TooManyInFlight {
                limit: self.base.config.max_in_flight,
            });
        }
        let ticket = Ticket(pursue::TICKET_TAG | (self.last_pursuit + 1));
        let call = LockUntil::start(&mut self.base, ticket, resource, ttl_ms, deadline)?;
        self.last_pursuit += 1;
        self.pursuits.push(call);
        Ok(ticket)
    }

    /// Starts an extend of `lock` to `ttl` on every master, as
    /// [`Redlock::extend`](crate::Redlock::extend) does: the client holds
    /// the lock until the outcome, which gives it back
    /// ([`Completion::Extended`], from
    /// [`poll_completion`](Self::poll_completion), by the request
    /// timeout), its validity renewed on success. While the extend is in
    /// flight the lock is worth what it was worth before.
    ///
    /// # Errors
    ///
    /// Without sending anything, with the lock unchanged:
    /// [`Error::InvalidTtl`], [`Error::Expired`],
    /// [`Error::ExtensionLimit`], or [`Error::TooManyInFlight`] at the cap
    /// of rounds in flight.
    #[allow(
        clippy::result_large_err,
        reason = "the lock goes back to its caller, unchanged, as it came"
    )]
    pub fn extend(&mut self, lock: Lock, ttl: Duration) -> Result<Ticket, (Lock, Error)> {
        let limits = self.base.config.limits();
        let started = match Extend::new(&limits, lock.holding(), ttl, crate::clock::now()) {
            Ok(call) => self.start(&call.command(), lock.keys(), *lock.token()),
            Err(error) => Err(error),
        };
        match started {
            Ok(ticket) => {
                if let Some(started) = self.started.last_mut() {
                    started.extending = Some(lock);
                }
                Ok(ticket)
            }
            Err(error) => Err((lock, error)),
        }
    }

    /// Starts the release of `lock` on every master. The outcome comes
    /// from [`poll_completion`](Self::poll_completion).
    ///
    /// # Errors
    ///
    /// [`Error::TooManyInFlight`] at the cap of rounds in flight (nothing was sent;
    /// the lock is unchanged: try again). Once started, the lock is
    /// expired, whatever the outcome.
    pub fn unlock(&mut self, lock: &mut Lock) -> Result<Ticket, Error> {
        let token = *lock.token();
        let ticket = self.start(&lock.release(), lock.keys(), token)?;
        // Expired from now on: its completion comes without the lock.
        lock.apply(Release::begun(crate::clock::now()));
        self.rewatch(Op::Release, lock);
        Ok(ticket)
    }

    /// Starts the round of `command`, an acquire or a release of `keys`
    /// with `token` (kept for what follows its completion).
    fn start(
        &mut self,
        command: &Command<'_>,
        keys: Keys<&[u8]>,
        token: [u8; TOKEN_LEN],
    ) -> Result<Ticket, Error> {
        let timeout = self.base.config.request_timeout;
        let id = self.base.start(command, timeout, crate::clock::now())?;
        let (resource, many) = keys.parts();
        self.started.push(Started {
            id,
            op: command.op(),
            resource: SmallVec::from_slice(resource),
            many,
            token,
            extending: None,
        });
        Ok(Ticket(id.get()))
    }

    /// Handles the readiness events of one poll: those of the client's
    /// tokens; the others are left to the caller. A `lock_until` call that
    /// was told a lock was handed to it makes its attempt now.
    pub fn handle_events(&mut self, events: &Events) {
        for event in events.iter() {
            self.base.driver.handle_event(event);
        }
        self.base.driver.after_events();
        self.step(crate::clock::now());
        self.tell_losses();
    }

    /// The time is `now`: rounds past their deadline count the masters
    /// that have not answered as failed; connects, handshakes and requests
    /// that ran out of time fail their connections; `lock_until` calls
    /// whose wait is over make their next attempt.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now = crate::clock::from_std(now);
        self.base.driver.check_timers(now);
        self.step(now);
        self.tell_losses();
    }

    /// Moves every `lock_until` call on, at `now`.
    fn step(&mut self, now: Instant) {
        for call in &mut self.pursuits {
            call.step(&mut self.base, now);
        }
        // Each call asked whether it was told: the list is not needed.
        self.base.driver.core.forget_told();
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to
    /// do: poll no longer than until then. `None`: nothing is in flight.
    pub fn next_timeout(&self) -> Option<Instant> {
        let driver = &self.base.driver;
        let rounds = driver.next_wake(crate::clock::now());
        let waits = self
            .pursuits
            .iter()
            .filter_map(|call| call.wakes_at(driver));
        let next = rounds.into_iter().chain(waits).min()?;
        Some(crate::clock::to_std(next))
    }

    /// The next operation that completed, if any.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if let Some(ticket) = self.lost.pop() {
            return Some(Completion::Lost { ticket });
        }
        if let Some(k) = self.pursuits.iter().position(LockUntil::is_done) {
            let call = self.pursuits.swap_remove(k);
            let ticket = call.ticket();
            if let Some(result) = call.into_result() {
                return Some(Completion::Acquired { ticket, result });
            }
        }
        let driver = &self.base.driver;
        let k = self
            .started
            .iter()
            .position(|s| driver.core.decided(&[s.id]))?;
        let mut started = self.started.swap_remove(k);
        let round = self.base.take(started.id);
        let ticket = Ticket(started.id.get());
        if let Some(mut lock) = started.extending.take() {
            let result = self.base.extended(&mut lock, round.as_ref());
            self.rewatch(Op::Extend, &mut lock);
            return Some(Completion::Extended {
                ticket,
                lock,
                result,
            });
        }
        Some(match started.op {
            Op::Release => Completion::Released {
                ticket,
                result: self.base.released(round.as_ref()),
            },
            _ => Completion::Acquired {
                ticket,
                result: self
                    .base
                    .acquired(Claim::new(started.keys(), &started.token), round.as_ref()),
            },
        })
    }
}
