//! What happened, in global time, and the checkers run over it: no two
//! holders of a resource within their validities (unless every master that
//! granted both lost its data in between), fences that grow in the order
//! holdings began (where `crate::fencing` says they do), every call within
//! its bound, the standings kept locks' keepers report as
//! `redlock_mio::Standing` documents them, nothing but one release from a
//! keeper once its release is asked for, waiters served within the
//! hand-off's bound once a release is sent, and (see the world) nothing
//! left on the masters past its own bound.

use std::collections::BTreeMap;
use std::fmt::Write;

use redlock_mio::Standing;

/// One stretch of time during which a client took a lock as held: from
/// the decision that gave it to the end of the validity that decision
/// computed (cut short by a later decision or a release).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holding {
    pub(crate) resource: usize,
    pub(crate) client: usize,
    /// The lock (an acquisition), unique in the run.
    pub(crate) lock: u64,
    pub(crate) from: u64,
    pub(crate) until: u64,
    /// The masters whose grants made the decision, bit `i` for master `i`.
    pub(crate) grants: u64,
    /// When the round that decided it started.
    pub(crate) t0: u64,
}

/// One fenced holding: a lock won by a fenced acquire, from when it
/// began, for each of its resources.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fenced {
    pub(crate) resource: usize,
    pub(crate) client: usize,
    pub(crate) lock: u64,
    pub(crate) fence: u64,
    /// When the client got the lock (after the raise).
    pub(crate) began: u64,
    /// When its acquire round started.
    pub(crate) t0: u64,
    /// The masters whose raise made the decision, bit `i` for master `i`.
    pub(crate) raised: u64,
}

/// What a kept lock's keeper had just seen when it took a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It woke on its own (not for the release).
    Wake,
    /// An extension reached a quorum.
    Extended,
    /// An extension found the lock gone: a quorum said its token no longer
    /// owns the resource, or it had expired before anything was sent.
    Gone,
    /// An extension missed a quorum otherwise.
    Missed,
    /// An extension was refused before anything was sent: the lock was
    /// extended as often as the client allows.
    Limit,
    /// The holder asked for the release.
    Asked,
    /// The release's round is over; `gone`: a quorum said the token no
    /// longer owned the resource.
    Released { gone: bool },
}

/// One step of a kept lock's keeper, and the standing it reported then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepStep {
    pub(crate) client: usize,
    pub(crate) lock: u64,
    pub(crate) at: u64,
    pub(crate) seen: Seen,
    /// Whether the lock had validity left then, as its client computed it.
    pub(crate) valid: bool,
    pub(crate) reported: Option<Standing>,
}

/// One call that waited (a `lock` or `lock_until` with a slot in the
/// table of waits, whose client's releases tell it).
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub(crate) client: usize,
    pub(crate) resources: Vec<usize>,
    /// When the call began.
    pub(crate) from: u64,
    /// Its place in the queues (their score: its client's wall clock when
    /// it began, in microseconds, as each master takes it within a second
    /// of its own clock).
    pub(crate) place: u64,
    /// When each of its attempts ended (refused), and whether it left it
    /// queued on a quorum of the masters for the hand-off to serve (else
    /// something other than contention refused it).
    pub(crate) queued: Vec<(u64, bool)>,
    /// When the call ended (or the world did).
    pub(crate) to: u64,
    /// Whether it ended with the lock.
    pub(crate) acquired: bool,
}

/// A release that a quorum answered, from when it was sent.
#[derive(Debug, Clone)]
pub(crate) struct Release {
    pub(crate) client: usize,
    pub(crate) resources: Vec<usize>,
    pub(crate) sent: u64,
    /// The reservation windows its hand-off may spend on nobody who comes
    /// (entries the masters disagree on, entries whose callers left).
    pub(crate) idle: u64,
}

/// Something other than the hand-off that may hold a waiter up: a fault
/// of a master or of the paths, or another client's write, from when it
/// began to when its effect is over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Disturbance {
    /// Only this client's waiters (its paths), if given.
    pub(crate) client: Option<usize>,
    /// Only this resource's waiters (its key or its queue), if given.
    pub(crate) resource: Option<usize>,
    /// It may take entries out of the queues (the waiters then wait for
    /// their next attempt): it holds up the waiters queued before it
    /// too.
    pub(crate) wipes: bool,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

/// Everything the checkers look at.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) holdings: Vec<Holding>,
    pub(crate) fenced: Vec<Fenced>,
    /// The steps of the kept locks' keepers, in time order.
    pub(crate) keeps: Vec<KeepStep>,
    /// When each master lost grants it had made, outside what the lock
    /// assumes (a `FLUSHALL`, a restart without its data or from an older
    /// snapshot that nothing guarded, a lock's key evicted), by master
    /// process.
    pub(crate) losses: Vec<Vec<u64>>,
    /// When each master lost its fence counter with its whole data set,
    /// or its counter alone (every restart, a `FLUSHALL`, the counter
    /// evicted), by master process: fencing puts it back in sync.
    pub(crate) wipes: Vec<Vec<u64>>,
    /// When each master left what fencing assumes (a restart from an
    /// older snapshot that brought back another counter or loss id than
    /// the master had when it crashed; the counter or its loss id
    /// evicted), by master process.
    pub(crate) breaks: Vec<Vec<u64>>,
    /// When a master's clock stepped back.
    pub(crate) steps: Vec<u64>,
    /// The master process each address names (grants are by address).
    proc_of: Vec<usize>,
    /// The calls that waited, the releases, and what else may hold a
    /// waiter up.
    pub(crate) waits: Vec<Waiting>,
    pub(crate) releases: Vec<Release>,
    pub(crate) disturbed: Vec<Disturbance>,
    /// Calls that took longer than their bound.
    pub(crate) slow_calls: Vec<String>,
    /// Anything else a check found wrong as it happened.
    pub(crate) errors: Vec<String>,
}

impl History {
    pub(crate) fn new(proc_of: Vec<usize>) -> History {
        let procs = proc_of.iter().max().map_or(0, |&p| p + 1);
        History {
            losses: vec![Vec::new(); procs],
            wipes: vec![Vec::new(); procs],
            breaks: vec![Vec::new(); procs],
            proc_of,
            ..History::default()
        }
    }

    /// The master processes of the addresses in `grants`.
    fn procs(&self, grants: u64) -> u64 {
        (0..self.proc_of.len().min(64))
            .filter(|a| grants >> a & 1 == 1)
            .fold(0, |mask, a| mask | 1 << self.proc_of[a])
    }

    /// Whether `grants` counts one master process twice (through two of
    /// its addresses).
    pub(crate) fn counts_twice(&self, grants: u64) -> bool {
        self.procs(grants).count_ones() < grants.count_ones()
    }

    /// Whether master `m` lost data between `from` and `to`.
    fn lost(&self, m: usize, from: u64, to: u64) -> bool {
        within(&self.losses[m], from, to)
    }

    /// Every pair of holdings of one resource by two locks that overlap in
    /// time, unless each master that granted both lost its data between
    /// the two rounds: the violations of mutual exclusion, described.
    pub(crate) fn overlaps(&self, names: &[String]) -> Vec<String> {
        let mut by_resource: Vec<Vec<&Holding>> = vec![Vec::new(); names.len()];
        for h in &self.holdings {
            if h.from < h.until {
                by_resource[h.resource].push(h);
            }
        }
        let mut found = Vec::new();
        for list in &mut by_resource {
            list.sort_by_key(|h| (h.from, h.lock));
            for (i, a) in list.iter().enumerate() {
                for b in &list[i + 1..] {
                    if b.from >= a.until {
                        break;
                    }
                    if a.lock == b.lock || self.excused(a, b) {
                        continue;
                    }
                    found.push(describe(names, a, b));
                    if found.len() >= 5 {
                        return found;
                    }
                }
            }
        }
        found
    }

    /// Whether every master that granted both `a` and `b` lost its data
    /// between the rounds (outside what the lock assumes).
    fn excused(&self, a: &Holding, b: &Holding) -> bool {
        let (from, to) = (a.t0.min(b.t0), a.from.max(b.from));
        let common = self.procs(a.grants) & self.procs(b.grants);
        (0..64)
            .filter(|m| common >> m & 1 == 1)
            .all(|m| self.lost(m, from, to))
    }
}

impl History {
    /// Every pair of fenced holdings of one resource in which the one that
    /// began later has a fence no larger, where `crate::fencing` says it
    /// is larger: described.
    pub(crate) fn fence_order(&self, names: &[String]) -> Vec<String> {
        let mut by_resource: Vec<Vec<&Fenced>> = vec![Vec::new(); names.len()];
        for f in &self.fenced {
            by_resource[f.resource].push(f);
        }
        let mut found = Vec::new();
        for list in &mut by_resource {
            list.sort_by_key(|f| (f.began, f.lock));
            for (i, a) in list.iter().enumerate() {
                for b in &list[i + 1..] {
                    if b.fence > a.fence || b.began == a.began || self.fence_excused(a, b) {
                        continue;
                    }
                    found.push(describe_fences(names, a, b));
                    if found.len() >= 5 {
                        return found;
                    }
                }
            }
        }
        found
    }

    /// Whether `b`, which began after `a`, may have a fence no larger
    /// than `a`'s by `crate::fencing`. Its fence is larger when `b`'s
    /// acquire started after `a` began (the proof there takes `a`'s raise
    /// quorum, done before `a` began, to meet `b`'s quorum), whatever the
    /// masters lost of their whole data sets; and, when no master lost
    /// anything, whenever `b` began after `a`. Unless, between `a`'s
    /// acquire and `b`'s beginning:
    ///
    /// - a master left what fencing assumes (an old counter restored, a
    ///   counter or loss id evicted);
    /// - every master that raised `a`'s fence lost its counter, which a
    ///   start from the clocks needs, and a master's clock had stepped back
    ///   (the start assumes it did not).
    fn fence_excused(&self, a: &Fenced, b: &Fenced) -> bool {
        let (from, to) = (a.t0.min(b.t0), b.began);
        let procs = 0..self.breaks.len();
        if procs.clone().any(|m| within(&self.breaks[m], from, to)) {
            return true;
        }
        let raised = self.procs(a.raised);
        let started = procs
            .clone()
            .filter(|m| raised >> m & 1 == 1)
            .all(|m| within(&self.wipes[m], from, to));
        if started && self.steps.iter().any(|&at| at <= to) {
            return true;
        }
        b.t0 <= a.began
            && procs
                .clone()
                .any(|m| within(&self.wipes[m], from, to) || self.lost(m, from, to))
    }
}

impl History {
    /// The steps of each kept lock's keeper, in time order, by lock.
    fn keeps_by_lock(&self) -> BTreeMap<u64, Vec<&KeepStep>> {
        let mut by_lock: BTreeMap<u64, Vec<&KeepStep>> = BTreeMap::new();
        for step in &self.keeps {
            by_lock.entry(step.lock).or_default().push(step);
        }
        by_lock
    }

    /// Every kept lock whose keeper reported a standing other than
    /// `redlock_mio::Standing` documents for what it had just seen: held
    /// after an extension that reached a quorum; lost after one that found
    /// the lock gone, and once the validity ran out (at a wake, a missed
    /// extension, the release); at risk after a missed extension with
    /// validity left; at the release's end released, or lost if a quorum
    /// said the token was gone; nothing else in between; and, once lost or
    /// released, never anything else. Its last standing is final.
    pub(crate) fn standings(&self) -> Vec<String> {
        let mut found = Vec::new();
        for steps in self.keeps_by_lock().values() {
            let mut standing = Standing::Held;
            let found_before = found.len();
            for step in steps {
                let before = standing;
                if let Some(reported) = step.reported {
                    if before.is_final() && reported != before {
                        found.push(describe_step(step, before, "after a final standing"));
                        break;
                    }
                    standing = reported;
                }
                let lost_unless_valid = if step.valid { before } else { Standing::Lost };
                let due = match step.seen {
                    _ if before.is_final() => before,
                    Seen::Extended => Standing::Held,
                    Seen::Gone | Seen::Released { gone: true } => Standing::Lost,
                    Seen::Missed if step.valid => Standing::AtRisk,
                    Seen::Missed | Seen::Limit | Seen::Wake | Seen::Asked => lost_unless_valid,
                    Seen::Released { gone: false } => Standing::Released,
                };
                if standing != due {
                    let why = format!("where {due:?} is due");
                    found.push(describe_step(step, standing, &why));
                    break;
                }
            }
            if let Some(last) = steps.last() {
                if !standing.is_final() && found.len() == found_before {
                    found.push(describe_step(last, standing, "as its last standing"));
                }
            }
            if found.len() >= 5 {
                break;
            }
        }
        found
    }
}

impl History {
    /// Every kept lock whose keeper took a step after the holder asked for
    /// the release other than the release's end, or any step after that
    /// end: once asked, a keeper sends the release, once, and nothing
    /// after it (the keeper's docs: nothing is extended after the release).
    /// Each extension a keeper sends, or has refused before anything goes
    /// out, comes back as a step.
    pub(crate) fn after_release(&self) -> Vec<String> {
        let mut found = Vec::new();
        for steps in self.keeps_by_lock().values() {
            let (mut asked, mut ended) = (false, false);
            for step in steps {
                let released = matches!(step.seen, Seen::Released { .. });
                let when = if ended {
                    "after its release's end"
                } else if asked && !released {
                    "between the ask for its release and the release's end"
                } else {
                    asked |= step.seen == Seen::Asked;
                    ended |= released;
                    continue;
                };
                found.push(format!(
                    "client {} kept lock {}: its keeper took a step {when}, after {:?} at {:.6}s (reported {:?}): once asked, a keeper sends the release, once, and nothing after it",
                    step.client,
                    step.lock,
                    step.seen,
                    secs(step.at),
                    step.reported
                ));
                break;
            }
            if found.len() >= 5 {
                break;
            }
        }
        found
    }
}

/// A second of global time, in nanoseconds.
const SECOND: u64 = 1_000_000_000;
impl History {
    /// Every waiter left waiting after a release, past the hand-off's
    /// bound: where a release of `r`, sent at `sent`, finds a caller
    /// waiting for `r` alone and queued (the last attempt of its call
    /// before `sent` refused by contention), some caller holds `r` by `sent + bound(left,
    /// passed, stalled)` (see `Params::handoff_bound`), or that waiter's
    /// call is over by then. `left`: the other waiters of `r` alone ahead
    /// of it (by place) whose calls end without the lock on the way;
    /// `passed`: the waiters of several resources ahead of it that do not
    /// win on the way (the key handed to one is left by its next attempt
    /// when another of its keys is held, and so handed on: an attempt in
    /// place of a leave); `stalled`: those ahead of it whose clients
    /// pause on the way (`pauses`, by client), and the release's idle
    /// windows (entries the masters' queues disagree on, or whose callers
    /// left), each of which may cost a reservation window. Dead entries
    /// (waiters nobody hears) are no excuse however many; any disturbance
    /// of the masters, of the waiter's, the releaser's or another
    /// waiter's paths, or the waiter's own pause, between its queueing
    /// and the bound is (a reset's lasts the link's back-off and a
    /// reconnect: a waiting client reconnects within it, and is told
    /// after).
    pub(crate) fn handoffs(
        &self,
        names: &[String],
        bound: &dyn Fn(u64, u64, u64) -> u64,
        pauses: &[Vec<(u64, u64)>],
    ) -> (Vec<String>, u64) {
        let paused =
            |c: usize, from: u64, to: u64| pauses[c].iter().any(|&(a, b)| a <= to && from <= b);
        let mut found = Vec::new();
        let mut checked = 0;
        for release in &self.releases {
            for &r in &release.resources {
                let on_r: Vec<&Waiting> = self
                    .waits
                    .iter()
                    .filter(|w| w.resources.contains(&r))
                    .collect();
                for (i, w) in on_r.iter().enumerate() {
                    if w.resources.len() > 1 || w.to <= release.sent {
                        continue;
                    }
                    // Its last attempt before the release, which must
                    // have left it queued: an attempt refused otherwise
                    // (timed out, say) may have taken it off the queues
                    // (its script ran late, took the key and was undone),
                    // and only its next attempt queues it again.
                    let last = w.queued.iter().rfind(|&&(q, _)| q <= release.sent);
                    let Some(&(queued, true)) = last else {
                        continue;
                    };
                    // The other waiters on the way, with the bound they
                    // make: twice, the second with the first's reach.
                    let mut deadline = release.sent + bound(0, 0, release.idle);
                    let mut parties = vec![w.client, release.client];
                    let (mut left, mut passed, mut stalled) = (0, 0, 0);
                    for _ in 0..2 {
                        (left, passed, stalled) = (0, 0, 0);
                        for (j, o) in on_r.iter().enumerate() {
                            let during = o.to > release.sent && o.from <= deadline;
                            // Ahead by place (its client's wall clock), or
                            // by when it came: each master takes a place
                            // within a second of its own clock when it
                            // queues the waiter, so that a waiter whose
                            // client's clock is further off than that
                            // stands where its entry went in, a second or
                            // so either way. The waiter's own entry may
                            // have gone in as late as its last queueing
                            // (an entry lost, expired or taken off is
                            // put back then), so that a waiter that came
                            // up to two seconds after that may be ahead.
                            let ahead = o.place <= w.place || o.from <= queued + 2 * SECOND;
                            if j == i || !during {
                                continue;
                            }
                            parties.push(o.client);
                            let won = o.acquired && o.to <= deadline;
                            if ahead && o.resources.len() > 1 && !won {
                                passed += 1;
                            } else if ahead && !o.acquired && o.to <= deadline {
                                left += 1;
                            }
                            if ahead && paused(o.client, release.sent, deadline) {
                                stalled += 1;
                            }
                        }
                        deadline = release.sent + bound(left, passed, stalled + release.idle);
                    }
                    if paused(w.client, queued, deadline) {
                        continue;
                    }
                    let disturbed = self.disturbed.iter().any(|d| {
                        let since = if d.wipes { queued } else { release.sent };
                        d.from <= deadline
                            && since <= d.to
                            && d.client.is_none_or(|c| parties.contains(&c))
                            && d.resource.is_none_or(|dr| dr == r)
                    });
                    if disturbed {
                        continue;
                    }
                    checked += 1;
                    let taken = self
                        .holdings
                        .iter()
                        .any(|h| h.resource == r && release.sent <= h.from && h.from <= deadline);
                    if taken || w.to <= deadline {
                        continue;
                    }
                    found.push(format!(
                        "a waiter of client {} for {} (queued {:.6}s) was not served within {:.3} ms ({stalled} waiters stalled, {left} left, {passed} of several resources passed on the way) of a release by client {} sent at {:.6}s (its call ended {:.6}s)",
                        w.client,
                        names[r],
                        secs(queued),
                        (deadline - release.sent) as f64 / 1e6,
                        release.client,
                        secs(release.sent),
                        secs(w.to)
                    ));
                    if found.len() >= 5 {
                        return (found, checked);
                    }
                }
            }
        }
        (found, checked)
    }
}

fn describe_step(step: &KeepStep, standing: Standing, why: &str) -> String {
    format!(
        "client {} kept lock {}: {standing:?} {why}, after {:?} at {:.6}s ({})",
        step.client,
        step.lock,
        step.seen,
        secs(step.at),
        if step.valid {
            "validity left"
        } else {
            "validity run out"
        }
    )
}

/// Whether one of `times` falls between `from` and `to`.
fn within(times: &[u64], from: u64, to: u64) -> bool {
    times.iter().any(|&at| from <= at && at <= to)
}

fn describe_fences(names: &[String], a: &Fenced, b: &Fenced) -> String {
    let mut text = format!("fences out of order on {}:", names[a.resource]);
    for f in [a, b] {
        let _ = write!(
            text,
            " [client {} lock {} fence {} began {:.6}s, acquire from {:.6}s, raised by {:b}]",
            f.client,
            f.lock,
            f.fence,
            secs(f.began),
            secs(f.t0),
            f.raised
        );
    }
    text
}

fn describe(names: &[String], a: &Holding, b: &Holding) -> String {
    let mut text = format!("two holders of {}:", names[a.resource]);
    for h in [a, b] {
        let _ = write!(
            text,
            " [client {} lock {} held {:.6}s..{:.6}s, round from {:.6}s, granted by {:b}]",
            h.client,
            h.lock,
            secs(h.from),
            secs(h.until),
            secs(h.t0),
            h.grants
        );
    }
    text
}

/// Global nanoseconds as seconds, for messages.
pub(crate) fn secs(t: u64) -> f64 {
    t as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lock: u64, from: u64, until: u64, grants: u64) -> Holding {
        Holding {
            resource: 0,
            client: lock as usize,
            lock,
            from,
            until,
            grants,
            t0: from,
        }
    }

    #[test]
    fn overlapping_holders_are_found_unless_their_common_masters_lost_data() {
        let names = vec!["r".to_owned()];
        let mut history = History::new(vec![0, 1, 2]);
        history.holdings = vec![held(1, 0, 100, 0b011), held(2, 50, 150, 0b110)];
        assert_eq!(history.overlaps(&names).len(), 1);
        history.losses[1].push(40);
        assert!(history.overlaps(&names).is_empty(), "master 1 lost the key");
        history.holdings.push(held(3, 100, 200, 0b111));
        assert_eq!(history.overlaps(&names).len(), 1, "3 overlaps 2 only");
    }

    /// A caller of `client` waiting for resource 0 from `from` to `to`,
    /// queued at `queued`.
    fn waiting(client: usize, from: u64, queued: u64, to: u64, acquired: bool) -> Waiting {
        Waiting {
            client,
            resources: vec![0],
            from,
            place: from,
            queued: vec![(queued, true)],
            to,
            acquired,
        }
    }

    /// A hand-off's bound for the tests: 10 ns, 2 more per waiter that
    /// left, 3 per waiter of several resources that passed the key on,
    /// 100 per stalled waiter.
    fn bound(left: u64, passed: u64, stalled: u64) -> u64 {
        10 + 2 * left + 3 * passed + 100 * stalled
    }

    /// A history of one master in which client 0 releases resource 0 at
    /// `sent`.
    fn released_at(sent: u64) -> History {
        let mut history = History::new(vec![0]);
        history.releases = vec![Release {
            client: 0,
            resources: vec![0],
            sent,
            idle: 0,
        }];
        history
    }

    /// A waiter queued when a release is sent is served within the
    /// hand-off's bound, a window more for each other waiter stalled on
    /// the way; a disturbance of its paths or the masters excuses it.
    #[test]
    fn waiters_left_waiting_past_the_handoffs_bound_are_found() {
        let names = vec!["r".to_owned()];
        let mut pauses = vec![Vec::new(); 3];
        let mut history = released_at(1000);
        // Served by the hand-off (its call ends with the lock in time).
        history.waits = vec![waiting(1, 0, 500, 1008, true)];
        assert_eq!(history.handoffs(&names, &bound, &pauses), (vec![], 1));
        // Still waiting past the bound, nobody holding the resource.
        history.waits[0].to = 1050;
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
        // Unless an attempt after its queueing was refused otherwise: it
        // may be off the queues until its next attempt.
        history.waits[0].queued.push((900, false));
        assert_eq!(history.handoffs(&names, &bound, &pauses), (vec![], 0));
        history.waits[0].queued.pop();
        // A waiter that came well after it began, but not after its
        // queueing, may stand ahead of it (its entry went in later) and
        // cost a window when it stalls.
        history.waits[0].queued[0].0 = 3 * SECOND;
        history.releases[0].sent = 3 * SECOND + 1000;
        history.waits[0].to = 3 * SECOND + 1050;
        let mut late = waiting(2, 5 * SECOND / 2, 3 * SECOND - 10, 4 * SECOND, false);
        late.place = u64::MAX;
        history.waits.push(late);
        pauses[2].push((3 * SECOND + 900, 3 * SECOND + 1500));
        assert!(history.handoffs(&names, &bound, &pauses).0.is_empty());
        pauses[2].clear();
        history.waits.pop();
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
        history.waits[0].queued[0].0 = 500;
        history.releases[0].sent = 1000;
        history.waits[0].to = 1050;
        // Someone took it within the bound: the lock was handed on.
        history.holdings.push(held(7, 1005, 1040, 1));
        assert!(history.handoffs(&names, &bound, &pauses).0.is_empty());
        history.holdings.clear();
        // Another waiter, stalled on the way, costs one window.
        history.waits.push(waiting(2, 0, 400, 2000, false));
        pauses[2].push((900, 1500));
        assert!(history.handoffs(&names, &bound, &pauses).0.is_empty());
        history.waits[0].to = 1200;
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
        // A disturbance of a party's paths (the waiter's, the releaser's,
        // another waiter's of the resource) excuses it; another client's
        // does not.
        history.disturbed.push(Disturbance {
            client: Some(0),
            resource: None,
            wipes: false,
            from: 990,
            to: 1010,
        });
        history.disturbed[0].client = Some(2);
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 0);
        pauses[2].clear();
        history.waits.pop();
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
        history.disturbed[0].client = Some(1);
        assert_eq!(history.handoffs(&names, &bound, &pauses), (vec![], 0));
    }

    /// A waiter of several resources ahead costs what a waiter that
    /// leaves costs, its attempt in place of the leave (it passes on the
    /// key it cannot take yet), unless it wins; it is no excuse beyond
    /// that.
    #[test]
    fn a_waiter_of_several_resources_ahead_costs_an_attempt() {
        let names = vec!["r".to_owned(), "s".to_owned()];
        let pauses = vec![Vec::new(); 3];
        let mut history = released_at(1000);
        history.waits = vec![waiting(1, 0, 500, 1012, true)];
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
        // A waiter of r and s ahead of it, which goes on waiting: r was
        // handed to it, and it passed r on.
        let mut several = waiting(2, 0, 400, 2000, false);
        several.resources = vec![0, 1];
        history.waits.push(several);
        assert_eq!(history.handoffs(&names, &bound, &pauses), (vec![], 1));
        history.waits[0].to = 1014;
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
        // Its call ending without the lock costs the same, once.
        history.waits[0].to = 1013;
        history.waits[1].to = 1005;
        assert_eq!(history.handoffs(&names, &bound, &pauses), (vec![], 1));
        // One that wins on the way holds r (a holding serves the waiter),
        // and costs nothing.
        history.waits[1].acquired = true;
        assert_eq!(history.handoffs(&names, &bound, &pauses).0.len(), 1);
    }

    /// Step `seen` of kept lock 1 at `at`, reported `reported`.
    fn step(at: u64, seen: Seen, valid: bool, reported: Option<Standing>) -> KeepStep {
        KeepStep {
            client: 0,
            lock: 1,
            at,
            seen,
            valid,
            reported,
        }
    }

    /// A keeper reports what each outcome means, and nothing after a
    /// final standing.
    #[test]
    fn standings_are_held_to_what_each_outcome_means() {
        let mut history = History::new(vec![0]);
        let released = Seen::Released { gone: false };
        history.keeps = vec![
            step(1, Seen::Extended, true, Some(Standing::Held)),
            step(2, Seen::Missed, true, Some(Standing::AtRisk)),
            step(3, Seen::Asked, true, None),
            step(4, released, false, Some(Standing::Released)),
        ];
        assert!(history.standings().is_empty());
        // Lost at the release's end after a quorum said the token was gone.
        history.keeps[3] = step(4, Seen::Released { gone: true }, false, None);
        assert_eq!(history.standings().len(), 1, "Lost is due");
        // At risk once a quorum said the token no longer owns it.
        history.keeps[1] = step(2, Seen::Gone, false, Some(Standing::AtRisk));
        assert_eq!(history.standings().len(), 1);
        // Lost, then released: not final.
        history.keeps[1] = step(2, Seen::Gone, false, Some(Standing::Lost));
        history.keeps[3] = step(4, released, false, Some(Standing::Released));
        assert_eq!(history.standings().len(), 1);
        history.keeps[3].reported = Some(Standing::Lost);
        assert!(history.standings().is_empty());
        // A wake past the validity says lost; a keeper that never ends
        // is reported too.
        history.keeps.truncate(1);
        history.keeps.push(step(5, Seen::Wake, false, None));
        assert_eq!(history.standings().len(), 1, "Lost is due");
        history.keeps[1].reported = Some(Standing::Lost);
        assert!(history.standings().is_empty());
        history.keeps.pop();
        assert_eq!(history.standings().len(), 1, "Held is not final");
    }

    /// Once asked, a keeper's only step is its release's end, and nothing
    /// follows that.
    #[test]
    fn a_keeper_takes_no_step_after_its_release() {
        let mut history = History::new(vec![0]);
        let released = Seen::Released { gone: false };
        history.keeps = vec![
            step(1, Seen::Extended, true, Some(Standing::Held)),
            step(2, Seen::Asked, true, None),
            step(3, released, false, Some(Standing::Released)),
        ];
        assert!(history.after_release().is_empty());
        // An extension's end after the release's.
        history.keeps.push(step(4, Seen::Gone, false, None));
        assert_eq!(history.after_release().len(), 1);
        // One between the ask and the release's end.
        history.keeps.swap(2, 3);
        assert_eq!(history.after_release().len(), 1);
        // A second release.
        history.keeps[2] = step(3, released, false, Some(Standing::Released));
        history.keeps[3] = step(4, Seen::Asked, false, None);
        assert_eq!(history.after_release().len(), 1);
        history.keeps.pop();
        assert!(history.after_release().is_empty());
    }

    /// Lock `lock`, fenced `fence`, its acquire from `t0`, began at
    /// `began`, raised by every master of three.
    fn fenced(lock: u64, fence: u64, t0: u64, began: u64) -> Fenced {
        Fenced {
            resource: 0,
            client: 0,
            lock,
            fence,
            began,
            t0,
            raised: 0b111,
        }
    }

    /// A later holding's fence must be larger; a master that lost its
    /// whole data set excuses only holdings whose acquires ran at once, and
    /// a step back of a clock only when every master that raised the
    /// first fence lost its counter; an old counter restored excuses
    /// every pair around it.
    #[test]
    fn fences_out_of_order_are_found_unless_outside_the_assumptions() {
        let names = vec!["r".to_owned()];
        let mut history = History::new(vec![0, 1, 2]);
        history.fenced = vec![fenced(1, 10, 0, 10), fenced(2, 10, 20, 30)];
        assert_eq!(history.fence_order(&names).len(), 1, "equal fences");
        history.fenced[1].fence = 11;
        assert!(history.fence_order(&names).is_empty());

        // B's acquire started after A began: no whole loss excuses it.
        history.fenced[1].fence = 9;
        history.wipes[0].push(15);
        history.losses[1].push(15);
        assert_eq!(history.fence_order(&names).len(), 1);
        // B's acquire started before A began: a loss does.
        history.fenced[1].t0 = 5;
        assert!(history.fence_order(&names).is_empty());

        // A start from the clocks after a step back, once every master
        // that raised A's fence lost its counter.
        history.fenced[1].t0 = 20;
        history.steps.push(1);
        assert_eq!(history.fence_order(&names).len(), 1, "two still count");
        history.wipes[1].push(16);
        history.wipes[2].push(17);
        assert!(history.fence_order(&names).is_empty());
        history.steps.clear();
        assert_eq!(history.fence_order(&names).len(), 1, "no step back");

        // An old counter restored between them.
        history.breaks[2].push(25);
        assert!(history.fence_order(&names).is_empty());
        history.breaks[2][0] = 31;
        assert_eq!(history.fence_order(&names).len(), 1, "after B began");
    }
}
