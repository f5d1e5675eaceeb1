//! The scripts: `EVAL`, `EVALSHA` and `SCRIPT`, running the Lua of
//! [`redlock_mio::scripts`] as Redis and Valkey run it.
//!
//! Each master has a Lua 5.1 state of its own ([`Interpreter`], in
//! `lua.rs`), as a server keeps one for its process, and compiles each
//! script's text once in it: the text the client sends, never a copy, so
//! what the simulator checks is what the masters run. The scripts the
//! model knows are those of [`Script::ALL`] (text and SHA-1); a script it
//! does not know is an error reply, never a guess.
//!
//! A script sees what Redis 7 gives it in RESP2: `KEYS` and `ARGV` as
//! tables of strings (byte for byte), `redis.call` and `redis.pcall`, which
//! run a command through the same table as a client's (`commands.rs`), on
//! a client of the script's own that starts on the caller's database, at
//! the clock of the script's start (`TIME` included), with replies and
//! arguments converted as Redis converts them; `redis.error_reply` and
//! `redis.status_reply`; globals it may neither set nor read when absent.
//! A `redis.call` that fails ends the script with its error and leaves
//! the writes before it (a publication included), as on a real server.
//!
//! A master with a deliberate fault of the hand-off runs the scripts'
//! text with the fault patched in (`faults.rs`), under the real SHA-1.

mod faults;
mod lua;

pub(crate) use lua::Interpreter;
use redlock_mio::scripts::Script;

use crate::commands::{Ctx, not_an_integer, parse_int};
use crate::reply::Reply;
use crate::server::Server;

/// The script whose text is `text`.
fn by_text(text: &[u8]) -> Option<Script> {
    Script::ALL
        .into_iter()
        .find(|s| s.text().as_bytes() == text)
}

/// The script whose SHA-1 is `sha` (in either case, as Redis reads it).
fn by_sha(sha: &[u8]) -> Option<Script> {
    Script::ALL
        .into_iter()
        .find(|s| s.sha1().as_bytes().eq_ignore_ascii_case(sha))
}

/// The reply to a script the model does not know.
fn unknown_script() -> Reply {
    Reply::error("ERR the model knows no such script (it runs those of redlock_mio::scripts)")
}

/// Compiles `script` on the server, if it has not, and caches it.
fn load(server: &mut Server, script: Script) -> Result<Script, Reply> {
    let fault = server.handoff_fault;
    server.lua.load(script, fault)?;
    server.scripts.insert(script.sha1());
    Ok(script)
}

/// `EVAL script numkeys key... arg...`: runs a known script and caches it.
pub(crate) fn eval(c: &mut Ctx<'_>) -> Reply {
    run(c, |server, text| {
        load(server, by_text(text).ok_or_else(unknown_script)?)
    })
}

/// `EVALSHA sha numkeys key... arg...`: runs a cached script.
pub(crate) fn evalsha(c: &mut Ctx<'_>) -> Reply {
    run(c, |server, sha| {
        by_sha(sha)
            .filter(|script| server.scripts.contains(script.sha1()))
            .ok_or_else(|| Reply::error("NOSCRIPT No matching script. Please use EVAL."))
    })
}

/// Checks the number of keys, finds the script with `find`, and runs it.
fn run(c: &mut Ctx<'_>, find: impl FnOnce(&mut Server, &[u8]) -> Result<Script, Reply>) -> Reply {
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
    // The state leaves the server while it runs the script, whose
    // commands change the server.
    let mut lua = std::mem::take(&mut c.server.lua);
    let (keys, argv) = args.split_at(numkeys);
    c.server.declared = keys.to_vec();
    let reply = lua.run(c.server, c.session, c.now, script, (keys, argv));
    c.server.declared.clear();
    c.server.lua = lua;
    reply
}

/// `SCRIPT LOAD script`: its SHA-1, once compiled and cached.
pub(crate) fn script_load(c: &mut Ctx<'_>) -> Reply {
    match by_text(&c.words[2]).ok_or_else(unknown_script) {
        Ok(script) => match load(c.server, script) {
            Ok(script) => Reply::bulk(script.sha1()),
            Err(reply) => reply,
        },
        Err(reply) => reply,
    }
}

/// `SCRIPT EXISTS sha...`: 1 or 0 for each.
pub(crate) fn script_exists(c: &mut Ctx<'_>) -> Reply {
    let cached = |sha: &Vec<u8>| by_sha(sha).is_some_and(|s| c.server.scripts.contains(s.sha1()));
    Reply::Array(
        c.words[2..]
            .iter()
            .map(|sha| Reply::Integer(i64::from(cached(sha))))
            .collect(),
    )
}

/// `SCRIPT FLUSH [ASYNC|SYNC]`: empties the cache, and gives the master
/// a new Lua state, as Redis does.
pub(crate) fn script_flush(c: &mut Ctx<'_>) -> Reply {
    match c.words {
        [_, _] => {}
        [_, _, mode]
            if mode.eq_ignore_ascii_case(b"ASYNC") || mode.eq_ignore_ascii_case(b"SYNC") => {}
        _ => return Reply::error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
    }
    c.server.scripts.clear();
    c.server.lua = Interpreter::default();
    Reply::OK
}

/// Panics unless `fault` still finds, in the scripts' text, what it
/// patches (see `faults.rs`).
pub(crate) fn check_fault(fault: crate::HandoffFault) {
    faults::check(fault);
}
