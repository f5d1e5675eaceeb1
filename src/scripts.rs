//! The Lua scripts the client runs on the masters, with their SHA-1s.
//!
//! They are public so that operators can audit what runs on their servers
//! and grant exactly what the scripts call (see [`operations`](crate::operations)),
//! and so that tests and tools can run them by hand. The client loads them
//! at every handshake (`SCRIPT LOAD`) and sends `EVALSHA`, falling back to
//! `EVAL` when a server answers `NOSCRIPT`. Every script changes a key only
//! while it holds the caller's token, and the fence scripts refuse keys of
//! the crate's own space that hold what the crate never writes there
//! ([`RESERVED_PREFIX`](crate::RESERVED_PREFIX)).

/// The hand-off every script that frees a key runs after it
/// ([`RELEASE_SCRIPT`], [`RELEASE_MANY_SCRIPT`], [`LEAVE_SCRIPT`],
/// [`WAIT_ACQUIRE_SCRIPT`]): `handoff(key)` takes the first waiter off the
/// key's queue (`redlock-mio:queue:<key>`, a sorted set ordered by when each
/// waiter began to wait) and publishes the waiter's id on its client's
/// channel. If its client heard it, the key is reserved for the waiter (the
/// value `reserved <member>`, which no token equals) for the waiter's
/// reservation window, and the next waiter whose client hears it is told
/// `<id> <window>`: to try once that window has passed, should the first
/// never come.
///
/// Waiters stall by process: a client that hears but never comes (paused,
/// swapped out, its threads starved) stalls every waiter it has. So when
/// the waiter told next is of the same client as the one the key is
/// reserved for, the telling goes on past that client's entries (they are
/// neither told nor dropped), adding their windows, to the first waiter of
/// another client whose client hears it; that one is told `<id> <ms>`, the
/// windows of every waiter before it, and named in the key's turn
/// (`redlock-mio:turn:<key>`, the waiter's member, expiring when its turn
/// ends). Should the waiters before it never come, its attempt finds its
/// turn come (`turn(key, member)`: named, and less than its window left),
/// drops the entries before it and takes the key: a stalled client costs
/// the waiters behind it one window per waiter of it, and a release still
/// tells at most two waiters (the walk past that client's entries costs a
/// `ZRANGE` each, and nothing when the next waiter is of another client,
/// as it is when every waiter has a client of its own). Every hand-off
/// replaces the turn. (A second
/// stalled client right behind the first is not covered: the waiters
/// behind both wait for the expiry of the key that refused them.)
///
/// A waiter whose client is gone (nobody hears its channel) is
/// dropped, and so is an entry of any other form than `<window
/// ms>|<waiter id>|redlock-mio:wake:<client id>` (the window a positive
/// integer of at most nine digits, without leading zeros, so that the
/// reservation's `PX` always takes it), however many there are: a crashed
/// process with many waiting threads leaves as many dead entries, and the
/// first live waiter behind them is still the one served. Each entry
/// looked at costs the server one `ZRANGE`, one `PUBLISH` and one `ZREM`,
/// and every one but the last is dropped, so a call costs one such step
/// per dead entry ahead of the first live waiter (and of the next one),
/// and each entry is dropped once, whatever the number of calls: the
/// queue holds one entry per waiting call, so the work is bounded by the
/// waits that existed, never by the number of releases. The
/// queue's commands run under `pcall`: a server that refuses them (a user
/// without the permissions) frees the key all the same, and nobody is
/// told. A key nobody waits for has no queue, and `EXISTS`, the cheapest
/// look a script can take, says so first: a release that nobody waits for
/// costs the server little more than the classic compare-and-delete.
macro_rules! handoff {
    () => {
        r#"local function tell(q,t,ch,at,i,told) while true do local e=redis.pcall("zrange",q,i,i) if type(e)~="table" or e.err or #e==0 then return end e=e[1] local w,eid,ech=string.match(e,"^(%d+)|(%d+)|(redlock%-mio:wake:%x+)$") if eid and told and ech==ch then at=at+tonumber(w) i=i+1 else local n=0 if eid then n=redis.pcall("publish",ech,eid.." "..string.format("%d",at)) if type(n)~="number" then return end end if n==0 then if redis.pcall("zrem",q,e)~=1 then return end elseif ech~=ch then redis.pcall("set",t,e,"px",string.format("%d",at+tonumber(w))) return else told=true at=at+tonumber(w) i=i+1 end end end end local function handoff(k) local q="redlock-mio:queue:"..k if redis.pcall("exists",q)~=1 then return end local t="redlock-mio:turn:"..k redis.pcall("del",t) while true do local h=redis.pcall("zrange",q,0,0) if type(h)~="table" or h.err or #h==0 then return end h=h[1] if redis.pcall("zrem",q,h)~=1 then return end local r,id,ch=string.match(h,"^([1-9]%d*)|(%d+)|(redlock%-mio:wake:%x+)$") if r and #r<=9 then local n=redis.pcall("publish",ch,id) if type(n)~="number" then return end if n>0 then redis.call("set",k,"reserved "..h,"px",r) tell(q,t,ch,tonumber(r),0,false) return end end end end local function turn(k,m) local t="redlock-mio:turn:"..k if redis.pcall("get",t)~=m then return false end local w=tonumber(string.match(m,"^(%d+)|")) local p=redis.pcall("pttl",t) if not w or type(p)~="number" or p>w then return false end local q="redlock-mio:queue:"..k local rk=redis.pcall("zrank",q,m) if type(rk)~="number" then return false end for _=1,rk do local h=redis.pcall("zrange",q,0,0) if type(h)~="table" or h.err or #h==0 or redis.pcall("zrem",q,h[1])~=1 then return false end end return true end "#
    };
}

/// Compare-and-delete: deletes the key only if it still holds our token,
/// then hands it to the first waiter of its queue, if any (see
/// [`WAIT_ACQUIRE_SCRIPT`]).
pub const RELEASE_SCRIPT: &str = concat!(
    handoff!(),
    r#"if redis.call("get",KEYS[1])==ARGV[1] then redis.call("del",KEYS[1]) handoff(KEYS[1]) return 1 else return 0 end"#
);

/// SHA1 of [`RELEASE_SCRIPT`], as `SCRIPT LOAD` returns it.
pub const RELEASE_SHA1: &str = "89c567845b1b50f5306500cc27f4b258318b01cb";

/// Compare-and-`PEXPIRE`: extends the key only if it still holds our
/// token, and never shortens it (`GT`): an extend delayed in the network,
/// on a connection the client gave up, cannot cut short a newer one. `1`
/// if the key holds the token (extended, or already expiring later), else
/// `0`.
pub const EXTEND_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then redis.call("pexpire",KEYS[1],ARGV[2],"GT") return 1 else return 0 end"#;

/// SHA1 of [`EXTEND_SCRIPT`], as `SCRIPT LOAD` returns it.
pub const EXTEND_SHA1: &str = "be538061265fde47686941b96d37e9137cbd0e7b";

/// All or nothing over several keys: sets every key (`PX ARGV[2]`) to the
/// token `ARGV[1]` if none of them exists, else none.
pub const ACQUIRE_MANY_SCRIPT: &str = r#"for i=1,#KEYS do if redis.call("get",KEYS[i]) then return 0 end end for i=1,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end return 1"#;
/// SHA1 of [`ACQUIRE_MANY_SCRIPT`].
pub const ACQUIRE_MANY_SHA1: &str = "fc228ec235ee22e803a6b572f5526aaf36477068";

/// Deletes every key that still holds the token `ARGV[1]`, handing each
/// to the first waiter of its queue; `1` if any did.
pub const RELEASE_MANY_SCRIPT: &str = concat!(
    handoff!(),
    r#"local n=0 for i=1,#KEYS do if redis.call("get",KEYS[i])==ARGV[1] then n=n+redis.call("del",KEYS[i]) handoff(KEYS[i]) end end if n>0 then return 1 else return 0 end"#
);
/// SHA1 of [`RELEASE_MANY_SCRIPT`].
pub const RELEASE_MANY_SHA1: &str = "b8cd2b2ad64a2fe96b99f70bc39564628dfc6106";

/// Extends every key to `ARGV[2]` ms if all still hold the token `ARGV[1]`,
/// else none; never shortens one (`GT`, as [`EXTEND_SCRIPT`]).
pub const EXTEND_MANY_SCRIPT: &str = r#"for i=1,#KEYS do if redis.call("get",KEYS[i])~=ARGV[1] then return 0 end end for i=1,#KEYS do redis.call("pexpire",KEYS[i],ARGV[2],"GT") end return 1"#;
/// SHA1 of [`EXTEND_MANY_SCRIPT`].
pub const EXTEND_MANY_SHA1: &str = "ecb5ec01e784d64adb41d90430ba5d6c1ef17d5e";

/// Fenced acquire, all or nothing over `KEYS[3..]`: sets every key to the
/// token `ARGV[1]` (`PX ARGV[2]`) if none exists, else returns nil. Then
/// `INCR`s the fence counter `KEYS[1]` and returns it, or, if the counter
/// is missing, returns minus the loss id kept in `KEYS[2]` (set now if
/// absent). `FOREIGNKEY` (nothing done) if `KEYS[1]` or `KEYS[2]` holds
/// what this crate never writes there.
pub const FENCED_ACQUIRE_SCRIPT: &str = r#"local function ok(v) return v==false or (type(v)=="string" and #v<=16 and string.find(v,"^[1-9]%d*$")~=nil and tonumber(v)<9007199254740992) end for i=3,#KEYS do if redis.call("exists",KEYS[i])==1 then return false end end local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end local l=false if not c then l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end end for i=3,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end if c then return redis.call("incr",KEYS[1]) end if not l then local t=redis.call("time") l=t[1]..string.format("%06d",t[2]) redis.call("set",KEYS[2],l) end return -tonumber(l)"#;
/// SHA1 of [`FENCED_ACQUIRE_SCRIPT`].
pub const FENCED_ACQUIRE_SHA1: &str = "c565053341d28d86c5dd6777a2fd6a53ab23aac6";

/// Raise: if every key `KEYS[3..]` still holds the token `ARGV[1]`, raises
/// the counter `KEYS[1]` to at least `ARGV[2]`, deletes the clock-start
/// mark `KEYS[2]` ([`FENCE_LOST_KEY`](crate::FENCE_LOST_KEY)) and returns 1; 0 if a key does not
/// hold the token; -1 if the counter is missing (nothing done);
/// `FOREIGNKEY` (nothing done) as for [`FENCED_ACQUIRE_SCRIPT`].
pub const RAISE_SCRIPT: &str = r#"local function ok(v) return v==false or (type(v)=="string" and #v<=16 and string.find(v,"^[1-9]%d*$")~=nil and tonumber(v)<9007199254740992) end for i=3,#KEYS do if redis.pcall("get",KEYS[i])~=ARGV[1] then return 0 end end local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end local l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end if not c then return -1 end if l then redis.call("del",KEYS[2]) end if tonumber(c)<tonumber(ARGV[2]) then redis.call("set",KEYS[1],ARGV[2]) end return 1"#;
/// SHA1 of [`RAISE_SCRIPT`].
pub const RAISE_SHA1: &str = "5e31fe373f41dba10fd9655b32f63c1d71097407";

/// Read: the counter `KEYS[1]`, an integer, when it exists without a loss
/// id `KEYS[2]`. Else, when the counter is missing (the loss id set now if
/// absent) or was started from the clock and has raised no fence since
/// (the id kept beside it), the text `"<loss id> <server time in µs>
/// <counter, or 0>"`: what a clock start needs. `FOREIGNKEY` as for
/// [`FENCED_ACQUIRE_SCRIPT`].
pub const FENCE_READ_SCRIPT: &str = r#"local function ok(v) return v==false or (type(v)=="string" and #v<=16 and string.find(v,"^[1-9]%d*$")~=nil and tonumber(v)<9007199254740992) end local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end local l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end if c and not l then return tonumber(c) end local t=redis.call("time") local now=t[1]..string.format("%06d",t[2]) if not l then l=now redis.call("set",KEYS[2],l) end return l.." "..now.." "..(c or "0")"#;
/// SHA1 of [`FENCE_READ_SCRIPT`].
pub const FENCE_READ_SHA1: &str = "85dbcb521bcf6946bbcbf7ee5711fca7f23c3755";

/// Sync: 1 if the counter `KEYS[1]` exists without a loss id `KEYS[2]`.
/// Else, if the loss id is one of `ARGV[3..]`: sets the counter to the
/// larger of `ARGV[1]` and the counter, and, unless `ARGV[2]` is `start`,
/// deletes the loss id (with `start`, a clock start, it stays beside the
/// counter until a raise); returns 1. Else 0. `FOREIGNKEY` as for
/// [`FENCED_ACQUIRE_SCRIPT`].
pub const FENCE_SYNC_SCRIPT: &str = r#"local function ok(v) return v==false or (type(v)=="string" and #v<=16 and string.find(v,"^[1-9]%d*$")~=nil and tonumber(v)<9007199254740992) end local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end local l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end if c and not l then return 1 end for i=3,#ARGV do if ARGV[i]==l then if not c or tonumber(c)<tonumber(ARGV[1]) then redis.call("set",KEYS[1],ARGV[1]) end if ARGV[2]~="start" then redis.call("del",KEYS[2]) end return 1 end end return 0"#;
/// SHA1 of [`FENCE_SYNC_SCRIPT`].
pub const FENCE_SYNC_SHA1: &str = "e7eb612d01abf6d2da6913abebdfb55835592cf6";

/// Acquire for a caller that waits, all or nothing over `KEYS` (one or
/// several resources). `ARGV`: the token, the TTL in ms, the waiter's
/// member (see the hand-off above), its place (when it began to wait, in
/// microseconds of its client's wall clock), and how long its queue entry
/// must outlive the key that blocks it, in ms.
///
/// The place is taken within a second of the master's own clock (`TIME`):
/// a client whose wall clock is off by more than that goes ahead of other
/// waiters, or behind them, by a second at most, so that a slow clock
/// cannot keep the lock from the others (clients whose clocks are right
/// keep the order of their wall clocks). A user that may not run `TIME`
/// keeps the client's place as it is.
///
/// A key is free for the waiter if it is missing or reserved for it. A
/// missing key with another waiter first in its queue is handed to that
/// one, and so is not free, unless the waiter's turn has come (see the
/// hand-off above): then the entries before it, whose turns are over,
/// are dropped, and the key is free. If every key is free, sets each to the token
/// (`PX` the TTL), takes the waiter off their queues and replies `+OK`.
/// Else it changes no key of the waiter's, enters it in every key's queue
/// (`ZADD NX`: a waiter keeps its place across attempts), keeps each queue
/// until the blocking keys expire plus the margin, and replies `+WAIT
/// <ms>`: the longest `PTTL` of the keys that block it (`-1` if one has no
/// TTL).
pub const WAIT_ACQUIRE_SCRIPT: &str = concat!(
    handoff!(),
    r#"local m=ARGV[3] local mine="reserved "..m local wait=0 local held=false for i=1,#KEYS do local k=KEYS[i] local v=redis.call("get",k) if not v then local h=redis.pcall("zrange","redlock-mio:queue:"..k,0,0) if type(h)=="table" and not h.err and #h>0 and h[1]~=m and not turn(k,m) then handoff(k) v=redis.call("get",k) end end if v and v~=mine then held=true local p=redis.pcall("pttl",k) if type(p)~="number" or p<0 then wait=-1 elseif wait>=0 and p>wait then wait=p end end end if not held then for i=1,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) redis.pcall("zrem","redlock-mio:queue:"..KEYS[i],m) end return redis.status_reply("OK") end local keep=math.max(wait,0)+tonumber(ARGV[5]) local p=ARGV[4] local tm=redis.pcall("time") if type(tm)=="table" and not tm.err then local now=tonumber(tm[1])*1000000+tonumber(tm[2]) local c=tonumber(p) if c and c<now-1000000 then p=string.format("%d",now-1000000) elseif c and c>now+1000000 then p=string.format("%d",now+1000000) end end for i=1,#KEYS do local q="redlock-mio:queue:"..KEYS[i] redis.pcall("zadd",q,"NX",p,m) local t=redis.pcall("pttl",q) if type(t)=="number" and t<keep then redis.pcall("pexpire",q,keep) end end return redis.status_reply("WAIT "..string.format("%d",wait))"#
);
/// SHA1 of [`WAIT_ACQUIRE_SCRIPT`].
pub const WAIT_ACQUIRE_SHA1: &str = "02b648cc24fe60b097844f75167405382359a564";

/// A waiter leaves the queues of `KEYS`: takes the member `ARGV[1]` off
/// each, and a key reserved for it is handed to the next waiter; a turn
/// that named it passes to the next waiter behind it whose client hears
/// it, told to try when the leaver would have (at once if that time has
/// passed). Sent when
/// a wait ends, whether the lock was won (the masters that refused it had
/// queued it) or not (the caller gave up, timed out or was dropped).
/// Always `1`.
pub const LEAVE_SCRIPT: &str = concat!(
    handoff!(),
    r#"local m=ARGV[1] local mine="reserved "..m for i=1,#KEYS do local k=KEYS[i] local q="redlock-mio:queue:"..k local t="redlock-mio:turn:"..k local rk=redis.pcall("zrank",q,m) redis.pcall("zrem",q,m) if redis.call("get",k)==mine then redis.call("del",k) handoff(k) elseif type(rk)=="number" and redis.pcall("get",t)==m then local p=redis.pcall("pttl",t) local w=tonumber(string.match(m,"^(%d+)|")) redis.pcall("del",t) if type(p)=="number" and w then tell(q,t,nil,math.max(p-w,0),rk,true) end end end return 1"#
);
/// SHA1 of [`LEAVE_SCRIPT`].
pub const LEAVE_SHA1: &str = "b3663c4e6b79b5e3865b837f6557a49be9dff3ca";

/// [`FENCED_ACQUIRE_SCRIPT`] for a caller that waits, as
/// [`WAIT_ACQUIRE_SCRIPT`] is [`ACQUIRE_MANY_SCRIPT`]'s: `KEYS[1]` and
/// `KEYS[2]` as for the fenced acquire, the resources from `KEYS[3]`;
/// `ARGV` as for [`WAIT_ACQUIRE_SCRIPT`]. Held keys: the waiter is queued
/// and the reply is `+WAIT <ms>`. Free keys: the fenced acquire's checks,
/// writes and reply (the counter, or minus the loss id; `FOREIGNKEY`).
pub const FENCED_WAIT_ACQUIRE_SCRIPT: &str = concat!(
    handoff!(),
    r#"local function ok(v) return v==false or (type(v)=="string" and #v<=16 and string.find(v,"^[1-9]%d*$")~=nil and tonumber(v)<9007199254740992) end local m=ARGV[3] local mine="reserved "..m local wait=0 local held=false for i=3,#KEYS do local k=KEYS[i] local v=redis.call("get",k) if not v then local h=redis.pcall("zrange","redlock-mio:queue:"..k,0,0) if type(h)=="table" and not h.err and #h>0 and h[1]~=m and not turn(k,m) then handoff(k) v=redis.call("get",k) end end if v and v~=mine then held=true local p=redis.pcall("pttl",k) if type(p)~="number" or p<0 then wait=-1 elseif wait>=0 and p>wait then wait=p end end end if held then local keep=math.max(wait,0)+tonumber(ARGV[5]) local p=ARGV[4] local tm=redis.pcall("time") if type(tm)=="table" and not tm.err then local now=tonumber(tm[1])*1000000+tonumber(tm[2]) local c=tonumber(p) if c and c<now-1000000 then p=string.format("%d",now-1000000) elseif c and c>now+1000000 then p=string.format("%d",now+1000000) end end for i=3,#KEYS do local q="redlock-mio:queue:"..KEYS[i] redis.pcall("zadd",q,"NX",p,m) local t=redis.pcall("pttl",q) if type(t)=="number" and t<keep then redis.pcall("pexpire",q,keep) end end return redis.status_reply("WAIT "..string.format("%d",wait)) end local c=redis.pcall("get",KEYS[1]) if not ok(c) then return redis.error_reply("FOREIGNKEY "..KEYS[1]) end local l=false if not c then l=redis.pcall("get",KEYS[2]) if not ok(l) then return redis.error_reply("FOREIGNKEY "..KEYS[2]) end end for i=3,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) redis.pcall("zrem","redlock-mio:queue:"..KEYS[i],m) end if c then return redis.call("incr",KEYS[1]) end if not l then local t=redis.call("time") l=t[1]..string.format("%06d",t[2]) redis.call("set",KEYS[2],l) end return -tonumber(l)"#
);
/// SHA1 of [`FENCED_WAIT_ACQUIRE_SCRIPT`].
pub const FENCED_WAIT_ACQUIRE_SHA1: &str = "972e6fa6ec41cad5b8036694f9b2e0c79283a66c";
