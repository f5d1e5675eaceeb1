//! The embedded front end's loop: an `EmbeddedRedlock` in a `mio` poller
//! of the caller's, driven as its docs say (each poll no longer than
//! `next_timeout`, then the events and the time handed over), one call at
//! a time.

use std::time::Instant;

use mio::{Events, Poll, Token};
use redlock_mio::{Builder, Completion, ConfigError, EmbeddedRedlock, Error, Lock, Ticket};

use super::PATIENCE;
use super::front::Call;

/// An embedded client and the loop that drives it.
pub(super) struct Looped {
    poll: Poll,
    redlock: EmbeddedRedlock,
    events: Events,
    /// Completions collected while waiting for another ticket.
    early: Vec<Completion>,
}

impl Looped {
    /// `builder`'s embedded client in a poller of its own.
    pub(super) fn build(builder: Builder) -> Result<Looped, ConfigError> {
        let poll = Poll::new().map_err(|e| ConfigError::Io(e.kind()))?;
        let redlock = builder.build_embedded(poll.registry(), Token(0))?;
        Ok(Looped {
            poll,
            redlock,
            events: Events::with_capacity(64),
            early: Vec::new(),
        })
    }

    pub(super) fn in_flight(&self) -> usize {
        self.redlock.in_flight()
    }

    /// `try_lock` or `lock_until`, to its completion.
    pub(super) fn acquire(
        &mut self,
        call: Call,
        name: &[u8],
        deadline: Instant,
    ) -> Result<Lock, Error> {
        let ticket = match call {
            Call::Try => self.redlock.try_lock(name, super::TTL)?,
            Call::Wait => self.redlock.lock_until(name, super::TTL, deadline)?,
        };
        match self.complete(ticket) {
            Completion::Acquired { result, .. } => result,
            other => panic!("an acquire completed as {other:?}"),
        }
    }

    /// `unlock`, to its completion.
    pub(super) fn release(&mut self, lock: &mut Lock) -> Result<(), Error> {
        let ticket = self.redlock.unlock(lock)?;
        match self.complete(ticket) {
            Completion::Released { result, .. } => result,
            other => panic!("a release completed as {other:?}"),
        }
    }

    /// Drives the loop until `ticket` completes. Each poll lasts no longer
    /// than the client's `next_timeout` (or what is left of `PATIENCE`
    /// when it has none): a call whose time the client does not keep
    /// fails here instead of hanging.
    fn complete(&mut self, ticket: Ticket) -> Completion {
        let give_up = Instant::now() + PATIENCE;
        loop {
            if let Some(at) = self.early.iter().position(|c| ticket_of(c) == ticket) {
                return self.early.swap_remove(at);
            }
            let now = Instant::now();
            assert!(
                now < give_up,
                "{ticket:?} did not complete within {PATIENCE:?}"
            );
            let until = self.redlock.next_timeout().unwrap_or(give_up).min(give_up);
            self.poll
                .poll(&mut self.events, Some(until.saturating_duration_since(now)))
                .unwrap_or_else(|e| panic!("poll: {e}"));
            self.redlock.handle_events(&self.events);
            self.redlock.handle_timeout(Instant::now());
            while let Some(completion) = self.redlock.poll_completion() {
                self.early.push(completion);
            }
        }
    }
}

fn ticket_of(completion: &Completion) -> Ticket {
    match completion {
        Completion::Acquired { ticket, .. } | Completion::Released { ticket, .. } => *ticket,
        other => panic!("a completion of another kind: {other:?}"),
    }
}
