//! The Lua scripts the client runs on the masters, with their SHA-1s.
//!
//! They are public so that operators can audit what runs on their servers
//! and grant exactly what the scripts call (see [`operations`](crate::operations)),
//! and so that tests and tools can run them by hand. The client loads them
//! at every handshake (`SCRIPT LOAD`) and sends `EVALSHA`, falling back to
//! `EVAL` when a server answers `NOSCRIPT`. Every script changes a key only
//! while it holds the caller's token, and the fence scripts refuse keys of
//! the crate's own space that hold what the crate never writes there
//! ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)).
//!
//! Each script is a file of `src/scripts/`, indented and commented. What
//! the masters run is the code of the files of shared functions
//! (`handoff.lua`, `leaving.lua`, `waiting.lua`, `fence.lua`) followed by
//! the script's own (`release.lua`, ...), every line that is code as it is
//! in the file without its indentation, the comment lines and blank lines
//! left out: [`Script::text`]. [`Script`] lists them; the compiler makes
//! each text and computes its SHA-1.
//!
//! # The hand-off
//!
//! The scripts that free a key ([`Script::Release`], [`Script::ReleaseMany`],
//! [`Script::Leave`], [`Script::WaitAcquire`]) hand it over after it
//! (`handoff.lua`): `handoff(key)` takes the first waiter off the
//! key's queue (`redlock-mio:queue:<key>`, a sorted set ordered by when each
//! waiter began to wait) and publishes the waiter's id on its client's
//! channel. If its client heard it, the key is reserved for the waiter (the
//! value `reserved <member>`, which no token equals) for the waiter's
//! reservation window, and the next waiter whose client hears it is told
//! `<id> <window>`: to try once that window has passed, should the first
//! never come.
//!
//! Waiters stall by process: a client that hears but never comes (paused,
//! swapped out, its threads starved) stalls every waiter it has. So when
//! the waiter told next is of the same client as the one the key is
//! reserved for, the telling goes on past that client's entries (they are
//! neither told nor dropped), adding their windows (of the one told and
//! seven more at most), to the first waiter of another client whose client hears it;
//! that one is told `<id> <ms>`, the windows of the waiters before it, and
//! named in the key's turn
//! (`redlock-mio:turn:<key>`, the waiter's member, expiring when its turn
//! ends). Should the waiters before it never come, its attempt finds its
//! turn come (`turn(key, member)`: named, and less than its window left),
//! drops the entries before it (telling their waiters to try at once: one
//! that came after the turn began may stand before it, as places are not
//! the order of arrival) and takes the key: a stalled client costs
//! the waiters behind it one window per waiter of it, nine at most
//! (entries of a live client whose waiters are gone, their leaves lost,
//! cost the same), and a turn lasts ten windows at most, the named
//! waiter's own included (while the turn runs,
//! an attempt that finds the key free does not hand it to a stalled waiter
//! again), and a release still
//! tells at most two waiters (the walk past that client's entries costs a
//! `ZRANGE` each, and nothing when the next waiter is of another client,
//! as it is when every waiter has a client of its own). Every hand-off
//! replaces the turn. (A second
//! stalled client right behind the first is not covered: the waiters
//! behind both wait for the expiry of the key that refused them.)
//!
//! A waiter whose client is gone (nobody hears its channel) is
//! dropped, and so is an entry of any other form than `<window
//! ms>|<waiter id>|redlock-mio:wake:<client id>` (the window a positive
//! integer of at most nine digits, without leading zeros, so that the
//! reservation's `PX` always takes it), however many there are: a crashed
//! process with many waiting threads leaves as many dead entries, and the
//! first live waiter behind them is still the one served. Each entry
//! looked at costs the server one `ZRANGE`, one `PUBLISH` and one `ZREM`,
//! and every one but the last is dropped, so a call costs one such step
//! per dead entry ahead of the first live waiter (and of the next one),
//! and each entry is dropped once, whatever the number of calls: the
//! queue holds one entry per waiting call, so the work is bounded by the
//! waits that existed, never by the number of releases. The
//! queue's commands run under `pcall`: a server that refuses them (a user
//! without the permissions) frees the key all the same, and nobody is
//! told. A key nobody waits for has no queue, and `EXISTS`, the cheapest
//! look a script can take, says so first: a release that nobody waits for
//! costs the server little more than the classic compare-and-delete.

mod sha1;
mod strip;

/// A script the client runs on the masters: its text and SHA-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Script {
    /// Compare-and-delete: deletes the key only if it still holds our
    /// token, then hands it to the first waiter of its queue, if any (see
    /// [`Script::WaitAcquire`]). `1` if it deleted it, else `0`.
    Release,
    /// Compare-and-`PEXPIRE`: extends the key only if it still holds our
    /// token, and never shortens it (`GT`): an extend delayed in the
    /// network, on a connection the client gave up, cannot cut short a
    /// newer one. `1` if the key holds the token (extended, or already
    /// expiring later), else `0`.
    Extend,
    /// All or nothing over several keys: sets every key (`PX ARGV[2]`) to
    /// the token `ARGV[1]` if none of them exists, else none.
    AcquireMany,
    /// Deletes every key that still holds the token `ARGV[1]`, handing
    /// each to the first waiter of its queue; `1` if any did.
    ReleaseMany,
    /// Extends every key to `ARGV[2]` ms if all still hold the token
    /// `ARGV[1]`, else none; never shortens one (`GT`, as
    /// [`Script::Extend`]).
    ExtendMany,
    /// Fenced acquire, all or nothing over `KEYS[3..]`: sets every key to
    /// the token `ARGV[1]` (`PX ARGV[2]`) if none exists, else returns
    /// nil. Then `INCR`s the fence counter `KEYS[1]` and returns it, or,
    /// if the counter is missing, returns minus the loss id kept in
    /// `KEYS[2]` (set now if absent). `FOREIGNKEY` (nothing done) if
    /// `KEYS[1]` or `KEYS[2]` holds what this crate never writes there.
    FencedAcquire,
    /// Raise: if every key `KEYS[3..]` still holds the token `ARGV[1]`,
    /// raises the counter `KEYS[1]` to at least `ARGV[2]`, deletes the
    /// clock-start mark `KEYS[2]` ([`FENCE_LOST_KEY`](crate::FENCE_LOST_KEY))
    /// and returns 1; 0 if a key does not hold the token; -1 if the
    /// counter is missing (nothing done); `FOREIGNKEY` (nothing done) as
    /// for [`Script::FencedAcquire`].
    Raise,
    /// Read: the counter `KEYS[1]`, an integer, when it exists without a
    /// loss id `KEYS[2]`. Else, when the counter is missing (the loss id
    /// set now if absent) or was started from the clock and has raised no
    /// fence since (the id kept beside it), the text `"<loss id> <server
    /// time in µs> <counter, or 0>"`: what a clock start needs.
    /// `FOREIGNKEY` as for [`Script::FencedAcquire`].
    FenceRead,
    /// Sync: 1 if the counter `KEYS[1]` exists without a loss id
    /// `KEYS[2]`. Else, if the loss id is one of `ARGV[3..]`: sets the
    /// counter to the larger of `ARGV[1]` and the counter, and, unless
    /// `ARGV[2]` is `start`, deletes the loss id (with `start`, a clock
    /// start, it stays beside the counter until a raise); returns 1. Else
    /// 0. `FOREIGNKEY` as for [`Script::FencedAcquire`].
    FenceSync,
    /// Acquire for a caller that waits, all or nothing over `KEYS` (one or
    /// several resources). `ARGV`: the token, the TTL in ms, the waiter's
    /// member (see the hand-off above), its place (when it began to wait,
    /// in microseconds of its client's wall clock), and how long its queue
    /// entry must outlive the key that blocks it, in ms.
    ///
    /// The place is taken within a second of the master's own clock
    /// (`TIME`): a client whose wall clock is off by more than that goes
    /// ahead of other waiters, or behind them, by a second at most, so
    /// that a slow clock cannot keep the lock from the others (clients
    /// whose clocks are right keep the order of their wall clocks). A user
    /// that may not run `TIME` keeps the client's place as it is.
    ///
    /// A key is free for the waiter if it is missing or reserved for it. A
    /// missing key with another waiter first in its queue is not free,
    /// unless the waiter's turn has come (see the hand-off above): then
    /// the entries before it, whose turns are over, are dropped, and the
    /// key is free. While a turn runs, the waiters before the one it names
    /// have their windows and the key is kept for them; else it is handed
    /// to the first of them. If every key is free,
    /// sets each to the token (`PX` the TTL), takes the waiter off their
    /// queues and replies `+OK`. Else it takes no key, enters the waiter
    /// in the queue of each key that blocks it (`ZADD NX`: a waiter keeps
    /// its place across attempts), keeps each queue until the blocking
    /// keys expire plus the margin, leaves the keys that are free for it
    /// as [`Script::Leave`] does (a key reserved for it is handed on, a
    /// free key to whoever waits for it: a waiter for several resources
    /// never keeps a free one from others while another is held), and
    /// replies `+WAIT <ms>`: the longest `PTTL` of the keys that block it
    /// (`-1` if one has no TTL).
    WaitAcquire,
    /// A waiter leaves the queues of `KEYS`: takes the member `ARGV[1]` off
    /// each, and what it was owed goes on. A key reserved for it is handed
    /// to the next waiter; a turn that named it passes to the next waiter
    /// behind it whose client hears it, told to try when the leaver would
    /// have (at once if that time has passed); a waiter told to come next
    /// (first in line while the key waits for a waiter) passes the telling
    /// to the waiters behind it; a free key that no turn keeps is handed to
    /// whoever waits for it. Sent when a wait ends, whether the lock was won
    /// (the masters that refused it had queued it) or not (the caller gave
    /// up, timed out or was dropped). Always `1`.
    Leave,
    /// [`Script::FencedAcquire`] for a caller that waits, as
    /// [`Script::WaitAcquire`] is [`Script::AcquireMany`]'s: `KEYS[1]` and
    /// `KEYS[2]` as for the fenced acquire, the resources from `KEYS[3]`;
    /// `ARGV` as for [`Script::WaitAcquire`]. Held keys: the waiter is
    /// queued and the reply is `+WAIT <ms>`. Free keys: the fenced
    /// acquire's checks, writes and reply (the counter, or minus the loss
    /// id; `FOREIGNKEY`).
    FencedWaitAcquire,
}

/// A script's text from its files, in order (shared functions, then its
/// own), as the masters run it: the code lines without their indentation
/// (`strip`).
macro_rules! lua {
    ($($file:literal),+) => {{
        const SOURCE: &str = concat!($(include_str!(concat!("scripts/", $file, ".lua"))),+);
        const SENT: [u8; strip::len(SOURCE)] = strip::code(SOURCE);
        strip::text(&SENT)
    }};
}

/// Each script's text, in the order of [`Script`]'s variants.
const TEXTS: [&str; 12] = [
    lua!("handoff", "release"),
    lua!("extend"),
    lua!("acquire_many"),
    lua!("handoff", "release_many"),
    lua!("extend_many"),
    lua!("fence", "fenced_acquire"),
    lua!("fence", "raise"),
    lua!("fence", "fence_read"),
    lua!("fence", "fence_sync"),
    lua!("handoff", "leaving", "waiting", "wait_acquire"),
    lua!("handoff", "leaving", "leave"),
    lua!(
        "handoff",
        "leaving",
        "waiting",
        "fence",
        "fenced_wait_acquire"
    ),
];

/// The SHA-1 of `script`'s text in hexadecimal, computed by the compiler.
const fn hex_sha1(script: Script) -> [u8; 40] {
    sha1::hex(sha1::digest(script.text().as_bytes()))
}

/// `hex` as text.
const fn hex_text(hex: &'static [u8; 40]) -> &'static str {
    match core::str::from_utf8(hex) {
        Ok(text) => text,
        Err(_) => panic!("hexadecimal digits are ASCII"),
    }
}

/// Each script's SHA-1, in the order of [`Script`]'s variants.
const SHA1_TEXTS: [&str; 12] = [
    RELEASE_SHA1,
    EXTEND_SHA1,
    ACQUIRE_MANY_SHA1,
    RELEASE_MANY_SHA1,
    EXTEND_MANY_SHA1,
    FENCED_ACQUIRE_SHA1,
    RAISE_SHA1,
    FENCE_READ_SHA1,
    FENCE_SYNC_SHA1,
    WAIT_ACQUIRE_SHA1,
    LEAVE_SHA1,
    FENCED_WAIT_ACQUIRE_SHA1,
];

impl Script {
    /// Every script, in the order of the variants.
    pub const ALL: [Script; 12] = [
        Script::Release,
        Script::Extend,
        Script::AcquireMany,
        Script::ReleaseMany,
        Script::ExtendMany,
        Script::FencedAcquire,
        Script::Raise,
        Script::FenceRead,
        Script::FenceSync,
        Script::WaitAcquire,
        Script::Leave,
        Script::FencedWaitAcquire,
    ];

    /// The script's Lua text, as the masters load it: the code lines of
    /// its files, without their comments (see the module's docs).
    pub const fn text(self) -> &'static str {
        TEXTS[self as usize]
    }

    /// The script's SHA-1 in lowercase hexadecimal, as `SCRIPT LOAD`
    /// returns it.
    pub const fn sha1(self) -> &'static str {
        SHA1_TEXTS[self as usize]
    }
}

/// The length of the longest script's text: what a command sent with its
/// script's text (`EVAL`) may carry.
pub(crate) const LONGEST_TEXT: usize = {
    let mut longest = 0;
    let mut i = 0;
    while i < Script::ALL.len() {
        let len = Script::ALL[i].text().len();
        if len > longest {
            longest = len;
        }
        i += 1;
    }
    longest
};

/// [`Script::Release`]'s text.
pub const RELEASE_SCRIPT: &str = Script::Release.text();
/// [`Script::Release`]'s SHA-1.
pub const RELEASE_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::Release);
    HEX
});
/// [`Script::Extend`]'s text.
pub const EXTEND_SCRIPT: &str = Script::Extend.text();
/// [`Script::Extend`]'s SHA-1.
pub const EXTEND_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::Extend);
    HEX
});
/// [`Script::AcquireMany`]'s text.
pub const ACQUIRE_MANY_SCRIPT: &str = Script::AcquireMany.text();
/// [`Script::AcquireMany`]'s SHA-1.
pub const ACQUIRE_MANY_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::AcquireMany);
    HEX
});
/// [`Script::ReleaseMany`]'s text.
pub const RELEASE_MANY_SCRIPT: &str = Script::ReleaseMany.text();
/// [`Script::ReleaseMany`]'s SHA-1.
pub const RELEASE_MANY_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::ReleaseMany);
    HEX
});
/// [`Script::ExtendMany`]'s text.
pub const EXTEND_MANY_SCRIPT: &str = Script::ExtendMany.text();
/// [`Script::ExtendMany`]'s SHA-1.
pub const EXTEND_MANY_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::ExtendMany);
    HEX
});
/// [`Script::FencedAcquire`]'s text.
pub const FENCED_ACQUIRE_SCRIPT: &str = Script::FencedAcquire.text();
/// [`Script::FencedAcquire`]'s SHA-1.
pub const FENCED_ACQUIRE_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::FencedAcquire);
    HEX
});
/// [`Script::Raise`]'s text.
pub const RAISE_SCRIPT: &str = Script::Raise.text();
/// [`Script::Raise`]'s SHA-1.
pub const RAISE_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::Raise);
    HEX
});
/// [`Script::FenceRead`]'s text.
pub const FENCE_READ_SCRIPT: &str = Script::FenceRead.text();
/// [`Script::FenceRead`]'s SHA-1.
pub const FENCE_READ_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::FenceRead);
    HEX
});
/// [`Script::FenceSync`]'s text.
pub const FENCE_SYNC_SCRIPT: &str = Script::FenceSync.text();
/// [`Script::FenceSync`]'s SHA-1.
pub const FENCE_SYNC_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::FenceSync);
    HEX
});
/// [`Script::WaitAcquire`]'s text.
pub const WAIT_ACQUIRE_SCRIPT: &str = Script::WaitAcquire.text();
/// [`Script::WaitAcquire`]'s SHA-1.
pub const WAIT_ACQUIRE_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::WaitAcquire);
    HEX
});
/// [`Script::Leave`]'s text.
pub const LEAVE_SCRIPT: &str = Script::Leave.text();
/// [`Script::Leave`]'s SHA-1.
pub const LEAVE_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::Leave);
    HEX
});
/// [`Script::FencedWaitAcquire`]'s text.
pub const FENCED_WAIT_ACQUIRE_SCRIPT: &str = Script::FencedWaitAcquire.text();
/// [`Script::FencedWaitAcquire`]'s SHA-1.
pub const FENCED_WAIT_ACQUIRE_SHA1: &str = hex_text(&{
    const HEX: [u8; 40] = hex_sha1(Script::FencedWaitAcquire);
    HEX
});

#[cfg(test)]
mod tests {
    use super::Script;

    #[test]
    fn every_script_is_listed_once_in_the_order_of_its_text() {
        for (i, script) in Script::ALL.into_iter().enumerate() {
            assert_eq!(script as usize, i);
        }
    }

    #[test]
    fn every_sha1_is_forty_hexadecimal_digits_of_its_own() {
        // The digest function is held to the standard vectors (`sha1.rs`),
        // and every handshake compares each SHA-1 with what `SCRIPT LOAD`
        // returns; here, that each is well formed and names one script.
        for script in Script::ALL {
            let sha = script.sha1();
            assert_eq!(sha.len(), 40, "{script:?}");
            assert!(
                sha.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
            assert_eq!(
                Script::ALL
                    .iter()
                    .filter(|other| other.sha1() == sha)
                    .count(),
                1
            );
        }
    }

    #[test]
    fn every_script_defines_only_locals() {
        // Redis and Valkey refuse a script that sets a global.
        for script in Script::ALL {
            for line in script.text().lines() {
                let line = line.trim_start();
                assert!(
                    !line.starts_with("function "),
                    "{script:?}: a global function: {line}"
                );
            }
        }
    }
}
