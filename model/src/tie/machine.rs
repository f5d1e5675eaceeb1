//! The library's fenced acquire machine with no core, sockets or
//! settings, for the tie of the model to the library ([`super::client`]).

use std::ops::DerefMut;
use std::time::{Duration, Instant};

use redlock_mio::sim::{Command, FenceBook, FencedAcquire, Host, Round, RoundEnd, calls};
use redlock_mio::{Error, Lock, Op, Report, TOKEN_LEN};

/// A fenced acquire's machine (`FencedAcquire`, `client/fence.rs`) and one client's fence
/// book with no core, sockets or settings: the caller sets up each step's
/// rounds ([`rounds`](Self::rounds), as the front ends set them up), gives
/// them the masters' answers, and hands them back
/// ([`handle`](Self::handle)). It exists so that the model check can drive
/// the library's own machine and its own transcription with the same
/// events and compare their decisions; a simulation runs [`Fenced`]
/// instead, whose rounds its masters answer.
pub(crate) struct FenceMachine {
    host: Bare,
    attempt: Option<FencedAcquire<'static>>,
}

/// What a [`FenceMachine`]'s attempts need of a client: the fence book,
/// the clock the caller sets, numbered tokens, and a count of the
/// releases a failed acquire queues.
struct Bare {
    masters: usize,
    wait: Duration,
    drift_factor: f64,
    now: Instant,
    book: FenceBook,
    tokens: u64,
    released: usize,
}

impl std::fmt::Debug for FenceMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceMachine")
            .field("attempting", &self.attempt.is_some())
            .finish_non_exhaustive()
    }
}

impl FenceMachine {
    /// A client of `masters` masters whose lost counters wait `wait`
    /// before they are put back, its acquires' validity cut by
    /// `drift_factor` of their TTL (and the least drift), at `now`.
    pub(crate) fn new(
        masters: usize,
        wait: Duration,
        drift_factor: f64,
        now: Instant,
    ) -> FenceMachine {
        FenceMachine {
            host: Bare {
                masters,
                wait,
                drift_factor,
                now,
                book: FenceBook::new(masters),
                tokens: 0,
                released: 0,
            },
            attempt: None,
        }
    }

    /// Starts a fenced acquire of the one resource `key` for `ttl_ms` at
    /// `now`, with no deadline, as the front ends' `FencedAcquire::new`
    /// does (it may claim the book's read). An attempt under way is
    /// dropped.
    pub(crate) fn begin(&mut self, key: &[u8], ttl_ms: u64, now: Instant) {
        self.host.now = now;
        let attempt = FencedAcquire::new(&mut self.host, [key.to_vec()], false, ttl_ms, None);
        self.attempt = Some(attempt);
    }

    /// The commands of the attempt's next step, each as the driver writes
    /// it to a master (RESP, `EVALSHA`); empty once the attempt has ended
    /// (or before one began).
    pub(crate) fn commands(&self) -> Vec<Vec<u8>> {
        let Some(next) = self.attempt.as_ref().and_then(FencedAcquire::next) else {
            return Vec::new();
        };
        next.commands
            .iter()
            .map(|command| {
                let mut out = Vec::new();
                command.encode(&mut out);
                out
            })
            .collect()
    }

    /// The rounds of the next step started at `now`, each waiting
    /// `timeout` for the masters (and no longer than the step's cap: a
    /// raise's lock validity), set up as the front ends set them up.
    pub(crate) fn rounds(&self, now: Instant, timeout: Duration) -> Vec<Round> {
        let Some(next) = self.attempt.as_ref().and_then(FencedAcquire::next) else {
            return Vec::new();
        };
        let timeout = calls::timeout(timeout, next.cap, now);
        let restart = calls::restarter(self.host.drift_factor, self.host.masters, timeout);
        next.commands
            .iter()
            .map(|command| {
                let mut round =
                    Round::new(Op::Release, 0, Duration::ZERO, Duration::ZERO, timeout, now);
                restart(&mut round, command, now);
                round
            })
            .collect()
    }

    /// The step's rounds (from [`rounds`](Self::rounds), in order) ended
    /// as they stand, the machine taking them at `now`; a round without a
    /// decision counts as no quorum, as the driver has it.
    pub(crate) fn handle(&mut self, rounds: Vec<Round>, now: Instant) {
        self.host.now = now;
        let Some(attempt) = self.attempt.as_mut() else {
            return;
        };
        let ends = rounds
            .into_iter()
            .map(|round| Ok(RoundEnd::decided(round, now)))
            .collect();
        attempt.handle(&mut self.host, ends);
    }

    /// The attempt's result, once it has ended: the lock, or the error
    /// after which its release was queued.
    pub(crate) fn finish(&mut self) -> Option<Result<Lock, Error>> {
        let attempt = self.attempt.take_if(|attempt| attempt.next().is_none())?;
        let result = attempt.finish(&mut self.host).into_iter().next()?;
        Some(result)
    }

    /// What the book keeps of each master: the loss id it reported, and
    /// when this client first saw it.
    pub(crate) fn losses(&self) -> Vec<Option<(u64, Instant)>> {
        self.host.book.losses().to_vec()
    }

    /// When the book says the counters were last read.
    pub(crate) fn last_read(&self) -> Option<Instant> {
        self.host.book.last_read()
    }

    /// How many releases failed acquires queued so far.
    pub(crate) fn releases(&self) -> usize {
        self.host.released
    }
}

/// The machine's host: tokens numbered from 1, the caller's clock, and
/// nothing sent (a failed acquire's release is only counted).
impl Host for &mut Bare {
    fn token(&mut self) -> [u8; TOKEN_LEN] {
        self.tokens += 1;
        let mut token = [b'0'; TOKEN_LEN];
        let digits = self.tokens.to_string();
        token[TOKEN_LEN - digits.len()..].copy_from_slice(digits.as_bytes());
        token
    }

    fn fence_wait(&self) -> Duration {
        self.wait
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn fences(&mut self) -> impl DerefMut<Target = FenceBook> {
        &mut self.book
    }

    fn busy(&self) -> Error {
        Error::TooManyInFlight { limit: 0 }
    }

    fn report(&self, end: &RoundEnd) -> Box<Report> {
        Box::new(end.round.report())
    }

    fn not_acquired(&mut self, _release: &Command<'_>, _end: &RoundEnd, error: Error) -> Error {
        self.released += 1;
        error
    }

    fn won(&mut self, _end: &RoundEnd) {}
}
