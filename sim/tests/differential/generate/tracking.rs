//! Client tracking's cases, as the loss watch uses it: a connection that
//! speaks RESP3 turns on `CLIENT TRACKING ON OPTIN NOLOOP` (in its
//! handshake, see `handshake`, or later), now and then another mode or
//! `OFF`, and reads lock keys after `CLIENT CACHING YES` (the watch's
//! read); now and then a read without it, which `OPTIN` leaves untracked,
//! a `CLIENT CACHING YES` that lapses before the read, or a script run
//! right after it (whose reads are tracked). The forms the model refuses
//! (`REDIRECT`, `BCAST`, `PREFIX`, `OPTOUT`, `CACHING NO`) come as a
//! server refuses them too. The changes that invalidate the keys are the
//! case's other commands, from this connection and the others: writes,
//! deletions, expiry changes, scripts, `FLUSHALL`, and reads after the
//! clock moved past an expiry.

use redlock_mio::scripts::*;
use redlock_mio_sim::{Conn, Master, Protocol};

use super::{Generator, exact};
use crate::steps::Command;

/// The modes a connection turns tracking on with, or off: the client's
/// most often. `OFF` takes the options that parse, and ignores them.
const MODES: [&[&[u8]]; 9] = [
    &[b"ON", b"OPTIN", b"NOLOOP"],
    &[b"ON", b"OPTIN", b"NOLOOP"],
    &[b"ON", b"OPTIN", b"NOLOOP"],
    &[b"ON"],
    &[b"ON", b"OPTIN"],
    &[b"ON", b"NOLOOP"],
    &[b"OFF"],
    &[b"ON", b"NOLOOP", b"OPTIN"],
    &[b"OFF", b"BCAST", b"NOLOOP"],
];

/// `CLIENT TRACKING` forms every server refuses, whatever the
/// connection's mode: a redirection to no client, `BCAST` or `PREFIX`
/// with what they exclude, both of `OPTIN` and `OPTOUT`, and words that do
/// not parse.
const REFUSED: [&[&[u8]]; 11] = [
    &[b"ON", b"REDIRECT", b"0"],
    &[b"ON", b"OPTIN", b"REDIRECT", b"-1", b"NOLOOP"],
    &[b"ON", b"REDIRECT", b"x"],
    &[b"ON", b"REDIRECT"],
    &[b"ON", b"BCAST", b"OPTIN"],
    &[b"ON", b"OPTOUT", b"BCAST"],
    &[b"ON", b"OPTIN", b"OPTOUT"],
    &[b"ON", b"OPTOUT", b"NOLOOP", b"OPTIN"],
    &[b"ON", b"PREFIX", b"redlock-mio:"],
    &[b"ON", b"NOLOOP", b"FOO"],
    &[b"MAYBE"],
];

fn tracking(options: &[&[u8]]) -> Command {
    let mut words: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING"];
    words.extend(options);
    exact(&words)
}

fn caching_yes() -> Command {
    exact(&[b"CLIENT", b"CACHING", b"YES"])
}

impl Generator {
    /// How often, in percent, a command of connection `conn` is one of
    /// client tracking's: often where it tracks, now and then where it
    /// speaks RESP3, rarely else (tracking asked on RESP2, which a server
    /// grants, and tells nothing).
    pub(super) fn tracking_share(&self, model: &Master, conn: Option<&Conn>) -> u64 {
        match conn {
            Some(c) if model.tracking(c).is_some() => 20,
            Some(c) if c.protocol() == Protocol::Resp3 => 6,
            _ => 2,
        }
    }

    /// The commands of one of client tracking's steps on `conn`, which
    /// tracks as `mode` says (`Some(optin)`) before them; `alone` if they
    /// are all the step sends (only then is `mode` what holds when they
    /// run).
    pub(super) fn tracking_commands(
        &mut self,
        conn: usize,
        model: &Master,
        mode: Option<bool>,
        alone: bool,
        now: u64,
    ) -> Vec<Command> {
        let key = self.watched_key(model, conn, now);
        match self.rng.below(100) {
            // The watch's read.
            0..45 => vec![caching_yes(), exact(&[b"GET", &key])],
            // A read without `CLIENT CACHING YES`: tracked only in the
            // default mode.
            45..55 => vec![exact(&[b"GET", &key])],
            // Other reads after it: each of their keys is tracked.
            55..60 => {
                let other = self.watched_key(model, conn, now);
                let verb = self.rng.pick(&[&b"PTTL"[..], b"TYPE", b"EXISTS"]);
                let read = if verb == b"EXISTS" {
                    exact(&[verb, &key, &other])
                } else {
                    exact(&[verb, &key])
                };
                vec![caching_yes(), read]
            }
            // It lapses at the next command but a `CLIENT` one.
            60..63 => {
                let between = if self.rng.chance(50) {
                    exact(&[b"PING"])
                } else {
                    exact(&[b"CLIENT", b"CACHING", b"YES"])
                };
                vec![caching_yes(), between, exact(&[b"GET", &key])]
            }
            // A script right after it: the keys its commands read are
            // tracked.
            63..67 => {
                let db = self.conns[conn].db;
                let script = match self.rng.below(3) {
                    0 => {
                        let args = vec![self.token(), self.ttl()];
                        self.script((EXTEND_SCRIPT, EXTEND_SHA1), vec![key], args)
                    }
                    1 => self.release(vec![key], model, db, now),
                    _ => self.script(
                        (FENCE_READ_SCRIPT, FENCE_READ_SHA1),
                        Generator::fenced(vec![]),
                        vec![],
                    ),
                };
                vec![caching_yes(), script]
            }
            67..77 => vec![tracking(self.rng.pick(&MODES))],
            // Off and on again: the keys read before stay remembered.
            77..82 => vec![tracking(&[b"OFF"]), tracking(self.rng.pick(&MODES[..6]))],
            82..96 => vec![self.refused_tracking(mode, alone)],
            _ => {
                let answer = self.rng.pick(&[&b"NO"[..], b"maybe"]);
                vec![exact(&[b"CLIENT", b"CACHING", answer])]
            }
        }
    }

    /// A form of `CLIENT TRACKING` a server refuses, for a connection that
    /// tracks as `mode` says (`Some(optin)`), if that is known (`alone`):
    /// then `BCAST` alone where it tracks, `OPTOUT` alone where it tracks
    /// with `OPTIN`, too.
    fn refused_tracking(&mut self, mode: Option<bool>, alone: bool) -> Command {
        if alone && self.rng.chance(30) {
            match mode {
                Some(true) if self.rng.chance(50) => return tracking(&[b"ON", b"OPTOUT"]),
                Some(_) => return tracking(&[b"ON", b"BCAST"]),
                None => {}
            }
        }
        tracking(self.rng.pick(&REFUSED))
    }

    /// A key a connection watches: a lock's, often one the model holds,
    /// now and then one of the reserved space (a queue among them).
    fn watched_key(&mut self, model: &Master, conn: usize, now: u64) -> Vec<u8> {
        if self.rng.chance(10) {
            return self.any_key();
        }
        let db = self.conns[conn].db;
        let held: Vec<&str> = super::RESOURCES
            .into_iter()
            .filter(|r| model.get(db, r.as_bytes(), now).is_some())
            .collect();
        if !held.is_empty() && self.rng.chance(60) {
            return self.rng.pick(&held).as_bytes().to_vec();
        }
        self.resource()
    }
}
