//! The simulated network: one connection per socket a client opens, each
//! a pair of FIFO byte streams with their own delays (so that streams of
//! different connections overtake each other), cut by partitions.

use std::collections::VecDeque;

use super::rng::Rng;

/// What a client's end sends to the master's.
#[derive(Debug)]
pub(crate) enum Up {
    /// The connect.
    Syn,
    Data(Vec<u8>),
    /// The client closed its socket.
    Fin,
}

/// What a master's end (or its host) sends to the client's.
#[derive(Debug)]
pub(crate) enum Down {
    /// The connect was accepted.
    SynAck,
    /// Nobody listens: the master is down.
    Refused,
    Data(Vec<u8>),
    /// The master closed the connection (or its process died).
    Fin,
    /// The connection was reset.
    Reset,
}

/// One direction of a connection: segments in order, each due at its time.
#[derive(Debug)]
pub(crate) struct Pipe<T> {
    pub(crate) segs: VecDeque<(u64, T)>,
    /// When the last segment is due: a later one is never due before it.
    last: u64,
    /// An event to deliver the front segment is scheduled.
    pub(crate) armed: bool,
}

impl<T> Pipe<T> {
    fn new() -> Pipe<T> {
        Pipe {
            segs: VecDeque::new(),
            last: 0,
            armed: false,
        }
    }

    /// Queues `seg`, sent at `now` with `delay`: due then, or after the
    /// segment before it.
    pub(crate) fn push(&mut self, now: u64, delay: u64, seg: T) -> u64 {
        let at = (now + delay).max(self.last);
        self.last = at;
        self.segs.push_back((at, seg));
        at
    }

    /// When the front segment is due.
    pub(crate) fn front(&self) -> Option<u64> {
        self.segs.front().map(|(at, _)| *at)
    }

    pub(crate) fn clear(&mut self) {
        self.segs.clear();
    }
}

/// One connection, from a client's socket for one start of its session
/// with one master.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) client: usize,
    pub(crate) master: usize,
    /// The start of the client's session it belongs to.
    pub(crate) start: u64,
    pub(crate) up: Pipe<Up>,
    pub(crate) down: Pipe<Down>,
    /// The master's end, once accepted and until closed.
    pub(crate) model: Option<crate::Conn>,
    /// The client's end is open (its socket is not closed).
    pub(crate) open: bool,
    /// The client's end saw the connect complete.
    pub(crate) connected: bool,
    /// The master's end is gone (a crash, a reset): what reaches it is
    /// dropped.
    pub(crate) dead: bool,
    /// The client's last write was cut short: the rest waits for its
    /// socket to become writable.
    pub(crate) blocked: bool,
}

/// The network's timing and faults.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    /// One-way latency of each client-master path, in ns.
    pub(crate) base: Vec<Vec<u64>>,
    /// The mean of the jitter added to each segment.
    pub(crate) jitter: u64,
    /// The chance that a segment is held up by a spike, and its mean.
    pub(crate) spike: (f64, u64),
    /// The chance that a write is cut short or cut in pieces.
    pub(crate) split: f64,
}

/// Every connection ever made (ids are never reused), and the partitions.
#[derive(Debug)]
pub(crate) struct Net {
    pub(crate) conns: Vec<Conn>,
    pub(crate) timing: Timing,
    /// Until when each client-master path is cut.
    pub(crate) cut_until: Vec<Vec<u64>>,
    /// The spikes so far: the client whose path, when the segment was
    /// sent, and when it is due.
    pub(crate) spikes: Vec<(usize, u64, u64)>,
}

impl Net {
    pub(crate) fn new(timing: Timing, clients: usize, masters: usize) -> Net {
        Net {
            conns: Vec::new(),
            timing,
            cut_until: vec![vec![0; masters]; clients],
            spikes: Vec::new(),
        }
    }

    /// A new connection of `client` to `master` for `start`: its id.
    pub(crate) fn open(&mut self, client: usize, master: usize, start: u64) -> usize {
        self.conns.push(Conn {
            client,
            master,
            start,
            up: Pipe::new(),
            down: Pipe::new(),
            model: None,
            open: true,
            connected: false,
            dead: false,
            blocked: false,
        });
        self.conns.len() - 1
    }

    /// The delay of a segment sent at `now` on `conn`'s path.
    pub(crate) fn delay(&mut self, conn: usize, now: u64, rng: &mut Rng) -> u64 {
        let c = &self.conns[conn];
        let t = &self.timing;
        let mut delay = t.base[c.client][c.master] + rng.exp(t.jitter);
        if rng.chance(t.spike.0) {
            delay += rng.exp(t.spike.1);
            let client = c.client;
            self.spikes.push((client, now, now + delay));
        }
        delay
    }

    /// Until when the path of `conn` is cut, if it is at `now`.
    pub(crate) fn cut(&self, conn: usize, now: u64) -> Option<u64> {
        let c = &self.conns[conn];
        let until = self.cut_until[c.client][c.master];
        (until > now).then_some(until)
    }

    /// Where to cut `len` bytes written at once: the lengths of the pieces
    /// that travel as segments of their own.
    pub(crate) fn pieces(&self, len: usize, rng: &mut Rng, out: &mut Vec<usize>) {
        out.clear();
        if len > 1 && rng.chance(self.timing.split) {
            let mut left = len;
            while left > 0 {
                let piece = (rng.range(1, left as u64) as usize).min(left);
                out.push(piece);
                left -= piece;
                if out.len() > 6 {
                    out.push(left);
                    break;
                }
            }
            out.retain(|&p| p > 0);
        } else {
            out.push(len);
        }
    }
}
