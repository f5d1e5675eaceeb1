//! A lock command, typed: one constructor per operation, each with the
//! arguments it takes and no other, and its encoding.
//!
//! A command borrows its byte arguments (keys, token, loss ids). A
//! connection that must be able to send it again after `NOSCRIPT` takes it
//! apart with [`Command::split`] into a [`Shape`], which holds everything
//! but those bytes, and the bytes themselves, which it keeps in an arena of
//! its own; [`Command::join`] puts the two back together. The connection
//! never needs to know what the arguments mean.

use smallvec::SmallVec;

use super::{FENCE_KEY, FENCE_LOST_KEY, unpack_keys};
use crate::ids::WaitId;
use crate::resp::{Arg, encode_command};
use crate::rules::Op;
use crate::scripts::*;

/// The keys a lock command names: one resource, or several packed by
/// `pack_key` (a lock over several resources, which the
/// all-or-nothing scripts take). `B` is the bytes: borrowed in a
/// [`Command`], their length in a `Shape`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Keys<B> {
    /// One resource name.
    One(B),
    /// Several resource names, packed by `pack_key`.
    Packed(B),
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<B> Keys<B> {
    /// `bytes`: several names packed by [`pack_key`](super::pack_key) if
    /// `packed`, else one name.
    pub fn new(bytes: B, packed: bool) -> Keys<B> {
        if packed {
            Keys::Packed(bytes)
        } else {
            Keys::One(bytes)
        }
    }

    /// The bytes, and whether they are several names packed.
    pub fn parts(self) -> (B, bool) {
        match self {
            Keys::One(bytes) => (bytes, false),
            Keys::Packed(bytes) => (bytes, true),
        }
    }

    fn map<C>(self, f: impl FnOnce(B) -> C) -> Keys<C> {
        match self {
            Keys::One(bytes) => Keys::One(f(bytes)),
            Keys::Packed(bytes) => Keys::Packed(f(bytes)),
        }
    }
}

/// How a fence sync sets the counters it puts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncMode {
    /// A start from the servers' clocks: the loss id stays beside the
    /// counter, so that a read counts the master as out of sync until it
    /// raises a fence (a first sync cut short can then be finished).
    Start,
    /// A repair from the counters of a quorum in sync: the loss id is
    /// deleted.
    Repair,
}

impl SyncMode {
    /// The mode as the sync script reads it.
    fn as_bytes(self) -> &'static [u8] {
        match self {
            SyncMode::Start => b"start",
            SyncMode::Repair => b"repair",
        }
    }
}

/// A command's arguments, by operation. `B` is the byte arguments:
/// borrowed in a [`Command`], their lengths in a [`Shape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Args<B> {
    Acquire {
        keys: Keys<B>,
        token: B,
        ttl_ms: u64,
        /// Also counts a fence ([`FENCED_ACQUIRE_SCRIPT`]).
        fenced: bool,
    },
    Extend {
        keys: Keys<B>,
        token: B,
        ttl_ms: u64,
    },
    Release {
        keys: Keys<B>,
        token: B,
        /// The masters the lock's acquire went out to (bit `i` for master
        /// `i`; masters past the 64th are never in it), where the key may
        /// be: see [`Command::reaching`].
        reach: u64,
    },
    /// Raises the fence counters to `fence` ([`RAISE_SCRIPT`]).
    Raise {
        keys: Keys<B>,
        token: B,
        fence: u64,
    },
    FenceRead,
    FenceSync {
        /// The loss ids the sync may repair, packed by
        /// [`pack_key`](super::pack_key).
        losses: B,
        mode: SyncMode,
        /// The value the counters are set to.
        value: u64,
    },
    /// An acquire that waits ([`WAIT_ACQUIRE_SCRIPT`]): queued where it is
    /// refused.
    Wait {
        keys: Keys<B>,
        token: B,
        ttl_ms: u64,
        /// The waiter's queue member (see [`crate::scripts`]).
        member: B,
        /// Its place in the queues: when it began to wait.
        place: u64,
        /// How long its queue entries outlive the keys that block it.
        margin_ms: u64,
        /// Also counts a fence ([`FENCED_WAIT_ACQUIRE_SCRIPT`]).
        fenced: bool,
    },
    /// A waiter leaves the queues of `keys` ([`LEAVE_SCRIPT`]).
    Leave {
        keys: Keys<B>,
        member: B,
    },
}

impl<B: Copy> Args<B> {
    fn op(&self) -> Op {
        match self {
            Args::Acquire { .. } => Op::Acquire,
            Args::Extend { .. } => Op::Extend,
            Args::Release { .. } => Op::Release,
            Args::Raise { .. } => Op::Raise,
            Args::FenceRead => Op::FenceRead,
            Args::FenceSync { .. } => Op::FenceSync,
            Args::Wait { .. } => Op::Acquire,
            Args::Leave { .. } => Op::Leave,
        }
    }

    /// The same arguments, each byte argument mapped by `f`, in the order
    /// of [`bytes`](Self::bytes).
    fn map<C>(self, mut f: impl FnMut(B) -> C) -> Args<C> {
        match self {
            Args::Acquire {
                keys,
                token,
                ttl_ms,
                fenced,
            } => Args::Acquire {
                keys: keys.map(&mut f),
                token: f(token),
                ttl_ms,
                fenced,
            },
            Args::Extend {
                keys,
                token,
                ttl_ms,
            } => Args::Extend {
                keys: keys.map(&mut f),
                token: f(token),
                ttl_ms,
            },
            Args::Release { keys, token, reach } => Args::Release {
                keys: keys.map(&mut f),
                token: f(token),
                reach,
            },
            Args::Raise { keys, token, fence } => Args::Raise {
                keys: keys.map(&mut f),
                token: f(token),
                fence,
            },
            Args::FenceRead => Args::FenceRead,
            Args::FenceSync {
                losses,
                mode,
                value,
            } => Args::FenceSync {
                losses: f(losses),
                mode,
                value,
            },
            Args::Wait {
                keys,
                token,
                ttl_ms,
                member,
                place,
                margin_ms,
                fenced,
            } => Args::Wait {
                keys: keys.map(&mut f),
                token: f(token),
                ttl_ms,
                member: f(member),
                place,
                margin_ms,
                fenced,
            },
            Args::Leave { keys, member } => Args::Leave {
                keys: keys.map(&mut f),
                member: f(member),
            },
        }
    }

    /// The byte arguments, in order: the keys (or loss ids), then the
    /// token, then a waiter's member.
    fn bytes(&self) -> SmallVec<[B; 3]> {
        match *self {
            Args::Acquire { keys, token, .. }
            | Args::Extend { keys, token, .. }
            | Args::Release { keys, token, .. }
            | Args::Raise { keys, token, .. } => SmallVec::from_slice(&[keys.parts().0, token]),
            Args::FenceRead => SmallVec::new(),
            Args::FenceSync { losses, .. } => SmallVec::from_slice(&[losses]),
            Args::Wait {
                keys,
                token,
                member,
                ..
            } => SmallVec::from_buf([keys.parts().0, token, member]),
            Args::Leave { keys, member } => SmallVec::from_slice(&[keys.parts().0, member]),
        }
    }

    /// Whether the keys are several names packed.
    fn packed(&self) -> bool {
        match self {
            Args::Acquire { keys, .. }
            | Args::Extend { keys, .. }
            | Args::Release { keys, .. }
            | Args::Raise { keys, .. }
            | Args::Wait { keys, .. }
            | Args::Leave { keys, .. } => matches!(keys, Keys::Packed(_)),
            Args::FenceRead | Args::FenceSync { .. } => false,
        }
    }

    /// Whether this is the fenced acquire.
    fn fenced(&self) -> bool {
        matches!(
            self,
            Args::Acquire { fenced: true, .. } | Args::Wait { fenced: true, .. }
        )
    }

    /// Whether this is the acquire that waits.
    fn waits(&self) -> bool {
        matches!(self, Args::Wait { .. })
    }

    /// Whether the command runs a script (all but the plain `SET` of one
    /// key), so that a reply may be `NOSCRIPT`.
    fn is_script(&self) -> bool {
        !matches!(
            self,
            Args::Acquire {
                keys: Keys::One(_),
                fenced: false,
                ..
            }
        )
    }
}

/// One lock command, borrowed from the caller's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Command<'a> {
    args: Args<&'a [u8]>,
    /// Send scripts as `EVAL` with their text instead of `EVALSHA`, which
    /// cannot fail with `NOSCRIPT`.
    eval: bool,
    /// The masters a queued command goes to: see [`Command::only_to`].
    to: u64,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl<'a> Command<'a> {
    fn new(args: Args<&'a [u8]>) -> Command<'a> {
        Command {
            args,
            eval: false,
            to: u64::MAX,
        }
    }

    /// Sets `keys` to `token` for `ttl_ms` unless they are set (`SET NX`,
    /// or the all-or-nothing script for several keys).
    pub(crate) fn acquire(keys: Keys<&'a [u8]>, token: &'a [u8], ttl_ms: u64) -> Command<'a> {
        Command::new(Args::Acquire {
            keys,
            token,
            ttl_ms,
            fenced: false,
        })
    }

    /// [`acquire`](Self::acquire) that also counts a fence
    /// ([`FENCED_ACQUIRE_SCRIPT`]).
    pub(crate) fn fenced_acquire(
        keys: Keys<&'a [u8]>,
        token: &'a [u8],
        ttl_ms: u64,
    ) -> Command<'a> {
        Command::new(Args::Acquire {
            keys,
            token,
            ttl_ms,
            fenced: true,
        })
    }

    /// [`acquire`](Self::acquire) for a caller that waits
    /// ([`WAIT_ACQUIRE_SCRIPT`]): where the keys are held, the waiter
    /// `member` is queued at `place`, its entries kept `margin_ms` past the
    /// blocking keys' expiry.
    pub(crate) fn wait_acquire(
        keys: Keys<&'a [u8]>,
        token: &'a [u8],
        ttl_ms: u64,
        (member, place, margin_ms): (&'a [u8], u64, u64),
    ) -> Command<'a> {
        Command::new(Args::Wait {
            keys,
            token,
            ttl_ms,
            member,
            place,
            margin_ms,
            fenced: false,
        })
    }

    /// [`wait_acquire`](Self::wait_acquire) that also counts a fence
    /// ([`FENCED_WAIT_ACQUIRE_SCRIPT`]).
    pub(crate) fn fenced_wait_acquire(
        keys: Keys<&'a [u8]>,
        token: &'a [u8],
        ttl_ms: u64,
        queue: (&'a [u8], u64, u64),
    ) -> Command<'a> {
        let mut command = Command::wait_acquire(keys, token, ttl_ms, queue);
        if let Args::Wait { fenced, .. } = &mut command.args {
            *fenced = true;
        }
        command
    }

    /// The waiter `member` leaves the queues of `keys` ([`LEAVE_SCRIPT`]).
    pub(crate) fn leave(keys: Keys<&'a [u8]>, member: &'a [u8]) -> Command<'a> {
        Command::new(Args::Leave { keys, member })
    }

    /// Sets the TTL of `keys` to `ttl_ms` where they hold `token`.
    pub(crate) fn extend(keys: Keys<&'a [u8]>, token: &'a [u8], ttl_ms: u64) -> Command<'a> {
        Command::new(Args::Extend {
            keys,
            token,
            ttl_ms,
        })
    }

    /// Deletes `keys` where they hold `token`. It reaches no master past
    /// its limits unless told ([`reaching`](Self::reaching)).
    pub(crate) fn release(keys: Keys<&'a [u8]>, token: &'a [u8]) -> Command<'a> {
        Command::new(Args::Release {
            keys,
            token,
            reach: 0,
        })
    }

    /// Raises the fence counters to `fence`, where `keys` hold `token`.
    pub(crate) fn raise(keys: Keys<&'a [u8]>, token: &'a [u8], fence: u64) -> Command<'a> {
        Command::new(Args::Raise { keys, token, fence })
    }

    /// Reads the fence counter.
    pub(crate) fn fence_read() -> Command<'a> {
        Command::new(Args::FenceRead)
    }

    /// Puts back the fence counter of a master whose loss is one of
    /// `losses` (loss ids packed by [`pack_key`](super::pack_key)), set to
    /// `value`.
    pub(crate) fn fence_sync(losses: &'a [u8], mode: SyncMode, value: u64) -> Command<'a> {
        Command::new(Args::FenceSync {
            losses,
            mode,
            value,
        })
    }

    /// The same command, sent as `EVAL` with its script's text: it cannot
    /// meet an empty script cache, so nothing needs to wait for its reply
    /// to send it again.
    pub(crate) fn with_script(self) -> Command<'a> {
        Command { eval: true, ..self }
    }

    /// For a release: the masters its lock's acquire went out to (bit `i`
    /// for master `i`; masters past the 64th are never in it), where the
    /// key may be. The release is queued on them past the limits that
    /// refuse other requests, in a reserve of its own (see `Link::queue`),
    /// so that a master that lags does not keep a key that its acquire
    /// set. Other commands reach no master past its limits: for them this
    /// changes nothing.
    pub(crate) fn reaching(self, masters: u64) -> Command<'a> {
        match self.args {
            Args::Release { keys, token, .. } => Command {
                args: Args::Release {
                    keys,
                    token,
                    reach: masters,
                },
                ..self
            },
            _ => self,
        }
    }

    /// The same command, queued only on the masters of `masters` (bit `i`
    /// for master `i`; masters past the 64th always get it): those where
    /// it has something to do, such as the release of an acquire that
    /// some masters refused (they set nothing). Only a command that
    /// waits for no reply reads it (`Core::queue`): a round goes to every
    /// master, since each must answer it.
    pub(crate) fn only_to(self, masters: u64) -> Command<'a> {
        Command {
            to: masters,
            ..self
        }
    }

    /// Whether the command, queued, goes to master `node` (see
    /// [`only_to`](Self::only_to)).
    pub(crate) fn goes_to(&self, node: usize) -> bool {
        node >= 64 || self.to >> node & 1 == 1
    }

    /// The operation.
    pub fn op(&self) -> Op {
        self.args.op()
    }

    /// Whether this is a release that must reach master `node` even past
    /// its limits (see [`reaching`](Self::reaching)).
    pub(crate) fn must_reach(&self, node: usize) -> bool {
        match self.args {
            Args::Release { reach, .. } => node < 64 && reach >> node & 1 == 1,
            _ => false,
        }
    }

    /// Bytes of the keys the command names (0 for the fence reads and
    /// syncs, which name none of the caller's).
    pub(crate) fn resource_len(&self) -> usize {
        match self.args {
            Args::Acquire { keys, .. }
            | Args::Extend { keys, .. }
            | Args::Release { keys, .. }
            | Args::Raise { keys, .. }
            | Args::Wait { keys, .. }
            | Args::Leave { keys, .. } => keys.parts().0.len(),
            Args::FenceRead | Args::FenceSync { .. } => 0,
        }
    }

    /// How long a grant lasts, for the commands that grant one (an acquire
    /// or an extend), in milliseconds.
    pub(crate) fn grant_ttl_ms(&self) -> Option<u64> {
        match self.args {
            Args::Acquire { ttl_ms, .. }
            | Args::Extend { ttl_ms, .. }
            | Args::Wait { ttl_ms, .. } => Some(ttl_ms),
            _ => None,
        }
    }

    /// For an acquire, the release of what it may have set: the same keys
    /// and token, sent as `EVAL` ([`with_script`](Self::with_script)).
    pub(crate) fn undo(&self) -> Option<Command<'a>> {
        match self.args {
            Args::Acquire { keys, token, .. } | Args::Wait { keys, token, .. } => {
                Some(Command::release(keys, token).with_script())
            }
            _ => None,
        }
    }

    /// For an acquire that waits: the leave of its waiter (its keys, its
    /// member) and the wait its member names. `None` for another command,
    /// or a member that names no wait.
    pub(crate) fn leave_of_wait(&self) -> Option<(Command<'a>, WaitId)> {
        let Args::Wait { keys, member, .. } = self.args else {
            return None;
        };
        // `<window ms>|<wait id>|<channel>`
        let id = member.split(|&b| b == b'|').nth(1)?;
        let id = std::str::from_utf8(id).ok()?.parse().ok()?;
        Some((Command::leave(keys, member), WaitId::from_wire(id)))
    }

    /// The command taken apart: its [`Shape`], and its byte arguments, in
    /// the order [`join`](Self::join) takes them back.
    pub(crate) fn split(&self) -> (Shape, SmallVec<[&'a [u8]; 3]>) {
        let lengths = self.args.map(|bytes| bytes.len() as u32);
        let shape = Shape {
            args: lengths,
            eval: self.eval,
        };
        (shape, self.args.bytes())
    }

    /// The command `shape` was split from, its byte arguments read from
    /// `bytes` (those [`split`](Self::split) gave, one after the other).
    /// `None` if `bytes` is not as long as they were.
    pub(crate) fn join(shape: Shape, bytes: &'a [u8]) -> Option<Command<'a>> {
        if bytes.len() != shape.args_len() {
            return None;
        }
        let mut rest = bytes;
        let args = shape.args.map(|len| {
            let (arg, tail) = rest.split_at(len as usize);
            rest = tail;
            arg
        });
        // A command sent again goes to the master it was sent to.
        Some(Command {
            args,
            eval: shape.eval,
            to: u64::MAX,
        })
    }

    /// Writes the command into `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self.args {
            Args::Acquire {
                keys: Keys::One(key),
                token,
                ttl_ms,
                fenced: false,
            } => encode_command(
                out,
                &[
                    Arg::Bytes(b"SET"),
                    Arg::Bytes(key),
                    Arg::Bytes(token),
                    Arg::Bytes(b"NX"),
                    Arg::Bytes(b"PX"),
                    Arg::Uint(ttl_ms),
                ],
            ),
            Args::Acquire {
                keys: Keys::Packed(packed),
                token,
                ttl_ms,
                fenced: false,
            } => {
                let script = Script::AcquireMany;
                self.encode_keyed(out, script, Keys::Packed(packed), token, Some(ttl_ms));
            }
            Args::Acquire {
                keys,
                token,
                ttl_ms,
                fenced: true,
            } => {
                let tail = [Arg::Bytes(token), Arg::Uint(ttl_ms)];
                self.encode_fenced(out, Script::FencedAcquire, keys, &tail);
            }
            Args::Extend {
                keys,
                token,
                ttl_ms,
            } => {
                let script = match keys {
                    Keys::One(_) => Script::Extend,
                    Keys::Packed(_) => Script::ExtendMany,
                };
                self.encode_keyed(out, script, keys, token, Some(ttl_ms));
            }
            Args::Release { keys, token, .. } => {
                let script = match keys {
                    Keys::One(_) => Script::Release,
                    Keys::Packed(_) => Script::ReleaseMany,
                };
                self.encode_keyed(out, script, keys, token, None);
            }
            Args::Raise { keys, token, fence } => {
                let tail = [Arg::Bytes(token), Arg::Uint(fence)];
                self.encode_fenced(out, Script::Raise, keys, &tail);
            }
            Args::FenceRead => {
                let args = self.fence_head(Script::FenceRead);
                encode_command(out, &args);
            }
            Args::Wait {
                keys,
                token,
                ttl_ms,
                member,
                place,
                margin_ms,
                fenced,
            } => {
                let tail = [
                    Arg::Bytes(token),
                    Arg::Uint(ttl_ms),
                    Arg::Bytes(member),
                    Arg::Uint(place),
                    Arg::Uint(margin_ms),
                ];
                if fenced {
                    let script = Script::FencedWaitAcquire;
                    self.encode_fenced(out, script, keys, &tail);
                } else {
                    let script = Script::WaitAcquire;
                    self.encode_script(out, script, keys, &tail);
                }
            }
            Args::Leave { keys, member } => {
                let script = Script::Leave;
                self.encode_script(out, script, keys, &[Arg::Bytes(member)]);
            }
            Args::FenceSync {
                losses,
                mode,
                value,
            } => {
                let mut args = self.fence_head(Script::FenceSync);
                args.push(Arg::Uint(value));
                args.push(Arg::Bytes(mode.as_bytes()));
                args.extend(unpack_keys(losses).map(Arg::Bytes));
                encode_command(out, &args);
            }
        }
    }

    /// `EVAL script` or `EVALSHA sha1`: the verb and its first argument.
    fn script_call(&self, script: Script) -> [Arg<'static>; 2] {
        if self.eval {
            [Arg::Bytes(b"EVAL"), Arg::Bytes(script.text().as_bytes())]
        } else {
            [Arg::Bytes(b"EVALSHA"), Arg::Bytes(script.sha1().as_bytes())]
        }
    }

    /// `EVALSHA sha numkeys key... token [ttl]` of a script on the keys
    /// (the argument list spills to the heap beyond 16 keys).
    fn encode_keyed(
        &self,
        out: &mut Vec<u8>,
        script: Script,
        keys: Keys<&[u8]>,
        token: &[u8],
        ttl_ms: Option<u64>,
    ) {
        match ttl_ms {
            Some(ttl_ms) => {
                self.encode_script(out, script, keys, &[Arg::Bytes(token), Arg::Uint(ttl_ms)])
            }
            None => self.encode_script(out, script, keys, &[Arg::Bytes(token)]),
        }
    }

    /// `EVALSHA sha numkeys key... tail...` of a script on the keys (the
    /// argument list spills to the heap beyond 16 keys).
    fn encode_script(
        &self,
        out: &mut Vec<u8>,
        script: Script,
        keys: Keys<&[u8]>,
        tail: &[Arg<'_>],
    ) {
        let mut args: SmallVec<[Arg<'_>; 24]> = SmallVec::new();
        args.extend(self.script_call(script));
        args.push(Arg::Uint(0));
        push_keys(&mut args, keys);
        args[2] = Arg::Uint((args.len() - 3) as u64);
        args.extend(tail.iter().copied());
        encode_command(out, &args);
    }

    /// A fence script on the keys: [`FENCE_KEY`], [`FENCE_LOST_KEY`] and
    /// the keys as keys, then `tail`.
    fn encode_fenced(
        &self,
        out: &mut Vec<u8>,
        script: Script,
        keys: Keys<&[u8]>,
        tail: &[Arg<'_>],
    ) {
        let mut args = self.fence_head(script);
        push_keys(&mut args, keys);
        args[2] = Arg::Uint((args.len() - 3) as u64);
        args.extend(tail.iter().copied());
        encode_command(out, &args);
    }

    /// The start of a fence script's call: [`FENCE_KEY`] and
    /// [`FENCE_LOST_KEY`] as its keys.
    fn fence_head(&self, script: Script) -> SmallVec<[Arg<'_>; 24]> {
        let mut args: SmallVec<[Arg<'_>; 24]> = SmallVec::new();
        args.extend(self.script_call(script));
        args.extend([
            Arg::Uint(2),
            Arg::Bytes(FENCE_KEY.as_bytes()),
            Arg::Bytes(FENCE_LOST_KEY.as_bytes()),
        ]);
        args
    }
}

/// Appends the keys to a command's arguments, one argument each.
fn push_keys<'k, const N: usize>(args: &mut SmallVec<[Arg<'k>; N]>, keys: Keys<&'k [u8]>)
where
    [Arg<'k>; N]: smallvec::Array<Item = Arg<'k>>,
{
    match keys {
        Keys::One(key) => args.push(Arg::Bytes(key)),
        Keys::Packed(packed) => args.extend(unpack_keys(packed).map(Arg::Bytes)),
    }
}

/// A [`Command`] without its byte arguments ([`Command::split`]): what a
/// connection keeps of a command sent to classify its reply
/// ([`classify`](super::classify)) and, with the bytes, to send it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The arguments, each byte argument by its length.
    args: Args<u32>,
    eval: bool,
}

impl Shape {
    /// The operation.
    pub(crate) fn op(&self) -> Op {
        self.args.op()
    }

    /// Whether the command is sent as `EVAL` with its script's text.
    pub(crate) fn is_eval(&self) -> bool {
        self.eval
    }

    /// The same command, sent as `EVAL` ([`Command::with_script`]).
    pub(crate) fn with_script(self) -> Shape {
        Shape { eval: true, ..self }
    }

    /// Whether the command runs a script, so that its reply may be
    /// `NOSCRIPT` and it may have to be sent again: only then must its
    /// byte arguments be kept.
    pub(crate) fn is_script(&self) -> bool {
        self.args.is_script()
    }

    /// Bytes of the byte arguments, all together.
    pub(crate) fn args_len(&self) -> usize {
        self.args.bytes().iter().map(|&len| len as usize).sum()
    }

    /// Whether the keys are several names packed (the all-or-nothing
    /// scripts).
    pub(super) fn packed(&self) -> bool {
        self.args.packed()
    }

    /// Whether this is the fenced acquire.
    pub(super) fn fenced(&self) -> bool {
        self.args.fenced()
    }

    /// Whether this is the acquire that waits.
    pub(crate) fn waits(&self) -> bool {
        self.args.waits()
    }
}
