//! [`EmbeddedRedlock`]: a client driven by the caller's own `mio` event
//! loop. Its user-facing docs are on the type.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Events;
use mio::{Registry, Token};
use smallvec::SmallVec;

use super::builder::{Builder, Config};
use super::rounds::{no_quorum, restarter};
use super::token::TokenSource;
use super::{Lock, TOKEN_LEN, check_resource, check_ttl};
use crate::commands::{Command, Keys};
use crate::driver::Driver;
use crate::error::{ConfigError, Error};
use crate::rules::{Decision, Op, Round};

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
    id: u64,
    op: Op,
    resource: SmallVec<[u8; 64]>,
    many: bool,
    token: [u8; TOKEN_LEN],
}

impl Started {
    /// The keys of its command.
    fn keys(&self) -> Keys<&[u8]> {
        Keys::new(&self.resource, self.many)
    }
}

/// A Redlock client driven by the caller's own `mio` event loop: no
/// thread, no poller of its own, no blocking call. Made by
/// [`Builder::build_embedded`]. It is `Send`; it needs `&mut` for every
/// call.
///
/// The client registers its sockets with the caller's [`Registry`] under a
/// range of tokens the caller sets aside. The caller starts operations
/// ([`try_lock`](Self::try_lock), [`unlock`](Self::unlock)), hands it the
/// events of each poll ([`handle_events`](Self::handle_events)), polls no
/// longer than [`next_timeout`](Self::next_timeout), tells it the time
/// ([`handle_timeout`](Self::handle_timeout)), and collects what completed
/// ([`poll_completion`](Self::poll_completion)). The rounds are the same
/// as the other APIs': written to every master at once, decided early both
/// ways, released everywhere after a failed acquire.
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
    driver: Driver,
    config: Config,
    masters: Arc<[String]>,
    tokens: TokenSource,
    started: Vec<Started>,
}

impl fmt::Debug for EmbeddedRedlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedRedlock")
            .field("servers", &self.masters)
            .field("tokens", &self.driver.tokens())
            .field("in_flight", &self.started.len())
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
        let (addrs, mut conn, tls) = self.prepare()?;
        // The embedded client has no call that waits: nothing to tell.
        conn.wake = None;
        if first.0.checked_add(addrs.len()).is_none() {
            return Err(ConfigError::NotEmbeddable("tokens past usize::MAX"));
        }
        let mut driver = Driver::embedded(&addrs, conn, &tls, registry, first.0)
            .map_err(|e| ConfigError::Io(e.kind()))?;
        driver.connect();
        let masters = driver.addrs().map(ToString::to_string).collect();
        Ok(EmbeddedRedlock {
            started: Vec::with_capacity(self.config(&conn).max_in_flight),
            config: self.config(&conn),
            driver,
            masters,
            tokens: TokenSource::new(),
        })
    }
}

impl EmbeddedRedlock {
    /// The poller tokens the client's sockets use.
    pub fn tokens(&self) -> std::ops::Range<usize> {
        self.driver.tokens()
    }

    /// Operations started and not yet collected by
    /// [`poll_completion`](Self::poll_completion).
    pub fn in_flight(&self) -> usize {
        self.started.len()
    }

    /// Starts one attempt to acquire `resource` for `ttl`: its command is
    /// written to every master now (or once the handshakes are done). The
    /// outcome comes from [`poll_completion`](Self::poll_completion), by
    /// the request timeout.
    ///
    /// # Errors
    ///
    /// Without sending anything: [`Error::InvalidResource`],
    /// [`Error::InvalidTtl`], or [`Error::Busy`] at the cap of rounds in
    /// flight ([`Builder::max_in_flight`]).
    pub fn try_lock(&mut self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Ticket, Error> {
        let resource = resource.as_ref();
        check_resource(resource)?;
        let ttl_ms = check_ttl(&self.config, ttl)?;
        let token = self.tokens.token();
        let keys = Keys::One(resource);
        self.start(&Command::acquire(keys, &token, ttl_ms), keys, token)
    }

    /// Starts the release of `lock` on every master. The outcome comes
    /// from [`poll_completion`](Self::poll_completion).
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] at the cap of rounds in flight (nothing was sent;
    /// the lock is unchanged: try again). Once started, the lock is
    /// expired, whatever the outcome.
    pub fn unlock(&mut self, lock: &mut Lock) -> Result<Ticket, Error> {
        let token = *lock.token();
        let ticket = self.start(&lock.release(), lock.keys(), token)?;
        lock.expire(crate::clock::now());
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
        let restart = restarter(
            &self.config,
            self.masters.len(),
            self.config.request_timeout,
        );
        let mut ids: SmallVec<[u64; 1]> = SmallVec::new();
        self.driver.submit(
            std::slice::from_ref(command),
            restart,
            &mut ids,
            true,
            crate::clock::now(),
        );
        let Some(&id) = ids.first() else {
            return Err(Error::Busy {
                limit: self.config.max_in_flight,
            });
        };
        let (resource, many) = keys.parts();
        self.started.push(Started {
            id,
            op: command.op(),
            resource: SmallVec::from_slice(resource),
            many,
            token,
        });
        Ok(Ticket(id))
    }

    /// Handles the readiness events of one poll: those of the client's
    /// tokens; the others are left to the caller.
    pub fn handle_events(&mut self, events: &Events) {
        for event in events.iter() {
            self.driver.handle_event(event);
        }
        self.driver.after_events();
    }

    /// The time is `now`: rounds past their deadline count the masters
    /// that have not answered as failed; connects, handshakes and requests
    /// that ran out of time fail their connections.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.driver.check_timers(crate::clock::from_std(now));
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to
    /// do: poll no longer than until then. `None`: nothing is in flight.
    pub fn next_timeout(&self) -> Option<Instant> {
        let next = self.driver.next_wake(crate::clock::now())?;
        Some(crate::clock::to_std(next))
    }

    /// The next operation that completed, if any.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let k = self
            .started
            .iter()
            .position(|s| self.driver.decided(&[s.id]))?;
        let started = self.started.swap_remove(k);
        let round = self.driver.round(started.id).cloned();
        self.driver.finish(&[started.id]);
        let ticket = Ticket(started.id);
        let report = |round: &Round| Box::new(round.report().with_masters(self.masters.clone()));
        let decision = round.as_ref().and_then(Round::decision);
        Some(match started.op {
            Op::Release => Completion::Released {
                ticket,
                result: match (decision, &round) {
                    (Some(Decision::Quorum { .. }), _) => Ok(()),
                    (_, Some(round)) => Err(no_quorum(report(round), Error::NotHeld)),
                    (_, None) => Err(Error::Io(std::io::ErrorKind::Other)),
                },
            },
            _ => {
                let result = match (decision, &round) {
                    (Some(Decision::Quorum { .. }), Some(round)) => Ok(Lock::new(
                        started.keys(),
                        started.token,
                        round.valid_until(),
                        None,
                        round.reached(),
                    )),
                    (Some(Decision::TooSlow), Some(round)) => Err(Error::TooSlow(report(round))),
                    (_, Some(round)) => Err(no_quorum(report(round), Error::Contended)),
                    (_, None) => Err(Error::Io(std::io::ErrorKind::Other)),
                };
                if result.is_err() {
                    // Release everywhere, without waiting, as try_lock does.
                    // Unknown without the round: every master.
                    let reach = round.as_ref().map_or(u64::MAX, Round::reached);
                    let release = Command::release(started.keys(), &started.token)
                        .with_script()
                        .reaching(reach);
                    self.driver.queue(&release, crate::clock::now());
                }
                Completion::Acquired { ticket, result }
            }
        })
    }
}
