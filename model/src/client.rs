//! A client's fenced acquire, step by step, as `src/client/fence.rs` runs
//! it (`FencedAcquire`, `FenceBook`, `sync_value`, `clock_start`), and
//! the rounds' decisions as `rules::Round` takes them. Each function names
//! the library's function it follows.

use crate::config::{ClockStart, Config, N, Q, StartRule};
use crate::log::Log;
use crate::state::{Book, Decision, Issued, Node, Op, Phase, Request, Round, State, Token};

impl Round {
    /// A round of `op` started at tick `started`.
    pub(crate) fn new(op: Op, started: u8) -> Round {
        Round {
            op,
            started,
            nodes: [Node::Pending; N],
            decided: None,
        }
    }

    /// `Round::record`: master `node` ended in `state` at tick `now`; the
    /// round decides as soon as the outcome is certain (a read or a sync
    /// waits for every master). An acquire's quorum with no validity left
    /// (`now` past `t0 + validity`) is too slow.
    pub(crate) fn record(&mut self, node: usize, state: Node, now: u8, validity: u8) {
        if self.nodes[node] != Node::Pending {
            return;
        }
        self.nodes[node] = state;
        if self.decided.is_some() {
            return;
        }
        let ok = self.count(|s| matches!(s, Node::Ok(_)));
        let failed = self.count(|s| !matches!(s, Node::Ok(_) | Node::Pending));
        let pending = N - ok - failed;
        if matches!(self.op, Op::Read | Op::Sync) && pending > 0 {
            return;
        }
        if ok >= Q {
            let late = self.op == Op::Acquire && now >= self.started.saturating_add(validity);
            self.decided = Some(if late {
                Decision::TooSlow
            } else {
                Decision::Quorum
            });
        } else if failed > N - Q {
            self.decided = Some(Decision::NoQuorum);
        }
    }

    fn count(&self, which: impl Fn(&Node) -> bool) -> usize {
        self.nodes.iter().filter(|s| which(s)).count()
    }

    /// `Round::max_count`: the largest count of the masters that did what
    /// was asked.
    pub(crate) fn max_count(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|s| match s {
                Node::Ok(v) if *v > 0 => Some(*v),
                _ => None,
            })
            .max()
    }

    /// The masters that did what was asked, bit `i` for master `i`.
    pub(crate) fn done(&self) -> u8 {
        (0..N).fold(0, |mask, i| match self.nodes[i] {
            Node::Ok(_) => mask | 1 << i,
            _ => mask,
        })
    }
}

impl Book {
    /// `FenceBook::saw_lost`.
    fn saw_lost(&mut self, node: usize, id: u64, now: u8) {
        if id == 0 {
            return;
        }
        if !matches!(self.lost[node], Some((known, _)) if known == id) {
            self.lost[node] = Some((id, now));
        }
    }

    /// `FenceBook::claim_read` (its `read_due`, with `any_due`): whether an
    /// attempt starting at `now` reads first.
    fn claim_read(&mut self, now: u8, config: &Config) -> bool {
        let due = match self.last_read {
            None => true,
            Some(at) => {
                self.lost
                    .iter()
                    .flatten()
                    .any(|&(_, seen)| due(seen, now, config.wait))
                    && now - at >= config.read_every
            }
        };
        if due && self.last_read.is_some() {
            self.last_read = Some(now);
        }
        due
    }

    /// `Redlock::note_fences`: records what a round said of each counter;
    /// the round's largest count.
    fn note(&mut self, round: &Round, now: u8) -> Option<u64> {
        for (node, state) in round.nodes.iter().enumerate() {
            match *state {
                Node::Unsynced { lost, .. } => self.saw_lost(node, lost, now),
                Node::Ok(v) if v > 0 => self.lost[node] = None,
                _ => {}
            }
        }
        round.max_count()
    }
}

/// `due`: whether `wait` ticks have passed from `seen` to `now`.
fn due(seen: u8, now: u8, wait: u8) -> bool {
    now.saturating_sub(seen) >= wait
}

/// How many values a start from the clocks after client `c`'s read could
/// take: with [`ClockStart::One`] and a read that every master answered
/// out of sync, one per master (the search tries each); else one.
pub(crate) fn picks(state: &State, c: usize, config: &Config) -> usize {
    let client = &state.clients[c];
    match (client.phase, client.round) {
        (Phase::Read, Some(round))
            if config.clock_start == ClockStart::One
                && round
                    .nodes
                    .iter()
                    .all(|s| matches!(s, Node::Unsynced { .. })) =>
        {
            N
        }
        _ => 1,
    }
}

/// `FencedAcquire::new`, then its first round: client `c` starts an
/// attempt, reading first if its book says so.
pub(crate) fn begin(state: &mut State, c: usize, config: &Config, log: &mut Log) {
    let now = state.now;
    let client = &mut state.clients[c];
    client.attempts += 1;
    client.reread = false;
    if client.book.claim_read(now, config) {
        log.note(|| format!("c{c} starts attempt {} with a read", client.attempts));
        read(state, c, config);
    } else {
        log.note(|| format!("c{c} starts attempt {}", client.attempts));
        acquire(state, c, config, log);
    }
}

/// The read round of client `c`'s attempt (`Step::Read`).
fn read(state: &mut State, c: usize, config: &Config) {
    let now = state.now;
    let client = &mut state.clients[c];
    client.phase = Phase::Read;
    client.round = Some(Round::new(Op::Read, now));
    if config.start == StartRule::Confirmed {
        client.known = client.book.lost.map(|slot| slot.map_or(0, |(id, _)| id));
    }
    state.send(c as u8, Request::Read, true);
}

/// The acquire round of client `c`'s attempt (`Step::Acquire`).
fn acquire(state: &mut State, c: usize, config: &Config, log: &mut Log) {
    let now = state.now;
    let client = &mut state.clients[c];
    client.phase = Phase::Acquire;
    client.round = Some(Round::new(Op::Acquire, now));
    let token = token(c, client.attempts);
    let expires = now.saturating_add(config.validity);
    log.note(|| {
        format!(
            "c{c} sends FENCED_ACQUIRE {}; valid until tick {expires}",
            show_token(token)
        )
    });
    // Ghost: the holdings this one comes after in `Order::Ended`.
    let after = state
        .issued
        .iter()
        .filter(|i| i.released || now >= i.valid_until)
        .map(|i| i.fence)
        .max()
        .unwrap_or(0);
    state.clients[c].after = after;
    state.send(c as u8, Request::Acquire { token, expires }, true);
}

/// The token of attempt `attempt` of client `c`.
fn token(c: usize, attempt: u8) -> Token {
    Token {
        client: c as u8,
        attempt,
    }
}

/// A token as a trace shows it.
pub(crate) fn show_token(token: Token) -> String {
    format!("c{}#{}", token.client, token.attempt)
}

/// `Redlock::not_acquired`: the attempt failed; its key is released on
/// every master, without waiting.
fn fail(state: &mut State, c: usize, why: &str, log: &mut Log) {
    let client = &mut state.clients[c];
    let token = token(c, client.attempts);
    client.phase = Phase::Idle;
    client.round = None;
    log.note(|| format!("c{c} fails ({why}) and sends RELEASE {}", show_token(token)));
    state.send(c as u8, Request::Release { token }, false);
}

/// `FencedAcquire::handle`: client `c` takes how its decided round ended
/// (at tick `now`, the round's `ended`) and sends the next. `pick` is the
/// master whose clock a [`ClockStart::One`] start takes. Returns the
/// fence handed out, if a holding began.
pub(crate) fn handle(
    state: &mut State,
    c: usize,
    pick: usize,
    config: &Config,
    log: &mut Log,
) -> Option<Issued> {
    let now = state.now;
    let client = &mut state.clients[c];
    let round = client.round.take()?;
    let decision = round.decided.unwrap_or(Decision::NoQuorum);
    let phase = client.phase;
    state.orphan(c as u8);
    log.note(|| format!("c{c} ends its {:?} round: {decision:?}", round.op));
    match phase {
        Phase::Read => {
            if !plan_sync(state, c, &round, pick, config, log) {
                acquire(state, c, config, log);
            }
            None
        }
        Phase::Sync { start } => {
            let book = &mut state.clients[c].book;
            for (node, s) in round.nodes.iter().enumerate() {
                if matches!(s, Node::Ok(_)) {
                    book.lost[node] = None;
                }
            }
            if start && round.count(|s| matches!(s, Node::Ok(_))) >= Q {
                book.last_read = Some(now);
            }
            acquire(state, c, config, log);
            None
        }
        Phase::Acquire => {
            acquired(state, c, &round, decision, config, log);
            None
        }
        Phase::Raise { fence, valid_until } => {
            state.clients[c].book.note(&round, now);
            if decision == Decision::Quorum && now < valid_until {
                let client = &mut state.clients[c];
                client.phase = Phase::Holding { fence };
                log.note(|| format!("c{c} holds the lock with fence {fence}"));
                Some(Issued {
                    fence,
                    raised: round.done(),
                    token: token(c, client.attempts),
                    valid_until,
                    released: false,
                })
            } else {
                let why = if decision == Decision::Quorum {
                    "raise too late"
                } else {
                    "raise without a quorum"
                };
                fail(state, c, why, log);
                None
            }
        }
        Phase::Idle | Phase::Holding { .. } => None,
    }
}

/// `FencedAcquire::plan_sync` with `sync_value` and `clock_start`: after
/// client `c`'s read, notes what it said and sends the sync of the masters
/// that may be put back, if any (then `true`).
fn plan_sync(
    state: &mut State,
    c: usize,
    read: &Round,
    pick: usize,
    config: &Config,
    log: &mut Log,
) -> bool {
    let now = state.now;
    let book = &mut state.clients[c].book;
    book.note(read, now);
    let plan = sync_value(read, pick, config.clock_start);
    if book.last_read.is_some() || matches!(plan, Some((_, false))) {
        // Until a read finds a quorum in sync (or a start reaches a
        // quorum), every attempt reads first.
        book.last_read = Some(now);
    }
    let Some((value, start)) = plan else {
        return false;
    };
    if start {
        match start_rule(state, c, read, config) {
            Some(true) => {}
            Some(false) => return false,
            None => {
                log.note(|| format!("c{c} reads again to confirm the start"));
                self::read(state, c, config);
                return true;
            }
        }
    }
    let book = &state.clients[c].book;
    let mut ids = [0; N];
    let mut n = 0;
    for (node, slot) in book.lost.iter().enumerate() {
        if let (Some((id, seen)), Node::Unsynced { .. }) = (slot, read.nodes[node]) {
            if start || due(*seen, read.started, config.wait) {
                ids[n] = *id;
                n += 1;
            }
        }
    }
    if n == 0 {
        return false;
    }
    ids.sort_unstable();
    let client = &mut state.clients[c];
    client.phase = Phase::Sync { start };
    client.round = Some(Round::new(Op::Sync, now));
    log.note(|| {
        let mode = if start { "start" } else { "repair" };
        let to = if start && config.clock_start == ClockStart::Own {
            "each master's own TIME".to_string()
        } else {
            value.to_string()
        };
        format!("c{c} sends FENCE_SYNC {mode} to {to} for loss ids {ids:?}")
    });
    state.send(c as u8, Request::Sync { value, start, ids }, true);
    true
}

/// Whether client `c` starts the counters after `read` found every master
/// out of sync: by the library's rule, yes; by a rule to try, perhaps
/// not (`None`: not yet, read again).
fn start_rule(state: &mut State, c: usize, read: &Round, config: &Config) -> Option<bool> {
    let client = &mut state.clients[c];
    match config.start {
        StartRule::Direct => Some(true),
        StartRule::Confirmed => {
            let confirmed = (0..N).all(|n| {
                matches!(read.nodes[n], Node::Unsynced { lost, .. } if lost != 0 && lost == client.known[n])
            });
            if confirmed {
                Some(true)
            } else if client.reread {
                Some(false)
            } else {
                client.reread = true;
                None
            }
        }
        StartRule::Waited => Some(
            client
                .book
                .lost
                .iter()
                .all(|slot| slot.is_some_and(|(_, seen)| due(seen, read.started, config.wait))),
        ),
    }
}

/// `sync_value`: the largest count of a quorum in sync, or, when every
/// master answered out of sync, the start from the clocks (`true`).
fn sync_value(read: &Round, pick: usize, rule: ClockStart) -> Option<(u64, bool)> {
    let synced = read.count(|s| matches!(s, Node::Ok(_)));
    let lost = read.count(|s| matches!(s, Node::Unsynced { .. }));
    if synced >= Q {
        read.max_count().map(|highest| (highest, false))
    } else if synced == 0 && lost == N {
        let clock = |node: usize| match read.nodes[node] {
            Node::Unsynced { clock, .. } => clock,
            _ => 0,
        };
        let start = match rule {
            // `clock_start`: the largest of the N.
            ClockStart::Largest => (0..N).map(clock).max().unwrap_or(0),
            ClockStart::One => match read.nodes[pick] {
                Node::Unsynced { time, .. } => time,
                _ => 0,
            },
            // Each master takes its own clock when the sync runs there.
            ClockStart::Own => 1,
        };
        (start > 0).then_some((start, true))
    } else {
        None
    }
}

/// `FencedAcquire::acquired`: after client `c`'s acquire round, the raise
/// of the fence counted, or the release.
fn acquired(
    state: &mut State,
    c: usize,
    round: &Round,
    decision: Decision,
    config: &Config,
    log: &mut Log,
) {
    let now = state.now;
    let client = &mut state.clients[c];
    match decision {
        Decision::Quorum => match client.book.note(round, now) {
            Some(fence) => {
                let token = token(c, client.attempts);
                let valid_until = round.started.saturating_add(config.validity);
                client.phase = Phase::Raise { fence, valid_until };
                client.round = Some(Round::new(Op::Raise, now));
                log.note(|| format!("c{c} sends RAISE {} to {fence}", show_token(token)));
                state.send(c as u8, Request::Raise { token, fence }, true);
            }
            None => fail(state, c, "unfenced", log),
        },
        Decision::TooSlow => fail(state, c, "too slow", log),
        Decision::NoQuorum => {
            client.book.note(round, now);
            fail(state, c, "no quorum", log);
        }
    }
}

/// `Lock::release` (`unlock`): client `c`, holding, releases its key on
/// every master and is idle again.
pub(crate) fn release(state: &mut State, c: usize, log: &mut Log) {
    let client = &mut state.clients[c];
    let token = token(c, client.attempts);
    client.phase = Phase::Idle;
    log.note(|| format!("c{c} releases: RELEASE {}", show_token(token)));
    state.send(c as u8, Request::Release { token }, false);
    for issued in state.issued.iter_mut().filter(|i| i.token == token) {
        issued.released = true;
    }
}
