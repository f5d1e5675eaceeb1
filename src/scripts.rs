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

/// Compare-and-delete: deletes the key only if it still holds our token.
pub const RELEASE_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// SHA1 of [`RELEASE_SCRIPT`], as `SCRIPT LOAD` returns it.
pub const RELEASE_SHA1: &str = "b70c2384248f88e6b75b9f89241a180f856ad852";

/// Compare-and-`PEXPIRE`: extends the key only if it still holds our token.
pub const EXTEND_SCRIPT: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end"#;

/// SHA1 of [`EXTEND_SCRIPT`], as `SCRIPT LOAD` returns it.
pub const EXTEND_SHA1: &str = "36e94d1c6e02fcefaa7ee5d79eee614dbac55f10";

/// All or nothing over several keys: sets every key (`PX ARGV[2]`) to the
/// token `ARGV[1]` if none of them exists, else none.
pub const ACQUIRE_MANY_SCRIPT: &str = r#"for i=1,#KEYS do if redis.call("get",KEYS[i]) then return 0 end end for i=1,#KEYS do redis.call("set",KEYS[i],ARGV[1],"px",ARGV[2]) end return 1"#;
/// SHA1 of [`ACQUIRE_MANY_SCRIPT`].
pub const ACQUIRE_MANY_SHA1: &str = "fc228ec235ee22e803a6b572f5526aaf36477068";

/// Deletes every key that still holds the token `ARGV[1]`; `1` if any did.
pub const RELEASE_MANY_SCRIPT: &str = r#"local n=0 for i=1,#KEYS do if redis.call("get",KEYS[i])==ARGV[1] then n=n+redis.call("del",KEYS[i]) end end if n>0 then return 1 else return 0 end"#;
/// SHA1 of [`RELEASE_MANY_SCRIPT`].
pub const RELEASE_MANY_SHA1: &str = "223e5508dbb3824a8b008627fa9b62603a25f294";

/// Extends every key to `ARGV[2]` ms if all still hold the token `ARGV[1]`,
/// else none.
pub const EXTEND_MANY_SCRIPT: &str = r#"for i=1,#KEYS do if redis.call("get",KEYS[i])~=ARGV[1] then return 0 end end for i=1,#KEYS do redis.call("pexpire",KEYS[i],ARGV[2]) end return 1"#;
/// SHA1 of [`EXTEND_MANY_SCRIPT`].
pub const EXTEND_MANY_SHA1: &str = "625585dd655db49164a0d3f383c152341a6e2375";

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
