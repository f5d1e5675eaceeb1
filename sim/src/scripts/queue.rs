//! The wait queue: the hand-off that every script freeing a key runs
//! after it, the acquires that wait (fenced or not), and the leave. Each body quotes its
//! Lua and follows it call for call.
//!
//! A key's queue is the sorted set `redlock-mio:queue:<key>`, whose
//! members are `<window ms>|<waiter id>|redlock-mio:wake:<client id>`,
//! scored by when each waiter began to wait. The scripts run its commands
//! under `redis.pcall`, so that a queue key of another type changes
//! nothing but the queue's own steps.

use super::fence::fenced_grant;
use super::{Call, Outcome, is_string, tonumber};
use crate::HandoffFault;
use crate::numbers::format_g;
use crate::reply::Reply;

/// Where a key's queue lives: `"redlock-mio:queue:"..k`.
fn queue_of(key: &[u8]) -> Vec<u8> {
    [&b"redlock-mio:queue:"[..], key].concat()
}

/// `"reserved "..member`: the value a handed-off key holds, which no
/// token equals.
fn reserved(member: &[u8]) -> Vec<u8> {
    [&b"reserved "[..], member].concat()
}

/// `string.match(e,"^(%d+)|(%d+)|(redlock%-mio:wake:%x+)$")`: a member's
/// window, waiter id and channel, if it has that form (`%d` and `%x` are
/// ASCII digits and hexadecimal digits of either case).
fn parse_member(member: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let mut parts = member.splitn(3, |&b| b == b'|');
    let (window, id, channel) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let client = channel.strip_prefix(b"redlock-mio:wake:")?;
    let hex = !client.is_empty() && client.iter().all(u8::is_ascii_hexdigit);
    (digits(window) && digits(id) && hex).then_some((window, id, channel))
}

/// The first member of `queue` (`redis.pcall("zrange",q,0,0)`): `None`
/// for an error (a key of another type) or an empty queue, which Lua
/// tells apart by `h.err` and `#h==0`.
fn first(s: &mut Call<'_>, queue: &[u8]) -> Option<Vec<u8>> {
    match s.pcall("zrange", &[queue, b"0", b"0"]) {
        Reply::Array(items) => match items.into_iter().next() {
            Some(Reply::Bulk(member)) => Some(member),
            _ => None,
        },
        _ => None,
    }
}

/// `tell(q,t,ch,at,i,told)`, the hand-off's telling, from rank `i` of
/// the queue `q`: the first waiter whose client hears it is told `<id>
/// <at>` (to try in `at` ms, should the waiters before it never come),
/// and the entries before it that are malformed or that nobody hears are
/// dropped. If that waiter is of the client of channel `ch` (the waiter
/// the key is reserved for), it is told too, but the telling goes on past
/// the entries of that client, adding their windows to `at`, to the first
/// waiter of another client, who is told and named in the turn key `t`
/// (its turn ends at `at` plus its window). `told` starts it past the
/// first step.
///
/// ```lua
/// local function tell(q,t,ch,at,i,told) while true do
///   local e=redis.pcall("zrange",q,i,i) if type(e)~="table" or e.err or #e==0 then return end
///   e=e[1] local w,eid,ech=string.match(e,"^(%d+)|(%d+)|(redlock%-mio:wake:%x+)$")
///   if eid and told and ech==ch then at=at+tonumber(w) i=i+1
///   else local n=0
///     if eid then n=redis.pcall("publish",ech,eid.." "..string.format("%d",at))
///       if type(n)~="number" then return end end
///     if n==0 then if redis.pcall("zrem",q,e)~=1 then return end
///     elseif ech~=ch then redis.pcall("set",t,e,"px",string.format("%d",at+tonumber(w))) return
///     else told=true at=at+tonumber(w) i=i+1 end end end end
/// ```
fn tell(
    s: &mut Call<'_>,
    (queue, turn): (&[u8], &[u8]),
    channel: Option<&[u8]>,
    mut at: f64,
    mut i: i64,
    mut told: bool,
) {
    loop {
        let rank = i.to_string();
        let entry = match s.pcall("zrange", &[queue, rank.as_bytes(), rank.as_bytes()]) {
            Reply::Array(items) => match items.into_iter().next() {
                Some(Reply::Bulk(entry)) => entry,
                _ => return,
            },
            _ => return,
        };
        let parsed = parse_member(&entry);
        let window = parsed.and_then(|(w, _, _)| tonumber(w)).unwrap_or(0.0);
        match parsed {
            Some((_, _, ech)) if told && Some(ech) == channel => {
                at += window;
                i += 1;
                continue;
            }
            _ => {}
        }
        let mut heard = 0;
        if let Some((_, id, ech)) = parsed {
            let hint = [id, b" ", lua_int(at).as_bytes()].concat();
            match s.pcall("publish", &[ech, &hint]) {
                Reply::Integer(n) => heard = n,
                _ => return,
            }
        }
        match parsed {
            Some((_, _, ech)) if heard != 0 => {
                if Some(ech) != channel {
                    let px = lua_int(at + window);
                    s.pcall("set", &[turn, &entry, b"px", px.as_bytes()]);
                    return;
                }
                told = true;
                at += window;
                i += 1;
            }
            _ => {
                if s.pcall("zrem", &[queue, &entry]) != Reply::Integer(1) {
                    return;
                }
            }
        }
    }
}

/// `string.format("%d",n)` of a Lua number the scripts compute (a sum of
/// windows): its integer part.
fn lua_int(n: f64) -> String {
    (n as i64).to_string()
}

/// Where a key's turn lives: `"redlock-mio:turn:"..k`, the waiter the
/// last hand-off told to try when its turn comes, should the waiters
/// before it never come, until that turn ends.
fn turn_of(key: &[u8]) -> Vec<u8> {
    [&b"redlock-mio:turn:"[..], key].concat()
}

/// `handoff(k)`, the function at the top of every script that frees a
/// key (see [`redlock_mio::scripts`]):
///
/// ```lua
/// local function handoff(k) local q="redlock-mio:queue:"..k
///   if redis.pcall("exists",q)~=1 then return end
///   local t="redlock-mio:turn:"..k redis.pcall("del",t) while true do
///   local h=redis.pcall("zrange",q,0,0) if type(h)~="table" or h.err or #h==0 then return end
///   h=h[1] if redis.pcall("zrem",q,h)~=1 then return end
///   local r,id,ch=string.match(h,"^([1-9]%d*)|(%d+)|(redlock%-mio:wake:%x+)$")
///   if r and #r<=9 then
///     local n=redis.pcall("publish",ch,id) if type(n)~="number" then return end
///     if n>0 then redis.call("set",k,"reserved "..h,"px",r)
///       tell(q,t,ch,tonumber(r),0,false) return end end end end
/// ```
pub(super) fn handoff(s: &mut Call<'_>, key: &[u8]) -> Result<(), Reply> {
    let fault = s.handoff_fault();
    if fault == Some(HandoffFault::Untold) {
        return Ok(());
    }
    let queue = queue_of(key);
    if s.pcall("exists", &[&queue]) != Reply::Integer(1) {
        return Ok(());
    }
    let turn = turn_of(key);
    s.pcall("del", &[&turn]);
    let mut skipped = 0;
    loop {
        if let Some(HandoffFault::SkipCapped(cap)) = fault {
            if skipped >= cap {
                return Ok(());
            }
            skipped += 1;
        }
        let Some(head) = first(s, &queue) else {
            return Ok(());
        };
        if s.pcall("zrem", &[&queue, &head]) != Reply::Integer(1) {
            return Ok(());
        }
        let Some((window, id, channel)) = parse_member(&head) else {
            continue;
        };
        // `[1-9]%d*`, at most 9 digits: a `PX` the reservation takes.
        if window.len() > 9 || window.first() == Some(&b'0') {
            continue;
        }
        let heard = match s.pcall("publish", &[channel, id]) {
            Reply::Integer(n) => n,
            _ => return Ok(()),
        };
        if heard > 0 {
            s.call("set", &[key, &reserved(&head), b"px", window])?;
            let at = tonumber(window).unwrap_or(0.0);
            tell(s, (&queue, &turn), Some(channel), at, 0, false);
            return Ok(());
        }
    }
}

/// `turn(k,m)`: whether the turn of `member` on `key` has come (the turn
/// key names it, and less than its window is left of it), in which case
/// the entries before it in the queue, whose turns are over, are dropped.
///
/// ```lua
/// local function turn(k,m) local t="redlock-mio:turn:"..k
///   if redis.pcall("get",t)~=m then return false end
///   local w=tonumber(string.match(m,"^(%d+)|")) local p=redis.pcall("pttl",t)
///   if not w or type(p)~="number" or p>w then return false end
///   local q="redlock-mio:queue:"..k local rk=redis.pcall("zrank",q,m)
///   if type(rk)~="number" then return false end
///   for _=1,rk do local h=redis.pcall("zrange",q,0,0)
///     if type(h)~="table" or h.err or #h==0 or redis.pcall("zrem",q,h[1])~=1 then return false end end
///   return true end
/// ```
fn turn(s: &mut Call<'_>, key: &[u8], member: &[u8]) -> bool {
    if s.handoff_fault() == Some(HandoffFault::TurnIgnored) {
        return false;
    }
    let turn = turn_of(key);
    if !is_string(&s.pcall("get", &[&turn]), member) {
        return false;
    }
    let Some(window) = leading_window(member) else {
        return false;
    };
    match s.pcall("pttl", &[&turn]) {
        Reply::Integer(p) if p as f64 <= window => {}
        _ => return false,
    }
    let queue = queue_of(key);
    let Reply::Integer(rank) = s.pcall("zrank", &[&queue, member]) else {
        return false;
    };
    for _ in 0..rank {
        let Some(head) = first(s, &queue) else {
            return false;
        };
        if s.pcall("zrem", &[&queue, &head]) != Reply::Integer(1) {
            return false;
        }
    }
    true
}

/// `tonumber(string.match(m,"^(%d+)|"))`: the digits before a member's
/// first `|`, as a number.
fn leading_window(member: &[u8]) -> Option<f64> {
    let end = member.iter().position(|&b| b == b'|')?;
    let digits = &member[..end];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    tonumber(digits)
}

/// [`WAIT_ACQUIRE_SCRIPT`](redlock_mio::scripts::WAIT_ACQUIRE_SCRIPT),
/// after `handoff`:
///
/// ```lua
/// local m=ARGV[3] local mine="reserved "..m local wait=0 local held=false
/// for i=1,#KEYS do local k=KEYS[i] local v=redis.call("get",k)
///   if not v then local h=redis.pcall("zrange","redlock-mio:queue:"..k,0,0)
///     if type(h)=="table" and not h.err and #h>0 and h[1]~=m then handoff(k) v=redis.call("get",k) end end
///   if v and v~=mine then held=true local p=redis.pcall("pttl",k)
///     if type(p)~="number" or p<0 then wait=-1 elseif wait>=0 and p>wait then wait=p end end end
/// if not held then for i=1,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2])
///   redis.pcall("zrem","redlock-mio:queue:"..KEYS[i],m) end return redis.status_reply("OK") end
/// local keep=math.max(wait,0)+tonumber(ARGV[5])
/// local p=ARGV[4] local tm=redis.pcall("time") if type(tm)=="table" and not tm.err then
///   local now=tonumber(tm[1])*1000000+tonumber(tm[2]) local c=tonumber(p)
///   if c and c<now-1000000 then p=string.format("%d",now-1000000)
///   elseif c and c>now+1000000 then p=string.format("%d",now+1000000) end end
/// for i=1,#KEYS do local q="redlock-mio:queue:"..KEYS[i] redis.pcall("zadd",q,"NX",p,m)
///   local t=redis.pcall("pttl",q) if type(t)=="number" and t<keep then redis.pcall("pexpire",q,keep) end end
/// return redis.status_reply("WAIT "..string.format("%d",wait))
/// ```
pub(super) fn wait_acquire(s: &mut Call<'_>) -> Outcome {
    let (keys, member) = (s.keys_from(0), s.arg(2)?);
    if let Some(wait) = blocked(s, keys, member)? {
        return enqueue(s, keys, member, wait);
    }
    take(s, keys, member)?;
    Ok(Reply::OK)
}

/// [`FENCED_WAIT_ACQUIRE_SCRIPT`](redlock_mio::scripts::FENCED_WAIT_ACQUIRE_SCRIPT),
/// after `handoff` and the fence scripts' `ok`: the loop of
/// [`wait_acquire`] over `KEYS[3..]`, its queueing if a key is held, else
/// the end of [`fenced_acquire`](super::fence::fenced_acquire) with the
/// writes of `wait_acquire`:
///
/// ```lua
/// local m=ARGV[3] local mine="reserved "..m local wait=0 local held=false
/// for i=3,#KEYS do local k=KEYS[i] local v=redis.call("get",k)
///   if not v then local h=redis.pcall("zrange","redlock-mio:queue:"..k,0,0)
///     if type(h)=="table" and not h.err and #h>0 and h[1]~=m then handoff(k) v=redis.call("get",k) end end
///   if v and v~=mine then held=true local p=redis.pcall("pttl",k)
///     if type(p)~="number" or p<0 then wait=-1 elseif wait>=0 and p>wait then wait=p end end end
/// if held then local keep=math.max(wait,0)+tonumber(ARGV[5])
///   local p=ARGV[4] local tm=redis.pcall("time") if type(tm)=="table" and not tm.err then
///     local now=tonumber(tm[1])*1000000+tonumber(tm[2]) local c=tonumber(p)
///     if c and c<now-1000000 then p=string.format("%d",now-1000000)
///     elseif c and c>now+1000000 then p=string.format("%d",now+1000000) end end
///   for i=3,#KEYS do local q="redlock-mio:queue:"..KEYS[i] redis.pcall("zadd",q,"NX",p,m)
///     local t=redis.pcall("pttl",q) if type(t)=="number" and t<keep then redis.pcall("pexpire",q,keep) end end
///   return redis.status_reply("WAIT "..string.format("%d",wait)) end
/// local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end
/// local l=false if not c then l=redis.pcall("get",KEYS[2])
///   if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end end
/// for i=3,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2])
///   redis.pcall("zrem","redlock-mio:queue:"..KEYS[i],m) end
/// if c then return redis.call("incr",KEYS[1]) end
/// if not l then local t=redis.call("time") l=t[1]..string.format("%06d",t[2]) redis.call("set",KEYS[2],l) end
/// return -tonumber(l)
/// ```
pub(super) fn fenced_wait_acquire(s: &mut Call<'_>) -> Outcome {
    let (keys, member) = (s.keys_from(2), s.arg(2)?);
    if let Some(wait) = blocked(s, keys, member)? {
        return enqueue(s, keys, member, wait);
    }
    fenced_grant(s, |s| take(s, keys, member))
}

/// The acquires' loop over their keys: a missing key with another waiter
/// than `member` first in its queue is handed to that waiter. `None` if
/// every key is free for `member` (missing, or reserved for it); else
/// `wait`, the longest `PTTL` of the keys held against it (a Lua number:
/// `-1` once one has no TTL, or its `PTTL` fails).
fn blocked(s: &mut Call<'_>, keys: &[Vec<u8>], member: &[u8]) -> Result<Option<f64>, Reply> {
    let mine = reserved(member);
    let mut wait = 0.0_f64;
    let mut held = false;
    for key in keys {
        let mut value = s.call("get", &[key])?;
        if value == Reply::Null {
            let head = first(s, &queue_of(key));
            if head.is_some_and(|head| head != member) && !turn(s, key, member) {
                handoff(s, key)?;
                value = s.call("get", &[key])?;
            }
        }
        if value != Reply::Null && !is_string(&value, &mine) {
            held = true;
            match s.pcall("pttl", &[key]) {
                Reply::Integer(p) if p >= 0 => {
                    if wait >= 0.0 && p as f64 > wait {
                        wait = p as f64;
                    }
                }
                _ => wait = -1.0,
            }
        }
    }
    Ok(held.then_some(wait))
}

/// A waiter refused: enters `member` in the queue of each key at its place
/// (`ZADD NX`, `ARGV[4]`), keeps each queue at least `keep`, the wait plus
/// the margin (`ARGV[5]`), and replies `+WAIT <wait>`.
fn enqueue(s: &mut Call<'_>, keys: &[Vec<u8>], member: &[u8], wait: f64) -> Outcome {
    let Some(margin) = tonumber(s.arg(4)?) else {
        return Err(Reply::error(
            "ERR user_script:1: attempt to perform arithmetic on a nil value",
        ));
    };
    let keep = wait.max(0.0) + margin;
    // A Lua number passed to a command is written `%.17g`.
    let keep_arg = format_g(keep, 17);
    let place = clamped_place(s)?;
    for key in keys {
        let queue = queue_of(key);
        s.pcall("zadd", &[&queue, b"NX", &place, member]);
        if let Reply::Integer(t) = s.pcall("pttl", &[&queue]) {
            if (t as f64) < keep {
                s.pcall("pexpire", &[&queue, keep_arg.as_bytes()]);
            }
        }
    }
    // `string.format("%d", wait)`: an integer, however large.
    Ok(Reply::Simple(format!("WAIT {}", wait as i64).into()))
}

/// The waiter's place (`ARGV[4]`) taken within a second of the master's
/// `TIME`, as text; as it is when `TIME` fails or the place is no number.
fn clamped_place(s: &mut Call<'_>) -> Result<Vec<u8>, Reply> {
    const SECOND: f64 = 1_000_000.0;
    let place = s.arg(3)?.to_vec();
    let Reply::Array(parts) = s.pcall("time", &[]) else {
        return Ok(place);
    };
    let now = match parts.as_slice() {
        [Reply::Bulk(secs), Reply::Bulk(micros)] => match (tonumber(secs), tonumber(micros)) {
            (Some(secs), Some(micros)) => secs * SECOND + micros,
            _ => return Ok(place),
        },
        _ => return Ok(place),
    };
    // `string.format("%d", ...)`: an integer.
    Ok(match tonumber(&place) {
        Some(c) if c < now - SECOND => format!("{}", (now - SECOND) as i64).into_bytes(),
        Some(c) if c > now + SECOND => format!("{}", (now + SECOND) as i64).into_bytes(),
        _ => place,
    })
}

/// A waiter's acquire: sets each key to the token (`ARGV[1]`, `PX`
/// `ARGV[2]`) and takes `member` off its queue, key by key.
fn take(s: &mut Call<'_>, keys: &[Vec<u8>], member: &[u8]) -> Result<(), Reply> {
    for key in keys {
        let (token, ttl) = (s.arg(0)?, s.arg(1)?);
        s.call("set", &[key, token, b"px", ttl])?;
        s.pcall("zrem", &[&queue_of(key), member]);
    }
    Ok(())
}

/// [`LEAVE_SCRIPT`](redlock_mio::scripts::LEAVE_SCRIPT), after `handoff`:
///
/// ```lua
/// local m=ARGV[1] local mine="reserved "..m
/// for i=1,#KEYS do local k=KEYS[i] local q="redlock-mio:queue:"..k local t="redlock-mio:turn:"..k
///   local rk=redis.pcall("zrank",q,m) redis.pcall("zrem",q,m)
///   if redis.call("get",k)==mine then redis.call("del",k) handoff(k)
///   elseif type(rk)=="number" and redis.pcall("get",t)==m then
///     local p=redis.pcall("pttl",t) local w=tonumber(string.match(m,"^(%d+)|")) redis.pcall("del",t)
///     if type(p)=="number" and w then tell(q,t,nil,math.max(p-w,0),rk,true) end end end
/// return 1
/// ```
pub(super) fn leave(s: &mut Call<'_>) -> Outcome {
    let member = s.arg(0)?;
    let mine = reserved(member);
    for key in s.keys_from(0) {
        let (queue, turn) = (queue_of(key), turn_of(key));
        let rank = s.pcall("zrank", &[&queue, member]);
        s.pcall("zrem", &[&queue, member]);
        if is_string(&s.call("get", &[key])?, &mine) {
            s.call("del", &[key])?;
            handoff(s, key)?;
        } else if let Reply::Integer(rank) = rank {
            if is_string(&s.pcall("get", &[&turn]), member) {
                let left = s.pcall("pttl", &[&turn]);
                let window = leading_window(member);
                s.pcall("del", &[&turn]);
                if let (Reply::Integer(left), Some(window)) = (left, window) {
                    let at = (left as f64 - window).max(0.0);
                    tell(s, (&queue, &turn), None, at, rank, true);
                }
            }
        }
    }
    Ok(Reply::Integer(1))
}

#[cfg(test)]
mod tests {
    use super::parse_member;

    #[test]
    fn members_match_the_scripts_pattern() {
        let good = b"250|7|redlock-mio:wake:00ff00ff00ff00fF";
        assert_eq!(
            parse_member(good),
            Some((&b"250"[..], &b"7"[..], &good[6..]))
        );
        for bad in [
            &b"250|7|redlock-mio:wake:"[..],
            b"250|7|redlock-mio:wake:0g",
            b"250|7|redlock-mio:wake:00|",
            b"+250|7|redlock-mio:wake:00",
            b"250||redlock-mio:wake:00",
            b"250|7|redlock-mio:wake:00\n",
            b"250|7|other:00",
            b"junk",
        ] {
            assert_eq!(parse_member(bad), None, "{}", bad.escape_ascii());
        }
    }
}
