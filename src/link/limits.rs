//! The limits that keep a broken or hostile server from holding the
//! client: the decoder's limits and the read buffer, the budget for frames
//! that answer nothing, and how many requests and unwritten bytes a
//! connection may hold. The connection's buffers are allocated once, at
//! build, for the most these limits let it hold: a master that lags never
//! makes them grow.

use super::{Link, LinkConfig};
use crate::commands;
use crate::resp::Limits;
use crate::rules::NodeError;

/// The decoder limits for replies to lock commands: all are tiny, so a
/// server that sends more is broken or hostile.
pub(crate) const REPLY_LIMITS: Limits = Limits::DEFAULT
    .with_max_depth(8)
    .with_max_elements(1024)
    .with_max_bulk_len(8 * 1024)
    .with_max_line_len(8 * 1024);

/// The read buffer holds the largest token the limits allow, plus its
/// header and CRLF; it never grows.
pub(crate) const READ_BUFFER: usize = 8 * 1024 + 64;

/// Unanswered requests after which a connection takes no new request
/// ([`NodeError::Lagging`]), beyond two per round the client may have in
/// flight ([`LinkConfig::in_flight`]). A healthy connection has the
/// handshake and the rounds in flight, plus the late replies of rounds
/// decided without it; a stopped server would otherwise collect a request
/// per round until the stall timer fires.
pub(super) const MAX_UNANSWERED: usize = 32;

/// Requests beyond [`MAX_UNANSWERED`] that releases may still queue.
pub(super) const RELEASE_HEADROOM: usize = 8;

/// Bytes of replay arena per request: the arguments of a script command on
/// a resource stored inline in a `Lock` (64 bytes) with a 20-byte token,
/// and a waiter's queue member (80 bytes at most).
/// The queue and the arena are allocated for the most requests a
/// connection may hold: a lagging master never makes them grow.
pub(super) const REPLAY_PER_REQUEST: usize = 64 + commands::TOKEN_LEN + 80;

/// Room in the output and held-back buffers for the handshake.
const OUTPUT_BASE: usize = 1024;

/// Room in the output and held-back buffers per request, for a command on
/// a resource stored inline in a `Lock` (an `EVALSHA` of the acquire that
/// waits on a 64-byte name is about 280 bytes): allocated for the most
/// requests a connection may hold, so that a master that stops answering
/// never makes them grow (past the limits, rounds skip it, and the stall
/// timer drops its connection).
const OUTPUT_PER_REQUEST: usize = 288;

/// Unwritten bytes after which a connection takes no new request (at
/// least).
const MAX_UNWRITTEN: usize = 64 * 1024;

/// Bytes of frames that answer nothing (pushes, attributes) accepted
/// between two replies. The client never asks for pushes (it speaks
/// RESP2), so a server that sends more is broken or hostile.
pub(crate) const UNSOLICITED_BUDGET: usize = 16 * 1024;

impl LinkConfig {
    /// The most requests a connection holds; past it, new rounds skip the
    /// master ([`NodeError::Lagging`]): one per round in flight, and as
    /// many again for the late replies of rounds decided without this
    /// master. A master behind the others under load is slow, not stalled:
    /// its connection, and the releases it holds, stay; one that stops
    /// answering is caught by the stall timer.
    pub(super) fn max_requests(&self) -> usize {
        MAX_UNANSWERED + RELEASE_HEADROOM + 2 * self.in_flight
    }

    /// Requests past every limit that releases which must reach this
    /// master may still queue (see [`Link::queue`]): one per round the
    /// client may have in flight, and at least [`MAX_UNANSWERED`].
    fn reserve(&self) -> usize {
        self.in_flight.max(MAX_UNANSWERED)
    }

    /// The most requests a connection ever holds: its limit and the
    /// reserve. The queue and the argument arena are allocated for them.
    pub(crate) fn capacity(&self) -> usize {
        self.max_requests() + self.reserve()
    }

    /// Room allocated for requests: the most a connection holds, and the
    /// `SUBSCRIBE` and `CLIENT TRACKING` a handshake adds once `HELLO`
    /// succeeded, behind the
    /// steps but before the commands held back for it (which were counted
    /// against the limits without it).
    pub(super) fn queue_room(&self) -> usize {
        self.capacity() + 2 * usize::from(self.wake.is_some())
    }

    /// The most unwritten bytes a release that must reach this master may
    /// find and still be queued: the limit and the reserve's share.
    pub(super) fn max_unwritten_reserved(&self) -> usize {
        self.max_unwritten() + self.reserve() * OUTPUT_PER_REQUEST
    }

    /// The room allocated for bytes to write (and for those held back
    /// during a handshake): at most the limit of unwritten bytes and the
    /// reserve's share.
    pub(super) fn output_capacity(&self) -> usize {
        OUTPUT_BASE + self.max_unwritten_reserved()
    }

    /// Unwritten bytes after which a connection takes no new request: room
    /// for a command of every round in flight and more (at least
    /// [`MAX_UNWRITTEN`]).
    pub(super) fn max_unwritten(&self) -> usize {
        MAX_UNWRITTEN.max((MAX_UNANSWERED + RELEASE_HEADROOM + self.in_flight) * OUTPUT_PER_REQUEST)
    }
}

impl Link {
    /// Refuses a request to a connection that holds `requests` requests or
    /// more than `unwritten` unwritten bytes ([`NodeError::Lagging`]: the
    /// request is not queued, the connection stays).
    pub(super) fn check_limits(&self, requests: usize, unwritten: usize) -> Result<(), NodeError> {
        let held = self.out.len() - self.written + self.held.len();
        if self.requests.len() >= requests || held > unwritten {
            return Err(NodeError::Lagging);
        }
        Ok(())
    }
}
