//! The model's scripts against the library's, run on a real
//! `redis-server`.
//!
//! Seeded random walks over one master: each step is a request the
//! model's clients send (a fence read, a sync with a value, a mode and
//! loss ids, a fenced acquire, a raise to a fence, a release, each with
//! the tokens of a few clients), or what befalls a master in the model (its
//! lock key expiring, its data lost). The real master runs the library's
//! Lua script (`redlock_mio::scripts`, sent as `EVAL` with the keys and
//! arguments the library's commands carry), the model runs its
//! transcription ([`crate::scripts`]) on its master, and both must give
//! the same reply (classified as the library's driver does) and leave the
//! same lock key, counter and loss id.
//!
//! Loss ids and clocks differ by construction: a real loss id is the
//! server's clock when it found its counter missing, a model's names its
//! master and loss. The test pairs each model loss id with the real one
//! when it first appears (each must keep its partner), and gives the
//! model's fence read the `TIME` the real script read.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a test fails loudly"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redlock_mio::{FENCE_KEY, FENCE_LOST_KEY, scripts};

use super::Rng;
use crate::config::{ClockStart, Config, N};
use crate::scripts::Site;
use crate::state::{Master, Node, Request, State, Token};

/// The master the walks run on (its index names its loss ids).
const INDEX: usize = 1;

/// The lock's key on the real master.
const LOCK: &str = "redlock-mio-model:r";

/// A reply of the real server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Resp>),
}

/// A `redis-server` of its own, on a free loopback port, in a temporary
/// directory; stopped and removed when dropped.
struct Server {
    child: Child,
    dir: PathBuf,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Server {
    /// Starts one (`$REDIS_SERVER`, else `redis-server` on the `PATH`).
    fn start() -> Server {
        let binary = std::env::var("REDIS_SERVER")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("redlock-mio-model-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        // Another process may take the port between its probe and the
        // server's bind: a few tries.
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run {binary}: {e}; install redis-server \
                         (`bash .ci/install-redis`) or set REDIS_SERVER"
                    )
                });
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if let Ok(stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
                    stream.set_nodelay(true).expect("nodelay");
                    let mut server = Server {
                        child,
                        dir,
                        reader: BufReader::new(stream.try_clone().expect("a clone")),
                        writer: stream,
                    };
                    if server.call(&[b"PING"]) == Resp::Simple("PONG".into()) {
                        return server;
                    }
                    panic!("{binary} on port {port} does not answer PING");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("{binary} did not start on a free port");
    }

    /// Sends a command and reads its reply.
    fn call(&mut self, args: &[&[u8]]) -> Resp {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out).expect("a write");
        self.reply()
    }

    fn reply(&mut self) -> Resp {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("a reply");
        let line = line.trim_end();
        let (kind, rest) = line.split_at(1);
        let number = || rest.parse::<i64>().expect("a number");
        match kind {
            "+" => Resp::Simple(rest.into()),
            "-" => Resp::Error(rest.into()),
            ":" => Resp::Int(number()),
            "$" if number() < 0 => Resp::Bulk(None),
            "$" => {
                let mut bytes = vec![0; number() as usize + 2];
                self.reader.read_exact(&mut bytes).expect("a bulk string");
                bytes.truncate(bytes.len() - 2);
                Resp::Bulk(Some(bytes))
            }
            "*" => Resp::Array((0..number().max(0)).map(|_| self.reply()).collect()),
            _ => panic!("an unexpected reply {line:?}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a walk does at a step.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A client's request.
    Run(Request),
    /// The lock key expires.
    Expire,
    /// The master loses its data (a `FLUSHALL`).
    Lose,
}

/// One walk's master on both sides, and the pairing of their loss ids.
struct Walk<'s> {
    server: &'s mut Server,
    master: Master,
    /// Model loss id to real loss id, and back.
    to_real: HashMap<u64, u64>,
    to_model: HashMap<u64, u64>,
    trail: Vec<String>,
}

fn token_text(token: Token) -> String {
    format!("client-{}-attempt-{}", token.client, token.attempt)
}

impl Walk<'_> {
    /// Runs `event` on both sides; the test fails where they differ.
    fn step(&mut self, event: Event) {
        self.trail.push(format!("{event:?} on {:?}", self.master));
        match event {
            Event::Expire => {
                self.server.call(&[b"DEL", LOCK.as_bytes()]);
                self.master.key = None;
            }
            Event::Lose => {
                self.server.call(&[b"FLUSHALL"]);
                let m = &mut self.master;
                *m = Master {
                    key: None,
                    counter: None,
                    lost: None,
                    losses: m.losses + 1,
                    ..*m
                };
            }
            Event::Run(request) => {
                let real = self.run_real(request);
                let time = match &real {
                    Resp::Bulk(Some(text)) => field(text, 1),
                    _ => 0,
                };
                let ours = Site {
                    master: &mut self.master,
                    index: INDEX,
                    time,
                    clock_start: ClockStart::Largest,
                }
                .run(request);
                self.keys_agree();
                let theirs = self.classify(request, &real);
                assert_eq!(
                    ours,
                    theirs,
                    "the reply {real:?}:\n{}",
                    self.trail.join("\n")
                );
            }
        }
        self.keys_agree();
    }

    /// Runs `request` as the library sends it, with the script's text.
    fn run_real(&mut self, request: Request) -> Resp {
        let (fence, lost, lock) = (
            FENCE_KEY.as_bytes(),
            FENCE_LOST_KEY.as_bytes(),
            LOCK.as_bytes(),
        );
        let text = |n: u64| n.to_string().into_bytes();
        let mut args: Vec<Vec<u8>> = vec![b"EVAL".to_vec()];
        match request {
            Request::Read => {
                args.push(scripts::FENCE_READ_SCRIPT.into());
                args.extend([b"2".to_vec(), fence.to_vec(), lost.to_vec()]);
            }
            Request::Sync { value, start, ids } => {
                args.push(scripts::FENCE_SYNC_SCRIPT.into());
                args.extend([b"2".to_vec(), fence.to_vec(), lost.to_vec(), text(value)]);
                args.push(if start {
                    b"start".to_vec()
                } else {
                    b"repair".to_vec()
                });
                for id in ids.into_iter().filter(|&id| id != 0) {
                    // A loss the real master never had keeps the model's
                    // number, which no real clock reads.
                    args.push(text(self.to_real.get(&id).copied().unwrap_or(id)));
                }
            }
            Request::Acquire { token, .. } => {
                args.push(scripts::FENCED_ACQUIRE_SCRIPT.into());
                args.extend([b"3".to_vec(), fence.to_vec(), lost.to_vec(), lock.to_vec()]);
                args.extend([token_text(token).into_bytes(), b"600000".to_vec()]);
            }
            Request::Raise { token, fence: f } => {
                args.push(scripts::RAISE_SCRIPT.into());
                args.extend([b"3".to_vec(), fence.to_vec(), lost.to_vec(), lock.to_vec()]);
                args.extend([token_text(token).into_bytes(), text(f)]);
            }
            Request::Release { token } => {
                args.push(scripts::RELEASE_SCRIPT.into());
                args.extend([b"1".to_vec(), lock.to_vec(), token_text(token).into_bytes()]);
            }
        }
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        self.server.call(&args)
    }

    /// The model loss id paired with the real `id`.
    fn model_id(&self, id: u64) -> u64 {
        *self.to_model.get(&id).unwrap_or_else(|| {
            panic!(
                "a real loss id {id} the model never had:\n{}",
                self.trail.join("\n")
            )
        })
    }

    /// The real reply to `request` as the library's driver classifies it,
    /// in the model's terms (none for a release, which the model does not
    /// wait for).
    fn classify(&self, request: Request, reply: &Resp) -> Option<Node> {
        let unsynced = |lost, clock, time| Node::Unsynced { lost, clock, time };
        Some(match (request, reply) {
            (Request::Release { .. }, Resp::Int(0 | 1)) => return None,
            (Request::Acquire { .. }, Resp::Bulk(None)) => Node::Refused,
            (Request::Acquire { .. } | Request::Read, &Resp::Int(n)) if n > 0 => Node::Ok(n as u64),
            (Request::Acquire { .. }, &Resp::Int(n)) if n < 0 => {
                unsynced(self.model_id(n.unsigned_abs()), 0, 0)
            }
            (Request::Read, Resp::Bulk(Some(text))) => {
                let (lost, time, counter) = (field(text, 0), field(text, 1), field(text, 2));
                unsynced(self.model_id(lost), time.max(counter), time)
            }
            (Request::Raise { .. } | Request::Sync { .. }, Resp::Int(1)) => Node::Ok(0),
            (Request::Raise { .. } | Request::Sync { .. }, Resp::Int(0)) => Node::Refused,
            (Request::Raise { .. }, Resp::Int(-1)) => unsynced(0, 0, 0),
            _ => panic!("an unexpected reply {reply:?}:\n{}", self.trail.join("\n")),
        })
    }

    /// The lock key, the counter and the loss id are the same on both
    /// sides (a new loss id pairs with the real one).
    fn keys_agree(&mut self) {
        let keys = [LOCK, FENCE_KEY, FENCE_LOST_KEY].map(str::as_bytes);
        let Resp::Array(values) = self.server.call(&[b"MGET", keys[0], keys[1], keys[2]]) else {
            panic!("MGET");
        };
        let value = |i: usize| match &values[i] {
            Resp::Bulk(Some(bytes)) => Some(String::from_utf8(bytes.clone()).expect("text")),
            _ => None,
        };
        let number = |i: usize| value(i).map(|v| v.parse::<u64>().expect("a number"));
        let trail = || self.trail.join("\n");
        assert_eq!(
            self.master.key.map(|k| token_text(k.token)),
            value(0),
            "the lock key:\n{}",
            trail()
        );
        assert_eq!(self.master.counter, number(1), "the counter:\n{}", trail());
        match (self.master.lost, number(2)) {
            (None, None) => {}
            (Some(ours), Some(theirs)) => {
                let paired = *self.to_real.entry(ours).or_insert(theirs);
                let back = *self.to_model.entry(theirs).or_insert(ours);
                assert_eq!((paired, back), (theirs, ours), "the loss id:\n{}", trail());
            }
            (ours, theirs) => panic!("the loss id: {ours:?} and {theirs:?}:\n{}", trail()),
        }
    }
}

/// Field `i` (from 0) of a read's `"<loss id> <time> <counter>"`.
fn field(text: &[u8], i: usize) -> u64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.split(' ').nth(i))
        .and_then(|f| f.parse().ok())
        .expect("a read's fields")
}

/// A random event, with values around the master's counter and the loss
/// ids the walk has met, and a few it has not.
fn event(rng: &mut Rng, master: &Master, tokens: &[Token]) -> Event {
    let token = tokens[rng.below(tokens.len())];
    let counter = master.counter.unwrap_or(1_000);
    let near = [
        counter.saturating_sub(1).max(1),
        counter,
        counter + 1,
        counter + 50,
        5,
        1_000_000_000_000_000,
    ];
    let value = near[rng.below(near.len())];
    let mut ids = [0; N];
    let known = [
        master.lost.unwrap_or(0),
        crate::state::loss_id(INDEX, master.losses),
        crate::state::loss_id(INDEX, master.losses.saturating_sub(1)),
        crate::state::loss_id(INDEX + 1, 0),
    ];
    for slot in ids.iter_mut().take(1 + rng.below(N)) {
        *slot = known[rng.below(known.len())];
    }
    let (expires, start) = (0, rng.below(2) == 0);
    rng.pick(&[
        (3, Event::Run(Request::Read)),
        (3, Event::Run(Request::Sync { value, start, ids })),
        (3, Event::Run(Request::Acquire { token, expires })),
        (
            3,
            Event::Run(Request::Raise {
                token,
                fence: value,
            }),
        ),
        (2, Event::Run(Request::Release { token })),
        (1, Event::Expire),
        (1, Event::Lose),
    ])
}

/// Seeded walks: every step gives the same reply and keys on both sides.
#[test]
fn the_model_scripts_do_what_the_librarys_do() {
    const WALKS: u64 = 400;
    const STEPS: usize = 16;
    let mut server = Server::start();
    let tokens = [0, 1, 2].map(|client| Token { client, attempt: 1 });
    let mut steps = 0;
    for walk in 0..WALKS {
        server.call(&[b"FLUSHALL"]);
        let mut rng = Rng::new(walk);
        let mut w = Walk {
            server: &mut server,
            // The model's master as a search begins with it.
            master: State::initial(&Config::default()).masters[INDEX],
            to_real: HashMap::new(),
            to_model: HashMap::new(),
            trail: vec![format!("walk {walk}")],
        };
        for _ in 0..STEPS {
            let event = event(&mut rng, &w.master, &tokens);
            w.step(event);
            steps += 1;
        }
    }
    println!("{WALKS} walks, {steps} steps on a real redis-server");
}
