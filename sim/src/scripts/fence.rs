//! The fence scripts: the fenced acquire, the raise, the read and the
//! sync. Each body quotes its Lua and follows it call for call. The
//! fenced acquire that waits is the wait queue's (`queue.rs`), and ends
//! as the fenced acquire does ([`fenced_grant`]).
//!
//! All of them start from the same Lua guard, `ok(v)`, which they apply to
//! what `redis.pcall("get", ...)` gives for the counter (`KEYS[1]`) and the
//! loss id (`KEYS[2]`):
//!
//! ```lua
//! local function ok(v) return v==false or (type(v)=="string" and #v<=16
//!   and string.find(v,"^[1-9]%d*$")~=nil and tonumber(v)<9007199254740992) end
//! ```

use super::{Call, Outcome, less, number_reply, tonumber};
use crate::reply::Reply;

/// 2^53: the counter and the loss id stay below it, where a Lua number
/// (a double) is exact.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// The scripts' `ok(v)`: a missing key, or a positive decimal integer of
/// at most 16 digits below 2^53. An error (a key of another type) is not.
fn ok(v: &Reply) -> bool {
    match v {
        Reply::Null => true,
        Reply::Bulk(text) => {
            text.len() <= 16
                && matches!(text.first(), Some(b'1'..=b'9'))
                && text.iter().all(u8::is_ascii_digit)
                && tonumber(text).is_some_and(|n| n < EXACT)
        }
        _ => false,
    }
}

/// `redis.error_reply("FOREIGNKEY "..key)`.
fn foreign(key: &[u8]) -> Reply {
    let mut message = b"FOREIGNKEY ".to_vec();
    message.extend_from_slice(key);
    Reply::Error(message)
}

/// `redis.pcall("get", key)` where the value must pass `ok`: the value
/// (`Null` for `false`), or the script's `FOREIGNKEY` reply.
fn checked_get(s: &mut Call<'_>, key: &[u8]) -> Result<Reply, Reply> {
    let value = s.pcall("get", &[key]);
    if ok(&value) {
        Ok(value)
    } else {
        Err(foreign(key))
    }
}

/// `local t=redis.call("time") ... t[1]..string.format("%06d",t[2])`: the
/// server's time in microseconds, as text.
fn time_text(s: &mut Call<'_>) -> Result<Vec<u8>, Reply> {
    let reply = s.call("time", &[])?;
    let Reply::Array(parts) = reply else {
        return Err(Reply::error("ERR TIME gave no array"));
    };
    match parts.as_slice() {
        [Reply::Bulk(secs), Reply::Bulk(micros)] => {
            let micros = tonumber(micros).unwrap_or_default() as i64;
            let mut text = secs.clone();
            text.extend_from_slice(format!("{micros:06}").as_bytes());
            Ok(text)
        }
        _ => Err(Reply::error("ERR TIME gave no seconds and microseconds")),
    }
}

/// `-tonumber(l)`, returned: a negative integer.
fn negated(l: &[u8]) -> Outcome {
    match tonumber(l) {
        Some(n) => Ok(number_reply(-n)),
        None => Err(Reply::error(
            "ERR user_script:1: attempt to perform arithmetic on a nil value",
        )),
    }
}

/// Unwraps [`checked_get`] inside a body: its `FOREIGNKEY` reply ends the
/// script as its (successful) return value.
macro_rules! checked {
    ($s:expr, $key:expr) => {
        match checked_get($s, $key) {
            Ok(value) => value,
            Err(foreign) => return Ok(foreign),
        }
    };
}

/// [`FENCED_ACQUIRE_SCRIPT`](redlock_mio::scripts::FENCED_ACQUIRE_SCRIPT):
///
/// ```lua
/// for i=3,#KEYS do if redis.call("exists",KEYS[i])==1 then return false end end
/// local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end
/// local l=false if not c then l=redis.pcall("get",KEYS[2])
///   if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end end
/// for i=3,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end
/// if c then return redis.call("incr",KEYS[1]) end
/// if not l then local t=redis.call("time") l=t[1]..string.format("%06d",t[2]) redis.call("set",KEYS[2],l) end
/// return -tonumber(l)
/// ```
pub(super) fn fenced_acquire(s: &mut Call<'_>) -> Outcome {
    let keys = s.keys_from(2);
    for key in keys {
        if s.call("exists", &[key])? == Reply::Integer(1) {
            return Ok(Reply::Null);
        }
    }
    fenced_grant(s, |s| {
        for key in keys {
            let (token, ttl) = (s.arg(0)?, s.arg(1)?);
            s.call("set", &[key, token, b"px", ttl])?;
        }
        Ok(())
    })
}

/// What the fenced acquires do once their keys are free, from
/// `local c=redis.pcall("get",KEYS[1])` on (see [`fenced_acquire`]): the
/// counter checked, and the loss id if the counter is missing (a
/// `FOREIGNKEY` reply, nothing written); then `write`, the acquire's
/// writes of its keys; then the counter `INCR`ed and returned, or minus
/// the loss id (set to the server's time if absent).
pub(super) fn fenced_grant(
    s: &mut Call<'_>,
    write: impl FnOnce(&mut Call<'_>) -> Result<(), Reply>,
) -> Outcome {
    let (counter, lost) = (s.key(0)?, s.key(1)?);
    let c = checked!(s, counter);
    let mut l = Reply::Null;
    if c == Reply::Null {
        l = checked!(s, lost);
    }
    write(s)?;
    if c != Reply::Null {
        // INCR's integer crosses Lua as a number (a double) and back.
        return match s.call("incr", &[counter])? {
            Reply::Integer(n) => Ok(number_reply(n as f64)),
            other => Ok(other),
        };
    }
    let l = match l {
        Reply::Bulk(l) => l,
        _ => {
            let now = time_text(s)?;
            s.call("set", &[lost, &now])?;
            now
        }
    };
    negated(&l)
}

/// [`RAISE_SCRIPT`](redlock_mio::scripts::RAISE_SCRIPT):
///
/// ```lua
/// for i=3,#KEYS do if redis.pcall("get",KEYS[i])~=ARGV[1] then return 0 end end
/// local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end
/// local l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end
/// if not c then return -1 end
/// if l then redis.call("del",KEYS[2]) end
/// if tonumber(c)<tonumber(ARGV[2]) then redis.call("set",KEYS[1],ARGV[2]) end
/// return 1
/// ```
pub(super) fn raise(s: &mut Call<'_>) -> Outcome {
    let (counter, lost) = (s.key(0)?, s.key(1)?);
    for key in s.keys_from(2) {
        let token = s.arg(0)?;
        if !super::is_string(&s.pcall("get", &[key]), token) {
            return Ok(Reply::Integer(0));
        }
    }
    let c = checked!(s, counter);
    let l = checked!(s, lost);
    let Reply::Bulk(c) = c else {
        return Ok(Reply::Integer(-1));
    };
    if l != Reply::Null {
        s.call("del", &[lost])?;
    }
    let fence = s.arg(1)?;
    if less(tonumber(&c), tonumber(fence))? {
        s.call("set", &[counter, fence])?;
    }
    Ok(Reply::Integer(1))
}

/// [`FENCE_READ_SCRIPT`](redlock_mio::scripts::FENCE_READ_SCRIPT):
///
/// ```lua
/// local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end
/// local l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end
/// if c and not l then return tonumber(c) end
/// local t=redis.call("time") local now=t[1]..string.format("%06d",t[2])
/// if not l then l=now redis.call("set",KEYS[2],l) end
/// return l.." "..now.." "..(c or "0")
/// ```
pub(super) fn read(s: &mut Call<'_>) -> Outcome {
    let (counter, lost) = (s.key(0)?, s.key(1)?);
    let c = checked!(s, counter);
    let l = checked!(s, lost);
    if let (Reply::Bulk(c), Reply::Null) = (&c, &l) {
        return Ok(number_reply(tonumber(c).unwrap_or_default()));
    }
    let now = time_text(s)?;
    let l = match l {
        Reply::Bulk(l) => l,
        _ => {
            s.call("set", &[lost, &now])?;
            now.clone()
        }
    };
    let c = match c {
        Reply::Bulk(c) => c,
        _ => b"0".to_vec(),
    };
    Ok(Reply::Bulk([&l[..], b" ", &now, b" ", &c].concat()))
}

/// [`FENCE_SYNC_SCRIPT`](redlock_mio::scripts::FENCE_SYNC_SCRIPT):
///
/// ```lua
/// local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end
/// local l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end
/// if c and not l then return 1 end
/// for i=3,#ARGV do if ARGV[i]==l then
///   if not c or tonumber(c)<tonumber(ARGV[1]) then redis.call("set",KEYS[1],ARGV[1]) end
///   if ARGV[2]~="start" then redis.call("del",KEYS[2]) end
///   return 1 end end
/// return 0
/// ```
pub(super) fn sync(s: &mut Call<'_>) -> Outcome {
    let (counter, lost) = (s.key(0)?, s.key(1)?);
    let c = checked!(s, counter);
    let l = checked!(s, lost);
    if c != Reply::Null && l == Reply::Null {
        return Ok(Reply::Integer(1));
    }
    let Reply::Bulk(l) = l else {
        // `ARGV[i]==false` never holds.
        return Ok(Reply::Integer(0));
    };
    if !s.args_from(2).contains(&l) {
        return Ok(Reply::Integer(0));
    }
    let value = s.arg(0)?;
    let behind = match &c {
        Reply::Bulk(c) => less(tonumber(c), tonumber(value))?,
        _ => true,
    };
    if behind {
        s.call("set", &[counter, value])?;
    }
    if s.arg(1)? != b"start" {
        s.call("del", &[lost])?;
    }
    Ok(Reply::Integer(1))
}
