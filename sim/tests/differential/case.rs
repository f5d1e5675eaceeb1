//! One case, run on the real server and the model side by side, every
//! frame each connection receives compared: the replies, and the pushes
//! among them and after them, in order.

use redlock_mio_sim::{Conn, ConnState, Master, Snapshot};

use super::compare::{RunIds, Tally, compare_frames, count};
use super::generate::Generator;
use super::server::{PASSWORD, Server};
use super::steps::{Command, Step};
use super::wire::{Replies, Value, Wire, encode};

/// The clock when the server of a case starts.
pub(crate) const SERVER_START: u64 = 1_750_000_000_000_000;

/// Connections a case holds at most: lock clients that wait, and other
/// clients.
pub(crate) const CONNS: usize = 4;

/// The clock when the case of `seed` begins: 100 s after the server's
/// start, at a microsecond of the second that varies with the seed, so
/// that expiry and the time-derived values meet every boundary.
pub(crate) fn case_start(seed: u64) -> u64 {
    SERVER_START + 100_000_000 + seed.wrapping_mul(7_919) % 1_000_000
}

/// The seed of the models' run ids (the server's are random: they
/// compare by when they change).
const MODEL_SEED: u64 = 1;

/// Where a case went wrong.
pub(crate) struct Failure {
    /// The steps run, the failing one last.
    pub(crate) steps: Vec<Step>,
    pub(crate) message: String,
}

/// A case being run: the real server and the model, their connections,
/// and the clock they share.
pub(crate) struct Runner<'a> {
    server: &'a mut Server,
    model: Master,
    wires: [Option<Wire>; CONNS],
    conns: [Option<Conn>; CONNS],
    /// The connections that have sent `SUBSCRIBE` since they opened: they
    /// can receive published messages.
    listening: [bool; CONNS],
    /// The connections that have sent `CLIENT TRACKING` since they
    /// opened: they can receive invalidations, after any command of
    /// another connection (a read that expires a key included).
    tracking: [bool; CONNS],
    snapshot: Option<Snapshot>,
    run_ids: RunIds,
    now: u64,
    tally: Tally,
    /// Numbers the `PING`s that end the exchanges.
    pings: u64,
}

impl<'a> Runner<'a> {
    /// A case on `server`, brought back to the start: a process started at
    /// [`SERVER_START`], empty, no script cached, the clock at `start`; and
    /// a model in the same state.
    pub(crate) fn new(server: &'a mut Server, start: u64) -> Runner<'a> {
        if server.started() != SERVER_START {
            server.set_clock(SERVER_START);
            server.restart(false);
        } else {
            let mut admin = server.admin();
            for command in [&[&b"FLUSHALL"[..]][..], &[b"SCRIPT", b"FLUSH"]] {
                let words: Vec<Vec<u8>> = command.iter().map(|w| w.to_vec()).collect();
                assert_eq!(admin.call(&words), Value::Simple(b"OK".to_vec()));
            }
        }
        server.set_clock(start);
        let model = Master::new(MODEL_SEED, SERVER_START)
            .with_password(PASSWORD)
            .with_push_order(server.push_order())
            .with_script_reads(server.script_reads());
        Runner {
            server,
            model,
            wires: Default::default(),
            conns: Default::default(),
            listening: [false; CONNS],
            tracking: [false; CONNS],
            snapshot: None,
            run_ids: RunIds::default(),
            now: start,
            tally: Tally::new(),
            pings: 0,
        }
    }

    /// Generates and runs `len` steps from `seed`.
    /// What the server replied, by kind, if the model replied the same.
    pub(crate) fn run_generated(mut self, seed: u64, len: usize) -> Result<Tally, Failure> {
        let mut generator = Generator::new(seed);
        let mut steps = Vec::with_capacity(len);
        for _ in 0..len {
            let step = generator.next(&self.model, &self.conns, self.now);
            let outcome = self.step(&step);
            steps.push(step);
            if let Err(message) = outcome {
                return Err(Failure { steps, message });
            }
        }
        match self.drain_all() {
            Ok(()) => Ok(self.tally),
            Err(message) => Err(Failure { steps, message }),
        }
    }

    /// Runs `steps` as they are (a replay, or a smaller case).
    pub(crate) fn replay(mut self, steps: &[Step]) -> Result<(), Failure> {
        for (i, step) in steps.iter().enumerate() {
            if let Err(message) = self.step(step) {
                let steps = steps[..=i].to_vec();
                return Err(Failure { steps, message });
            }
        }
        self.drain_all().map_err(|message| Failure {
            steps: steps.to_vec(),
            message,
        })
    }

    /// Runs one step on both sides.
    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Connect(conn) => {
                self.close(*conn);
                self.wires[*conn] = Some(self.server.connect());
                self.conns[*conn] = Some(self.model.connect());
                Ok(())
            }
            Step::Send {
                conn,
                commands,
                cuts,
            } => self.send(*conn, commands, cuts),
            Step::Advance(us) => {
                self.now += us;
                self.server.set_clock(self.now);
                Ok(())
            }
            Step::Snapshot => {
                self.server.snapshot();
                self.snapshot = Some(self.model.snapshot());
                Ok(())
            }
            Step::Restart { from_snapshot } => {
                self.wires = Default::default();
                self.listening = [false; CONNS];
                self.tracking = [false; CONNS];
                // A restart from a snapshot that this case never took (a
                // shrunk case may have dropped it) starts empty on both
                // sides: the server's file is an earlier case's.
                let from_snapshot = *from_snapshot && self.snapshot.is_some();
                self.server.restart(from_snapshot);
                match (&self.snapshot, from_snapshot) {
                    (Some(snapshot), true) => self.model.restore(snapshot, self.now),
                    _ => self.model.restart(self.now),
                }
                Ok(())
            }
        }
    }

    /// Sends `commands` on `conn`, on both sides, and compares what comes
    /// back; then what the other connections received: those that listen,
    /// if the commands may have published; those that track, always.
    fn send(&mut self, conn: usize, commands: &[Command], cuts: &[u64]) -> Result<(), String> {
        let words: Vec<Vec<Vec<u8>>> = commands.iter().map(|c| c.words.clone()).collect();
        let (model, state) = self.model_exchange(conn, &words, cuts)?;
        let sentinel = self.sentinel();
        let real = match &mut self.wires[conn] {
            Some(wire) => wire.exchange(&words, &sentinel, model.len())?,
            None => Vec::new(),
        };
        for frame in &real {
            count(&mut self.tally, frame);
        }
        compare_frames(&model, &real, &mut self.run_ids).map_err(|why| {
            let sent: Vec<String> = commands.iter().map(|c| format!("\n    {c}")).collect();
            format!("c{conn} sent:{}\n  {why}", sent.concat())
        })?;
        let named = |name: &[u8]| words.iter().any(|w| w[0].eq_ignore_ascii_case(name));
        self.listening[conn] |= named(b"SUBSCRIBE");
        self.tracking[conn] |= words.iter().any(|w| {
            w[0].eq_ignore_ascii_case(b"CLIENT")
                && w.get(1)
                    .is_some_and(|sub| sub.eq_ignore_ascii_case(b"TRACKING"))
        });
        if state == ConnState::Closed {
            self.close(conn);
        }
        let published = named(b"PUBLISH") || named(b"EVAL") || named(b"EVALSHA");
        for other in (0..CONNS).filter(|&other| other != conn) {
            if (published && self.listening[other]) || self.tracking[other] {
                self.drain(other)?;
            }
        }
        Ok(())
    }

    /// Compares the pushes `conn` has received and not read, if it
    /// listens or tracks: a `PING` to the server, and the model's pushes.
    fn drain(&mut self, conn: usize) -> Result<(), String> {
        if !self.listening[conn] && !self.tracking[conn] {
            return Ok(());
        }
        let sentinel = self.sentinel();
        let (Some(wire), Some(model_conn)) = (&mut self.wires[conn], &self.conns[conn]) else {
            return Ok(());
        };
        let mut out = Vec::new();
        self.model.take_pushes(model_conn, &mut out);
        let model = decode(&out)?;
        let real = wire.exchange(&[], &sentinel, model.len())?;
        for frame in &real {
            count(&mut self.tally, frame);
        }
        compare_frames(&model, &real, &mut self.run_ids)
            .map_err(|why| format!("pushes to c{conn}: {why}"))
    }

    /// [`drain`](Self::drain)s every connection.
    fn drain_all(&mut self) -> Result<(), String> {
        (0..CONNS).try_for_each(|conn| self.drain(conn))
    }

    /// A new text for the `PING` that ends an exchange.
    fn sentinel(&mut self) -> Vec<u8> {
        self.pings += 1;
        format!("sync:{}", self.pings).into_bytes()
    }

    /// Closes `conn` on both sides, if open; waits for the server to see
    /// it, if it listened (its subscriptions count until the server has).
    fn close(&mut self, conn: usize) {
        if let Some(old) = self.conns[conn].take() {
            self.model.close(old);
        }
        let had_wire = self.wires[conn].take().is_some();
        // A connection that tracked needs no wait: nothing counts the
        // connections that track.
        self.tracking[conn] = false;
        if had_wire && std::mem::take(&mut self.listening[conn]) {
            let open = self.wires.iter().flatten().count();
            self.server.await_connections(open);
        }
    }

    /// The model's frames in answer to `words` on `conn` (replies and
    /// pushes), its input cut at `cuts`, and the connection's state after.
    fn model_exchange(
        &mut self,
        conn: usize,
        words: &[Vec<Vec<u8>>],
        cuts: &[u64],
    ) -> Result<(Vec<Value>, ConnState), String> {
        let Some(conn) = &mut self.conns[conn] else {
            return Ok((Vec::new(), ConnState::Closed));
        };
        let mut bytes = Vec::new();
        for command in words {
            encode(command, &mut bytes);
        }
        let mut points: Vec<usize> = cuts
            .iter()
            .map(|&c| (c as usize * bytes.len()) / 1000)
            .chain([0, bytes.len()])
            .collect();
        points.sort_unstable();
        let mut out = Vec::new();
        let mut state = ConnState::Open;
        for piece in points.windows(2) {
            state = self
                .model
                .handle(conn, &bytes[piece[0]..piece[1]], self.now, &mut out);
            if state == ConnState::Closed {
                break;
            }
        }
        Ok((decode(&out)?, state))
    }
}

/// The frames of `out`, all whole.
fn decode(out: &[u8]) -> Result<Vec<Value>, String> {
    let mut replies = Replies::default();
    replies.push(out);
    let mut values = Vec::new();
    while let Some(value) = replies.next()? {
        values.push(value);
    }
    if replies.has_partial() {
        return Err(format!("the model wrote a partial frame: {out:?}"));
    }
    Ok(values)
}
