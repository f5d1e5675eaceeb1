//! The shape of one world, drawn from its seed: how many masters, clients
//! and callers, the clients' settings (fenced or not), the TTLs and
//! resources, the network's timing, the clocks, the masters' eviction
//! policy, and how often each fault comes.

use std::time::Duration;

use crate::client::Settings;

use crate::Eviction;

use super::clock::MasterClock;
use super::net::Timing;
use super::rng::Rng;

const MS: u64 = 1_000_000;

/// A deliberate fault, to prove that the checkers catch what they check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Regression {
    /// None: the library as it is.
    #[default]
    None,
    /// The clients' copy of the drift factor is 0 (the validity ignores
    /// the clocks' rates, but for the 2 ms minimum).
    NoDrift,
    /// A quorum of masters grants `SET NX` on a key that exists.
    DoubleGrants,
    /// One master's clock runs 5% fast: outside what the lock assumes,
    /// which the checkers must see.
    FastMaster,
    /// The clients' request timeout is three times the one their calls'
    /// bounds are checked against.
    LongRounds,
    /// The other clients write a key that never expires.
    ForeignLeak,
    /// Fenced acquires skip their raise (every client is fenced): a
    /// fence no longer reaches a quorum, and a later holder can get a
    /// smaller one.
    NoRaise,
    /// The keepers of kept locks take an extension's `NotHeld` for a
    /// missed quorum, and keep the validity the lock had before it: they
    /// report the lock at risk, not lost, once a quorum said its token no
    /// longer owns the resource.
    KeptNotHeld,
    /// The keepers of kept locks wake half a period after their schedule
    /// says: later than their documentation promises.
    LateKeeper,
    /// The simulated masters' hand-off does nothing: a release tells
    /// nobody, and a waiter tries again only when its own wait ends.
    Untold,
    /// The simulated masters' hand-off examines at most eight queue
    /// entries: more dead ones ahead of a live waiter leave the key free
    /// and the waiter untold.
    EightDead,
    /// A client's connection that was lost is opened again only while the
    /// client has a round in flight: a link that went down while its
    /// client only waits does not come back (as a link without a timer
    /// for `Down` does not).
    NoReconnectWhileWaiting,
    /// The simulated masters' acquire that waits leaves alone the keys
    /// that do not hold a waiter out: a key handed to a waiter for several
    /// resources stays reserved for it, while another of its keys is
    /// held, until its window ends.
    KeptForSeveral,
    /// The simulated masters never see a waiter's turn come: a waiter
    /// told to try once the windows of a stalled client's waiters before
    /// it are over finds the key free, hands it to the first of them
    /// still queued, and waits another window for each.
    TurnIgnored,
    /// The simulated masters' acquire that waits queues a waiter at the
    /// place its client claims, however far that is from the master's
    /// clock: a waiter whose client's wall clock is slow goes ahead of
    /// the others by as much.
    PlaceAsClaimed,
    /// The clients report an extend decided too slow (its quorum answered
    /// once the validity it asked for was gone) as a success.
    SlowExtendSucceeds,
    /// The clients never read a watched key again after extending it:
    /// the masters forget a key the watching connection changed itself
    /// (`NOLOOP`), so a later removal of it is told to nobody.
    WatchSkipsRearm,
    /// The clients take a dropped connection for the loss of every lock
    /// they watch, where it only leaves its master unknown.
    DropIsLoss,
}

impl Regression {
    /// The deliberate fault of the masters' scripts this regression is
    /// made of, if it is one.
    pub(crate) fn handoff_fault(self) -> Option<crate::HandoffFault> {
        match self {
            Regression::Untold => Some(crate::HandoffFault::Untold),
            Regression::EightDead => Some(crate::HandoffFault::SkipCapped(8)),
            Regression::KeptForSeveral => Some(crate::HandoffFault::KeptForSeveral),
            Regression::TurnIgnored => Some(crate::HandoffFault::TurnIgnored),
            Regression::PlaceAsClaimed => Some(crate::HandoffFault::PlaceAsClaimed),
            _ => None,
        }
    }
}

/// How often each fault comes, relative to the others.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Weights {
    pub(crate) client_pause: u64,
    pub(crate) master_pause: u64,
    pub(crate) crash: u64,
    pub(crate) reset: u64,
    pub(crate) partition: u64,
    pub(crate) flushall: u64,
    pub(crate) step_back: u64,
    pub(crate) evict: u64,
}

/// One world's shape (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Params {
    /// The masters' addresses the clients are given.
    pub(crate) masters: usize,
    /// The master processes: one per address, but that the last address
    /// may name a process another address names too (a server listed
    /// twice, which the clients must refuse on one of them).
    pub(crate) procs: usize,
    /// The process each address names.
    pub(crate) proc_of: Vec<usize>,
    pub(crate) clients: usize,
    /// Callers per client, each running calls one after another.
    pub(crate) tasks: usize,
    pub(crate) settings: Settings,
    /// The clients' own settings, where a regression makes them differ
    /// from `settings` (what the checkers hold them to).
    pub(crate) client_settings: Settings,
    pub(crate) regression: Regression,
    /// The TTLs the calls choose from; the last is the longest.
    pub(crate) ttls: Vec<Duration>,
    /// The resources the calls contend for.
    pub(crate) resources: Vec<Vec<u8>>,
    /// Names in the crate's key space, which must be refused.
    pub(crate) reserved: Vec<Vec<u8>>,
    pub(crate) timing: Timing,
    pub(crate) master_epochs: Vec<u64>,
    pub(crate) master_ppm: Vec<i64>,
    pub(crate) client_ppm: Vec<i64>,
    /// The clients' wall clocks at global time 0 (µs since the epoch),
    /// where the world sets them (see `sync_clocks`); elsewhere each
    /// client draws its own.
    pub(crate) client_walls: Option<Vec<u64>>,
    /// How long the faults go on, ns.
    pub(crate) duration: u64,
    /// Mean time between faults, between foreign writes, between a
    /// master's snapshots; the mean pause between a task's calls.
    fault_mean: u64,
    writer_mean: u64,
    snapshot_mean: u64,
    pub(crate) think_mean: u64,
    pub(crate) weights: Weights,
    /// A crashed master restarts only after the longest TTL (the
    /// operators' remedy without the restart guard): no loss then.
    pub(crate) delayed_restarts: bool,
    /// Which clients are built with fencing (all, some or none).
    pub(crate) fenced: Vec<bool>,
    /// The masters' `maxmemory-policy`, if they evict at all.
    pub(crate) eviction: Option<Eviction>,
    /// How often a lock won is kept (a keeper extends it on its schedule
    /// until its holder releases it) rather than held and extended by
    /// hand.
    pub(crate) kept: f64,
    /// How often a call asks for several resources at once (never, in a
    /// third of the worlds).
    pub(crate) several: f64,
    /// A world where nothing but the waiters' own troubles happens:
    /// connections reset, clients paused, dead waiters in the queues
    /// (the only foreign writes), and calls of one resource each but in
    /// a share of them (see `waiters_shape`); the hand-off's bound is
    /// then checked on most waiters.
    pub(crate) waits_only: bool,
}

impl Params {
    pub(crate) fn draw(rng: &mut Rng, regression: Regression) -> Params {
        let procs = [1, 3, 3, 5, 5, 4][rng.index(6)];
        let clients = rng.range(2, 5) as usize;
        let tasks = rng.range(1, 3) as usize;
        let request_ms = [10, 20, 30, 50][rng.index(4)];
        let request_timeout = Duration::from_millis(request_ms);
        let ttls: Vec<Duration> = [3, 6, 15, 40]
            .iter()
            .map(|k| Duration::from_millis(request_ms * k + rng.below(request_ms)))
            .collect();
        let longest = *ttls.last().unwrap_or(&request_timeout);
        let guard = rng.chance(0.6);
        let mut settings = Settings {
            request_timeout,
            connect_timeout: Duration::from_millis(rng.range(request_ms * 2, 500)),
            backoff_max: Duration::from_millis(rng.range(20, 400)),
            drift_factor: if regression == Regression::NoDrift {
                0.0
            } else {
                0.01
            },
            retry_count: rng.range(1, 5) as u32,
            retry_delay: Duration::from_millis(rng.range(request_ms, 8 * request_ms)),
            retry_jitter: Duration::from_millis(rng.range(0, request_ms)),
            // Small tables too, so that slots run out and come back.
            in_flight: [2, 4, 32][rng.index(3)],
            // The builder refuses the guard without it.
            identify: guard || rng.chance(0.9),
            wake: rng.chance(0.85),
            restart_guard: guard.then_some(longest),
            fencing: None,
            max_extensions: None,
        };
        // A server listed twice, which identification refuses.
        let twice = settings.identify && procs >= 2 && rng.chance(0.2);
        let mut proc_of: Vec<usize> = (0..procs).collect();
        if twice {
            proc_of.push(rng.index(procs));
        }
        let masters = proc_of.len();
        let resources = resources(rng);
        let reserved = vec![
            b"redlock-mio:orders".to_vec(),
            format!("{}{}", redlock_mio::RESERVED_PREFIX, "queue:orders").into_bytes(),
        ];
        let base = (0..clients)
            .map(|_| (0..masters).map(|_| rng.range(30_000, 1_500_000)).collect())
            .collect();
        let timing = Timing {
            base,
            jitter: rng.range(10_000, 300_000),
            spike: (rng.unit() * 0.02, request_ms * MS / rng.range(1, 4)),
            split: rng.unit() * 0.3,
        };
        // The rates differ by less than the drift factor: 0.3% each way.
        let rate = |rng: &mut Rng| rng.range(0, 6000) as i64 - 3000;
        let mut master_ppm: Vec<i64> = (0..procs).map(|_| rate(rng)).collect();
        let mut client_ppm: Vec<i64> = (0..clients).map(|_| rate(rng)).collect();
        match regression {
            Regression::FastMaster => master_ppm[0] = 50_000,
            // The rates as far apart as the drift factor lets them be:
            // without it, a validity outlasts the keys.
            Regression::NoDrift => {
                master_ppm.fill(3000);
                client_ppm.fill(-3000);
            }
            // Now and then the same edge with the drift factor, which must
            // hold there.
            _ if rng.chance(0.2) => {
                master_ppm.fill(3000);
                client_ppm.fill(-3000);
            }
            _ => {}
        }
        let master_epochs = (0..procs)
            .map(|_| 1_700_000_000_000_000 + rng.below(1 << 40))
            .collect();
        let calm_odds = rng.range(1, 4);
        let mut client_settings = settings;
        if regression == Regression::LongRounds {
            client_settings.request_timeout *= 3;
        }
        let duration = rng.range(2_000, 8_000) * MS;
        let fault_mean = rng.range(20, 300) * MS * calm_odds;
        let writer_mean = rng.range(5, 100) * MS;
        let snapshot_mean = rng.range(50, 1000) * MS;
        let think_mean = rng.range(0, request_ms) * MS;
        let mut weights = Weights {
            client_pause: rng.range(0, 4),
            master_pause: rng.range(0, 4),
            crash: rng.range(0, 3),
            reset: rng.range(0, 4),
            partition: rng.range(0, 4),
            flushall: rng.range(0, 1),
            step_back: rng.range(0, 2),
            evict: 0,
        };
        let delayed_restarts = !guard && rng.chance(0.7);
        // (Drawn last: the worlds drawn before fencing and evictions keep
        // their shape.)
        let fence_odds = match regression {
            Regression::NoRaise => 1.0,
            _ => [0.0, 0.0, 0.5, 1.0][rng.index(4)],
        };
        let fenced = (0..clients).map(|_| rng.chance(fence_odds)).collect();
        let eviction = match rng.below(8) {
            0 => Some(Eviction::Volatile),
            1 => Some(Eviction::AllKeys),
            _ => None,
        };
        if eviction.is_some() {
            weights.evict = rng.range(1, 4);
        }
        let kept = match regression {
            Regression::KeptNotHeld | Regression::LateKeeper => 0.8,
            _ => [0.0, 0.25, 0.5][rng.index(3)],
        };
        let max_extensions = rng.chance(0.2).then(|| rng.range(1, 6) as u32);
        settings.max_extensions = max_extensions;
        client_settings.max_extensions = max_extensions;
        let mut several = [0.15, 0.15, 0.0][rng.index(3)];
        let waits_only = match regression {
            Regression::Untold
            | Regression::EightDead
            | Regression::NoReconnectWhileWaiting
            | Regression::KeptForSeveral
            | Regression::TurnIgnored => true,
            _ => rng.chance(0.25),
        };
        if waits_only {
            several = 0.0;
            weights = Weights {
                client_pause: weights.client_pause.max(1),
                reset: weights.reset.max(1),
                ..Weights::default()
            };
        }
        let mut params = Params {
            masters,
            procs,
            proc_of,
            clients,
            tasks,
            settings,
            client_settings,
            regression,
            ttls,
            resources,
            reserved,
            timing,
            master_epochs,
            master_ppm,
            client_ppm,
            client_walls: None,
            duration,
            fault_mean,
            writer_mean,
            snapshot_mean,
            think_mean,
            weights,
            delayed_restarts,
            fenced,
            eviction,
            kept,
            several,
            waits_only,
        };
        // (Drawn last: the worlds drawn before keep their shape.)
        if waits_only {
            params.waiters_shape(rng);
        }
        params
    }

    /// The shapes of the worlds of the waiters' own troubles, each the
    /// one a broken promise of the waiting calls shows in:
    ///
    /// - one master, and no fault but resets of a client's connections:
    ///   a waiting client whose link does not come back hears nothing
    ///   from anyone (`Regression::NoReconnectWhileWaiting`, and the
    ///   library's table of waits that looks empty to the timers);
    /// - waiters of several resources among those of one: a key handed
    ///   to one while another of its keys is held must go on at its next
    ///   attempt (`Regression::KeptForSeveral`);
    /// - clients with several callers that stall as they are told: a
    ///   waiter behind them waits one window for each of them, and no
    ///   more (`Regression::TurnIgnored`).
    fn waiters_shape(&mut self, rng: &mut Rng) {
        let alone = match self.regression {
            Regression::NoReconnectWhileWaiting => true,
            Regression::None => rng.chance(0.5),
            _ => false,
        };
        if alone {
            self.alone();
            return;
        }
        let several = match self.regression {
            Regression::KeptForSeveral => true,
            Regression::None => rng.chance(0.4),
            _ => false,
        };
        if several {
            if self.resources.len() < 2 {
                self.resources.push(b"jobs/nightly".to_vec());
            }
            self.several = 0.3;
        }
        // The regressions' worlds have few other faults, which would
        // excuse the waiters they hold up: no pauses where a key is kept
        // for a waiter of several resources; only the stalls of clients
        // told their turn where turns are ignored, with callers enough
        // for a stalled client to have two waiters in line, and calls
        // that wait long enough for the windows of both (the most
        // attempts, the longest delay between two).
        match self.regression {
            Regression::KeptForSeveral => {
                self.weights.client_pause = 0;
                self.fault_mean *= 10;
            }
            Regression::TurnIgnored => {
                self.tasks = self.tasks.max(2);
                self.fault_mean *= 20;
                self.long_waits();
            }
            _ => {}
        }
    }

    /// Calls that wait long between attempts (the most attempts, the
    /// longest delay between two), so that a waiter that is not told
    /// goes on waiting well past the hand-off's bound.
    fn long_waits(&mut self) {
        for s in [&mut self.settings, &mut self.client_settings] {
            s.retry_count = 5;
            s.retry_delay = s.request_timeout * 8;
        }
    }

    /// One master, resets of every connection of a client the only
    /// fault, a link that comes back well before a waiter tries again by
    /// itself: a waiting client that does not reconnect is left untold.
    fn alone(&mut self) {
        self.long_waits();
        for s in [&mut self.settings, &mut self.client_settings] {
            s.backoff_max = s.backoff_max.min(s.request_timeout * 2);
        }
        self.procs = 1;
        self.proc_of = vec![0];
        self.masters = 1;
        self.master_epochs.truncate(1);
        self.master_ppm.truncate(1);
        for base in &mut self.timing.base {
            base.truncate(1);
        }
        self.weights = Weights {
            reset: 3,
            ..Weights::default()
        };
    }

    /// The hosts' wall clocks, in half of the worlds, as NTP keeps them:
    /// the masters' within 20 ms of one another, and each client's within
    /// 50 ms of them (right), or, half of the time, off by 1.2 s to an
    /// hour either way (wrong). Elsewhere every wall clock is off from
    /// every other by hours or days. Where some clocks are right and
    /// some wrong, the masters keep the order of the right ones' places
    /// and take the wrong ones' within a second of their own clocks,
    /// which the checker of places holds them to (`places`). Drawn from
    /// a stream of its own (`rng`), so that the worlds that keep their
    /// clocks keep every other draw too.
    pub(crate) fn sync_clocks(&mut self, rng: &mut Rng) {
        if !rng.chance(0.5) {
            return;
        }
        let epoch = 1_700_000_000_000_000 + rng.below(1 << 40);
        for e in &mut self.master_epochs {
            *e = epoch + rng.below(20_000);
        }
        let walls = (0..self.clients)
            .map(|_| {
                let off = if rng.chance(0.5) {
                    // Log-uniform: as often a few seconds as an hour.
                    (1_200_000.0 * 3000f64.powf(rng.unit())) as u64
                } else {
                    rng.below(50_000)
                };
                if rng.chance(0.5) {
                    epoch - off
                } else {
                    epoch + off
                }
            })
            .collect();
        self.client_walls = Some(walls);
    }

    /// The longest TTL a call uses.
    pub(crate) fn longest(&self) -> Duration {
        self.ttls.last().copied().unwrap_or_default()
    }

    /// Master `m`'s clock.
    pub(crate) fn master_clock(&self, m: usize) -> MasterClock {
        MasterClock::new(self.master_epochs[m], self.master_ppm[m])
    }

    pub(crate) fn fault_gap(&self, rng: &mut Rng) -> u64 {
        rng.exp(self.fault_mean) + 1
    }

    pub(crate) fn writer_gap(&self, rng: &mut Rng) -> u64 {
        rng.exp(self.writer_mean) + 1
    }

    pub(crate) fn snapshot_gap(&self, rng: &mut Rng) -> u64 {
        rng.exp(self.snapshot_mean) + 1
    }

    /// How long a crashed master stays down: past the longest TTL with
    /// delayed restarts.
    pub(crate) fn restart_delay(&self, rng: &mut Rng) -> u64 {
        let longest = self.longest().as_nanos() as u64;
        if self.delayed_restarts {
            longest + longest / 20 + 5 * MS + rng.exp(longest).min(2 * longest)
        } else {
            rng.exp(longest / 2 + 1).min(longest)
        }
    }

    /// A waiter's reservation window, as the front end has it.
    pub(crate) fn window(&self) -> Duration {
        (self.settings.request_timeout * 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(10))
    }

    /// The longest a segment takes one way on any path when no spike
    /// holds it up: the slowest path's latency, 25 times the jitter's
    /// mean (an exponential: longer once in e^25), and, where writes
    /// are cut short, 25 times the 0.2 ms mean a socket takes to become
    /// writable again. The masters' processing takes no simulated time.
    pub(crate) fn one_way(&self) -> u64 {
        let t = &self.timing;
        let base = t.base.iter().flatten().copied().max().unwrap_or(0);
        let writable = if t.split > 0.0 { 25 * 200_000 } else { 0 };
        base + 25 * t.jitter + writable
    }

    /// How long after a release is sent a waiter of its resource may take
    /// to hold it, where nothing disturbs the hand-off: the release to
    /// the masters, their telling to the waiter, its attempt and the
    /// reply (four one-way trips; a fenced attempt's up to five rounds
    /// add eight), two more per waiter that left on the way (its leave
    /// passes the turn on), as many per waiter of several resources that
    /// passed the key on (told, its attempt leaves the key it cannot take
    /// yet; fenced, up to three rounds before its acquire add six), and
    /// one reservation window per waiter stalled on the way (`stalled`).
    pub(crate) fn handoff_bound(&self, fenced: bool, left: u64, passed: u64, stalled: u64) -> u64 {
        let fenced_trips = |trips| if fenced { trips } else { 0 };
        let trips = 4 + fenced_trips(8) + 2 * left + (2 + fenced_trips(6)) * passed;
        trips * self.one_way() + stalled * self.window().as_nanos() as u64
    }

    /// How long after a connection of a client is cut (a reset, a crash
    /// or pause of its master, a partition) its link may take to be
    /// back, and its waiters to have tried again: the longest back-off,
    /// then the connect, the handshake's rounds and an attempt's (eight
    /// one-way trips), and a request timeout for a round that met the
    /// cut. (A socket that cannot even be opened is a disturbance of its
    /// own.)
    pub(crate) fn reconnect_bound(&self) -> u64 {
        let s = &self.settings;
        (s.backoff_max + s.request_timeout).as_nanos() as u64 + 8 * self.one_way()
    }

    /// How long a wait queue outlives the keys that block it.
    fn margin(&self) -> Duration {
        let s = &self.settings;
        self.window() + s.retry_delay + s.retry_jitter + s.request_timeout
    }

    /// How long after the clients are quiet the crate's keys may still be
    /// there: the longest TTL (of a lock, a foreign holder that blocks a
    /// queue) or of a turn (ten windows: the reservation, eight waiters of
    /// the stalled client and the named waiter's own), whichever is
    /// longer, then the queue's margin, and the 1 ms of expiry precision.
    pub(crate) fn leftover_bound(&self) -> Duration {
        self.longest().max(self.window() * 10) + self.margin() + Duration::from_millis(2)
    }

    /// How long the world must stay quiet to count as quiet.
    pub(crate) fn settle(&self) -> u64 {
        4 * self.settings.request_timeout.as_nanos() as u64
    }

    /// How long after the faults the clients may take to be quiet: the
    /// longest call and a reconnect.
    pub(crate) fn calm_limit(&self) -> u64 {
        let s = &self.settings;
        let calls = (s.request_timeout + s.retry_delay + s.retry_jitter) * (s.retry_count + 2);
        let calls = calls + self.longest() * 6 + s.connect_timeout * 2 + s.backoff_max * 2;
        // And the retransmissions of what a partition held, which back
        // off to about twice the partition's length.
        calls.as_nanos() as u64 + 2 * self.duration
    }

    /// The longest a call of `attempts` attempts may take, by the
    /// documentation: each attempt a request timeout, and a retry delay
    /// between two; a fenced attempt's rounds run one after another, each
    /// within a request timeout, and `more` counts those beyond one per
    /// attempt (the checkers hold each fenced attempt to at most five
    /// rounds, two when no read is due).
    pub(crate) fn call_bound(&self, attempts: u32, more: u32) -> Duration {
        let s = &self.settings;
        s.request_timeout * (attempts + more)
            + (s.retry_delay + s.retry_jitter) * attempts.saturating_sub(1)
    }

    /// Client `c`'s settings: fenced with the longest TTL, if it is.
    pub(crate) fn settings_of(&self, c: usize) -> Settings {
        Settings {
            fencing: self.fenced[c].then(|| self.longest()),
            ..self.client_settings
        }
    }

    /// The world in a line, for messages.
    pub(crate) fn describe(&self) -> String {
        let s = &self.settings;
        format!(
            "{} masters ({} addresses), {} clients x {} callers ({} fenced), request timeout {:?}, TTLs {:?}, guard {:?}, wake {}, identify {}, eviction {:?}, {}, {:.1}s of faults",
            self.procs,
            self.masters,
            self.clients,
            self.tasks,
            self.fenced.iter().filter(|&&f| f).count(),
            s.request_timeout,
            self.ttls,
            s.restart_guard,
            s.wake,
            s.identify,
            self.eviction,
            self.describe_walls(),
            self.duration as f64 / 1e9
        )
    }

    /// The wall clocks, for messages: how far each client's is from the
    /// masters', where they are in sync.
    fn describe_walls(&self) -> String {
        let Some(walls) = &self.client_walls else {
            return "wall clocks hours apart".to_owned();
        };
        let epoch = self.master_epochs.iter().copied().min().unwrap_or(0) as i128;
        let offsets: Vec<String> = walls
            .iter()
            .map(|&w| format!("{:+.3}s", (w as i128 - epoch) as f64 / 1e6))
            .collect();
        format!("wall clocks in sync, clients off by {}", offsets.join(" "))
    }
}

/// The resources: few, to contend; some binary, one long.
fn resources(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut names = vec![b"orders:42".to_vec(), b"bin\x00\r\n\xff*1\r\n".to_vec()];
    if rng.chance(0.5) {
        names.push(b"jobs/nightly".to_vec());
    }
    if rng.chance(0.3) {
        names.push(vec![b'x'; 200]);
    }
    if rng.chance(0.3) {
        names.truncate(1);
    }
    names
}
