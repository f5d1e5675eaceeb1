//! The commands on the connection itself: logging in, the protocol, the
//! database, and closing.

use super::{Ctx, not_an_integer, parse_int, syntax_error};
use crate::reply::{Protocol, Reply};
use crate::server::{DATABASES, Server};

/// Whether `user` may log in with `password`: only the default user
/// exists, and without `requirepass` it takes any password.
fn accepts(server: &Server, user: &[u8], password: &[u8]) -> bool {
    user == b"default" && server.password.as_deref().is_none_or(|p| p == password)
}

fn wrong_password() -> Reply {
    Reply::error("WRONGPASS invalid username-password pair or user is disabled.")
}

/// `AUTH [user] password`. A failed attempt leaves the connection as it
/// was (logged in or not).
pub(super) fn auth(c: &mut Ctx<'_>) -> Reply {
    let (user, password) = match c.words {
        [_, password] if c.server.password.is_some() => (&b"default"[..], password),
        [_, _] => {
            return Reply::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            );
        }
        [_, user, password] => (user.as_slice(), password),
        _ => return syntax_error(),
    };
    if accepts(c.server, user, password) {
        c.session.authenticated = true;
        Reply::OK
    } else {
        wrong_password()
    }
}

/// `HELLO [version [AUTH user password] [SETNAME name]]`: switches the
/// protocol and replies with the server's description, in the new
/// protocol.
pub(super) fn hello(c: &mut Ctx<'_>) -> Reply {
    let mut protocol = None;
    if let Some(version) = c.words.get(1) {
        protocol = match parse_int(version) {
            Some(2) => Some(Protocol::Resp2),
            Some(3) => Some(Protocol::Resp3),
            Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
            None => {
                return Reply::error("ERR Protocol version is not an integer or out of range");
            }
        };
    }
    let mut login = None;
    let mut options = c.words.iter().skip(2);
    while let Some(option) = options.next() {
        let option_name = option.to_ascii_uppercase();
        let left = options.len();
        match option_name.as_slice() {
            b"AUTH" if left >= 2 => login = options.next().zip(options.next()),
            b"SETNAME" if left >= 1 => drop(options.next()),
            _ => {
                let option = String::from_utf8_lossy(option);
                return Reply::error(format!("ERR Syntax error in HELLO option '{option}'"));
            }
        }
    }
    if let Some((user, password)) = login {
        if !accepts(c.server, user, password) {
            return wrong_password();
        }
        c.session.authenticated = true;
    }
    if !c.session.authenticated {
        return Reply::error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        );
    }
    if let Some(protocol) = protocol {
        c.session.protocol = protocol;
        c.server.tracking.set_protocol(c.session.id, protocol);
    }
    let proto = match c.session.protocol {
        Protocol::Resp2 => 2,
        Protocol::Resp3 => 3,
    };
    let field = |name: &str, value: Reply| (Reply::bulk(name), value);
    Reply::Map(vec![
        field("server", Reply::bulk("redis")),
        field("version", Reply::bulk(crate::VERSION)),
        field("proto", Reply::Integer(proto)),
        field("id", Reply::Integer(c.session.id as i64)),
        field("mode", Reply::bulk("standalone")),
        field("role", Reply::bulk("master")),
        field("modules", Reply::Array(Vec::new())),
    ])
}

/// `QUIT`: `+OK`, then the connection closes.
pub(super) fn quit(c: &mut Ctx<'_>) -> Reply {
    c.session.closing = true;
    Reply::OK
}

/// `SELECT db`.
pub(super) fn select(c: &mut Ctx<'_>) -> Reply {
    let Some(db) = parse_int(&c.words[1]).filter(|&db| i32::try_from(db).is_ok()) else {
        return not_an_integer();
    };
    match usize::try_from(db) {
        Ok(db) if db < DATABASES => {
            c.session.db = db;
            Reply::OK
        }
        _ => Reply::error("ERR DB index is out of range"),
    }
}

/// `PING [message]`; on a RESP2 connection that listens to a channel,
/// `pong` and the message (empty if none) in an array.
pub(super) fn ping(c: &mut Ctx<'_>) -> Reply {
    let subscribe_mode = c.server.subscribe_mode(c.session);
    match c.words {
        [_] if subscribe_mode => Reply::Array(vec![Reply::bulk("pong"), Reply::bulk("")]),
        [_, message] if subscribe_mode => {
            Reply::Array(vec![Reply::bulk("pong"), Reply::bulk(message)])
        }
        [_] => Reply::Simple("PONG".into()),
        [_, message] => Reply::bulk(message),
        _ => Reply::error("ERR wrong number of arguments for 'ping' command"),
    }
}
