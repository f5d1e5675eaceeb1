//! A master's Lua state: Lua 5.1, as Redis and Valkey embed it, with the
//! `redis` table and the sandbox Redis 7 gives a script, and the
//! conversions between Redis replies and Lua values that Redis 7 makes
//! for a script in RESP2.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use mlua::{ChunkMode, Function, LuaOptions, MultiValue, StdLib, Table, Value};
use redlock_mio::scripts::Script;

use super::faults;
use crate::HandoffFault;
use crate::commands::execute_in_script;
use crate::keyspace::Now;
use crate::numbers::format_g;
use crate::reply::Reply;
use crate::server::{Server, Session};

/// What the master sets up in a new state (`redis.call`, `redis.pcall`,
/// the sandbox).
const SETUP: &str = include_str!("redis.lua");

/// The name scripts are compiled under, as Redis names them: errors read
/// `user_script:<line>: ...`.
const CHUNK: &str = "@user_script";

/// Each script's bytecode (by SHA-1 and the fault patched in), compiled
/// from its text once per process and loaded by every state after: a
/// simulation makes a state for every master of every seed, and parsing
/// the texts again for each costs more than loading what Lua compiled.
static BYTECODE: Mutex<Vec<Bytecode>> = Mutex::new(Vec::new());

/// A script's SHA-1, the fault patched into its text, and what Lua
/// compiled of it.
type Bytecode = (&'static str, Option<HandoffFault>, Vec<u8>);

/// A master's Lua state, made at its first script and kept until the
/// master goes (a restart makes a new one), as Redis keeps one per
/// process. A clone starts without one: a state holds nothing a script
/// left (scripts set no globals), only what any state rebuilds.
#[derive(Default)]
pub(crate) struct Interpreter {
    state: Option<State>,
}

impl Clone for Interpreter {
    fn clone(&self) -> Interpreter {
        Interpreter::default()
    }
}

impl fmt::Debug for Interpreter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let compiled = self.state.as_ref().map_or(0, |s| s.compiled.len());
        f.debug_struct("Interpreter")
            .field("compiled", &compiled)
            .finish()
    }
}

/// A live Lua state and what the master keeps of it.
struct State {
    lua: mlua::Lua,
    /// The `redis` table, whose `call` and `pcall` are set for each run
    /// (they reach the server the run is on).
    redis: Table,
    /// Lua's own `xpcall`, taken before a script can reach it.
    xpcall: Function,
    /// Turns what a script raised into the error table Redis builds: the
    /// message and the script's line where it was raised.
    handler: Function,
    /// Each script compiled once, by its SHA-1.
    compiled: BTreeMap<&'static str, Function>,
}

impl Interpreter {
    /// Compiles `script` if this state has not, as `SCRIPT LOAD` and the
    /// first `EVAL` do, with the master's deliberate fault patched in.
    pub(crate) fn load(
        &mut self,
        script: Script,
        fault: Option<HandoffFault>,
    ) -> Result<(), Reply> {
        self.function(script, fault).map(drop)
    }

    /// Runs `script` with `keys` and `argv` on the server, at the clock
    /// of its start, for the connection of `session`: its reply.
    pub(crate) fn run(
        &mut self,
        server: &mut Server,
        session: &Session,
        now: Now,
        script: Script,
        (keys, argv): (&[Vec<u8>], &[Vec<u8>]),
    ) -> Reply {
        let function = match self.function(script, server.handoff_fault) {
            Ok(function) => function,
            Err(reply) => return reply,
        };
        let Some(state) = &self.state else {
            return lua_failed(mlua::Error::runtime("no Lua state"));
        };
        // The script's commands run on a client of its own, which starts
        // on the caller's database: a `SELECT` in the script stays there.
        let mut own = session.clone();
        state
            .call(function, server, &mut own, now, (keys, argv), script.sha1())
            .unwrap_or_else(lua_failed)
    }

    /// The compiled `script`, compiling it (and making the state) if this
    /// is its first run here.
    fn function(&mut self, script: Script, fault: Option<HandoffFault>) -> Result<Function, Reply> {
        let state = match &mut self.state {
            Some(state) => state,
            empty => empty.insert(State::new().map_err(lua_failed)?),
        };
        let sha = script.sha1();
        if let Some(function) = state.compiled.get(sha) {
            return Ok(function.clone());
        }
        let function = compile(&state.lua, script, fault)?;
        state.compiled.insert(sha, function.clone());
        Ok(function)
    }
}

/// `script`, with `fault` patched in, compiled in `lua`: from the
/// bytecode another state compiled, or from its text.
fn compile(
    lua: &mlua::Lua,
    script: Script,
    fault: Option<HandoffFault>,
) -> Result<Function, Reply> {
    let sha = script.sha1();
    let mut cache = BYTECODE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, _, bytecode)) = cache.iter().find(|(s, f, _)| *s == sha && *f == fault) {
        return lua
            .load(bytecode.as_slice())
            .set_mode(ChunkMode::Binary)
            .into_function()
            .map_err(lua_failed);
    }
    let text = match fault {
        Some(fault) => faults::patch(script.text(), fault),
        None => script.text().to_owned(),
    };
    let function = lua
        .load(text)
        .set_name(CHUNK)
        .set_mode(ChunkMode::Text)
        .into_function()
        .map_err(|e| Reply::error(format!("ERR Error compiling script (new function): {e}")))?;
    // Kept whole (not stripped): the lines name where an error was raised.
    cache.push((sha, fault, function.dump(false)));
    Ok(function)
}

impl State {
    /// A new state: the libraries Redis loads that the model has (base,
    /// table, string, math, coroutine; not `bit`, `cjson`, `struct`,
    /// `cmsgpack`), the `redis` table, the sandbox.
    fn new() -> mlua::Result<State> {
        // Lua 5.1's base library holds `coroutine`.
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = mlua::Lua::new_with(libs, LuaOptions::new())?;
        let globals = lua.globals();
        let xpcall: Function = globals.get("xpcall")?;
        let redis = lua.create_table()?;
        redis.set("error_reply", lua.create_function(error_reply)?)?;
        redis.set("status_reply", lua.create_function(status_reply)?)?;
        globals.set("redis", redis.clone())?;
        lua.load(SETUP).set_name("=redis").exec()?;
        let handler = lua.create_function(raised)?;
        Ok(State {
            lua,
            redis,
            xpcall,
            handler,
            compiled: BTreeMap::new(),
        })
    }

    /// Runs `function` as the script of SHA-1 `sha`, its `redis.call`s on
    /// `server` through `session`.
    fn call(
        &self,
        function: Function,
        server: &mut Server,
        session: &mut Session,
        now: Now,
        (keys, argv): (&[Vec<u8>], &[Vec<u8>]),
        sha: &str,
    ) -> mlua::Result<Reply> {
        let lua = &self.lua;
        let globals = lua.globals();
        globals.raw_set("KEYS", strings(lua, keys)?)?;
        globals.raw_set("ARGV", strings(lua, argv)?)?;
        // One client for both functions, whichever the script calls.
        let client = RefCell::new((server, session));
        let command = |lua: &mlua::Lua, args: MultiValue| {
            let reply = match words(args) {
                Ok(words) => {
                    let mut client = client.borrow_mut();
                    let (server, session) = &mut *client;
                    execute_in_script(server, session, &words, now)
                }
                Err(reply) => reply,
            };
            to_lua(lua, reply)
        };
        lua.scope(|scope| {
            // Both are Rust functions, as on Redis, where they are C ones: a
            // script's `return redis.call(...)` keeps its frame (Lua 5.1
            // drops a frame only for a tail call to a Lua function), so an
            // error names the script's line.
            let pcall = scope.create_function(|lua, args| command(lua, args))?;
            let call = scope.create_function(|lua, args| match command(lua, args)? {
                Value::Table(reply) if reply.contains_key("err")? => {
                    Err(mlua::Error::external(Raised(reply.raw_get("err")?)))
                }
                reply => Ok(reply),
            })?;
            self.redis.raw_set("pcall", pcall)?;
            self.redis.raw_set("call", call)?;
            let (ok, value): (bool, Value) = self.xpcall.call((function, self.handler.clone()))?;
            self.redis.raw_set("pcall", Value::Nil)?;
            self.redis.raw_set("call", Value::Nil)?;
            Ok(if ok {
                to_reply(value)
            } else {
                error_reply_of(&value, sha)
            })
        })
    }
}

/// A Lua array of the strings `items`, byte for byte.
fn strings(lua: &mlua::Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// The words of a command a script calls, as Redis 7 makes them: strings
/// byte for byte, numbers printed `%.17g` (`1500`, `0.10000000000000001`),
/// anything else an error reply.
fn words(args: MultiValue) -> Result<Vec<Vec<u8>>, Reply> {
    if args.is_empty() {
        return Err(Reply::error(
            "ERR Please specify at least one argument for this redis lib call",
        ));
    }
    let mut words = Vec::with_capacity(args.len());
    for arg in &args {
        words.push(match arg {
            Value::String(s) => s.as_bytes().to_vec(),
            // `%.17g` prints a whole number below 10^17 as its digits.
            Value::Integer(n) if n.unsigned_abs() < 100_000_000_000_000_000 => {
                n.to_string().into_bytes()
            }
            Value::Integer(n) => format_g(*n as f64, 17).into_bytes(),
            Value::Number(x) => format_g(*x, 17).into_bytes(),
            _ => {
                return Err(Reply::error(
                    "ERR Lua redis lib command arguments must be strings or integers",
                ));
            }
        });
    }
    Ok(words)
}

/// A reply as a script sees it (Redis 7, RESP2): an integer a number, a
/// bulk string a string, a null `false`, an array a table, a status
/// `{ok = ...}`, an error `{err = ...}`. The other RESP3 kinds come as
/// RESP2 writes them: a double a string, a map a flat array.
fn to_lua(lua: &mlua::Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Simple(text) => {
            let table = lua.create_table()?;
            table.raw_set("ok", text.as_ref())?;
            Value::Table(table)
        }
        Reply::Error(text) => {
            let table = lua.create_table()?;
            table.raw_set("err", lua.create_string(error_text(&text))?)?;
            Value::Table(table)
        }
        Reply::Integer(n) => Value::Number(n as f64),
        Reply::Bulk(bytes) | Reply::Verbatim(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Double(x) => Value::String(lua.create_string(format_g(x, 17))?),
        Reply::Null => Value::Boolean(false),
        Reply::Array(items) | Reply::Push(items) | Reply::Frames(items) => sequence(lua, items)?,
        Reply::Map(pairs) => sequence(lua, pairs.into_iter().flat_map(|(k, v)| [k, v]))?,
    })
}

/// A Lua array of `items`, each converted.
fn sequence(lua: &mlua::Lua, items: impl IntoIterator<Item = Reply>) -> mlua::Result<Value> {
    let values = items
        .into_iter()
        .map(|item| to_lua(lua, item))
        .collect::<mlua::Result<Vec<Value>>>()?;
    Ok(Value::Table(lua.create_sequence_from(values)?))
}

/// What a script returns, as a reply (Redis 7): a number its integer
/// part, a string a bulk string, `true` 1, `false` and `nil` a null, a
/// table with `err` an error, with `ok` a status, any other an array up
/// to its first `nil`.
fn to_reply(value: Value) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Integer(1),
        Value::Integer(n) => Reply::Integer(n),
        Value::Number(x) => Reply::Integer(truncated(x)),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(table) => {
            if let Ok(Value::String(err)) = table.raw_get("err") {
                return Reply::Error(err.as_bytes().to_vec());
            }
            if let Ok(Value::String(ok)) = table.raw_get("ok") {
                let ok = String::from_utf8_lossy(&ok.as_bytes()).into_owned();
                return Reply::Simple(ok.into());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match table.raw_get(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(to_reply(item)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Null,
    }
}

/// A Lua number as Redis casts it to a C `long long` on x86-64: toward
/// zero, and the one value x86 gives for what does not fit (a NaN,
/// `1e30`).
fn truncated(x: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if x.is_nan() || !(-LIMIT..LIMIT).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

/// The reply to a script that raised `value` (the handler's table):
/// Redis 7's `<error> script: <sha>, on @user_script:<line>.`
fn error_reply_of(value: &Value, sha: &str) -> Reply {
    let Value::Table(table) = value else {
        return Reply::error("ERR unknown error");
    };
    let Ok(Value::String(err)) = table.raw_get("err") else {
        return Reply::error("ERR unknown error");
    };
    let mut message = err.as_bytes().to_vec();
    if let Ok(Some(line)) = table.raw_get::<Option<i64>>("line") {
        message.extend_from_slice(format!(" script: {sha}, on {CHUNK}:{line}.").as_bytes());
    }
    Reply::Error(message)
}

/// The error handler of a run: what a script raised as the table Redis
/// builds, `{err = ..., line = ...}` (an error table as it is, a
/// `redis.call` error as its reply's text, anything else `ERR <message>`),
/// the line that of the script's innermost frame.
fn raised(lua: &mlua::Lua, value: Value) -> mlua::Result<Table> {
    let err = match value {
        Value::Table(table) if matches!(table.raw_get("err"), Ok(Value::String(_))) => {
            return with_line(lua, table);
        }
        Value::Error(error) => match raised_reply(&error) {
            Some(err) => err.as_bytes().to_vec(),
            None => [&b"ERR "[..], error.to_string().as_bytes()].concat(),
        },
        Value::String(s) => [&b"ERR "[..], &s.as_bytes()].concat(),
        Value::Integer(n) => format!("ERR {}", format_g(n as f64, 14)).into_bytes(),
        Value::Number(x) => format!("ERR {}", format_g(x, 14)).into_bytes(),
        _ => b"ERR unknown error".to_vec(),
    };
    let table = lua.create_table()?;
    table.raw_set("err", lua.create_string(err)?)?;
    with_line(lua, table)
}

/// `table` with the line of the script where it was raised.
fn with_line(lua: &mlua::Lua, table: Table) -> mlua::Result<Table> {
    if let Some(line) = script_line(lua) {
        table.raw_set("line", line)?;
    }
    Ok(table)
}

/// The error table `redis.call` raised, inside what Lua carried of it.
fn raised_reply(error: &mlua::Error) -> Option<mlua::String> {
    match error {
        mlua::Error::CallbackError { cause, .. } => raised_reply(cause),
        mlua::Error::ExternalError(external) => external
            .downcast_ref::<Raised>()
            .map(|raised| raised.0.clone()),
        _ => None,
    }
}

/// What `redis.call` raises for an error reply: its `err` text. Lua
/// carries it as an error of Rust's; the handler turns it back into the
/// table Redis raises.
#[derive(Debug)]
struct Raised(mlua::String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_string_lossy())
    }
}

impl std::error::Error for Raised {}

/// The current line of the innermost frame of the script on the stack
/// (past the C functions and `redis.call` between it and the error).
fn script_line(lua: &mlua::Lua) -> Option<i64> {
    (1..64)
        .map_while(|level| {
            lua.inspect_stack(level, |frame| {
                let source = frame.source();
                (source.source.as_deref() == Some(CHUNK)).then(|| frame.current_line())
            })
        })
        .flatten()
        .next()
        .flatten()
        .and_then(|line| i64::try_from(line).ok())
}

/// `redis.error_reply(text)`: `{err = ...}`, the text read as Redis 7
/// reads it (a leading `-` dropped, see [`error_text`]).
fn error_reply(lua: &mlua::Lua, text: mlua::String) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    let text = text.as_bytes();
    let text = text.strip_prefix(b"-").unwrap_or(&text);
    table.raw_set("err", lua.create_string(error_text(text))?)?;
    Ok(table)
}

/// `redis.status_reply(text)`: `{ok = text}`.
fn status_reply(lua: &mlua::Lua, text: mlua::String) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    table.raw_set("ok", text)?;
    Ok(table)
}

/// An error's text (after its `-`) as Redis 7 keeps it in a Lua error
/// table: `CODE msg` as it is, a text without a space given the code
/// `ERR`, no trailing newline.
fn error_text(text: &[u8]) -> Vec<u8> {
    let (code, message) = match text.iter().position(|&b| b == b' ') {
        Some(space) => (&text[..space], &text[space + 1..]),
        None => (&b"ERR"[..], text),
    };
    let end = message
        .iter()
        .rposition(|&b| b != b'\r' && b != b'\n')
        .map_or(0, |last| last + 1);
    [code, b" ", &message[..end]].concat()
}

/// The reply to a failure of the Lua machinery itself (a state that
/// cannot be made, memory): never a script's doing.
fn lua_failed(error: mlua::Error) -> Reply {
    Reply::error(format!("ERR the model's Lua failed: {error}"))
}

#[cfg(test)]
#[allow(clippy::expect_used, reason = "a test fails loudly")]
mod tests {
    use super::{State, error_text, truncated};
    use crate::keyspace::Now;
    use crate::reply::Reply;
    use crate::server::Server;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    const T0: u64 = 1_700_000_000_000_000;

    /// What `text`, compiled as a script, replies with `keys` on a server
    /// where `str` holds `abc`.
    fn eval(text: &str, keys: &[&[u8]]) -> Reply {
        run_with(text, keys).0
    }

    /// What `text` replies without keys, and the server after it.
    fn run(text: &str) -> (Reply, Server) {
        run_with(text, &[])
    }

    fn run_with(text: &str, keys: &[&[u8]]) -> (Reply, Server) {
        let now = Now(T0);
        let mut server = Server::new("r".repeat(40), now, None);
        let mut session = server.open_session();
        let state = State::new().expect("a Lua state");
        let set = [b"SET".to_vec(), b"str".to_vec(), b"abc".to_vec()];
        crate::commands::execute(&mut server, &mut session, &set, now);
        let function = state
            .lua
            .load(text)
            .set_name(super::CHUNK)
            .into_function()
            .expect("a script that compiles");
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        let reply = state
            .call(function, &mut server, &mut session, now, (&keys, &[]), SHA)
            .expect("Lua runs");
        (reply, server)
    }

    fn error(text: &str) -> Reply {
        Reply::error(text.replace("<sha>", SHA))
    }

    // Each reply below is what Redis 7.0 gave for the same script.

    #[test]
    fn replies_convert_as_redis_converts_them() {
        let items = eval("return {1, 2.7, -2.7, 'a', true, false, nil, 3}", &[]);
        let expected = [
            Reply::Integer(1),
            Reply::Integer(2),
            Reply::Integer(-2),
            Reply::bulk("a"),
            Reply::Integer(1),
            Reply::Null,
        ];
        assert_eq!(items, Reply::Array(expected.to_vec()));
        assert_eq!(eval("return 1e30", &[]), Reply::Integer(i64::MIN));
        assert_eq!(
            eval("return KEYS[1]", &[b"\x00\xff\r\n"]),
            Reply::bulk(b"\x00\xff\r\n")
        );
        assert_eq!(
            eval("return redis.call('get', 'nokey') == false", &[]),
            Reply::Integer(1)
        );
        assert_eq!(
            eval("return redis.call('ping').ok", &[]),
            Reply::bulk("PONG")
        );
        assert_eq!(
            eval("return redis.status_reply('WAIT 5')", &[]),
            Reply::Simple("WAIT 5".into())
        );
        assert_eq!(
            eval("return redis.error_reply('boom')", &[]),
            error("ERR boom")
        );
        assert_eq!(
            eval("return redis.error_reply('FOREIGNKEY k')", &[]),
            error("FOREIGNKEY k")
        );
        assert_eq!(eval("return {err = 'boom'}", &[]), error("boom"));
    }

    #[test]
    fn arguments_convert_as_redis_converts_them() {
        for (arg, stored) in [
            ("1500", "1500"),
            ("1.5", "1.5"),
            ("0.1", "0.10000000000000001"),
            ("1e20", "1e+20"),
        ] {
            let text = format!("redis.call('set', 'a', {arg}) return redis.call('get', 'a')");
            assert_eq!(eval(&text, &[]), Reply::bulk(stored), "{arg}");
        }
        assert_eq!(
            eval("return redis.call('set', 'a', true)", &[]),
            error(
                "ERR Lua redis lib command arguments must be strings or integers script: <sha>, on @user_script:1."
            )
        );
        assert_eq!(
            eval("return redis.pcall()", &[]),
            error("ERR Please specify at least one argument for this redis lib call")
        );
    }

    #[test]
    fn errors_end_the_script_as_on_redis() {
        let raised = [
            (
                "return redis.call('incr', KEYS[1])",
                "ERR value is not an integer or out of range script: <sha>, on @user_script:1.",
            ),
            (
                "local function f()\n  return redis.call('incr', 'str')\nend\nreturn f()",
                "ERR value is not an integer or out of range script: <sha>, on @user_script:2.",
            ),
            (
                "\nlocal x = 1\nx = x + nil",
                "ERR user_script:3: attempt to perform arithmetic on a nil value script: <sha>, on @user_script:3.",
            ),
            (
                "foo = 1",
                "ERR user_script:1: Attempt to modify a readonly table script: <sha>, on @user_script:1.",
            ),
            (
                "return foo",
                "ERR user_script:1: Script attempted to access nonexistent global variable 'foo' script: <sha>, on @user_script:1.",
            ),
        ];
        for (text, reply) in raised {
            assert_eq!(eval(text, &[b"str"]), error(reply), "{text}");
        }
        let handed_on = [
            ("incr', 'str", "ERR value is not an integer or out of range"),
            (
                "eval', 'return 1', '0",
                "ERR This Redis command is not allowed from script",
            ),
            ("nosuch", "ERR Unknown Redis command called from script"),
            (
                "get",
                "ERR Wrong number of args calling Redis command from script",
            ),
        ];
        for (args, err) in handed_on {
            let text = format!("return redis.pcall('{args}').err");
            assert_eq!(eval(&text, &[]), Reply::bulk(err), "{text}");
        }
    }

    #[test]
    fn the_writes_before_an_error_stay() {
        let (reply, mut server) = run("redis.call('set', 'w', '1') redis.call('incr', 'str')");
        assert!(matches!(reply, Reply::Error(_)));
        let mut session = server.open_session();
        let get = [b"GET".to_vec(), b"w".to_vec()];
        let now = Now(T0);
        let value = crate::commands::execute(&mut server, &mut session, &get, now);
        assert_eq!(value, Reply::bulk("1"));
    }

    #[test]
    fn error_texts_take_a_code_as_redis_does() {
        assert_eq!(error_text(b"FOREIGNKEY k"), b"FOREIGNKEY k");
        assert_eq!(error_text(b"boom"), b"ERR boom");
        assert_eq!(error_text(b"ERR no\r\n"), b"ERR no");
    }

    #[test]
    fn numbers_truncate_toward_zero() {
        assert_eq!(truncated(3.99), 3);
        assert_eq!(truncated(-3.99), -3);
        assert_eq!(truncated(1e30), i64::MIN);
        assert_eq!(truncated(f64::NAN), i64::MIN);
    }
}
