//! The lock's scripts: release, extend, and the all-or-nothing ones over
//! several keys. Each body quotes its Lua and follows it call for call;
//! the releases hand each key they free to its first waiter
//! ([`handoff`](super::queue::handoff)).

use super::queue::handoff;
use super::{Call, Outcome, is_string};
use crate::reply::Reply;

/// [`RELEASE_SCRIPT`](redlock_mio::scripts::RELEASE_SCRIPT), after
/// `handoff`:
/// `if redis.call("get",KEYS[1])==ARGV[1] then redis.call("del",KEYS[1]) handoff(KEYS[1]) return 1 else return 0 end`
pub(super) fn release(s: &mut Call<'_>) -> Outcome {
    let (key, token) = (s.key(0)?, s.arg(0)?);
    if is_string(&s.call("get", &[key])?, token) {
        s.call("del", &[key])?;
        handoff(s, key)?;
        Ok(Reply::Integer(1))
    } else {
        Ok(Reply::Integer(0))
    }
}

/// [`EXTEND_SCRIPT`](redlock_mio::scripts::EXTEND_SCRIPT):
/// `if redis.call("get",KEYS[1]) == ARGV[1] then redis.call("pexpire",KEYS[1],ARGV[2],"GT") return 1 else return 0 end`
pub(super) fn extend(s: &mut Call<'_>) -> Outcome {
    let (key, token) = (s.key(0)?, s.arg(0)?);
    if is_string(&s.call("get", &[key])?, token) {
        let ttl = s.arg(1)?;
        s.call("pexpire", &[key, ttl, b"GT"])?;
        Ok(Reply::Integer(1))
    } else {
        Ok(Reply::Integer(0))
    }
}

/// [`ACQUIRE_MANY_SCRIPT`](redlock_mio::scripts::ACQUIRE_MANY_SCRIPT):
/// `for i=1,#KEYS do if redis.call("get",KEYS[i]) then return 0 end end`
/// `for i=1,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end return 1`
pub(super) fn acquire_many(s: &mut Call<'_>) -> Outcome {
    let keys = s.keys_from(0);
    for key in keys {
        if s.call("get", &[key])? != Reply::Null {
            return Ok(Reply::Integer(0));
        }
    }
    for key in keys {
        let (token, ttl) = (s.arg(0)?, s.arg(1)?);
        s.call("set", &[key, token, b"px", ttl])?;
    }
    Ok(Reply::Integer(1))
}

/// [`RELEASE_MANY_SCRIPT`](redlock_mio::scripts::RELEASE_MANY_SCRIPT),
/// after `handoff`:
/// `local n=0 for i=1,#KEYS do if redis.call("get",KEYS[i])==ARGV[1] then n=n+redis.call("del",KEYS[i]) handoff(KEYS[i]) end end`
/// `if n>0 then return 1 else return 0 end`
pub(super) fn release_many(s: &mut Call<'_>) -> Outcome {
    let mut deleted = 0;
    for key in s.keys_from(0) {
        let token = s.arg(0)?;
        if is_string(&s.call("get", &[key])?, token) {
            if let Reply::Integer(n) = s.call("del", &[key])? {
                deleted += n;
            }
            handoff(s, key)?;
        }
    }
    Ok(Reply::Integer(i64::from(deleted > 0)))
}

/// [`EXTEND_MANY_SCRIPT`](redlock_mio::scripts::EXTEND_MANY_SCRIPT):
/// `for i=1,#KEYS do if redis.call("get",KEYS[i])~=ARGV[1] then return 0 end end`
/// `for i=1,#KEYS do redis.call("pexpire",KEYS[i],ARGV[2],"GT") end return 1`
pub(super) fn extend_many(s: &mut Call<'_>) -> Outcome {
    let keys = s.keys_from(0);
    for key in keys {
        let token = s.arg(0)?;
        if !is_string(&s.call("get", &[key])?, token) {
            return Ok(Reply::Integer(0));
        }
    }
    for key in keys {
        let ttl = s.arg(1)?;
        s.call("pexpire", &[key, ttl, b"GT"])?;
    }
    Ok(Reply::Integer(1))
}
