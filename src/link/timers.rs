//! The connection's timers: the connect and handshake deadline, stall
//! detection (the oldest request unanswered, or replies that keep coming
//! late), and the back-off before a reconnect.

use std::io;
use std::time::Instant;

use super::{Link, State};
use crate::clock::after;
use crate::rules::NodeError;

impl Link {
    /// When the connection closed after `error` may be made again; the
    /// back-off doubles for the next failure if this one backs off.
    pub(super) fn retry_after(&mut self, error: &NodeError, now: Instant) -> Instant {
        // A healthy connection that was closed, reset or stalled is re-made
        // at once (the next round reconnects and waits for the handshake):
        // servers restart, middleboxes drop idle connections. A server
        // that broke the protocol, and repeated failures, back off,
        // doubling up to the maximum.
        let benign = matches!(
            error,
            NodeError::Closed | NodeError::Io(_) | NodeError::Stalled
        );
        if self.state == State::Ready && benign {
            now
        } else {
            let at = after(now, self.backoff);
            self.backoff = (self.backoff * 2).min(self.config.backoff_max);
            at
        }
    }

    /// When a link that is down may connect again (its back-off's end);
    /// `None` while it is up or connecting.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        match self.state {
            State::Down { retry_at, .. } => Some(retry_at),
            _ => None,
        }
    }

    /// Whether the link is up, or down with its back-off expired (so that
    /// a connect may start now).
    ///
    /// A `now` older than the close counts as the close's time: a front
    /// end reads the clock before it takes the engine, which may meanwhile
    /// have closed the link, and a link that may reconnect at once (a
    /// healthy connection that dropped) must take the command all the
    /// same. Else the release that follows a failed attempt, queued with
    /// the attempt's time, would skip that master and leave its grant
    /// there until the TTL.
    pub(crate) fn may_send(&self, now: Instant) -> bool {
        match self.state {
            State::Down { since, retry_at } => now.max(since) >= retry_at,
            _ => true,
        }
    }

    /// The round that started at `started` reached its deadline without a
    /// reply from this link.
    pub(crate) fn note_late(&mut self, started: Instant) {
        self.late_since.get_or_insert(started);
    }

    /// Fails a connection that stopped answering: its oldest request, or
    /// its late replies, older than the stall timeout.
    pub(super) fn check_stall(&self, now: Instant) -> Result<(), NodeError> {
        if let Some(since) = self.late_since {
            if now.saturating_duration_since(since) > self.config.stall_timeout {
                return Err(NodeError::Stalled);
            }
        }
        match self.requests.front() {
            Some(oldest) if now > oldest.stall_at => Err(NodeError::Stalled),
            _ => Ok(()),
        }
    }

    /// Fails the connection whose connect or handshake ran out of time, or
    /// whose oldest request went unanswered past the stall limit.
    pub(crate) fn check_timers(&self, now: Instant) -> Result<(), NodeError> {
        match self.state {
            State::Connecting { deadline } | State::Handshaking { deadline } if now >= deadline => {
                Err(NodeError::Connect(io::ErrorKind::TimedOut))
            }
            _ => self.check_stall(now),
        }
    }

    /// The next instant at which [`check_timers`](Self::check_timers) may
    /// fail.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        let stall = self.requests.front().map(|oldest| oldest.stall_at);
        let connect = match self.state {
            State::Connecting { deadline } | State::Handshaking { deadline } => Some(deadline),
            _ => None,
        };
        match (stall, connect) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
