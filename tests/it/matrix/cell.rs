//! One cell of the matrix: its situation played out with clients of its
//! front end and mode on its names, then the checkers every cell runs.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use crate::support::check::{assert_gone, calls, eventually, left_on, queued_at};
use crate::support::cluster::Cluster;
use crate::support::holdings::{Holding, assert_safe};
use crate::support::restart::restart_empty;
use redlock_mio::NodeState;
use redlock_mio::{ConfigError, Error, RESERVED_PREFIX};

use super::front::{Call, Client, Held};
use super::{Cell, Front, Name, PATIENCE, Shape, Situation, Support, Tuning};

/// The masters a minority pause stops, and a majority pause.
const MINORITY: [usize; 1] = [2];
const MAJORITY: [usize; 2] = [0, 1];
/// The master restarted empty.
const RESTARTED: usize = 0;
/// What a hand-written holder leaves at a reserved name.
const FOREIGN: &[u8] = b"someone-else";

/// What a cell did, for the table's summary.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Tally {
    /// Holdings checked.
    pub(super) holdings: usize,
    /// Errors that came as documented.
    pub(super) errors: usize,
}

/// Plays `cell` out on `cluster` and runs its checkers; panics on the
/// first thing that is not as documented.
pub(super) fn run(cluster: &Cluster, cell: &Cell) -> Tally {
    if cell.support() == Support::Refused {
        refused(cluster, cell);
        return Tally {
            holdings: 0,
            errors: 1,
        };
    }
    let mut ctx = Ctx::new(cluster, *cell);
    match (cell.name, cell.situation) {
        (Name::Reserved, _) => reserved(&mut ctx),
        (_, Situation::Free) => served(&mut ctx, &[]),
        (_, Situation::SkewedClock) => {
            served(&mut ctx, &[]);
            hand_over(&mut ctx, &[], None, 2..=2);
        }
        (_, Situation::MinorityPaused) => {
            served(&mut ctx, &MINORITY);
            hand_over(&mut ctx, &MINORITY, None, 2..=2);
        }
        (_, Situation::MajorityPaused) => unavailable(&mut ctx),
        (_, Situation::Contended) => hand_over(&mut ctx, &[], None, 2..=2),
        (_, Situation::RestartedEmpty) => restarted(&mut ctx),
    }
    ctx.finish()
}

/// What a cell keeps while it runs.
struct Ctx<'a> {
    cluster: &'a Cluster,
    cell: Cell,
    tuning: Tuning,
    names: Vec<Vec<u8>>,
    /// The names the clients warmed up on.
    warm: Vec<Vec<u8>>,
    holdings: Vec<Holding>,
    origin: Instant,
    clients: usize,
    /// Errors that came as documented.
    errors: usize,
}

impl<'a> Ctx<'a> {
    fn new(cluster: &'a Cluster, cell: Cell) -> Ctx<'a> {
        Ctx {
            cluster,
            tuning: cell.situation.tuning(),
            names: cell.names(),
            warm: Vec::new(),
            holdings: Vec::new(),
            origin: Instant::now(),
            clients: 0,
            errors: 0,
            cell,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.cluster.urls()
    }

    /// A warm client of the cell's front end and mode.
    fn client(&mut self) -> Client {
        self.client_of(self.cell.front, self.cell.mode.shape)
    }

    /// A warm client of `front` for `shape`, fenced as the cell is: its
    /// connections made, its fence counters read, and everything it sent
    /// applied on every master (the warm-up's last command, a release, is
    /// gone from each).
    fn client_of(&mut self, front: Front, shape: Shape) -> Client {
        self.clients += 1;
        let fenced = self.cell.mode.fenced;
        let mut client = Client::new(
            front,
            shape,
            fenced,
            &self.tuning,
            &self.urls(),
            self.clients,
        )
        .unwrap_or_else(|e| panic!("building a client: {e}"));
        let name = [self.cell.tag(b'w', self.clients).into_bytes()];
        let call = if client.has(Call::Try) {
            Call::Try
        } else {
            Call::Wait
        };
        // The warm-up is not what the cell tests: on a loaded machine with
        // a short request timeout it may time out, and is tried again.
        let warmed = (0..20).any(|_| match client.acquire(call, &name, self.deadline()) {
            Ok(held) => client.release(held, &name).1.is_ok(),
            Err(_) => false,
        });
        assert!(warmed, "a client could not warm up");
        let all: Vec<usize> = (0..self.cluster.len()).collect();
        assert_gone(self.cluster, &all, &name[0], PATIENCE);
        let [name] = name;
        self.warm.push(name);
        client
    }

    /// When a call that waits, starting now, gives up.
    fn deadline(&self) -> Instant {
        Instant::now() + self.tuning.wait
    }

    /// `client` acquires the cell's names by `call`, which must succeed.
    fn hold(&self, client: &mut Client, call: Call) -> Held {
        client
            .acquire(call, &self.names, self.deadline())
            .unwrap_or_else(|e| panic!("{call:?} acquire: expected the lock, got {e}"))
    }

    /// `client` releases `held`, which must succeed; its holdings count.
    fn release(&mut self, client: &mut Client, held: Held, names: &[Vec<u8>]) {
        let (holdings, result) = client.release(held, names);
        self.holdings.extend(holdings);
        result.unwrap_or_else(|e| panic!("release: {e}"));
    }

    /// The holding goes on: the caller extends (which must succeed), or
    /// the keeper does (at least once from now).
    fn extend(&self, client: &mut Client, held: &mut Held) {
        let before = client.stats().map(|s| s.extended);
        match client.extend(held) {
            Some(result) => result.unwrap_or_else(|e| panic!("extend: {e}")),
            None => {
                if let (Some(before), Shape::Kept | Shape::Scoped) = (before, client.shape) {
                    let extended = eventually(PATIENCE, || {
                        client.stats().is_some_and(|s| s.extended > before)
                    });
                    assert!(extended, "the keeper never extended: {:?}", client.stats());
                }
            }
        }
    }

    /// A caller that does not wait, with the names it takes: one of the
    /// cell's kind, or a blocking `try_lock` of the first name where the
    /// shape has none (a scope).
    fn contender(&mut self) -> (Client, Vec<Vec<u8>>) {
        if self.cell.mode.shape.has(Call::Try) {
            (self.client(), self.names.clone())
        } else {
            let first = vec![self.names[0].clone()];
            (self.client_of(Front::Blocking, Shape::Single), first)
        }
    }

    /// `contender` is refused while the names are held: `Contended` (a
    /// batch's every element).
    fn refused(&mut self, (contender, names): &mut (Client, Vec<Vec<u8>>)) {
        match contender.acquire(Call::Try, names, self.deadline()) {
            Err(Error::Contended(_)) => self.errors += 1,
            Err(other) => panic!("a contender: expected Contended, got {other}"),
            Ok(held) => {
                let (holdings, _) = contender.release(held, names);
                self.holdings.extend(holdings);
                panic!("a contender got the lock while it was held");
            }
        }
    }

    /// The checkers every cell ends with: no two holdings overlapped;
    /// fences grew in the order holdings began (and fenced cells have one
    /// on every holding, plain ones none); nothing of the cell is left on
    /// any master, neither a lock nor a waiter's queue entry, well before
    /// any key of it could have expired on its own.
    fn finish(self) -> Tally {
        assert_safe(&self.holdings, self.origin, "holdings");
        let fenced = self.holdings.iter().filter(|h| h.fence.is_some()).count();
        let expected = if self.cell.mode.fenced {
            self.holdings.len()
        } else {
            0
        };
        assert_eq!(fenced, expected, "holdings with a fence");
        let mut keys: Vec<Vec<u8>> = self.names.iter().chain(&self.warm).cloned().collect();
        let queues: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| [b"redlock-mio:queue:", &k[..]].concat())
            .collect();
        keys.extend(queues);
        let clean = eventually(PATIENCE, || left_on(self.cluster, &keys).is_empty());
        assert!(
            clean,
            "left on the masters after {PATIENCE:?}: {:?}",
            left_on(self.cluster, &keys)
        );
        Tally {
            holdings: self.holdings.len(),
            errors: self.errors,
        }
    }
}

/// The embedded front end with fencing: the build is refused, as
/// documented, with `NotEmbeddable`.
fn refused(cluster: &Cluster, cell: &Cell) {
    let built = Client::new(
        cell.front,
        cell.mode.shape,
        true,
        &cell.situation.tuning(),
        &cluster.urls(),
        0,
    );
    match built {
        Err(ConfigError::NotEmbeddable(_)) => {}
        Err(other) => panic!("expected NotEmbeddable, got {other}"),
        Ok(_) => panic!("an embedded client was built with fencing"),
    }
}

/// Free, or with a paused minority: every call of the mode gets the lock,
/// extends it and releases it; no round waited for a paused master (none
/// of them counts a timeout, none failed), and every attempt won.
fn served(ctx: &mut Ctx<'_>, paused: &[usize]) {
    let mut client = ctx.client();
    let before = client.stats();
    for &i in paused {
        ctx.cluster.pause(i);
    }
    for call in [Call::Try, Call::Wait] {
        if !client.has(call) {
            continue;
        }
        let mut held = ctx.hold(&mut client, call);
        ctx.extend(&mut client, &mut held);
        let names = ctx.names.clone();
        ctx.release(&mut client, held, &names);
    }
    for &i in paused {
        ctx.cluster.resume(i);
    }
    let (Some(before), Some(after)) = (before, client.stats()) else {
        return;
    };
    assert_eq!(
        after.attempts - before.attempts,
        after.acquired - before.acquired,
        "every attempt won: {after:?}"
    );
    for (i, (b, a)) in before.masters.iter().zip(&after.masters).enumerate() {
        assert_eq!(
            (a.timeouts - b.timeouts, a.errors - b.errors),
            (0, 0),
            "master {i}: a round waited for it or it failed: {after:?}"
        );
    }
}

/// A majority paused: every call of the mode fails with `Unavailable`,
/// ended by its rounds' own deadline (the paused masters timed out in the
/// report, not a stall or anything else), after the attempts its
/// documented bound allows; a scope's closure never runs.
fn unavailable(ctx: &mut Ctx<'_>) {
    let mut client = ctx.client();
    for i in MAJORITY {
        ctx.cluster.pause(i);
    }
    for call in [Call::Try, Call::Wait] {
        if !client.has(call) {
            continue;
        }
        let before = client.attempts();
        let error = match client.acquire(call, &ctx.names, ctx.deadline()) {
            Err(error @ Error::Unavailable(_)) => error,
            Err(other) => panic!("{call:?}: expected Unavailable, got {other}"),
            Ok(_) => panic!("{call:?}: got a lock with a majority paused"),
        };
        ctx.errors += 1;
        let report = error.report().expect("a report");
        for i in MAJORITY {
            assert_eq!(
                report.nodes()[i],
                NodeState::TimedOut,
                "{call:?}: master {i}: {report}"
            );
        }
        let Some(stats) = client.stats() else {
            continue;
        };
        let attempts = stats.attempts - before;
        // One round per call that does not wait (per lock for a batch);
        // the retry count's worth for those that wait by retries
        // (`lock_all`, `lock` before `keep`, `with_lock`); as many as fit
        // before the deadline for `lock_until`.
        let expected = match (call, ctx.cell.mode.shape) {
            (Call::Try, Shape::Batch) => ctx.names.len() as u64..=ctx.names.len() as u64,
            (Call::Try, _) => 1..=1,
            // The last attempt starts while its whole request timeout
            // fits before the deadline.
            (Call::Wait, Shape::Single) => {
                let fit = ctx.tuning.wait.as_millis() / ctx.tuning.request_timeout.as_millis();
                1..=fit as u64
            }
            (Call::Wait, _) => {
                let retries = u64::from(ctx.tuning.retry_count) + 1;
                retries..=retries
            }
        };
        assert!(
            expected.contains(&attempts),
            "{call:?}: {attempts} attempts, expected {expected:?}: {stats:?}"
        );
    }
    for i in MAJORITY {
        ctx.cluster.resume(i);
    }
}

/// Held, then released while a call that waits is queued for it on a
/// quorum of the masters in `live` (the others paused): the waiter is
/// handed the lock by the release and told, within the holder's key's
/// life (a waiter that was not told would wait for it to expire, far past
/// `PATIENCE`: its retry delay is longer still), after `attempts` (one
/// refused, then the one it was told to make; one more where a reconnect
/// makes it try again). A call that does not wait is refused meanwhile.
/// `meanwhile` (a restart of master `RESTARTED`) happens once the waiter
/// is queued on every other live master, before the release.
fn hand_over(
    ctx: &mut Ctx<'_>,
    paused: &[usize],
    meanwhile: Option<fn(&Cluster)>,
    attempts: RangeInclusive<u64>,
) {
    let shape = ctx.cell.mode.shape;
    let mut holder = ctx.client();
    let mut contender = ctx.contender();
    // A batch has no call that waits: a blocking `lock_until` waits for
    // its first lock, which the batch's `unlock_many` hands over.
    let (waiter, names) = if shape.has(Call::Wait) {
        (ctx.client(), ctx.names.clone())
    } else {
        let first = vec![ctx.names[0].clone()];
        (ctx.client_of(Front::Blocking, Shape::Single), first)
    };
    for &i in paused {
        ctx.cluster.pause(i);
    }
    let live: Vec<usize> = (0..ctx.cluster.len())
        .filter(|i| !paused.contains(i))
        .collect();
    let first = if holder.has(Call::Try) {
        Call::Try
    } else {
        Call::Wait
    };
    let held = ctx.hold(&mut holder, first);
    ctx.refused(&mut contender);
    let before = waiter.attempts();
    let deadline = ctx.deadline();
    let (send, done) = mpsc::channel();
    let waiting = {
        let names = names.clone();
        let mut waiter = waiter;
        thread::spawn(move || {
            let result = waiter.acquire(Call::Wait, &names, deadline);
            let _ = send.send((waiter, result));
        })
    };
    // A waiter queued on a quorum is told by the release: that is what
    // the docs promise, and what the test holds it to. It may not be
    // queued everywhere: an embedded client's sessions progress only
    // while its caller drives it, and this test drives each client only
    // during its own calls, so the holder's acquire may still wait, behind
    // a handshake, for a slow master (its round decided by the others),
    // which then grants the waiter. Then the waiter may make one attempt
    // more. What happens meanwhile takes the restarted master's queue
    // away: then the waiter must be queued on every other live master (a
    // quorum).
    let quorum = ctx.cluster.len() / 2 + 1;
    let counted: Vec<usize> = match meanwhile {
        Some(_) => live.iter().copied().filter(|&i| i != RESTARTED).collect(),
        None => live.clone(),
    };
    let need = match meanwhile {
        Some(_) => counted.len(),
        None => quorum,
    };
    let queued = eventually(PATIENCE, || {
        waiting.is_finished() || queued_at(ctx.cluster, &counted, &names[0]) >= need
    });
    if waiting.is_finished() {
        if let Err(panic) = waiting.join() {
            std::panic::resume_unwind(panic);
        }
        let ended = done
            .try_recv()
            .map(|(_, result)| result.map(|_| "the lock"));
        panic!("the waiter ended before it was queued on masters {live:?}: {ended:?}");
    }
    assert!(queued, "the waiter was not queued on {need} of {counted:?}");
    let attempts = if queued_at(ctx.cluster, &live, &names[0]) == live.len() {
        attempts
    } else {
        *attempts.start()..=attempts.end() + 1
    };
    if let Some(meanwhile) = meanwhile {
        meanwhile(ctx.cluster);
    }
    let holder_names = ctx.names.clone();
    ctx.release(&mut holder, held, &holder_names);
    let (mut waiter, result) = done.recv_timeout(PATIENCE).unwrap_or_else(|e| {
        panic!("the waiter was not served within {PATIENCE:?} of the release: {e}")
    });
    if let Err(panic) = waiting.join() {
        std::panic::resume_unwind(panic);
    }
    let held = result.unwrap_or_else(|e| panic!("the waiter: expected the lock, got {e}"));
    if waiter.stats().is_some() {
        let made = waiter.attempts() - before;
        assert!(
            attempts.contains(&made),
            "the waiter was told, not polling: {made} attempts, expected {attempts:?}: {:?}",
            waiter.stats()
        );
    }
    ctx.release(&mut waiter, held, &names);
    for &i in paused {
        ctx.cluster.resume(i);
    }
}

/// A master restarted empty while the lock is held: others are still
/// refused, the holding goes on (an extension after the restart) and
/// ends by a release that succeeds, and the lock is served again. Then
/// one restarted empty while a waiter is queued: the release still hands
/// the lock over (the other masters tell the waiter). Clients run with
/// the restart guard, which the docs require where a master may restart
/// empty at once.
fn restarted(ctx: &mut Ctx<'_>) {
    let mut holder = ctx.client();
    let call = if holder.has(Call::Wait) {
        Call::Wait
    } else {
        Call::Try
    };
    let mut held = ctx.hold(&mut holder, call);
    let mut contender = ctx.contender();
    restart_empty(ctx.cluster, RESTARTED);
    ctx.refused(&mut contender);
    ctx.extend(&mut holder, &mut held);
    let names = ctx.names.clone();
    ctx.release(&mut holder, held, &names);
    let again = if holder.has(Call::Try) {
        Call::Try
    } else {
        Call::Wait
    };
    let held = ctx.hold(&mut holder, again);
    ctx.release(&mut holder, held, &names);
    // The waiter's connection to the restarted master drops, and a
    // waiter tries again when its connection is made again.
    hand_over(
        ctx,
        &[],
        Some(|cluster| restart_empty(cluster, RESTARTED)),
        2..=3,
    );
}

/// A name in the crate's key space, alone or among others, in every
/// situation: every call of the mode is refused with `ReservedResource`
/// at once, sending nothing (the client counts no attempt, the embedded
/// one has nothing in flight, the masters ran no command: their command
/// counts are unchanged, a key someone else wrote there is untouched).
fn reserved(ctx: &mut Ctx<'_>) {
    let mut client = ctx.client();
    let reserved = ctx
        .names
        .iter()
        .find(|n| n.starts_with(RESERVED_PREFIX.as_bytes()))
        .expect("a reserved name")
        .clone();
    let situation = ctx.cell.situation;
    let cluster = ctx.cluster;
    if situation == Situation::Contended {
        for i in 0..cluster.len() {
            cluster.set(i, &reserved, FOREIGN);
        }
    }
    // The restarted master's counts start again from nothing.
    let watched: Vec<usize> = (0..cluster.len())
        .filter(|&i| situation != Situation::RestartedEmpty || i != RESTARTED)
        .collect();
    let snapshot =
        || -> Vec<BTreeMap<String, u64>> { watched.iter().map(|&i| calls(cluster, i)).collect() };
    let before = snapshot();
    let attempts = client.attempts();
    let paused: &[usize] = match situation {
        Situation::MinorityPaused => &MINORITY,
        Situation::MajorityPaused => &MAJORITY,
        _ => &[],
    };
    for &i in paused {
        cluster.pause(i);
    }
    if situation == Situation::RestartedEmpty {
        restart_empty(cluster, RESTARTED);
    }
    for call in [Call::Try, Call::Wait] {
        if !client.has(call) {
            continue;
        }
        match client.acquire(call, &ctx.names, ctx.deadline()) {
            Err(Error::ReservedResource) => ctx.errors += 1,
            Err(other) => panic!("{call:?}: expected ReservedResource, got {other}"),
            Ok(_) => panic!("{call:?}: locked a reserved name"),
        }
        assert_eq!(client.in_flight(), 0, "{call:?}: a round was started");
    }
    for &i in paused {
        cluster.resume(i);
    }
    assert_eq!(client.attempts(), attempts, "an attempt was counted");
    let after = snapshot();
    for ((i, b), a) in watched.iter().zip(&before).zip(&after) {
        assert_eq!(b, a, "master {i} ran commands for a reserved name");
    }
    if situation == Situation::Contended {
        for i in 0..cluster.len() {
            assert_eq!(cluster.get(i, &reserved).as_deref(), Some(FOREIGN));
            cluster.command(i, &[b"DEL", &reserved]);
        }
    }
}
