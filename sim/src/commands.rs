//! The commands the model knows, and the checks a server makes before it
//! runs one: that it exists, its number of arguments, that the connection
//! has logged in.
//!
//! A new command is one arm in [`lookup`] (its name, its arity as Redis
//! declares it, the function that runs it) and that function, which takes
//! the server, the connection's session, the command's words and the
//! clock, and returns the reply. Scripts call commands through the same
//! table ([`execute`]), as `redis.call` does.

mod admin;
mod client;
mod keys;
mod pubsub;
mod session;
mod zsets;

use crate::ScriptReads;
use crate::keyspace::{Now, WrongType};
pub(crate) use crate::numbers::parse_int;
use crate::reply::Reply;
use crate::scripts;
use crate::server::{Server, Session};

/// A command being run: the server, the session of the connection that
/// sent it, its words (the name first), and the clock.
pub(crate) struct Ctx<'a> {
    pub(crate) server: &'a mut Server,
    pub(crate) session: &'a mut Session,
    pub(crate) words: &'a [Vec<u8>],
    pub(crate) now: Now,
}

/// What runs a command.
pub(crate) type Run = fn(&mut Ctx<'_>) -> Reply;

/// A command: its name in error messages, its arity, whether it runs
/// before `AUTH`, in subscribe mode and from a script, and what runs it.
#[derive(Clone, Copy)]
struct Spec {
    name: &'static str,
    /// Redis's convention: `n` words exactly, or at least `-n` words when
    /// negative (the name counts).
    arity: i32,
    before_auth: bool,
    /// It runs on a RESP2 connection that listens to a channel, where
    /// every other command is refused.
    when_subscribed: bool,
    /// A script may call it (Redis flags the others `noscript`).
    in_scripts: bool,
    /// It only reads the keys it names (Redis's `readonly`): a connection
    /// that tracks remembers them.
    reads: bool,
    run: Run,
}

impl Spec {
    fn new(name: &'static str, arity: i32, run: Run) -> Spec {
        Spec {
            name,
            arity,
            before_auth: false,
            when_subscribed: false,
            in_scripts: true,
            reads: false,
            run,
        }
    }

    /// A command that only reads the keys it names.
    fn reads(self) -> Spec {
        Spec {
            reads: true,
            ..self
        }
    }

    /// A command a connection may send before it logs in.
    fn before_auth(self) -> Spec {
        Spec {
            before_auth: true,
            ..self
        }
    }

    /// A command a RESP2 connection may send while it listens to a
    /// channel.
    fn when_subscribed(self) -> Spec {
        Spec {
            when_subscribed: true,
            ..self
        }
    }

    /// A command a script may not call.
    fn noscript(self) -> Spec {
        Spec {
            in_scripts: false,
            ..self
        }
    }

    fn fits(&self, words: usize) -> bool {
        let words = i32::try_from(words).unwrap_or(i32::MAX);
        if self.arity >= 0 {
            words == self.arity
        } else {
            words >= -self.arity
        }
    }
}

/// The command `words` names, or the error a server gives for an unknown
/// one.
fn lookup(words: &[Vec<u8>]) -> Result<Spec, Reply> {
    let name = words
        .first()
        .map(|w| w.to_ascii_uppercase())
        .unwrap_or_default();
    Ok(match name.as_slice() {
        // Keys.
        b"GET" => Spec::new("get", 2, keys::get).reads(),
        b"SET" => Spec::new("set", -3, keys::set),
        b"DEL" => Spec::new("del", -2, keys::del),
        b"EXISTS" => Spec::new("exists", -2, keys::exists).reads(),
        b"TYPE" => Spec::new("type", 2, keys::type_of).reads(),
        b"PTTL" => Spec::new("pttl", 2, keys::pttl).reads(),
        b"PEXPIRE" => Spec::new("pexpire", -3, keys::pexpire),
        b"INCR" => Spec::new("incr", 2, keys::incr),
        b"RPUSH" => Spec::new("rpush", -3, keys::rpush),
        // Sorted sets: the wait queues.
        b"ZADD" => Spec::new("zadd", -4, zsets::zadd),
        b"ZREM" => Spec::new("zrem", -3, zsets::zrem),
        b"ZRANGE" => Spec::new("zrange", -4, zsets::zrange).reads(),
        b"ZCARD" => Spec::new("zcard", 2, zsets::zcard).reads(),
        b"ZSCORE" => Spec::new("zscore", 3, zsets::zscore).reads(),
        b"ZRANK" => Spec::new("zrank", -3, zsets::zrank).reads(),
        // Scripts.
        b"EVAL" => Spec::new("eval", -3, scripts::eval).noscript(),
        b"EVALSHA" => Spec::new("evalsha", -3, scripts::evalsha).noscript(),
        b"SCRIPT" => return script_subcommand(words),
        b"CLIENT" => return client_subcommand(words),
        // The connection.
        b"AUTH" => Spec::new("auth", -2, session::auth)
            .before_auth()
            .noscript(),
        b"HELLO" => Spec::new("hello", -1, session::hello)
            .before_auth()
            .noscript(),
        b"QUIT" => Spec::new("quit", -1, session::quit)
            .before_auth()
            .when_subscribed()
            .noscript(),
        b"SELECT" => Spec::new("select", 2, session::select),
        b"PING" => Spec::new("ping", -1, session::ping).when_subscribed(),
        // Pub/sub: the wake-ups.
        b"SUBSCRIBE" => Spec::new("subscribe", -2, pubsub::subscribe)
            .when_subscribed()
            .noscript(),
        b"UNSUBSCRIBE" => Spec::new("unsubscribe", -1, pubsub::unsubscribe)
            .when_subscribed()
            .noscript(),
        b"PUBLISH" => Spec::new("publish", 3, pubsub::publish),
        // The server.
        b"INFO" => Spec::new("info", -1, admin::info),
        b"TIME" => Spec::new("time", 1, admin::time),
        b"FLUSHALL" => Spec::new("flushall", -1, admin::flushall),
        _ => {
            let name = String::from_utf8_lossy(words.first().map_or(&[][..], |w| w));
            return Err(Reply::error(format!("ERR unknown command '{name}'")));
        }
    })
}

/// `SCRIPT <subcommand>`.
fn script_subcommand(words: &[Vec<u8>]) -> Result<Spec, Reply> {
    let Some(sub) = words.get(1) else {
        // The container alone fails its arity check.
        return Ok(Spec::new("script", -2, scripts::script_load).noscript());
    };
    Ok(match sub.to_ascii_uppercase().as_slice() {
        b"LOAD" => Spec::new("script|load", 3, scripts::script_load),
        b"EXISTS" => Spec::new("script|exists", -3, scripts::script_exists),
        b"FLUSH" => Spec::new("script|flush", -2, scripts::script_flush),
        _ => {
            let sub = String::from_utf8_lossy(sub);
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{sub}'. Try SCRIPT HELP."
            )));
        }
    }
    .noscript())
}

/// `CLIENT <subcommand>`: client tracking only.
fn client_subcommand(words: &[Vec<u8>]) -> Result<Spec, Reply> {
    let Some(sub) = words.get(1) else {
        return Ok(Spec::new("client", -2, client::tracking).noscript());
    };
    Ok(match sub.to_ascii_uppercase().as_slice() {
        b"TRACKING" => Spec::new("client|tracking", -3, client::tracking),
        b"CACHING" => Spec::new("client|caching", 3, client::caching),
        _ => {
            let sub = String::from_utf8_lossy(sub);
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{sub}'. Try CLIENT HELP."
            )));
        }
    }
    .noscript())
}

/// Runs the command `words` on behalf of `session`: the reply, an error
/// one if the command is unknown, has the wrong number of arguments,
/// needs a login the connection has not made, or is not one a RESP2
/// connection may send while it listens to a channel (checked in that
/// order, as Redis does).
pub(crate) fn execute(
    server: &mut Server,
    session: &mut Session,
    words: &[Vec<u8>],
    now: Now,
) -> Reply {
    let spec = match lookup(words) {
        Ok(spec) => spec,
        Err(reply) => {
            session.caching = false;
            return reply;
        }
    };
    let reply = checked_run(server, session, spec, words, now);
    // `CLIENT CACHING YES` holds through the next command (the scripts it
    // runs included), whatever becomes of it, but for a `CLIENT` command
    // of a known subcommand (Redis's `resetClient`).
    if !spec.name.starts_with("client|") {
        session.caching = false;
    }
    reply
}

/// Runs the command of `spec` for [`execute`], once its checks pass.
fn checked_run(
    server: &mut Server,
    session: &mut Session,
    spec: Spec,
    words: &[Vec<u8>],
    now: Now,
) -> Reply {
    if !spec.fits(words.len()) {
        return Reply::error(format!(
            "ERR wrong number of arguments for '{}' command",
            spec.name
        ));
    }
    if !spec.before_auth && !session.authenticated {
        return Reply::error("NOAUTH Authentication required.");
    }
    if server.subscribe_mode(session) && !spec.when_subscribed {
        return Reply::error(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            spec.name
        ));
    }
    let reply = (spec.run)(&mut Ctx {
        server,
        session,
        words,
        now,
    });
    track(server, session, spec, read_keys(spec, words));
    reply
}

/// The keys a read-only command names (none for another command). Its
/// arity has been checked: a read names a key at least.
fn read_keys(spec: Spec, words: &[Vec<u8>]) -> &[Vec<u8>] {
    match spec.name {
        _ if !spec.reads => &[],
        "exists" => &words[1..],
        _ => &words[1..2],
    }
}

/// Client tracking after a command ran for `session` (a client's or a
/// script's, which tracks for its caller), in Redis's order: the keys it
/// changed are told of (a read that expired its key included), then, if
/// it is a read and the connection tracks every read or this one follows
/// `CLIENT CACHING YES`, `keys` are remembered.
fn track(server: &mut Server, session: &Session, spec: Spec, keys: &[Vec<u8>]) {
    server.signal_changes(Some(session.id));
    if let Some(mode) = server.tracking.mode(session.id)
        && spec.reads
        && (!mode.optin || session.caching)
    {
        for key in keys {
            server.tracking.remember(session.id, key);
        }
    }
}

/// Runs the command `words` for a script (`redis.call`, `redis.pcall`),
/// with Redis's checks and wording for scripts: unknown command, then the
/// number of arguments, then a command no script may call. The session is
/// the script's own (logged in, never in subscribe mode).
pub(crate) fn execute_in_script(
    server: &mut Server,
    session: &mut Session,
    words: &[Vec<u8>],
    now: Now,
) -> Reply {
    let Ok(spec) = lookup(words) else {
        return Reply::error("ERR Unknown Redis command called from script");
    };
    if !spec.fits(words.len()) {
        return Reply::error("ERR Wrong number of args calling Redis command from script");
    }
    if !spec.in_scripts {
        return Reply::error("ERR This Redis command is not allowed from script");
    }
    let reply = (spec.run)(&mut Ctx {
        server,
        session,
        words,
        now,
    });
    // A script's read tracks, for its caller, the keys the server picks.
    let declared = std::mem::take(&mut server.declared);
    let keys = match server.script_reads {
        ScriptReads::DeclaredKeys => &declared,
        ScriptReads::CalledKeys => read_keys(spec, words),
    };
    track(server, session, spec, keys);
    server.declared = declared;
    reply
}

/// The error for an argument that is not an integer.
pub(crate) fn not_an_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

/// The error for options that do not parse.
pub(crate) fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

impl From<WrongType> for Reply {
    fn from(_: WrongType) -> Reply {
        Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
    }
}
