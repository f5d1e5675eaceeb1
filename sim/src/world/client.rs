//! A client's process: the library's core (through `redlock_mio::sim`),
//! its clock, its sockets, and its callers. The world moves bytes between
//! its sockets and the core as the `mio` driver does: after every event
//! of the client it compares identities, wakes the callers whose rounds
//! are decided, opens and closes sockets as the sessions need them, writes
//! what is due, and sets its timer.

use std::io::ErrorKind;
use std::time::Instant;

use crate::client::Client;
use redlock_mio::NodeError;

use super::clock::ClientClock;
use super::net::Up;
use super::params::Params;
use super::rng::Rng;
use super::task::Task;
use super::{Ev, World};

/// One client's process.
pub(crate) struct ClientProc {
    pub(crate) client: Client,
    pub(crate) clock: ClientClock,
    /// Per master: the connection of its socket, if it has one.
    pub(crate) socks: Vec<Option<usize>>,
    pub(crate) tasks: Vec<Task>,
    /// Stopped until then: its events wait.
    pub(crate) paused_until: u64,
    /// Its pauses so far, in global time (for the calls' bounds).
    pub(crate) pauses: Vec<(u64, u64)>,
    /// When its timer event is set for.
    timer_at: Option<u64>,
    pub(crate) rounds: u64,
    pub(crate) rng: Rng,
    /// Its wake channel, where releases tell its waiters.
    pub(crate) channel: Vec<u8>,
    woken: Vec<u64>,
    /// Per master: whether it ever opened a socket to it.
    opened: Vec<bool>,
}

impl ClientProc {
    pub(crate) fn new(c: usize, params: &Params, base: Instant, rng: &mut Rng) -> ClientProc {
        let offset = rng.range(0, 1 << 40);
        let wall = 1_700_000_000_000_000 + rng.below(1 << 36);
        let wall = params.client_walls.as_ref().map_or(wall, |walls| walls[c]);
        let clock = ClientClock::new(base, offset, params.client_ppm[c], wall);
        let addrs: Vec<redlock_mio::ServerAddr> = (0..params.masters)
            .map(|m| {
                let port = 7000 + m as u16;
                redlock_mio::ServerAddr::tcp(std::net::SocketAddr::from(([10, 0, 0, 1], port)))
            })
            .collect();
        let id = rng.next_u64();
        let mut client = Client::new(&addrs, params.settings_of(c), id, clock.local(0));
        if params.regression == super::Regression::NoRaise {
            client.skip_raises();
        }
        if params.regression == super::Regression::SlowExtendSucceeds {
            client.slow_extends_succeed();
        }
        if params.regression == super::Regression::WatchSkipsRearm {
            client.skip_rearms();
        }
        if params.regression == super::Regression::DropIsLoss {
            client.drops_are_losses();
        }
        ClientProc {
            client,
            clock,
            socks: vec![None; params.masters],
            tasks: (0..params.tasks).map(|_| Task::new()).collect(),
            paused_until: 0,
            pauses: Vec::new(),
            timer_at: None,
            rounds: 0,
            rng: rng.fork(),
            channel: format!("redlock-mio:wake:{id:016x}").into_bytes(),
            woken: Vec::new(),
            opened: vec![false; params.masters],
        }
    }

    /// Whether its callers are done and nothing of its rounds is in flight.
    pub(crate) fn is_quiet(&self) -> bool {
        self.client.in_flight() == 0 && self.tasks.iter().all(Task::is_done)
    }

    /// What keeps it busy, for messages.
    pub(crate) fn busy(&self) -> String {
        let tasks: Vec<&str> = self.tasks.iter().map(Task::describe).collect();
        format!(
            "{} rounds in flight, callers {tasks:?}",
            self.client.in_flight()
        )
    }

    /// How long it was paused between `from` and `to` (global ns).
    pub(crate) fn paused_within(&self, from: u64, to: u64) -> u64 {
        self.pauses
            .iter()
            .map(|&(a, b)| b.min(to).saturating_sub(a.max(from)))
            .sum()
    }
}

impl World {
    /// Client `c`'s clock now.
    pub(crate) fn local(&self, c: usize) -> Instant {
        self.clients[c].clock.local(self.t)
    }

    /// Client `c` starts: it connects to every master, as at build, and
    /// its callers begin.
    pub(crate) fn start_client(&mut self, c: usize) {
        let now = self.local(c);
        self.clients[c].client.connect(now);
        for k in 0..self.clients[c].tasks.len() {
            let gap = self.params.think_mean;
            let at = self.t + self.clients[c].rng.exp(gap + 1);
            self.task_timer_at(c, k, at);
        }
        self.settle(c);
    }

    /// Whether client `c` is paused: then `ev` waits for its resume.
    pub(crate) fn deferred(&mut self, c: usize, ev: Ev) -> bool {
        let until = self.clients[c].paused_until;
        if until > self.t {
            self.at(until, ev);
            return true;
        }
        false
    }

    /// After an event of client `c`: identities, wake-ups of its callers,
    /// its sockets, its writes and its timer.
    pub(crate) fn settle(&mut self, c: usize) {
        let now = self.local(c);
        self.clients[c].client.handle_handshakes(now);
        // Until nothing more happens: callers whose rounds are decided run
        // (and may start others); the sockets follow (a socket that cannot
        // be opened decides rounds too).
        for _ in 0..64 {
            if self.wake_tasks(c) {
                continue;
            }
            self.sync_sockets(c);
            if !self.wake_tasks(c) {
                break;
            }
        }
        self.follow_watches(c);
        self.arm_timer(c);
    }

    /// Runs client `c`'s callers that its core wakes; whether there were
    /// any.
    fn wake_tasks(&mut self, c: usize) -> bool {
        let mut woken = std::mem::take(&mut self.clients[c].woken);
        woken.clear();
        self.clients[c].client.wake(|caller| woken.push(caller));
        for &k in &woken {
            self.task_woken(c, k as usize);
        }
        let any = !woken.is_empty();
        self.clients[c].woken = woken;
        any
    }

    /// Opens and closes client `c`'s sockets as its sessions need, and
    /// writes what is due.
    fn sync_sockets(&mut self, c: usize) {
        for i in 0..self.params.masters {
            let want = self.clients[c].client.socket(i);
            if let Some(conn) = self.clients[c].socks[i] {
                if want != Some(self.net.conns[conn].start) {
                    self.close_socket(c, i, conn);
                }
            }
            if let Some(start) = want {
                if self.clients[c].socks[i].is_none() && self.rng.chance(0.01) {
                    // A socket that cannot even be opened.
                    let now = self.local(c);
                    let error = NodeError::Connect(ErrorKind::AddrNotAvailable);
                    self.note(|| format!("client {c}: no socket to master {i}"));
                    let to = self.t + 2 * self.params.reconnect_bound();
                    self.disturb((Some(c), None, false), to, "no socket");
                    self.clients[c].client.handle_unopened(i, error, now);
                    continue;
                }
                let again = self.clients[c].opened[i];
                if again
                    && self.params.regression == super::Regression::NoReconnectWhileWaiting
                    && self.clients[c].client.in_flight() == 0
                {
                    // The deliberate fault: a connection lost comes back
                    // only for a round.
                    continue;
                }
                if self.clients[c].socks[i].is_none() {
                    self.clients[c].opened[i] = true;
                    let conn = self.net.open(c, i, start);
                    self.clients[c].socks[i] = Some(conn);
                    let delay = self.net.delay(conn, self.t, &mut self.rng);
                    self.net.conns[conn].up.push(self.t, delay, Up::Syn);
                    self.arm(conn, true);
                }
            }
            if self.clients[c].client.take_write_due(i) {
                self.write(c, i);
            }
        }
    }

    /// Client `c` closes its socket to master `i` (connection `conn`).
    fn close_socket(&mut self, c: usize, i: usize, conn: usize) {
        self.clients[c].socks[i] = None;
        self.leftovers.ended(c, i, self.t);
        let k = &mut self.net.conns[conn];
        k.open = false;
        k.down.clear();
        let delay = self.net.delay(conn, self.t, &mut self.rng);
        self.net.conns[conn].up.push(self.t, delay, Up::Fin);
        self.arm(conn, true);
    }

    /// Sets client `c`'s timer for its core's next one.
    fn arm_timer(&mut self, c: usize) {
        let Some(next) = self.clients[c].client.next_timer() else {
            return;
        };

        // A timer still due after its turn (the stall timer fires only
        // once its instant has passed) is looked at again a nanosecond
        // later, as a real clock moves on between two polls.
        let at = self.clients[c].clock.global(next).max(self.t + 1);
        if self.clients[c].timer_at.is_none_or(|armed| at < armed) {
            self.clients[c].timer_at = Some(at);
            self.at(at, Ev::ClientTimer { client: c });
        }
    }

    /// Client `c`'s timer: its core's timers and deadlines.
    pub(crate) fn client_timer(&mut self, c: usize) {
        if self.deferred(c, Ev::ClientTimer { client: c }) {
            return;
        }
        if self.clients[c].timer_at.is_some_and(|at| at > self.t) {
            // An earlier timer, since moved later: the later one stands.
            return;
        }
        self.clients[c].timer_at = None;
        let now = self.local(c);
        self.clients[c].client.handle_timeout(now);
        self.settle(c);
    }

    /// Writes what client `c`'s session with master `i` has to send, as
    /// far as its socket takes it: sometimes only part (the rest when the
    /// socket becomes writable), sometimes cut in pieces on the wire.
    pub(crate) fn write(&mut self, c: usize, i: usize) {
        let Some(conn) = self.clients[c].socks[i] else {
            return;
        };
        if !self.net.conns[conn].connected || self.net.conns[conn].blocked {
            return;
        }
        let mut pieces = Vec::new();
        loop {
            let bytes = self.clients[c].client.transmit(i);
            let len = bytes.len();
            if len == 0 {
                break;
            }
            let short = len > 1 && self.rng.chance(self.net.timing.split / 2.0);
            let take = if short {
                self.rng.range(1, len as u64 - 1) as usize
            } else {
                len
            };
            self.net.pieces(take, &mut self.rng, &mut pieces);
            let mut at = 0;
            for &piece in &pieces {
                let data = bytes[at..at + piece].to_vec();
                at += piece;
                let delay = self.net.delay(conn, self.t, &mut self.rng);
                self.net.conns[conn].up.push(self.t, delay, Up::Data(data));
            }
            self.clients[c].client.advance(i, take);
            if short {
                self.net.conns[conn].blocked = true;
                let later = self.t + self.rng.exp(200_000) + 1;
                self.at(later, Ev::Writable { conn });
                break;
            }
        }
        self.arm(conn, true);
    }

    /// A socket that cut a write short takes the rest.
    pub(crate) fn writable(&mut self, conn: usize) {
        let c = self.net.conns[conn].client;
        if self.deferred(c, Ev::Writable { conn }) {
            return;
        }
        self.net.conns[conn].blocked = false;
        let i = self.net.conns[conn].master;
        if self.clients[c].socks[i] == Some(conn) {
            self.write(c, i);
        }
    }

    /// Client `c` reads `data` from master `i`, as much at a time as its
    /// session's buffer takes; then writes what reading queued.
    pub(crate) fn read(&mut self, c: usize, i: usize, data: &[u8]) {
        let now = self.local(c);
        let mut rest = data;
        while !rest.is_empty() {
            let client = &mut self.clients[c].client;
            let n = match client.read_buf(i) {
                Ok(buf) => {
                    let n = buf.len().min(rest.len());
                    buf[..n].copy_from_slice(&rest[..n]);
                    n
                }
                Err(error) => return self.client_fail(c, i, error),
            };
            rest = &rest[n..];
            if let Err(error) = self.clients[c].client.handle_read(i, n, now) {
                return self.client_fail(c, i, error);
            }
        }
        self.write(c, i);
    }

    /// Client `c`'s socket to master `i` met the end of its stream.
    pub(crate) fn read_end(&mut self, c: usize, i: usize) {
        let now = self.local(c);
        let error = match self.clients[c].client.handle_read(i, 0, now) {
            Ok(()) => NodeError::Closed,
            Err(error) => error,
        };
        self.client_fail(c, i, error);
    }

    /// Client `c`'s socket to master `i` failed after `error`.
    pub(crate) fn client_fail(&mut self, c: usize, i: usize, error: NodeError) {
        self.note(|| format!("client {c}: master {i} fails: {error}"));
        self.leftovers.ended(c, i, self.t);
        let now = self.local(c);
        self.clients[c].client.handle_failure(i, error, now);
        self.sync_sockets(c);
    }

    /// The error a reset gives.
    pub(crate) fn reset_error() -> NodeError {
        NodeError::Io(ErrorKind::ConnectionReset)
    }

    /// The error a refused connect gives.
    pub(crate) fn refused_error() -> NodeError {
        NodeError::Connect(ErrorKind::ConnectionRefused)
    }
}
