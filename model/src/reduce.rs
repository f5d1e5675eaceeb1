//! Partial-order reduction: of the steps enabled in a state, the search
//! takes a *stubborn set* when it finds a smaller one, and all of them
//! otherwise.
//!
//! Two steps are *independent* when neither can disable the other and
//! both orders end in the same state: a master running one client's
//! request and another master running another's, say. A strong stubborn
//! set `S` of a state is closed under two rules: an enabled step in `S`
//! brings in every step that depends on it; a disabled step in `S` brings
//! in a set of steps one of which must run before it can be enabled.
//! Every path of the full graph then has a path of the reduced graph that
//! ends in a state with the same *visible* variables (Valmari's theorem;
//! the graph has no cycles, since every step uses up a request, an
//! attempt, a budget or a tick, so no cycle proviso is needed). The
//! visible steps are those that may hand out a fence: a client ending its
//! raise round; a set that holds one is taken only if it holds every
//! enabled step. So the fence property is checked on every path, though a
//! path may need more steps in the reduced graph: a reduced search is
//! exhaustive only once it has run out of states. Invariant (I) and the
//! counter check read the masters, which nearly every step writes: they
//! are checked on every state and step the reduced search visits, and on
//! every state by a search without the reduction.
//!
//! Dependence comes from what each step reads and writes (its
//! *footprint*), refined by three facts that hold along every path of
//! steps outside the set: requests appended to a connection commute with
//! the master taking its first one (the queue cannot run dry, since the
//! steps that take from it depend on each other); a master's step follows
//! the request at the head of its connection, which only steps of the set
//! change; and the replies of one round's masters commute (with N = 3 a
//! decision follows from how many masters did what was asked and how
//! many did not, in whatever order, as `Round::record` takes it).

use crate::config::{ClockStart, Config, N, Order, Q};
use crate::state::{Node, Op, Phase, Request, Round, State};
use crate::step::Action;

/// Which of the state's parts a step reads and writes, one bit each
/// (below); which clients' connections it appends to, and which
/// connections it takes the first request of.
#[derive(Debug, Clone, Copy, Default)]
struct Footprint {
    writes: u32,
    reads: u32,
    append: u8,
    take: u16,
}

/// Master `m`'s data (bits 0 to 2).
fn data(m: usize) -> u32 {
    1 << m
}

/// Master `m`'s clock offset (bits 3 to 5).
fn clock(m: usize) -> u32 {
    1 << (3 + m)
}

/// Client `c`'s phase, book and round but the round's slots (bits 6 to 8).
fn client(c: usize) -> u32 {
    1 << (6 + c)
}

/// The tick.
const NOW: u32 = 1 << 9;

/// The record of the fences handed out.
const FENCES: u32 = 1 << 10;

/// Client `c`'s round's slot of master `m` (bits 11 to 19).
fn slot(c: usize, m: usize) -> u32 {
    1 << (11 + c * N + m)
}

/// The whole of client `c`: its state and every slot of its round.
fn whole(c: usize) -> u32 {
    (0..N).fold(client(c), |all, m| all | slot(c, m))
}

/// The connection of client `c` to master `m`.
fn connection(c: usize, m: usize) -> u16 {
    1 << (c * N + m)
}

impl Footprint {
    fn union(&mut self, other: &Footprint) {
        self.writes |= other.writes;
        self.reads |= other.reads;
        self.append |= other.append;
        self.take |= other.take;
    }

    fn depends(&self, other: &Footprint) -> bool {
        self.writes & (other.writes | other.reads) != 0
            || other.writes & self.reads != 0
            || self.take & other.take != 0
            || self.append & other.append != 0
    }

    /// Master `m` runs `request` of client `c`, whose round `op` waits for
    /// its reply if `awaited` (the request is live and the round's slot of
    /// `m` pending: that slot can only be filled, or the round end, before
    /// the request runs).
    fn add_request(
        &mut self,
        request: &Request,
        awaited: bool,
        op: Option<Op>,
        c: usize,
        m: usize,
        rule: ClockStart,
    ) {
        if awaited {
            self.writes |= slot(c, m);
            if op == Some(Op::Acquire) {
                // The decision reads the time (too slow or not).
                self.reads |= NOW;
            }
        }
        match request {
            Request::Read => self.add_time(m),
            Request::Sync { start: true, .. } if rule == ClockStart::Own => self.add_time(m),
            _ => {}
        }
    }

    /// Reads master `m`'s `TIME` (its data holds how often it was read).
    fn add_time(&mut self, m: usize) {
        self.reads |= NOW | clock(m);
    }
}

/// A step's place in the universe of steps.
type Index = usize;

/// The steps a search may ever take with a configuration, and the
/// scratch space of a stubborn set.
pub(crate) struct Reducer {
    universe: Vec<Action>,
    enabled: Vec<bool>,
    member: Vec<bool>,
    /// Per step: its footprint now, if enabled.
    own: Vec<Footprint>,
    /// Per step: what it may touch on any path outside the set; for a
    /// master's step, if its client may still send more.
    open: Vec<Footprint>,
    /// For a master's step, if its client sends nothing more: what is
    /// queued now.
    closed: Vec<Footprint>,
    /// Per client: how many of its sending steps are in the set.
    senders_in: Vec<usize>,
    senders: usize,
    work: Vec<Index>,
    best: Vec<Index>,
}

/// The client of a step of a client or of a master running its request.
fn client_of(action: Action) -> Option<usize> {
    match action {
        Action::Begin { client }
        | Action::Handle { client, .. }
        | Action::Release { client }
        | Action::TimeOut { client, .. }
        | Action::Run { client, .. }
        | Action::ReadAll { client }
        | Action::Reset { client, .. } => Some(usize::from(client)),
        _ => None,
    }
}

/// Whether a step of client `c` sends requests.
fn sends(action: Action) -> bool {
    matches!(
        action,
        Action::Begin { .. } | Action::Handle { .. } | Action::Release { .. }
    )
}

impl Reducer {
    /// Every step `config` allows.
    pub(crate) fn new(config: &Config) -> Reducer {
        let mut universe = Vec::new();
        for c in 0..config.clients as u8 {
            universe.push(Action::Begin { client: c });
            for pick in 0..N as u8 {
                universe.push(Action::Handle { client: c, pick });
            }
            universe.push(Action::Release { client: c });
            if config.atomic_reads {
                universe.push(Action::ReadAll { client: c });
            }
            for m in 0..N as u8 {
                if config.timeouts {
                    universe.push(Action::TimeOut {
                        client: c,
                        master: m,
                    });
                }
                universe.extend(Action::of_connection(c, m, config));
            }
        }
        for m in 0..N as u8 {
            universe.push(Action::Expire { master: m });
            if config.restarts > 0 {
                universe.push(Action::Restart { master: m });
            }
            if config.steps > 0 {
                universe.extend(Action::steps_of(m, config));
            }
        }
        if config.ticks > 0 {
            universe.push(Action::Tick);
        }
        let n = universe.len();
        Reducer {
            universe,
            enabled: vec![false; n],
            member: vec![false; n],
            own: vec![Footprint::default(); n],
            open: vec![Footprint::default(); n],
            closed: vec![Footprint::default(); n],
            senders_in: vec![0; config.clients],
            senders: 1 + N + 1,
            work: Vec::new(),
            best: Vec::new(),
        }
    }

    /// Narrows `actions`, the steps enabled in `state`, to the smallest
    /// stubborn set found, if one is smaller and holds no visible step.
    pub(crate) fn reduce(&mut self, state: &State, config: &Config, actions: &mut Vec<Action>) {
        if actions.len() <= 1 {
            return;
        }
        for i in 0..self.universe.len() {
            let a = self.universe[i];
            self.enabled[i] = actions.contains(&a);
            self.own[i] = if self.enabled[i] {
                self.footprint(state, config, a)
            } else {
                Footprint::default()
            };
            self.open[i] = self.potential(state, config, a, false);
            self.closed[i] = self.potential(state, config, a, true);
        }
        let mut best_len = actions.len();
        self.best.clear();
        for seed in 0..self.universe.len() {
            if !self.enabled[seed] || self.visible(state, seed) {
                continue;
            }
            let len = self.close(state, config, seed, best_len);
            if len < best_len {
                best_len = len;
                self.best.clear();
                self.best.extend(
                    (0..self.universe.len()).filter(|&i| self.member[i] && self.enabled[i]),
                );
                if len == 1 {
                    break;
                }
            }
        }
        if !self.best.is_empty() {
            actions.clear();
            actions.extend(self.best.iter().map(|&i| self.universe[i]));
        }
    }

    /// Whether step `i` may hand out a fence.
    fn visible(&self, state: &State, i: Index) -> bool {
        match self.universe[i] {
            Action::Handle { client, .. } => {
                matches!(
                    state.clients[usize::from(client)].phase,
                    Phase::Raise { .. }
                )
            }
            _ => false,
        }
    }

    /// Puts step `u` in the set; `false` if that makes the set no smaller
    /// than `limit` enabled steps (counted in `enabled`), or visible.
    fn add(&mut self, state: &State, u: Index, enabled: &mut usize, limit: usize) -> bool {
        if self.member[u] {
            return true;
        }
        self.member[u] = true;
        self.work.push(u);
        let action = self.universe[u];
        if sends(action) {
            if let Some(c) = client_of(action) {
                self.senders_in[c] += 1;
            }
        }
        if self.enabled[u] {
            *enabled += 1;
            if *enabled >= limit || self.visible(state, u) {
                return false;
            }
        }
        true
    }

    /// Builds the stubborn set of `seed` in `member`; the number of its
    /// enabled steps, or `limit` once it cannot be smaller than that (or
    /// holds a visible step).
    fn close(&mut self, state: &State, config: &Config, seed: Index, limit: usize) -> usize {
        self.member.iter_mut().for_each(|m| *m = false);
        self.senders_in.iter_mut().for_each(|n| *n = 0);
        self.work.clear();
        let mut enabled = 0;
        if !self.add(state, seed, &mut enabled, limit) {
            return limit;
        }
        while let Some(t) = self.work.pop() {
            if self.enabled[t] {
                let own = self.own[t];
                for u in 0..self.universe.len() {
                    if self.member[u] {
                        continue;
                    }
                    let quiet = client_of(self.universe[u])
                        .is_some_and(|c| self.senders_in[c] == self.senders);
                    let other = if quiet {
                        &self.closed[u]
                    } else {
                        &self.open[u]
                    };
                    if own.depends(other) && !self.add(state, u, &mut enabled, limit) {
                        return limit;
                    }
                }
            } else {
                for u in self.enablers(state, config, t) {
                    if !self.add(state, u, &mut enabled, limit) {
                        return limit;
                    }
                }
            }
        }
        enabled
    }

    /// What step `action`, enabled, reads and writes in `state`.
    fn footprint(&self, state: &State, config: &Config, action: Action) -> Footprint {
        match action {
            Action::Handle { client: c, .. } => {
                let c = usize::from(c);
                let mut f = self.potential(state, config, action, false);
                if !matches!(state.clients[c].phase, Phase::Raise { .. }) {
                    f.writes &= !FENCES;
                }
                if config.order == Order::Ended {
                    // An acquire it sends notes the holdings ended by then.
                    f.reads |= FENCES;
                }
                f
            }
            Action::Run {
                client: c,
                master: m,
                ..
            } => {
                let (cu, mu) = (usize::from(c), usize::from(m));
                let mut f = Footprint {
                    writes: data(mu),
                    take: connection(cu, mu),
                    ..Footprint::default()
                };
                if let Some(i) = state.head(c, m) {
                    let msg = &state.wire[i];
                    let op = state.clients[cu].round.map(|r| r.op);
                    let awaited = state.awaited(msg);
                    f.add_request(&msg.request, awaited, op, cu, mu, config.clock_start);
                }
                f
            }
            Action::ReadAll { client } => {
                let mut f = Footprint::default();
                for master in 0..N as u8 {
                    let run = Action::Run {
                        client,
                        master,
                        lose: false,
                    };
                    f.union(&self.footprint(state, config, run));
                }
                f
            }
            other => self.potential(state, config, other, false),
        }
    }

    /// What step `action` may read and write whenever it runs on a path of
    /// steps outside the set; for a master's step, `quiet`: its client
    /// sends nothing more on that path.
    fn potential(&self, state: &State, config: &Config, action: Action, quiet: bool) -> Footprint {
        let mut f = Footprint::default();
        match action {
            Action::Begin { client: c } => {
                let c = usize::from(c);
                f.writes = whole(c);
                f.reads = NOW;
                if config.order == Order::Ended {
                    // An acquire it sends notes the holdings ended by then.
                    f.reads |= FENCES;
                }
                f.append = 1 << c;
            }
            Action::Handle { client: c, .. } => {
                let c = usize::from(c);
                f.writes = whole(c) | FENCES;
                f.reads = NOW;
                f.append = 1 << c;
            }
            Action::Release { client: c } => {
                let c = usize::from(c);
                f.writes = whole(c);
                if config.order == Order::Ended {
                    // It ends a holding.
                    f.writes |= FENCES;
                }
                f.append = 1 << c;
            }
            Action::TimeOut { client, master } => {
                f.writes = slot(usize::from(client), usize::from(master));
            }
            Action::Run {
                client: c,
                master: m,
                ..
            } => {
                let (cu, mu) = (usize::from(c), usize::from(m));
                f.writes = data(mu);
                f.take = connection(cu, mu);
                if quiet {
                    let op = state.clients[cu].round.map(|r| r.op);
                    for msg in state.wire.iter().filter(|x| (x.client, x.master) == (c, m)) {
                        let awaited = state.awaited(msg);
                        f.add_request(&msg.request, awaited, op, cu, mu, config.clock_start);
                    }
                } else {
                    f.writes |= slot(cu, mu);
                    f.add_time(mu);
                }
            }
            Action::ReadAll { client } => {
                for master in 0..N as u8 {
                    let run = Action::Run {
                        client,
                        master,
                        lose: false,
                    };
                    f.union(&self.potential(state, config, run, quiet));
                }
            }
            Action::Expire { master } => {
                f.writes = data(usize::from(master));
                f.reads = NOW;
            }
            Action::Restart { master } => f.writes = data(usize::from(master)),
            Action::Reset { client, master } => {
                f.take = connection(usize::from(client), usize::from(master));
            }
            Action::Tick => f.writes = NOW,
            Action::Step { master, .. } => f.writes = clock(usize::from(master)),
        }
        f
    }

    /// Steps of which one must run before disabled step `i` can be
    /// enabled.
    fn enablers(&self, state: &State, config: &Config, i: Index) -> Vec<Index> {
        let action = self.universe[i];
        let Some(c) = client_of(action) else {
            return self.master_enablers(state, config, action);
        };
        let cu = c as u8;
        let client = &state.clients[c];
        // The steps that start the client's next round.
        let next_round = || match (client.phase, client.round) {
            (Phase::Idle, _) => self.find(|a| a == Action::Begin { client: cu }),
            (Phase::Holding { .. }, _) => self.find(|a| a == Action::Release { client: cu }),
            _ => self.find(|a| matches!(a, Action::Handle { client, .. } if client == cu)),
        };
        match action {
            Action::Begin { .. } if client.attempts >= config.attempts => Vec::new(),
            Action::Begin { .. } | Action::Release { .. } => self.find(|a| {
                matches!(a, Action::Handle { client, .. } if client == cu)
                    || a == Action::Release { client: cu }
            }),
            Action::Handle { .. } => match client.round {
                Some(round) if round.decided.is_none() => self.deciders(cu, &round),
                _ => next_round(),
            },
            Action::TimeOut { .. } => next_round(),
            Action::Run { master: m, .. } | Action::Reset { master: m, .. } => {
                let mut all = self.find(|a| sends(a) && client_of(a) == Some(c));
                if state.head(cu, m).is_some() {
                    // A lost reply waits for its request to be awaited; a
                    // master's step for a read that runs everywhere at once.
                    all.extend(self.find(|a| {
                        matches!(a, Action::Run { client, master, .. } | Action::Reset { client, master }
                            if client == cu && master == m)
                            || a == Action::ReadAll { client: cu }
                    }));
                }
                all
            }
            Action::ReadAll { .. } => self.find(|a| {
                client_of(a) == Some(c)
                    && (sends(a) || matches!(a, Action::Run { .. } | Action::Reset { .. }))
            }),
            _ => Vec::new(),
        }
    }

    /// Steps of which one must run before a disabled master's step can
    /// be enabled.
    fn master_enablers(&self, state: &State, config: &Config, action: Action) -> Vec<Index> {
        let runs_at = |m: u8| {
            self.find(|a| {
                matches!(a, Action::Run { master, .. } if master == m)
                    || matches!(a, Action::ReadAll { .. })
            })
        };
        match action {
            Action::Expire { master: m } => {
                if state.masters[usize::from(m)].key.is_none() {
                    runs_at(m)
                } else if state.now < config.ticks {
                    self.find(|a| a == Action::Tick)
                } else {
                    Vec::new()
                }
            }
            Action::Restart { master: m } => {
                if state.masters[usize::from(m)].losses >= config.restarts {
                    Vec::new()
                } else {
                    runs_at(m)
                }
            }
            _ => Vec::new(),
        }
    }

    /// Steps of which one must run before client `c`'s undecided round
    /// decides: its masters' answers (or time-outs). The decision needs
    /// `need` more of them, so any `pending - need + 1` pending masters
    /// include one of them; masters already in the set are taken first.
    fn deciders(&self, c: u8, round: &Round) -> Vec<Index> {
        let pending: Vec<usize> = (0..N)
            .filter(|&m| round.nodes[m] == Node::Pending)
            .collect();
        let ok = round
            .nodes
            .iter()
            .filter(|s| matches!(s, Node::Ok(_)))
            .count();
        let failed = N - ok - pending.len();
        let need = match round.op {
            Op::Read | Op::Sync => pending.len(),
            Op::Acquire | Op::Raise => (Q - ok.min(Q)).min(N - Q + 1 - failed.min(N - Q + 1)),
        };
        let take = (pending.len() + 1).saturating_sub(need.max(1));
        let answers = |m: usize| {
            self.find(|a| {
                matches!(a, Action::Run { client, master, .. } | Action::TimeOut { client, master }
                    if client == c && usize::from(master) == m)
                    || a == Action::ReadAll { client: c }
            })
        };
        let mut chosen: Vec<usize> = pending
            .iter()
            .copied()
            .filter(|&m| answers(m).iter().any(|&i| self.member[i]))
            .collect();
        for &m in &pending {
            if chosen.len() >= take {
                break;
            }
            if !chosen.contains(&m) {
                chosen.push(m);
            }
        }
        chosen.truncate(take.max(1));
        chosen.into_iter().flat_map(answers).collect()
    }

    fn find(&self, which: impl Fn(Action) -> bool) -> Vec<Index> {
        (0..self.universe.len())
            .filter(|&i| which(self.universe[i]))
            .collect()
    }
}

const _: () =
    assert!(crate::config::MAX_CLIENTS * N <= 16 && 11 + crate::config::MAX_CLIENTS * N <= 32);
