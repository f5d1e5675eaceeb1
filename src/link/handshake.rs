//! The pipelined handshake's replies: each step's reply checked, and what
//! it teaches of the master kept (`INFO`, the restart guard's marker, the
//! longest TTL); `HELLO 3` and then `SUBSCRIBE` to the client's wake
//! channel and `CLIENT TRACKING`, whose refusals leave the connection
//! without wake-ups or without word of lost keys; and the
//! handshake's end, when the commands held back for it are let out and
//! what it learned is compared with what this client knew of the master.

use std::time::Instant;

use super::{Expect, Link, Request, State, Tracking};
use crate::commands::{self, HandshakeStep};
use crate::resp::Token;
use crate::rules::NodeError;
use crate::rules::identity::{Found, Info, MarkerValue, Sighting, Suspicion};

impl Link {
    /// Whether a handshake completed after a reconnect since the last
    /// call (the first connect is no reconnect).
    pub(crate) fn take_reconnected(&mut self) -> bool {
        std::mem::take(&mut self.reconnected)
    }

    /// What this client knows of the server: its `run_id`, quarantine.
    pub(crate) fn sighting(&self) -> &Sighting {
        &self.sighting
    }

    /// The `run_id` of a handshake completed since the last call, for the
    /// driver to compare with the other masters'.
    pub(crate) fn take_fresh_run_id(&mut self) -> Option<[u8; 40]> {
        if !std::mem::take(&mut self.fresh) || !self.is_ready() {
            return None;
        }
        self.sighting.run_id().copied()
    }

    /// The suspicion that quarantined the server at the last handshake,
    /// once.
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    pub(crate) fn take_suspicion(&mut self) -> Option<Suspicion> {
        self.suspicion.take()
    }

    /// Whether the oldest request unanswered is handshake step `step`.
    pub(super) fn expects(&self, step: HandshakeStep) -> bool {
        matches!(self.requests.front(), Some(Request { expect: Expect::HandshakeStep(s), .. }) if *s == step)
    }

    /// The reply to a step of the handshake: what it teaches about the
    /// master is kept; a refusal fails the connection.
    pub(super) fn handle_step(
        &mut self,
        step: HandshakeStep,
        token: &Token<'_>,
    ) -> Result<(), NodeError> {
        if matches!(step, HandshakeStep::Hello | HandshakeStep::Subscribe) {
            self.handle_wake_step(step, token);
            return Ok(());
        }
        if step == HandshakeStep::Tracking {
            self.handle_tracking(token);
            return Ok(());
        }
        match commands::handshake_ok(step, token) {
            Ok(true) => learn(
                &mut self.info,
                [&mut self.marker, &mut self.longest],
                step,
                token,
            ),
            Ok(false) => Err(NodeError::UnexpectedReply),
            Err(error) => Err(NodeError::Handshake(error)),
        }
    }

    /// The reply to `HELLO 3` or an error in answer to `SUBSCRIBE` (which
    /// is confirmed by a push). Neither refusal fails the connection: a
    /// server that will not speak RESP3 or let this user subscribe (an ACL
    /// without those permissions) serves locks all the same, and its
    /// releases tell nobody. `SUBSCRIBE` goes out only once `HELLO` has
    /// succeeded: on a RESP2 connection it would take over the connection.
    fn handle_wake_step(&mut self, step: HandshakeStep, token: &Token<'_>) {
        let refused = matches!(token, Token::Error(_) | Token::BulkError(_));
        match (step, &self.config.wake) {
            (HandshakeStep::Hello, Some(channel)) if !refused => {
                crate::resp::encode_command(
                    &mut self.out,
                    &[b"SUBSCRIBE".as_slice().into(), channel.as_slice().into()],
                );
                let mut steps = 1;
                if self.tracking == Tracking::Wanted {
                    encode_tracking(&mut self.out);
                    self.tracking = Tracking::Asked;
                    steps = 2;
                }
                // Their replies come after the handshake's other steps and
                // before the commands held back for the handshake, which
                // are written once it is over.
                let sent = self
                    .requests
                    .front()
                    .map_or_else(crate::clock::now, |p| p.sent);
                let at = self
                    .requests
                    .iter()
                    .position(|p| matches!(p.expect, Expect::Command(_)))
                    .unwrap_or(self.requests.len());
                for (k, step) in [HandshakeStep::Subscribe, HandshakeStep::Tracking]
                    .into_iter()
                    .take(steps)
                    .enumerate()
                {
                    let step = Request::new(Expect::HandshakeStep(step), sent, &self.config);
                    self.requests.insert(at + k, step);
                }
            }
            _ => self.wakes = false,
        }
    }

    /// Asks the server to track the keys this connection reads after
    /// `CLIENT CACHING YES`, from now on and after every reconnect: at once
    /// on a ready connection, else in the next handshake, once `HELLO 3`
    /// has succeeded (pushes need RESP3). A link without the wake channel
    /// speaks RESP2 and is never tracked: its watched keys are read, and
    /// their losses found, only at their reads. Returns whether it queued
    /// the ask, to be written.
    pub(crate) fn track(&mut self, now: Instant) -> bool {
        if self.tracking != Tracking::Off || self.config.wake.is_none() {
            return false;
        }
        self.tracking = Tracking::Wanted;
        let asked = self.is_ready() && self.wakes;
        if asked {
            encode_tracking(&mut self.out);
            self.tracking = Tracking::Asked;
            let step = Request::new(
                Expect::HandshakeStep(HandshakeStep::Tracking),
                now,
                &self.config,
            );
            self.requests.push_back(step);
        }
        asked
    }

    /// The reply to `CLIENT TRACKING`. A server that will not track (too
    /// old, an ACL without `CLIENT`) serves locks all the same: their
    /// losses are found at their reads and extensions, as without a watch.
    fn handle_tracking(&mut self, token: &Token<'_>) {
        self.tracking = if matches!(token, Token::Simple(b"OK")) {
            Tracking::On
        } else {
            Tracking::Refused
        };
    }

    /// Ends the handshake once no step is left unanswered: what it learned
    /// is judged, the back-off is reset, and the commands held back for it
    /// go out.
    pub(super) fn handshake_progress(&mut self, now: Instant) {
        if let State::Handshaking { .. } = self.state {
            let waiting = matches!(
                self.requests.front(),
                Some(Request {
                    expect: Expect::HandshakeStep(_),
                    ..
                })
            );
            if !waiting {
                let (guard, ours) = match &self.config.guard {
                    Some((guard, ours)) => (Some(*guard), &ours[..]),
                    None => (None, &[][..]),
                };
                self.suspicion = self.sighting.handle_handshake(
                    self.info.as_ref(),
                    self.marker.as_ref(),
                    ours,
                    self.longest.as_ref().zip(self.config.longest_ttl),
                    guard,
                    now,
                );
                self.fresh = true;
                self.reconnected = self.connects > 1;
                self.state = State::Ready;
                self.backoff = self.config.backoff_min;
                self.last_error = None;
                if self.tracking == Tracking::Wanted && self.wakes {
                    // Wanted after `HELLO` was answered: asked now, before
                    // the commands held back (all of them behind it).
                    encode_tracking(&mut self.out);
                    self.tracking = Tracking::Asked;
                    let step = Expect::HandshakeStep(HandshakeStep::Tracking);
                    self.requests
                        .push_front(Request::new(step, now, &self.config));
                }
                self.out.extend_from_slice(&self.held);
                self.held.clear();
            }
        }
    }
}

/// Writes `CLIENT TRACKING ON OPTIN NOLOOP`: only keys read after `CLIENT
/// CACHING YES` are tracked (not those every lock script reads), and this
/// connection's own changes (extensions, releases) are not told back.
fn encode_tracking(out: &mut Vec<u8>) {
    crate::resp::encode_command(
        out,
        &[
            b"CLIENT".as_slice().into(),
            b"TRACKING".as_slice().into(),
            b"ON".as_slice().into(),
            b"OPTIN".as_slice().into(),
            b"NOLOOP".as_slice().into(),
        ],
    );
}

/// Keeps what a handshake reply says of the server; refuses a replica and
/// a cluster-mode node.
fn learn(
    info: &mut Option<Info>,
    [marker, longest]: [&mut Option<Found>; 2],
    step: HandshakeStep,
    token: &Token<'_>,
) -> Result<(), NodeError> {
    match (step, token) {
        (HandshakeStep::Identify, Token::Bulk(text) | Token::Verbatim { text, .. }) => {
            let parsed = Info::parse(text);
            if parsed.replica {
                return Err(NodeError::Replica);
            }
            if parsed.cluster {
                return Err(NodeError::ClusterMode);
            }
            *info = Some(parsed);
        }
        (HandshakeStep::Marker | HandshakeStep::LongestTtl, _) => {
            let found = match token {
                Token::Bulk(value) => Found::Holds(MarkerValue::from_slice(value)),
                Token::Null(_) => Found::Missing,
                // `WRONGTYPE` (`handshake_ok` let no other error through).
                _ => Found::Foreign,
            };
            let slot = if step == HandshakeStep::Marker {
                marker
            } else {
                longest
            };
            *slot = Some(found);
        }
        _ => {}
    }
    Ok(())
}
