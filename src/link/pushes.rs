//! The frames that answer no request: pushes, read element by element
//! (a wake-up for a waiter of this client goes to the [`Sink`], and so
//! does each key of an invalidation, the confirmation of the handshake's
//! `SUBSCRIBE` answers that step, any other push is skipped), and
//! attributes, skipped; together they are held
//! to [`UNSOLICITED_BUDGET`] between two replies. Also the one aggregate
//! reply, the map that answers `HELLO`, skipped to its end.

use std::time::{Duration, Instant};

use super::limits::UNSOLICITED_BUDGET;
use super::{Link, Sink};
use crate::commands::HandshakeStep;
use crate::ids::WaitId;
use crate::resp::Token;
use crate::rules::NodeError;

/// Tokens of a top-level frame that is not a reply, or of a reply that
/// is an aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Skip {
    /// Nothing: the next token starts a frame.
    No,
    /// A push, read element by element up to the frame's end.
    Push(PushRead),
    /// An attribute: skip its pairs; the value after it is the reply.
    Attribute,
    /// The map that answers `HELLO`: skip to the frame's end, then it is
    /// the step's reply.
    Hello,
}

/// What a push said, so far: `>3 message <channel> <id>` tells a waiter
/// of this client, `>3 subscribe <channel> <count>` confirms the
/// handshake's `SUBSCRIBE`, `>2 invalidate <keys or null>` says that keys
/// this connection tracks changed; any other push is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PushRead {
    /// Elements read.
    seen: u8,
    /// What its first element said it is.
    kind: PushKind,
    /// Its channel is this client's wake channel.
    ours: bool,
    /// A message's payload: a waiter's id, and a delay in ms when the
    /// waiter is told to try once it has passed (see the hand-off in
    /// [`crate::scripts`]).
    id: Option<u64>,
    /// See `id`.
    later: Option<u64>,
    /// Keys of an invalidation still to come.
    keys: usize,
}

/// What an invalidation says changed: a key, or every key (`FLUSHALL`,
/// or a frame of another shape, taken at its widest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalidated<'a> {
    /// This key.
    Key(&'a [u8]),
    /// Any key.
    All,
}

/// What a push is, from its first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushKind {
    /// No element read yet.
    Unknown,
    /// `message`: a publication on a channel.
    Message,
    /// `subscribe`: a subscription's confirmation.
    Subscribe,
    /// `invalidate`: tracked keys changed.
    Invalidate,
    /// Anything else, or a known kind with an unexpected element.
    Other,
}

impl PushRead {
    /// A push of which nothing is read yet.
    const NEW: PushRead = PushRead {
        seen: 0,
        kind: PushKind::Unknown,
        ours: false,
        id: None,
        later: None,
        keys: 0,
    };

    /// Reads one more token of the push; `nested`: it is an aggregate, or
    /// inside one. Returns what an invalidation says changed, as each of
    /// its keys is read.
    fn read<'t>(
        &mut self,
        token: &Token<'t>,
        nested: bool,
        channel: Option<&[u8]>,
    ) -> Option<Invalidated<'t>> {
        let element = self.seen;
        self.seen = self.seen.saturating_add(1);
        if self.kind == PushKind::Invalidate {
            return self.read_invalidated(token, element);
        }
        if nested || self.kind == PushKind::Other {
            self.kind = PushKind::Other;
            return None;
        }
        let Token::Bulk(bytes) = token else {
            if element != 2 || self.kind != PushKind::Subscribe {
                self.kind = PushKind::Other;
            }
            return None;
        };
        match element {
            0 => {
                self.kind = match *bytes {
                    b"message" => PushKind::Message,
                    b"subscribe" => PushKind::Subscribe,
                    b"invalidate" => PushKind::Invalidate,
                    _ => PushKind::Other,
                }
            }
            1 => self.ours = channel == Some(*bytes),
            2 => {
                let mut numbers = bytes.splitn(2, |&b| b == b' ').map(|field| {
                    std::str::from_utf8(field)
                        .ok()
                        .and_then(|n| n.parse::<u64>().ok())
                });
                self.id = numbers.next().flatten();
                self.later = numbers.next().flatten();
            }
            _ => self.kind = PushKind::Other,
        }
        None
    }

    /// Element `element` of an invalidation: the array of keys (or a null:
    /// every key), then each key. Anything else says every key changed,
    /// once, and the rest of the push is skipped.
    fn read_invalidated<'t>(&mut self, token: &Token<'t>, element: u8) -> Option<Invalidated<'t>> {
        match (element, token) {
            (1, Token::Array(n)) => {
                self.keys = *n;
                None
            }
            (1, Token::Null(_)) => {
                self.kind = PushKind::Other;
                Some(Invalidated::All)
            }
            (_, Token::Bulk(key)) if element > 1 && self.keys > 0 => {
                self.keys -= 1;
                Some(Invalidated::Key(key))
            }
            _ => {
                self.kind = PushKind::Other;
                Some(Invalidated::All)
            }
        }
    }
}

/// What a top-level frame turned out to be.
pub(super) enum Frame<'t> {
    /// A reply (or the first token of one).
    Reply,
    /// Part of a frame that answers nothing, skipped.
    Skipped,
    /// Part of an invalidation: what it says changed.
    Invalidated(Invalidated<'t>),
    /// The end of a push.
    Push(PushRead),
    /// The end of the map that answers `HELLO`.
    HelloEnd,
}

impl Link {
    /// Sorts a token: a reply, or part of what answers nothing (pushes and
    /// attributes, counted against their budget), or of an aggregate reply
    /// (`HELLO`'s map, handed on at its end). Fails once what answers
    /// nothing exceeds its budget.
    pub(super) fn frame<'t>(
        &mut self,
        token: &Token<'t>,
        len: usize,
        frame_end: bool,
    ) -> Result<Frame<'t>, NodeError> {
        if self.skip == Skip::Hello {
            if !frame_end {
                return Ok(Frame::Skipped);
            }
            self.skip = Skip::No;
            return Ok(Frame::HelloEnd);
        }
        let reply = self.skip == Skip::No && !matches!(token, Token::Push(_) | Token::Attribute(_));
        if reply {
            self.unsolicited = 0;
            return Ok(Frame::Reply);
        }
        self.unsolicited += len;
        if self.unsolicited > UNSOLICITED_BUDGET {
            return Err(NodeError::Unsolicited);
        }
        match &mut self.skip {
            Skip::Push(push) => {
                let depth = self.decoder.depth();
                let invalidated = push.read(
                    token,
                    is_aggregate(token) || depth > 1,
                    self.config.wake.as_ref().map(|c| &c[..]),
                );
                let push = *push;
                if frame_end {
                    self.skip = Skip::No;
                }
                return Ok(match invalidated {
                    Some(invalidated) => Frame::Invalidated(invalidated),
                    None if frame_end => Frame::Push(push),
                    None => Frame::Skipped,
                });
            }
            Skip::Attribute if self.decoder.depth() == 0 => self.skip = Skip::No,
            Skip::Attribute | Skip::Hello => {}
            Skip::No => match token {
                Token::Push(_) if !frame_end => self.skip = Skip::Push(PushRead::NEW),
                Token::Attribute(_) if self.decoder.depth() > 0 => self.skip = Skip::Attribute,
                _ => {}
            },
        }
        Ok(Frame::Skipped)
    }

    /// A whole push: a wake-up for a waiter of this client goes to `sink`;
    /// the confirmation of the handshake's `SUBSCRIBE` is that step's
    /// reply; anything else was skipped.
    pub(super) fn handle_push(
        &mut self,
        push: PushRead,
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<(), NodeError> {
        match (push.kind, push.ours, push.id) {
            (PushKind::Message, true, Some(id)) => sink.on_wake(
                WaitId::from_wire(id),
                push.later.map(Duration::from_millis),
                now,
            ),
            (PushKind::Subscribe, true, _) if self.expects(HandshakeStep::Subscribe) => {
                self.unsolicited = 0;
                self.requests.pop_front();
                self.handshake_progress(now);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Whether `token` opens an aggregate.
fn is_aggregate(token: &Token<'_>) -> bool {
    matches!(
        token,
        Token::Array(_)
            | Token::Set(_)
            | Token::Push(_)
            | Token::Map(_)
            | Token::Attribute(_)
            | Token::StreamedString
            | Token::StreamedArray
            | Token::StreamedSet
            | Token::StreamedMap
    )
}
