//! A waiting caller's place: its slot's id in the client's table of waits
//! and its entries in the masters' queues ([`Wait`]), and the times a
//! call that waits is made with ([`Times`]).

use std::io::Write;
use std::time::Duration;

use crate::commands::{Command, Keys, WakeChannel};
use crate::ids::WaitId;
use crate::rules::wait::Entries;

/// Room for a queue member: `<window ms>|<wait id>|<channel>`.
const MEMBER: usize = 80;

/// The most a waiter's reservation window may be.
const MAX_WINDOW: Duration = Duration::from_secs(10);

/// The least a waiter's reservation window may be: a release's hand-off
/// must reach a waiter on a busy machine and its attempt come back.
const MIN_WINDOW: Duration = Duration::from_millis(50);

/// A client's times that a call that waits reads: its attempts' request
/// timeout, and the retry delay with its jitter.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Times {
    /// How long a round waits for the masters.
    pub request_timeout: Duration,
    /// The retry delay.
    pub retry_delay: Duration,
    /// How far a retry delay strays from `retry_delay`, either way.
    pub retry_jitter: Duration,
}

/// A call's place in the client's table of waits and in the masters'
/// queues.
#[derive(Debug)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Wait {
    /// Its slot's id: what releases publish to tell it.
    pub id: WaitId,
    member: [u8; MEMBER],
    member_len: usize,
    /// When it began to wait, in microseconds of the wall clock: its place
    /// in the queues, the same on every master.
    place: u64,
    /// How long its queue entries outlive the keys that block it, in ms.
    margin_ms: u64,
    /// Whether a master may hold an entry of it: the wait leaves the
    /// queues when it ends.
    pub(crate) entries: Entries,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Wait {
    /// The wait of slot `id` of a client whose connections hear `channel`,
    /// which began to wait at `place`, for a client with these `times`:
    /// its queue member and margin; `None` if the member does not fit.
    pub fn new(id: WaitId, channel: &WakeChannel, place: u64, times: Times) -> Option<Wait> {
        let window = (times.request_timeout * 4).clamp(MIN_WINDOW, MAX_WINDOW);
        let mut member = [0; MEMBER];
        let mut out = &mut member[..];
        write!(out, "{}|{}|", window.as_millis(), id.get())
            .and_then(|()| out.write_all(channel))
            .ok()?;
        let member_len = MEMBER - out.len();
        let margin = window + times.retry_delay + times.retry_jitter + times.request_timeout;
        Some(Wait {
            id,
            member,
            member_len,
            place,
            margin_ms: margin.as_millis() as u64,
            entries: Entries::default(),
        })
    }

    /// The member, as the scripts read it.
    fn member(&self) -> &[u8] {
        &self.member[..self.member_len]
    }

    /// The member, place and margin, as a fenced acquire that waits takes
    /// them.
    pub(crate) fn queue(&self) -> (&[u8], u64, u64) {
        (self.member(), self.place, self.margin_ms)
    }

    /// The acquire that waits, for `keys` with `token`.
    pub(crate) fn acquire<'a>(
        &'a self,
        keys: Keys<&'a [u8]>,
        token: &'a [u8],
        ttl_ms: u64,
    ) -> Command<'a> {
        Command::wait_acquire(keys, token, ttl_ms, self.queue())
    }

    /// The command that takes it off the queues of `keys` when its call
    /// ends, if a master may hold an entry of it: sent to those masters.
    pub(crate) fn leave<'a>(&'a self, keys: Keys<&'a [u8]>) -> Option<Command<'a>> {
        self.entries.queued().then(|| {
            Command::leave(keys, self.member())
                .with_script()
                .only_to(self.entries.masters())
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Times, Wait};
    use crate::commands::{Keys, wake_channel};
    use crate::ids::WaitId;

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// The acquire that waits and the leave carry the waiter's member,
    /// `<window ms>|<wait id>|<channel>`, which the scripts parse and the
    /// releases publish to.
    #[test]
    fn the_commands_carry_the_waiters_member() {
        let times = Times {
            request_timeout: Duration::from_millis(100),
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::ZERO,
        };
        let channel = wake_channel(0xab);
        let Some(mut wait) = Wait::new(WaitId::from_wire(65_541), &channel, 42, times) else {
            panic!("a member fits");
        };
        let member = [&b"400|65541|"[..], &channel].concat();
        let keys = Keys::One(&b"r"[..]);
        let mut out = Vec::new();
        wait.acquire(keys, &[7; 20], 1_000).encode(&mut out);
        assert!(contains(&out, &member), "{}", String::from_utf8_lossy(&out));
        assert_eq!(wait.queue().0, &member[..]);
        wait.entries.attempting();
        let Some(leave) = wait.leave(keys) else {
            panic!("an attempt under way may have queued it");
        };
        out.clear();
        leave.encode(&mut out);
        assert!(contains(&out, &member), "{}", String::from_utf8_lossy(&out));
    }
}
