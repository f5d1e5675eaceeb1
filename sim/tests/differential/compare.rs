//! How a model's frames are held against the server's: the same number,
//! in the same order (replies and pushes alike), each equal, except where
//! a reply carries what differs from one server to another (error
//! wording, `INFO`, `HELLO`).

use std::collections::BTreeMap;

use super::wire::Value;

/// How a frame is compared, from what the server sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Equal, errors by their code.
    Exact,
    /// `INFO`: the fields a client reads.
    Info,
    /// `HELLO`: its kind and protocol.
    Hello,
}

impl Check {
    /// `INFO`'s text and `HELLO`'s map (a flat array in RESP2) are the
    /// only replies of their shapes the cases meet.
    fn of(frame: &Value) -> Check {
        match frame {
            Value::Verbatim(_) => Check::Info,
            Value::Bulk(text) if text.starts_with(b"# Server") => Check::Info,
            Value::Map(_) => Check::Hello,
            Value::Array(items) if items.first() == Some(&Value::Bulk(b"server".to_vec())) => {
                Check::Hello
            }
            _ => Check::Exact,
        }
    }
}

/// `Ok` if the model's frames stand for the server's, one for one.
pub(crate) fn compare_frames(
    model: &[Value],
    server: &[Value],
    ids: &mut RunIds,
) -> Result<(), String> {
    for (i, (model, server)) in model.iter().zip(server).enumerate() {
        compare(Check::of(server), model, server, ids).map_err(|why| {
            format!("frame {i}: {why}\n  server: {server:?}\n  model:  {model:?}")
        })?;
    }
    if model.len() != server.len() {
        let (side, extra) = if server.len() > model.len() {
            ("server", &server[model.len()..])
        } else {
            ("model", &model[server.len()..])
        };
        return Err(format!(
            "{} frames from the server, {} from the model; the {side}'s last: {extra:?}",
            server.len(),
            model.len()
        ));
    }
    Ok(())
}

/// Whether `frame` is a push: RESP3's kind, or, in RESP2, an array that a
/// subscribed connection receives (`message`, `subscribe`,
/// `unsubscribe` and their channel).
pub(crate) fn is_push(frame: &Value) -> bool {
    match frame {
        Value::Push(_) => true,
        Value::Array(items) => matches!(
            items.first(),
            Some(Value::Bulk(kind)) if items.len() == 3 && [&b"message"[..], b"subscribe", b"unsubscribe"].contains(&kind.as_slice())
        ),
        _ => false,
    }
}

/// The run ids each side has shown, in order: a restart must show a new
/// one on both sides at the same step.
#[derive(Default)]
pub(crate) struct RunIds {
    model: Vec<Vec<u8>>,
    server: Vec<Vec<u8>>,
}

/// The position of `id` among those seen, added if new.
fn position(seen: &mut Vec<Vec<u8>>, id: &[u8]) -> usize {
    match seen.iter().position(|s| s == id) {
        Some(i) => i,
        None => {
            seen.push(id.to_vec());
            seen.len() - 1
        }
    }
}

/// How many replies of each kind a run compared (by error code for
/// errors), to show what the cases reach.
pub(crate) type Tally = BTreeMap<String, u64>;

/// Counts `value` in `tally`: a push by its kind (`>message`), a reply by
/// its type, an error by its code.
pub(crate) fn count(tally: &mut Tally, value: &Value) {
    let kind = match value {
        Value::Push(items) | Value::Array(items) if is_push(value) => match items.as_slice() {
            // A wake-up names a waiter; a hint adds when to try.
            [Value::Bulk(kind), _, Value::Bulk(payload)] if kind == b"message" => {
                let number = |n: &[u8]| !n.is_empty() && n.iter().all(u8::is_ascii_digit);
                let fields: Vec<&[u8]> = payload.split(|&b| b == b' ').collect();
                match fields.as_slice() {
                    [id] if number(id) => ">message id",
                    [id, window] if number(id) && number(window) => ">message id window",
                    _ => ">message",
                }
                .to_owned()
            }
            // A `FLUSHALL`'s invalidation names no key.
            [Value::Bulk(kind), Value::Null(_)] if kind == b"invalidate" => {
                ">invalidate null".to_owned()
            }
            [Value::Bulk(kind), ..] => format!(">{}", String::from_utf8_lossy(kind)),
            _ => ">push".to_owned(),
        },
        Value::Error(message) => format!("-{}", String::from_utf8_lossy(code(message))),
        Value::Simple(text) if text.starts_with(b"WAIT ") => {
            let wait = &text[b"WAIT ".len()..];
            let wait: &[u8] = match wait {
                b"-1" | b"0" => wait,
                // 1e14 ms or more: what Lua's own `%.14g` would write with
                // an exponent, and `%d` writes whole.
                _ if wait.len() >= 15 => b"n (15 digits or more)",
                _ => b"n",
            };
            format!("+WAIT {}", String::from_utf8_lossy(wait))
        }
        Value::Simple(text) => format!("+{}", String::from_utf8_lossy(text)),
        Value::Integer(n) if *n < 0 => ":negative".to_owned(),
        Value::Integer(n) => format!(":{}", (*n).min(2)),
        Value::Bulk(text) if text.starts_with(b"reserved ") => "$reserved".to_owned(),
        Value::Bulk(_) => "$bulk".to_owned(),
        Value::Double(_) => ",double".to_owned(),
        Value::Null(_) => "null".to_owned(),
        Value::Verbatim(_) => "=verbatim".to_owned(),
        Value::Array(_) => "*array".to_owned(),
        Value::Map(_) => "%map".to_owned(),
        other => format!("{other:?}"),
    };
    *tally.entry(kind).or_default() += 1;
}

/// `Ok` if the model's reply stands for the server's.
fn compare(check: Check, model: &Value, server: &Value, ids: &mut RunIds) -> Result<(), String> {
    if let (Value::Error(model), Value::Error(server)) = (model, server) {
        return errors(model, server);
    }
    match check {
        Check::Exact if model == server => Ok(()),
        Check::Exact => Err("the replies differ".to_owned()),
        Check::Info => info(model, server, ids),
        Check::Hello => hello(model, server),
    }
}

/// The code of an error: its first word.
fn code(message: &[u8]) -> &[u8] {
    message.split(|&b| b == b' ').next().unwrap_or_default()
}

/// Errors compare by their code; a script's own error (`FOREIGNKEY`),
/// whose text the client reads, compares whole.
fn errors(model: &[u8], server: &[u8]) -> Result<(), String> {
    if code(model) != code(server) {
        return Err("the error codes differ".to_owned());
    }
    if code(model) == b"FOREIGNKEY" && model != server {
        return Err("the FOREIGNKEY errors name different keys".to_owned());
    }
    Ok(())
}

/// The `field:value` lines of an `INFO` text.
fn fields(text: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(field, value)| (field.to_owned(), value.trim_end().to_owned()))
        .collect()
}

/// `INFO`: the same kind of string, and the fields a client reads equal;
/// the run ids new at the same restarts.
fn info(model: &Value, server: &Value, ids: &mut RunIds) -> Result<(), String> {
    let (model, server) = match (model, server) {
        (Value::Bulk(m), Value::Bulk(s)) | (Value::Verbatim(m), Value::Verbatim(s)) => {
            (fields(m), fields(s))
        }
        _ => return Err("INFO replies of different kinds".to_owned()),
    };
    for field in [
        "role",
        "cluster_enabled",
        "uptime_in_seconds",
        "server_time_usec",
    ] {
        if model.get(field) != server.get(field) {
            return Err(format!("INFO fields {field} differ"));
        }
    }
    let run_id = |fields: &BTreeMap<String, String>| -> Result<Vec<u8>, String> {
        let id = fields.get("run_id").ok_or("no run_id")?;
        if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("run_id {id:?} is not 40 hex digits"));
        }
        Ok(id.as_bytes().to_vec())
    };
    let (m, s) = (run_id(&model)?, run_id(&server)?);
    if position(&mut ids.model, &m) != position(&mut ids.server, &s) {
        return Err("the run ids did not change at the same restarts".to_owned());
    }
    Ok(())
}

/// `HELLO`: a map in RESP3, a flat array in RESP2, with the same fields
/// and the same protocol, role and mode.
fn hello(model: &Value, server: &Value) -> Result<(), String> {
    let pairs = |value: &Value| -> Option<BTreeMap<Vec<u8>, Value>> {
        let items = match value {
            Value::Map(items) | Value::Array(items) => items,
            _ => return None,
        };
        let mut map = BTreeMap::new();
        for pair in items.chunks(2) {
            if let [Value::Bulk(key), value] = pair {
                map.insert(key.clone(), value.clone());
            }
        }
        Some(map)
    };
    if std::mem::discriminant(model) != std::mem::discriminant(server) {
        return Err("HELLO replies of different kinds".to_owned());
    }
    let (Some(model), Some(server)) = (pairs(model), pairs(server)) else {
        return Err("a HELLO reply is not a map".to_owned());
    };
    if !model.keys().eq(server.keys()) {
        return Err("HELLO replies with different fields".to_owned());
    }
    for field in [&b"proto"[..], b"role", b"mode"] {
        if model.get(field) != server.get(field) {
            return Err(format!("HELLO fields {} differ", field.escape_ascii()));
        }
    }
    Ok(())
}
