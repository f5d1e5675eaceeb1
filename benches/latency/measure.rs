//! The checker, the statistics and the scenarios: closed loop, paced, contention, faults.

use super::*;

/// Plain blocking connections that check keys outside the timed region.
pub(crate) struct Checker {
    pub(crate) conns: Vec<TcpStream>,
}

impl Checker {
    pub(crate) fn new(env: &Env, live: &[usize]) -> Result<Checker> {
        let mut conns = Vec::new();
        for &i in live {
            let stream = TcpStream::connect_timeout(&env.addrs[i], Duration::from_secs(1))?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            conns.push(stream);
        }
        Ok(Checker { conns })
    }

    /// `PTTL key` on each master (-2: no key), for diagnostics.
    pub(crate) fn pttls(&mut self, key: &str) -> Result<Vec<i64>> {
        let cmd = encode(&[b"PTTL", key.as_bytes()]);
        let mut out = Vec::new();
        for conn in &mut self.conns {
            conn.write_all(&cmd)?;
            let mut line = String::new();
            BufReader::new(&*conn).read_line(&mut line)?;
            let n = line
                .trim_end()
                .strip_prefix(':')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("PTTL replied {line:?}"))?;
            out.push(n);
        }
        Ok(out)
    }

    /// On how many masters `key` exists.
    pub(crate) fn count(&mut self, key: &str) -> Result<usize> {
        let cmd = encode(&[b"EXISTS", key.as_bytes()]);
        let mut n = 0;
        for conn in &mut self.conns {
            conn.write_all(&cmd)?;
            let mut reply = [0u8; 4];
            conn.read_exact(&mut reply)?;
            match &reply {
                b":1\r\n" => n += 1,
                b":0\r\n" => {}
                other => return Err(format!("EXISTS replied {other:?}").into()),
            }
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

pub(crate) fn histogram() -> Histogram<u64> {
    // 1 ns to 1 h, 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

#[derive(Clone)]
pub(crate) struct Stats {
    pub(crate) acquire: Histogram<u64>,
    pub(crate) release: Histogram<u64>,
    pub(crate) cycle: Histogram<u64>,
    pub(crate) allocations: u64,
    pub(crate) failures: u64,
    pub(crate) note: String,
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats {
            acquire: histogram(),
            release: histogram(),
            cycle: histogram(),
            allocations: 0,
            failures: 0,
            note: String::new(),
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.cycle.len()
    }

    pub(crate) fn allocs_per_cycle(&self) -> f64 {
        self.allocations as f64 / self.count().max(1) as f64
    }
}

pub(crate) struct Slot {
    pub(crate) kind: Kind,
    pub(crate) resource: String,
    pub(crate) variant: Box<dyn Variant>,
    pub(crate) cycles: u64,
    /// Spot-check every this many cycles.
    pub(crate) check_every: u64,
    /// Spot checks after release, and how many found the key still there.
    pub(crate) checks: u64,
    pub(crate) leftovers: u64,
}

/// What one acquire + release took: the instants around each call and
/// the heap allocations of each.
pub(crate) struct Timed {
    pub(crate) t: [Instant; 4],
    pub(crate) allocations: u64,
}

impl Timed {
    pub(crate) fn acquire(&self) -> Duration {
        self.t[1] - self.t[0]
    }

    pub(crate) fn release(&self) -> Duration {
        self.t[3] - self.t[2]
    }
}

/// Why a cycle did not complete: a call that failed (its phase and the
/// variant's message), or the bench's own failure.
pub(crate) enum Broken {
    Acquire(String),
    Release(String),
    Bench(Box<dyn StdError>),
}

/// One verified cycle: acquire (timed), spot-check every `check_every`
/// cycles (untimed: on a quorum after the acquire, gone from every master
/// after the release), release (timed).
pub(crate) fn timed_cycle(
    slot: &mut Slot,
    checker: &mut Checker,
    quorum: usize,
) -> std::result::Result<Timed, Broken> {
    let check = slot.cycles.is_multiple_of(slot.check_every);
    slot.cycles += 1;
    let a0 = allocations();
    let t0 = Instant::now();
    let acquired = slot.variant.acquire();
    let t1 = Instant::now();
    let a1 = allocations();
    acquired.map_err(Broken::Acquire)?;
    if check {
        let n = checker.count(&slot.resource).map_err(Broken::Bench)?;
        if n < quorum {
            return Err(Broken::Bench(
                format!(
                    "{}: acquired, but the key is on {n} masters only",
                    slot.kind.name()
                )
                .into(),
            ));
        }
    }
    let a2 = allocations();
    let t2 = Instant::now();
    let released = slot.variant.release();
    let t3 = Instant::now();
    let a3 = allocations();
    released.map_err(Broken::Release)?;
    if check {
        released_everywhere(slot, checker).map_err(Broken::Bench)?;
    }
    Ok(Timed {
        t: [t0, t1, t2, t3],
        allocations: (a1 - a0) + (a3 - a2),
    })
}

/// The spot check after a release: the key gone from every master. A
/// client that decides at quorum returns before the last masters have
/// answered the release: they are given 500 ms. A key left is counted and
/// reported, not fatal: the next acquire still finds a quorum as long as a
/// minority is left, else it aborts.
fn released_everywhere(slot: &mut Slot, checker: &mut Checker) -> Result<()> {
    let mut n = checker.count(&slot.resource)?;
    let deadline = Instant::now() + Duration::from_millis(500);
    while n != 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
        n = checker.count(&slot.resource)?;
    }
    slot.checks += 1;
    if n != 0 {
        slot.leftovers += 1;
        eprintln!(
            "warning: {}: released, but the key is still on {n} masters after 500 ms \
             (spot check {}; PTTL per master in ms, -2 = gone: {:?})",
            slot.kind.name(),
            slot.checks,
            checker.pttls(&slot.resource)?
        );
    }
    Ok(())
}

/// One verified cycle ([`timed_cycle`]), which must succeed: the masters
/// are healthy. `intended` is the start the latencies are measured from
/// (now, in closed loop).
pub(crate) fn cycle(
    slot: &mut Slot,
    checker: &mut Checker,
    quorum: usize,
    intended: Option<Instant>,
    stats: Option<&mut Stats>,
) -> Result<()> {
    let timed = match timed_cycle(slot, checker, quorum) {
        Ok(timed) => timed,
        Err(Broken::Acquire(e)) => {
            return Err(
                format!("{}: acquire failed in a healthy run: {e}", slot.kind.name()).into(),
            );
        }
        Err(Broken::Release(e)) => {
            return Err(format!("{}: release failed: {e}", slot.kind.name()).into());
        }
        Err(Broken::Bench(e)) => return Err(e),
    };
    if let Some(stats) = stats {
        // Paced: acquire from the intended start; release is its own service
        // time; the cycle from the intended start to the end of release.
        let acquire = timed.t[1].saturating_duration_since(intended.unwrap_or(timed.t[0]));
        let release = timed.release();
        stats.acquire.saturating_record(nanos(acquire));
        stats.release.saturating_record(nanos(release));
        stats.cycle.saturating_record(nanos(acquire + release));
        stats.allocations += timed.allocations;
    }
    Ok(())
}

pub(crate) fn warm_up(
    slots: &mut [Slot],
    checker: &mut Checker,
    quorum: usize,
    n: u64,
) -> Result<()> {
    for slot in slots.iter_mut() {
        for _ in 0..n {
            cycle(slot, checker, quorum, None, None)?;
        }
    }
    Ok(())
}

/// Closed loop, in round-robin batches; the order rotates every round.
pub(crate) fn closed_loop(
    slots: &mut [Slot],
    checker: &mut Checker,
    quorum: usize,
    args: &Args,
) -> Result<Vec<Stats>> {
    let mut stats = vec![Stats::new(); slots.len()];
    let rounds = args.cycles.div_ceil(args.batch);
    for round in 0..rounds {
        for j in 0..slots.len() {
            let i = (j + round as usize) % slots.len();
            for _ in 0..args.batch {
                cycle(&mut slots[i], checker, quorum, None, Some(&mut stats[i]))?;
            }
        }
    }
    Ok(stats)
}

/// Waits until `at`: sleeps until shortly before, then spins.
pub(crate) fn wait_until(at: Instant) {
    let now = Instant::now();
    if at > now + Duration::from_micros(150) {
        thread::sleep(at - now - Duration::from_micros(100));
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

/// Paced at `rate` cycles/s, one variant at a time in interleaved slices;
/// latency from each cycle's intended start (free of coordinated omission).
pub(crate) fn paced(
    slots: &mut [Slot],
    checker: &mut Checker,
    quorum: usize,
    args: &Args,
) -> Result<Vec<Stats>> {
    let mut stats = vec![Stats::new(); slots.len()];
    if args.paced == 0 {
        return Ok(stats);
    }
    let period = Duration::from_nanos(1_000_000_000 / args.rate);
    let rounds = args.paced.div_ceil(args.slice);
    for round in 0..rounds {
        for j in 0..slots.len() {
            let i = (j + round as usize) % slots.len();
            let start = Instant::now() + Duration::from_millis(1);
            for k in 0..args.slice {
                let intended = start + period * k as u32;
                wait_until(intended);
                cycle(
                    &mut slots[i],
                    checker,
                    quorum,
                    Some(intended),
                    Some(&mut stats[i]),
                )?;
            }
        }
    }
    Ok(stats)
}

/// The contention scenarios: a tight loop, and a random wait of up to 1 ms
/// after each failed attempt.
pub(crate) const CONTENTION_BACKOFFS: [Duration; 2] = [Duration::ZERO, Duration::from_millis(1)];

pub(crate) struct ContentionResult {
    pub(crate) kind: Kind,
    /// Most random wait after a failed attempt (zero: try again at once).
    pub(crate) backoff: Duration,
    pub(crate) acquired: u64,
    pub(crate) attempts: u64,
    pub(crate) secs: f64,
    pub(crate) success: Histogram<u64>,
    pub(crate) attempt: Histogram<u64>,
    pub(crate) error: Option<String>,
}

/// `threads` clients, each with its own connections, try to take one
/// resource for `duration`, releasing at once after each success. After a
/// failed attempt a client waits a random time from zero to `backoff` (the
/// same for every variant), as Redlock's retry rule says; with a zero
/// `backoff` it tries again at once.
pub(crate) fn contention(
    env: &Env,
    kind: Kind,
    threads: usize,
    duration: Duration,
    backoff: Duration,
) -> ContentionResult {
    let resource = kind.resource("contended");
    let barrier = Arc::new(Barrier::new(threads));
    let live: Vec<usize> = (0..env.addrs.len()).collect();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (env, resource, barrier, live) =
                (env.clone(), resource.clone(), barrier.clone(), live.clone());
            thread::spawn(move || -> std::result::Result<_, String> {
                let made = make(kind, &env, &resource, &live).map_err(|e| e.to_string());
                barrier.wait();
                let mut variant = made?;
                let (mut success, mut attempt) = (histogram(), histogram());
                let (mut acquired, mut attempts) = (0u64, 0u64);
                let end = Instant::now() + duration;
                while Instant::now() < end {
                    let t0 = Instant::now();
                    let ok = variant.acquire().is_ok();
                    let took = nanos(t0.elapsed());
                    attempts += 1;
                    attempt.saturating_record(took);
                    if ok {
                        acquired += 1;
                        success.saturating_record(took);
                        variant.release()?;
                    } else if !backoff.is_zero() {
                        let wait = rand::random_range(0..=backoff.as_nanos() as u64);
                        thread::sleep(Duration::from_nanos(wait));
                    }
                }
                Ok((acquired, attempts, success, attempt))
            })
        })
        .collect();
    let mut result = ContentionResult {
        kind,
        backoff,
        acquired: 0,
        attempts: 0,
        secs: duration.as_secs_f64(),
        success: histogram(),
        attempt: histogram(),
        error: None,
    };
    for handle in handles {
        match handle.join() {
            Ok(Ok((acquired, attempts, success, attempt))) => {
                result.acquired += acquired;
                result.attempts += attempts;
                let _ = result.success.add(&success);
                let _ = result.attempt.add(&attempt);
            }
            Ok(Err(e)) => result.error = Some(e),
            Err(_) => result.error = Some("a client thread panicked".to_owned()),
        }
    }
    result
}

pub(crate) enum FaultOutcome {
    Done(Box<Stats>),
    Blocked { after: u64, waited: Duration },
}

/// Runs `variant` with one master paused in a thread of its own, for up to
/// `cycles` cycles or `budget`; gives up waiting after `budget + grace`
/// (the thread is leaked: it may be stuck forever).
pub(crate) fn fault_run(
    kind: Kind,
    mut variant: Box<dyn Variant>,
    cycles: u64,
    budget: Duration,
) -> FaultOutcome {
    let grace = Duration::from_secs(10);
    let progress = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel();
    let counter = progress.clone();
    let spawned = thread::Builder::new()
        .name(format!("fault-{}", kind.id()))
        .spawn(move || {
            let mut stats = Stats::new();
            let end = Instant::now() + budget;
            for _ in 0..cycles {
                if Instant::now() >= end {
                    stats.note = format!("stopped at the {budget:?} budget");
                    break;
                }
                let a0 = allocations();
                let t0 = Instant::now();
                let acquired = variant.acquire();
                let t1 = Instant::now();
                counter.fetch_add(1, Ordering::Relaxed);
                if acquired.is_err() {
                    stats.failures += 1;
                    if stats.note.is_empty() {
                        stats.note =
                            format!("acquire failed: {}", acquired.err().unwrap_or_default());
                    }
                    continue;
                }
                let t2 = Instant::now();
                if variant.release().is_err() {
                    stats.failures += 1;
                }
                let t3 = Instant::now();
                stats.allocations += allocations() - a0;
                stats.acquire.saturating_record(nanos(t1 - t0));
                stats.release.saturating_record(nanos(t3 - t2));
                stats.cycle.saturating_record(nanos(t3 - t0));
            }
            let _ = tx.send(stats);
        });
    if let Err(e) = spawned {
        let mut stats = Stats::new();
        stats.note = format!("could not spawn: {e}");
        return FaultOutcome::Done(Box::new(stats));
    }
    let waited = budget + grace;
    match rx.recv_timeout(waited) {
        Ok(stats) => FaultOutcome::Done(Box::new(stats)),
        Err(_) => FaultOutcome::Blocked {
            after: progress.load(Ordering::Relaxed),
            waited,
        },
    }
}

/// Failed attempts while a minority is paused: what a contender pays.
pub(crate) struct FailedAttempts {
    /// Wall time of each `try_lock` that failed as contended.
    pub(crate) attempt: Histogram<u64>,
    /// Attempts that ended otherwise (acquired, unavailable, …).
    pub(crate) other: u64,
    /// The first such outcome, for the report.
    pub(crate) note: String,
}

/// A holder (this crate) takes `resource` for a minute; a second client,
/// with a 50 ms request timeout and no retries, makes `attempts` calls to
/// `try_lock` on it, each of which must fail as contended. Run while a
/// master is paused: the attempt must decide as soon as a quorum of
/// refusals is in and queue its release without waiting for the paused
/// master: a paused or dead minority costs nothing.
pub(crate) fn failed_attempts(env: &Env, resource: &str, attempts: u64) -> Result<FailedAttempts> {
    let build = || {
        Redlock::builder(&env.urls)
            .request_timeout(REQUEST_TIMEOUT)
            .retry_count(0)
            .build()
    };
    let holder = build()?;
    let contender = build()?;
    let mut held = holder.try_lock(resource, Duration::from_secs(60))?;
    let mut out = FailedAttempts {
        attempt: histogram(),
        other: 0,
        note: String::new(),
    };
    for _ in 0..attempts {
        let t0 = Instant::now();
        let result = contender.try_lock(resource, TTL);
        let took = t0.elapsed();
        match result {
            Err(redlock_mio::Error::Contended(_)) => {
                out.attempt.saturating_record(nanos(took));
            }
            other => {
                out.other += 1;
                if out.note.is_empty() {
                    out.note = match other {
                        Ok(_) => "acquired a held lock".to_owned(),
                        Err(e) => e.to_string(),
                    };
                }
            }
        }
    }
    // The paused master keeps its key until the holder's TTL; the others
    // release now.
    let _ = holder.unlock(&mut held);
    Ok(out)
}
