//! The replies to lock commands, and `NOSCRIPT` replay: a script command's
//! byte arguments wait in the replay arena until its reply, so that a
//! `NOSCRIPT` reply, however late, is answered by the same request with
//! its script (`EVAL`) when that is safe. The arena is allocated for the
//! most requests a connection holds, and a request sent again takes its
//! arguments along without making it grow.

use std::time::Instant;

use super::{Link, Sink};
use crate::commands::{self, Command, Outcome, Shape};
use crate::ids::RoundId;
use crate::resp::Token;
use crate::rules::{NodeError, Op, Reply, ServerError};

/// What is kept of a lock command sent, to classify its reply and to send
/// it again with its script.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    /// The round it belongs to.
    pub(super) round: RoundId,
    /// The command without its byte arguments.
    pub(super) shape: Shape,
}

impl Sent {
    /// Bytes of the command's arguments in the replay arena: those of a
    /// script command, which may have to be sent again.
    pub(super) fn kept(&self) -> usize {
        if self.shape.is_script() {
            self.shape.args_len()
        } else {
            0
        }
    }
}

impl Link {
    /// The reply to lock command `sent`: told to its round if the round
    /// still waits; the request sent again with its script if the reply
    /// is `NOSCRIPT` and that is safe (returned, to queue).
    pub(super) fn handle_command_reply(
        &mut self,
        sent: Sent,
        token: &Token<'_>,
        now: Instant,
        sink: &mut dyn Sink,
    ) -> Result<Option<Sent>, NodeError> {
        let mut outcome = commands::classify(&sent.shape, token);
        let args = 0..sent.kept();
        if self.replay.len() < args.end {
            return Err(NodeError::UnexpectedReply);
        }
        if outcome == Outcome::NoScript && sent.shape.is_eval() {
            // EVAL carries the script: it cannot be missing.
            outcome = Outcome::Server(ServerError::new(b"NOSCRIPT"));
        }
        let live = sink.is_live(sent.round);
        let again = match outcome {
            Outcome::Unexpected => return Err(NodeError::UnexpectedReply),
            // An extend of a round that is over is never replayed: newer
            // commands (a later extend of the same lock, with another TTL)
            // may already have been applied on this master, and this one
            // must not overtake them. The lock's validity already assumes
            // the worst of this round. Nor is an acquire (of several keys):
            // its release may be queued already, and must come after it.
            Outcome::NoScript if sent.shape.op() != Op::Release && !live => None,
            // The script cache was emptied: the same request again with the
            // script, for this round, or a release of a finished one (it
            // frees a key; with its own token it cannot touch a newer lock).
            Outcome::NoScript => Some(self.resend_with_script(sent, args.end)?),
            // The late refusal of an attempt decided without it: see
            // `leave_late`.
            Outcome::Reply(Reply::Queued { .. }) if !live && sent.shape.waits() => {
                self.leave_late(sent, args.end, sink)?
            }
            _ if live => {
                self.deliver(sent, outcome, now, sink);
                None
            }
            _ => None,
        };
        // Drop the consumed arguments now: with early decision a connection
        // may never be idle, so waiting for an empty arena could grow it
        // without bound. What is left is a request or two, cheap to move.
        // (A request sent again took them to the arena's end.)
        if args.end > 0 && again.is_none() {
            self.replay.drain(..args.end);
        }
        Ok(again)
    }

    /// The refusal of an acquire that waits (`sent`, its arguments the
    /// arena's first `used` bytes) read after its round was decided: the
    /// master queued its waiter. If the wait is over (its call won with
    /// the other masters, or ended), that entry is nobody's, and once
    /// first in line it would hold the key for a window, for nobody: the
    /// waiter leaves that queue at once, by the same member, its leave
    /// last in the queue (returned) and its arguments at the arena's end.
    /// `None` while the wait goes on: its call leaves the queues it may be
    /// in when it ends.
    fn leave_late(
        &mut self,
        sent: Sent,
        used: usize,
        sink: &dyn Sink,
    ) -> Result<Option<Sent>, NodeError> {
        let args = self.replay.get(..used).ok_or(NodeError::UnexpectedReply)?;
        let wait = Command::join(sent.shape, args).ok_or(NodeError::UnexpectedReply)?;
        let Some((leave, id)) = wait.leave_of_wait() else {
            return Ok(None);
        };
        if sink.is_waiting(id) {
            return Ok(None);
        }
        leave.encode(&mut self.out);
        let (shape, bytes) = leave.split();
        // The arena holds the keys, the token and the member; the leave
        // keeps the keys and the member.
        let keys = bytes.first().map_or(0, |keys| keys.len());
        drop(bytes);
        let kept = shape.args_len();
        let token = used.checked_sub(kept).ok_or(NodeError::UnexpectedReply)?;
        self.replay.drain(keys..keys + token);
        self.replay.rotate_left(kept);
        Ok(Some(Sent {
            round: RoundId::FREE,
            shape,
        }))
    }

    /// Encodes `sent` again as `EVAL` with its script; its arguments (the
    /// arena's first `used` bytes) move to the arena's end, where the
    /// request sent again (last in the queue) finds them: a full arena
    /// never grows. Fails if the arena does not hold them.
    fn resend_with_script(&mut self, sent: Sent, used: usize) -> Result<Sent, NodeError> {
        let shape = sent.shape.with_script();
        let args = self.replay.get(..used).ok_or(NodeError::UnexpectedReply)?;
        let command = Command::join(shape, args).ok_or(NodeError::UnexpectedReply)?;
        command.encode(&mut self.out);
        self.replay.rotate_left(used);
        Ok(Sent { shape, ..sent })
    }
}
