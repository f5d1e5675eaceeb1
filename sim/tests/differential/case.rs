//! One case, run on the real server and the model side by side, every
//! reply compared.

use redlock_mio_sim::{Conn, ConnState, Master, Snapshot};

use super::compare::{RunIds, Tally, compare, count};
use super::generate::Generator;
use super::server::{PASSWORD, Server};
use super::steps::Step;
use super::wire::{Replies, Value, Wire, encode};

/// The clock when the server of a case starts.
pub(crate) const SERVER_START: u64 = 1_750_000_000_000_000;

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
    wires: [Option<Wire>; 2],
    conns: [Option<Conn>; 2],
    snapshot: Option<Snapshot>,
    run_ids: RunIds,
    now: u64,
    tally: Tally,
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
        Runner {
            server,
            model: Master::new(MODEL_SEED, SERVER_START).with_password(PASSWORD),
            wires: [None, None],
            conns: [None, None],
            snapshot: None,
            run_ids: RunIds::default(),
            now: start,
            tally: Tally::new(),
        }
    }

    /// Generates and runs `len` steps from `seed`.
    /// What the server replied, by kind, if the model replied the same.
    pub(crate) fn run_generated(mut self, seed: u64, len: usize) -> Result<Tally, Failure> {
        let mut generator = Generator::new(seed);
        let mut steps = Vec::with_capacity(len);
        for _ in 0..len {
            let step = generator.next(&self.model, self.now);
            let outcome = self.step(&step);
            steps.push(step);
            if let Err(message) = outcome {
                return Err(Failure { steps, message });
            }
        }
        Ok(self.tally)
    }

    /// Runs `steps` as they are (a replay, or a smaller case).
    pub(crate) fn replay(mut self, steps: &[Step]) -> Result<(), Failure> {
        for (i, step) in steps.iter().enumerate() {
            if let Err(message) = self.step(step) {
                let steps = steps[..=i].to_vec();
                return Err(Failure { steps, message });
            }
        }
        Ok(())
    }

    /// Runs one step on both sides.
    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Connect(conn) => {
                self.wires[*conn] = Some(self.server.connect());
                self.conns[*conn] = Some(self.model.connect());
                Ok(())
            }
            Step::Send {
                conn,
                commands,
                cuts,
            } => {
                let words: Vec<Vec<Vec<u8>>> = commands.iter().map(|c| c.words.clone()).collect();
                let real = match &mut self.wires[*conn] {
                    Some(wire) => wire.exchange(&words),
                    None => Vec::new(),
                };
                let model = self.model_exchange(*conn, &words, cuts)?;
                if real.len() != model.len() {
                    return Err(format!(
                        "{} replies from the server, {} from the model\nserver: {real:?}\nmodel:  {model:?}",
                        real.len(),
                        model.len()
                    ));
                }
                for ((command, real), model) in commands.iter().zip(&real).zip(&model) {
                    count(&mut self.tally, real);
                    compare(command.check, model, real, &mut self.run_ids).map_err(|why| {
                        format!("{command}\n  server: {real:?}\n  model:  {model:?}\n  {why}")
                    })?;
                }
                Ok(())
            }
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
                self.wires = [None, None];
                self.server.restart(*from_snapshot);
                match (&self.snapshot, from_snapshot) {
                    (Some(snapshot), true) => self.model.restore(snapshot, self.now),
                    _ => self.model.restart(self.now),
                }
                Ok(())
            }
        }
    }

    /// The model's replies to `words` on `conn`, its input cut at `cuts`.
    fn model_exchange(
        &mut self,
        conn: usize,
        words: &[Vec<Vec<u8>>],
        cuts: &[u64],
    ) -> Result<Vec<Value>, String> {
        let Some(conn) = &mut self.conns[conn] else {
            return Ok(Vec::new());
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
        for piece in points.windows(2) {
            let state = self
                .model
                .handle(conn, &bytes[piece[0]..piece[1]], self.now, &mut out);
            if state == ConnState::Closed {
                break;
            }
        }
        let mut replies = Replies::default();
        replies.push(&out);
        let mut values = Vec::new();
        while let Some(value) = replies.next()? {
            values.push(value);
        }
        if replies.has_partial() {
            return Err(format!("the model wrote a partial reply: {out:?}"));
        }
        Ok(values)
    }
}
