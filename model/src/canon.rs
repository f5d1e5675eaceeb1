//! Fingerprints of states up to symmetry. Masters are interchangeable
//! (the protocol names them only by index, and a master's clock offset
//! is part of its state), and so are clients (same program, same
//! configuration; a token names its client). A state's fingerprint is
//! the least hash over the renamings of its masters and clients, so two
//! states that differ only by names are visited once. Only renamings of
//! masters that keep the configured clock offsets are tried: the others
//! map every state with those offsets to one without (a clock step makes
//! some symmetric states count twice, which is safe).
//!
//! A renaming is hashed as it reads, without building the renamed state:
//! masters and clients in their new order, every name inside renamed.

use crate::config::{MAX_CLIENTS, N};
use crate::state::{
    Client, Decision, Master, Msg, Node, Op, Phase, Request, State, Token, loss_id, loss_of,
};

/// A 64-bit hash, strong enough to stand for a state in the visited set
/// (two of ten million states share one with a chance of about 3 in a
/// million).
struct Fingerprint(u64);

const P1: u64 = 0x9E37_79B9_7F4A_7C15;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;

impl Fingerprint {
    fn new() -> Fingerprint {
        Fingerprint(0x2545_F491_4F6C_DD1D)
    }

    fn mix(&mut self, word: u64) {
        self.0 = (self.0 ^ word.wrapping_mul(P1))
            .rotate_left(31)
            .wrapping_mul(P2);
    }

    fn finish(&self) -> u64 {
        // The murmur3 finalizer: every input bit moves every output bit.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^= h >> 33;
        h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
        h ^ (h >> 33)
    }
}

/// Every permutation of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for rest in permutations(n - 1) {
        for at in 0..n {
            let mut p = rest.clone();
            p.insert(at, n - 1);
            all.push(p);
        }
    }
    all
}

/// A renaming: master `i` becomes `masters[i]`, client `j` becomes
/// `clients[j]`; with the inverses.
#[derive(Debug, Clone, Copy)]
struct Renaming {
    masters: [usize; N],
    clients: [usize; MAX_CLIENTS],
    old_master: [usize; N],
    old_client: [usize; MAX_CLIENTS],
}

impl Renaming {
    fn token(&self, t: Token) -> u64 {
        (self.clients[usize::from(t.client)] as u64) << 8 | u64::from(t.attempt)
    }

    fn loss(&self, id: u64) -> u64 {
        if id == 0 {
            return 0;
        }
        let (m, losses) = loss_of(id);
        loss_id(self.masters[m], losses)
    }
}

/// The renamings a search tries.
pub(crate) struct Canon {
    renamings: Vec<Renaming>,
}

impl Canon {
    /// The renamings of `N` masters that keep `offsets`, and of `clients`
    /// clients.
    pub(crate) fn new(clients: usize, offsets: &[i64; N]) -> Canon {
        let mut renamings = Vec::new();
        for m in permutations(N) {
            if (0..N).any(|i| offsets[m[i]] != offsets[i]) {
                continue;
            }
            for c in permutations(clients) {
                let mut r = Renaming {
                    masters: [0; N],
                    clients: [0; MAX_CLIENTS],
                    old_master: [0; N],
                    old_client: [0; MAX_CLIENTS],
                };
                for (i, &to) in m.iter().enumerate() {
                    r.masters[i] = to;
                    r.old_master[to] = i;
                }
                for j in 0..MAX_CLIENTS {
                    let to = c.get(j).copied().unwrap_or(j);
                    r.clients[j] = to;
                    r.old_client[to] = j;
                }
                renamings.push(r);
            }
        }
        Canon { renamings }
    }

    /// The fingerprint of `state`'s class: the least hash of its renamings.
    pub(crate) fn fingerprint(&self, state: &State) -> u64 {
        self.renamings
            .iter()
            .map(|r| hash(state, r))
            .min()
            .unwrap_or(0)
    }
}

/// The hash of `state` renamed by `r`.
fn hash(state: &State, r: &Renaming) -> u64 {
    let mut h = Fingerprint::new();
    h.mix(u64::from(state.now) | u64::from(state.client_count) << 8);
    for &old in &r.old_master {
        master(&mut h, &state.masters[old], r);
    }
    for new in 0..usize::from(state.client_count) {
        let c = &state.clients[r.old_client[new]];
        client(&mut h, c, r);
        h.mix(c.after | u64::from(c.reread) << 63);
        for &old in &r.old_master {
            h.mix(r.loss(c.known[old]));
        }
    }
    // The wire by connection in the new order; each connection's requests
    // in the order sent.
    for new_c in 0..usize::from(state.client_count) {
        for new_m in 0..N {
            let (c, m) = (r.old_client[new_c] as u8, r.old_master[new_m] as u8);
            for msg in state.wire.iter().filter(|x| (x.client, x.master) == (c, m)) {
                h.mix((new_c * N + new_m) as u64);
                wire(&mut h, msg, r);
            }
        }
    }
    for issued in &state.issued {
        let raised = (0..N)
            .filter(|m| issued.raised & (1 << m) != 0)
            .fold(0u64, |mask, m| mask | 1 << r.masters[m]);
        h.mix(issued.fence);
        h.mix(
            raised
                | 1 << 16
                | r.token(issued.token) << 24
                | u64::from(issued.valid_until) << 40
                | u64::from(issued.released) << 48,
        );
    }
    h.finish()
}

fn master(h: &mut Fingerprint, m: &Master, r: &Renaming) {
    let key = m.key.map_or(0, |k| {
        1 << 24 | r.token(k.token) << 8 | u64::from(k.expires)
    });
    h.mix(key);
    h.mix(m.counter.map_or(0, |c| c ^ 1 << 63));
    h.mix(m.lost.map_or(0, |l| r.loss(l) | 1 << 40));
    h.mix(m.offset as u64);
    h.mix(u64::from(m.losses) | u64::from(m.steps) << 8 | u64::from(m.time_reads) << 16);
}

fn client(h: &mut Fingerprint, c: &Client, r: &Renaming) {
    for &old in &r.old_master {
        h.mix(c.book.lost[old].map_or(0, |(id, seen)| r.loss(id) << 16 | u64::from(seen) << 8 | 1));
    }
    let (phase, value) = match c.phase {
        Phase::Idle => (0, 0),
        Phase::Read => (1, 0),
        Phase::Sync { start } => (2, u64::from(start)),
        Phase::Acquire => (3, 0),
        Phase::Raise { fence, valid_until } => {
            h.mix(u64::from(valid_until));
            (4, fence)
        }
        Phase::Holding { fence } => (5, fence),
    };
    h.mix(
        phase
            | u64::from(c.attempts) << 8
            | c.book.last_read.map_or(0, |t| u64::from(t) << 16 | 1 << 32),
    );
    h.mix(value);
    let Some(round) = c.round else {
        h.mix(u64::MAX);
        return;
    };
    let op = match round.op {
        Op::Read => 0,
        Op::Sync => 1,
        Op::Acquire => 2,
        Op::Raise => 3,
    };
    let decided = match round.decided {
        None => 0,
        Some(Decision::Quorum) => 1,
        Some(Decision::TooSlow) => 2,
        Some(Decision::NoQuorum) => 3,
    };
    h.mix(op | decided << 4 | u64::from(round.started) << 8);
    for &old in &r.old_master {
        match round.nodes[old] {
            Node::Pending => h.mix(0),
            Node::Ok(v) => {
                h.mix(1);
                h.mix(v);
            }
            Node::Refused => h.mix(2),
            Node::Unsynced { lost, clock, time } => {
                h.mix(3 | r.loss(lost) << 8);
                h.mix(clock);
                h.mix(time);
            }
            Node::Failed => h.mix(4),
        }
    }
}

fn wire(h: &mut Fingerprint, msg: &Msg, r: &Renaming) {
    let live = u64::from(msg.live) << 4;
    match msg.request {
        Request::Read => h.mix(live),
        Request::Sync { value, start, ids } => {
            h.mix(1 | live | u64::from(start) << 5);
            h.mix(value);
            let mut ids = ids.map(|id| r.loss(id));
            ids.sort_unstable();
            for id in ids {
                h.mix(id);
            }
        }
        Request::Acquire { token, expires } => {
            h.mix(2 | live | r.token(token) << 8 | u64::from(expires) << 32);
        }
        Request::Raise { token, fence } => {
            h.mix(3 | live | r.token(token) << 8);
            h.mix(fence);
        }
        Request::Release { token } => h.mix(4 | live | r.token(token) << 8),
    }
}
