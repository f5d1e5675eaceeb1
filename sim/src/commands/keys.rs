//! The commands on keys: what the lock's `SET NX PX` and the handshake's
//! `SET NX GET` send, what the scripts call, and what other clients write.

use super::{Ctx, not_an_integer, parse_int, syntax_error};
use crate::keyspace::{Now, Value};
use crate::reply::Reply;

/// `GET key`.
pub(super) fn get(c: &mut Ctx<'_>) -> Reply {
    match c.server.db(c.session).string(&c.words[1], c.now) {
        Ok(Some(value)) => Reply::bulk(value),
        Ok(None) => Reply::Null,
        Err(wrong) => wrong.into(),
    }
}

/// The options of `SET` (Redis 7's grammar, without `EXAT`, `PXAT`).
#[derive(Debug, Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    /// `EX` (seconds, `true`) or `PX` (ms, `false`), and its argument.
    expire: Option<(bool, Vec<u8>)>,
}

impl SetOptions {
    /// Parses `SET`'s words after the value, as Redis does: an option that
    /// conflicts with one already given is a syntax error.
    fn parse(words: &[Vec<u8>]) -> Result<SetOptions, Reply> {
        let mut options = SetOptions::default();
        let mut rest = words.iter();
        while let Some(word) = rest.next() {
            let expire_given = options.expire.is_some() || options.keep_ttl;
            match word.to_ascii_uppercase().as_slice() {
                b"NX" if !options.xx => options.nx = true,
                b"XX" if !options.nx => options.xx = true,
                b"GET" => options.get = true,
                b"KEEPTTL" if !expire_given => options.keep_ttl = true,
                unit @ (b"EX" | b"PX") => {
                    let seconds = unit == b"EX";
                    let other_unit = options.expire.as_ref().is_some_and(|(s, _)| *s != seconds);
                    match rest.next() {
                        Some(arg) if !options.keep_ttl && !other_unit => {
                            options.expire = Some((seconds, arg.clone()));
                        }
                        _ => return Err(syntax_error()),
                    }
                }
                _ => return Err(syntax_error()),
            }
        }
        Ok(options)
    }

    /// The expiry time in ms the options ask for at `now`, if any.
    fn expires_at(&self, now: Now) -> Result<Option<i64>, Reply> {
        let Some((seconds, arg)) = &self.expire else {
            return Ok(None);
        };
        let invalid = || Reply::error("ERR invalid expire time in 'set' command");
        let n = parse_int(arg).ok_or_else(not_an_integer)?;
        if n <= 0 {
            return Err(invalid());
        }
        let ms = if *seconds {
            n.checked_mul(1000)
        } else {
            Some(n)
        };
        ms.and_then(|ms| ms.checked_add(now.ms()))
            .map(Some)
            .ok_or_else(invalid)
    }
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|KEEPTTL]`.
pub(super) fn set(c: &mut Ctx<'_>) -> Reply {
    let options = match SetOptions::parse(&c.words[3..]) {
        Ok(options) => options,
        Err(reply) => return reply,
    };
    let expires_at = match options.expires_at(c.now) {
        Ok(at) => at,
        Err(reply) => return reply,
    };
    let double_grants = c.server.double_grants;
    let db = c.server.db(c.session);
    let key = &c.words[1];
    let old = match db.string(key, c.now) {
        Ok(old) => old.map(<[u8]>::to_vec),
        // Without GET, SET replaces a key of any type.
        Err(wrong) if options.get => return wrong.into(),
        Err(_) => Some(Vec::new()),
    };
    let found = old.is_some();
    let reply = if options.get {
        old.map_or(Reply::Null, Reply::Bulk)
    } else {
        Reply::OK
    };
    let nx_refuses = found && !double_grants;
    if (options.nx && nx_refuses) || (options.xx && !found) {
        return if options.get { reply } else { Reply::Null };
    }
    let value = Value::Str(c.words[2].clone());
    if options.keep_ttl {
        db.replace(key, value, c.now);
    } else {
        db.set(key, value, expires_at);
    }
    reply
}

/// `DEL key...`: how many were live.
pub(super) fn del(c: &mut Ctx<'_>) -> Reply {
    let db = c.server.db(c.session);
    let removed = c.words[1..]
        .iter()
        .filter(|key| db.remove(key, c.now))
        .count();
    Reply::Integer(removed as i64)
}

/// `EXISTS key...`: how many are live (a key named twice counts twice).
pub(super) fn exists(c: &mut Ctx<'_>) -> Reply {
    let db = c.server.db(c.session);
    let live = c.words[1..]
        .iter()
        .filter(|key| db.value(key, c.now).is_some())
        .count();
    Reply::Integer(live as i64)
}

/// `TYPE key`.
pub(super) fn type_of(c: &mut Ctx<'_>) -> Reply {
    let name = c
        .server
        .db(c.session)
        .value(&c.words[1], c.now)
        .map_or("none", Value::type_name);
    Reply::Simple(name.into())
}

/// `PTTL key`: -2 if missing, -1 without expiry, else the ms left (0 at
/// the last millisecond).
pub(super) fn pttl(c: &mut Ctx<'_>) -> Reply {
    Reply::Integer(match c.server.db(c.session).expiry(&c.words[1], c.now) {
        None => -2,
        Some(None) => -1,
        Some(Some(at)) => at.saturating_sub(c.now.ms()).max(0),
    })
}

/// The conditions of `PEXPIRE`.
#[derive(Debug, Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl ExpireFlags {
    fn parse(words: &[Vec<u8>]) -> Result<ExpireFlags, Reply> {
        let mut flags = ExpireFlags::default();
        for word in words {
            match word.to_ascii_uppercase().as_slice() {
                b"NX" => flags.nx = true,
                b"XX" => flags.xx = true,
                b"GT" => flags.gt = true,
                b"LT" => flags.lt = true,
                _ => {
                    let word = String::from_utf8_lossy(word);
                    return Err(Reply::error(format!("ERR Unsupported option {word}")));
                }
            }
        }
        if flags.nx && (flags.xx || flags.gt || flags.lt) {
            return Err(Reply::error(
                "ERR NX and XX, GT or LT options at the same time are not compatible",
            ));
        }
        if flags.gt && flags.lt {
            return Err(Reply::error(
                "ERR GT and LT options at the same time are not compatible",
            ));
        }
        Ok(flags)
    }

    /// Whether a key whose expiry is `current` may get `at`.
    fn allow(&self, current: Option<i64>, at: i64) -> bool {
        !(self.nx && current.is_some()
            || self.xx && current.is_none()
            || self.gt && current.is_none_or(|c| at <= c)
            || self.lt && current.is_some_and(|c| at >= c))
    }
}

/// `PEXPIRE key ms [NX|XX|GT|LT]`: 1 if set; a time not after `now`
/// deletes the key (and is 1 too).
pub(super) fn pexpire(c: &mut Ctx<'_>) -> Reply {
    let flags = match ExpireFlags::parse(&c.words[3..]) {
        Ok(flags) => flags,
        Err(reply) => return reply,
    };
    let Some(ms) = parse_int(&c.words[2]) else {
        return not_an_integer();
    };
    let Some(at) = ms.checked_add(c.now.ms()) else {
        return Reply::error("ERR invalid expire time in 'pexpire' command");
    };
    let db = c.server.db(c.session);
    let key = &c.words[1];
    let Some(current) = db.expiry(key, c.now) else {
        return Reply::Integer(0);
    };
    if !flags.allow(current, at) {
        return Reply::Integer(0);
    }
    if at <= c.now.ms() {
        db.remove(key, c.now);
    } else {
        db.set_expiry(key, Some(at), c.now);
    }
    Reply::Integer(1)
}

/// `INCR key`: the new value; the key keeps its expiry.
pub(super) fn incr(c: &mut Ctx<'_>) -> Reply {
    let db = c.server.db(c.session);
    let key = &c.words[1];
    let current = match db.string(key, c.now) {
        Ok(None) => 0,
        Ok(Some(text)) => match parse_int(text) {
            Some(n) => n,
            None => return not_an_integer(),
        },
        Err(wrong) => return wrong.into(),
    };
    let Some(next) = current.checked_add(1) else {
        return Reply::error("ERR increment or decrement would overflow");
    };
    db.replace(key, Value::Str(next.to_string().into_bytes()), c.now);
    Reply::Integer(next)
}

/// `RPUSH key value...`: the list's new length. Other clients' keys of
/// another type are made with it.
pub(super) fn rpush(c: &mut Ctx<'_>) -> Reply {
    match c.server.db(c.session).list(&c.words[1], c.now) {
        Ok(list) => {
            list.extend(c.words[2..].iter().cloned());
            Reply::Integer(list.len() as i64)
        }
        Err(wrong) => wrong.into(),
    }
}
