//! The scripts: `EVAL`, `EVALSHA` and `SCRIPT`, and the Lua scripts of
//! [`redlock_mio::scripts`], each run by Rust code that does what its Lua
//! does, call for call.
//!
//! The model runs no Lua. Each script the client sends is a row of
//! [`SCRIPTS`]: its text and SHA-1 (the crate's own constants, so the
//! model runs exactly what the client sends) and a body written against
//! [`Call`], whose [`call`](Call::call) and [`pcall`](Call::pcall) are
//! `redis.call` and `redis.pcall`: they run commands through the same
//! table as a client's, on the caller's database, at the clock of the
//! script's start. A body mirrors its Lua line by line, including what a
//! failed `redis.call` leaves behind (the writes before it stay, as on a
//! real server). A script the model does not know is an error reply, never
//! a guess.
//!
//! A new script is one row in [`SCRIPTS`] and its body, in `lock.rs`,
//! `fence.rs`, `queue.rs` (the wait queue's), or a file of its own.

mod fence;
mod lock;
mod queue;

use redlock_mio::scripts::*;

use crate::commands::{Ctx, execute, not_an_integer, parse_int};
use crate::keyspace::Now;
use crate::reply::Reply;
use crate::server::{Server, Session};

/// What a script body returns: its reply, or the error of a `redis.call`
/// (or of the Lua runtime) that ended it.
type Outcome = Result<Reply, Reply>;

/// A script the model runs.
struct Script {
    text: &'static str,
    sha: &'static str,
    body: fn(&mut Call<'_>) -> Outcome,
}

/// Every script the model knows: one row each.
const SCRIPTS: &[Script] = &[
    Script {
        text: RELEASE_SCRIPT,
        sha: RELEASE_SHA1,
        body: lock::release,
    },
    Script {
        text: EXTEND_SCRIPT,
        sha: EXTEND_SHA1,
        body: lock::extend,
    },
    Script {
        text: ACQUIRE_MANY_SCRIPT,
        sha: ACQUIRE_MANY_SHA1,
        body: lock::acquire_many,
    },
    Script {
        text: RELEASE_MANY_SCRIPT,
        sha: RELEASE_MANY_SHA1,
        body: lock::release_many,
    },
    Script {
        text: EXTEND_MANY_SCRIPT,
        sha: EXTEND_MANY_SHA1,
        body: lock::extend_many,
    },
    Script {
        text: FENCED_ACQUIRE_SCRIPT,
        sha: FENCED_ACQUIRE_SHA1,
        body: fence::fenced_acquire,
    },
    Script {
        text: RAISE_SCRIPT,
        sha: RAISE_SHA1,
        body: fence::raise,
    },
    Script {
        text: FENCE_READ_SCRIPT,
        sha: FENCE_READ_SHA1,
        body: fence::read,
    },
    Script {
        text: FENCE_SYNC_SCRIPT,
        sha: FENCE_SYNC_SHA1,
        body: fence::sync,
    },
    Script {
        text: WAIT_ACQUIRE_SCRIPT,
        sha: WAIT_ACQUIRE_SHA1,
        body: queue::wait_acquire,
    },
    Script {
        text: FENCED_WAIT_ACQUIRE_SCRIPT,
        sha: FENCED_WAIT_ACQUIRE_SHA1,
        body: queue::fenced_wait_acquire,
    },
    Script {
        text: LEAVE_SCRIPT,
        sha: LEAVE_SHA1,
        body: queue::leave,
    },
];

/// The script whose text is `text`.
fn by_text(text: &[u8]) -> Option<&'static Script> {
    SCRIPTS.iter().find(|s| s.text.as_bytes() == text)
}

/// The script whose SHA-1 is `sha` (in either case, as Redis reads it).
fn by_sha(sha: &[u8]) -> Option<&'static Script> {
    SCRIPTS
        .iter()
        .find(|s| s.sha.as_bytes().eq_ignore_ascii_case(sha))
}

/// The reply to a script the model does not know.
fn unknown_script() -> Reply {
    Reply::error("ERR the model knows no such script (it runs those of redlock_mio::scripts)")
}

/// `EVAL script numkeys key... arg...`: runs a known script and caches it.
pub(crate) fn eval(c: &mut Ctx<'_>) -> Reply {
    run(c, |server, text| {
        let script = by_text(text).ok_or_else(unknown_script)?;
        server.scripts.insert(script.sha);
        Ok(script)
    })
}

/// `EVALSHA sha numkeys key... arg...`: runs a cached script.
pub(crate) fn evalsha(c: &mut Ctx<'_>) -> Reply {
    run(c, |server, sha| {
        by_sha(sha)
            .filter(|script| server.scripts.contains(script.sha))
            .ok_or_else(|| Reply::error("NOSCRIPT No matching script. Please use EVAL."))
    })
}

/// Checks the number of keys, finds the script with `find`, and runs it.
fn run(
    c: &mut Ctx<'_>,
    find: impl FnOnce(&mut Server, &[u8]) -> Result<&'static Script, Reply>,
) -> Reply {
    let words = c.words;
    let Some(numkeys) = parse_int(&words[2]) else {
        return not_an_integer();
    };
    let args = &words[3..];
    let Ok(numkeys) = usize::try_from(numkeys) else {
        return Reply::error("ERR Number of keys can't be negative");
    };
    if numkeys > args.len() {
        return Reply::error("ERR Number of keys can't be greater than number of args");
    }
    let script = match find(c.server, &words[1]) {
        Ok(script) => script,
        Err(reply) => return reply,
    };
    let (keys, argv) = args.split_at(numkeys);
    let mut call = Call {
        server: c.server,
        session: c.session,
        now: c.now,
        keys,
        argv,
    };
    match (script.body)(&mut call) {
        Ok(reply) => reply,
        // An error raised inside the script names it, as Redis 7 does.
        Err(Reply::Error(mut message)) => {
            let place = format!(" script: {}, on @user_script:1.", script.sha);
            message.extend_from_slice(place.as_bytes());
            Reply::Error(message)
        }
        Err(other) => other,
    }
}

/// `SCRIPT LOAD script`: its SHA-1, once cached.
pub(crate) fn script_load(c: &mut Ctx<'_>) -> Reply {
    match by_text(&c.words[2]) {
        Some(script) => {
            c.server.scripts.insert(script.sha);
            Reply::bulk(script.sha)
        }
        None => unknown_script(),
    }
}

/// `SCRIPT EXISTS sha...`: 1 or 0 for each.
pub(crate) fn script_exists(c: &mut Ctx<'_>) -> Reply {
    let cached = |sha: &Vec<u8>| by_sha(sha).is_some_and(|s| c.server.scripts.contains(s.sha));
    Reply::Array(
        c.words[2..]
            .iter()
            .map(|sha| Reply::Integer(i64::from(cached(sha))))
            .collect(),
    )
}

/// `SCRIPT FLUSH [ASYNC|SYNC]`: empties the cache.
pub(crate) fn script_flush(c: &mut Ctx<'_>) -> Reply {
    match c.words {
        [_, _] => {}
        [_, _, mode]
            if mode.eq_ignore_ascii_case(b"ASYNC") || mode.eq_ignore_ascii_case(b"SYNC") => {}
        _ => return Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
    }
    c.server.scripts.clear();
    Reply::OK
}

/// What a script body sees: `KEYS`, `ARGV`, and the server through
/// `redis.call`.
pub(crate) struct Call<'a> {
    server: &'a mut Server,
    session: &'a mut Session,
    /// The clock at the script's start, which it keeps throughout.
    now: Now,
    keys: &'a [Vec<u8>],
    argv: &'a [Vec<u8>],
}

impl<'a> Call<'a> {
    /// The master's deliberate fault of its hand-off, if it has one.
    pub(crate) fn handoff_fault(&self) -> Option<crate::HandoffFault> {
        self.server.handoff_fault
    }

    /// `redis.call(command, args...)`: the reply, or `Err` with the error
    /// that ends the script.
    pub(crate) fn call(&mut self, command: &str, args: &[&[u8]]) -> Outcome {
        let reply = self.pcall(command, args);
        if reply.is_error() {
            Err(reply)
        } else {
            Ok(reply)
        }
    }

    /// `redis.pcall(command, args...)`: the reply, an error one included.
    pub(crate) fn pcall(&mut self, command: &str, args: &[&[u8]]) -> Reply {
        let mut words = Vec::with_capacity(args.len() + 1);
        words.push(command.as_bytes().to_vec());
        words.extend(args.iter().map(|arg| arg.to_vec()));
        execute(self.server, self.session, &words, self.now)
    }

    /// `KEYS[i + 1]`.
    pub(crate) fn key(&self, i: usize) -> Result<&'a [u8], Reply> {
        self.keys.get(i).map(Vec::as_slice).ok_or_else(missing)
    }

    /// `KEYS[from + 1..]`.
    pub(crate) fn keys_from(&self, from: usize) -> &'a [Vec<u8>] {
        self.keys.get(from..).unwrap_or_default()
    }

    /// `ARGV[i + 1]`.
    pub(crate) fn arg(&self, i: usize) -> Result<&'a [u8], Reply> {
        self.argv.get(i).map(Vec::as_slice).ok_or_else(missing)
    }

    /// `ARGV[from + 1..]`.
    pub(crate) fn args_from(&self, from: usize) -> &'a [Vec<u8>] {
        self.argv.get(from..).unwrap_or_default()
    }
}

/// A `KEYS` or `ARGV` entry the client always sends is missing: Lua would
/// pass `nil` on, which the model does not follow.
fn missing() -> Reply {
    Reply::error("ERR the model runs scripts only with the keys and arguments the client sends")
}

/// Whether a reply, as Lua sees it, is the string `text` (`== ARGV[1]`).
pub(crate) fn is_string(reply: &Reply, text: &[u8]) -> bool {
    matches!(reply, Reply::Bulk(bytes) if bytes == text)
}

/// Lua's `tonumber` of a string, for the decimal numbers the scripts
/// meet (and hexadecimal, which Lua 5.1 also reads).
pub(crate) fn tonumber(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok().map(|n| n as f64),
        None => text.parse().ok(),
    }
}

/// Lua's `a < b` on two numbers, or the runtime error for a `nil`.
pub(crate) fn less(a: Option<f64>, b: Option<f64>) -> Result<bool, Reply> {
    match (a, b) {
        (Some(a), Some(b)) => Ok(a < b),
        _ => Err(Reply::error(
            "ERR user_script:1: attempt to compare number with nil",
        )),
    }
}

/// A Lua number returned by a script: Redis truncates it to an integer.
pub(crate) fn number_reply(n: f64) -> Reply {
    Reply::Integer(n as i64)
}
