//! Waiting for a contended lock: when the next attempt of a caller that
//! waits is due, free of I/O (the time and the random draws are passed in).
//!
//! A caller that waits is queued on the masters by its refused attempts
//! (see [`WAIT_ACQUIRE_SCRIPT`](crate::scripts::WAIT_ACQUIRE_SCRIPT)); a
//! release hands the lock to the first waiter in the queue and tells it.
//! The telling is a hint, never a grant: the waiter still wins the lock by
//! its own acquire round. What is decided here is the fallback, for a
//! waiter nobody tells: until the key that blocks it expires on enough
//! masters (a holder that crashed), or a retry delay, whichever the call's
//! terms allow.

use std::time::{Duration, Instant};

use super::{NodeState, Round, quorum};

/// What a waiter adds to a blocking key's expiry before it tries: a
/// server's `PTTL` is rounded to the millisecond.
const EXPIRY_MARGIN: Duration = Duration::from_millis(1);

/// The most a waiter adds on top, at random, so that waiters behind a
/// holder that crashed do not all arrive in the same microsecond (the
/// queue decides who wins; this only spreads the load).
const EXPIRY_JITTER: Duration = Duration::from_millis(1);

/// When enough of the keys that refused `round` (an acquire that waits)
/// expire for a quorum to be free, counted from the round's replies:
/// `None` if the refusals do not tell (keys without TTL, too few answers),
/// or if refusals are not what kept the quorum away.
pub(crate) fn free_in(round: &Round) -> Option<Duration> {
    let n = round.nodes().len();
    let refusing = round
        .nodes()
        .iter()
        .filter(|state| **state == NodeState::Refused)
        .count();
    // Masters that must let go before a quorum can be free.
    let needed = (quorum(n) + refusing).checked_sub(n).filter(|&k| k > 0)?;
    let mut expiries: smallvec::SmallVec<[Duration; 8]> =
        (0..n).filter_map(|node| round.expires_in(node)).collect();
    expiries.sort_unstable();
    expiries.get(needed - 1).copied()
}

/// The terms of a call that waits: a number of retries, or a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub enum Terms {
    /// Up to this many more attempts, each after at most a retry delay.
    Retries(u32),
    /// Attempts until this deadline; each must fit its whole request
    /// timeout before it.
    Deadline(Instant),
}

/// What a waiting caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Stop: return the last attempt's outcome.
    Stop,
    /// Wait until told (a release handed the lock over) or until this
    /// instant, then attempt again.
    Until(Instant),
}

/// Where a waiter may have entries in the masters' queues, after its
/// attempts: what decides if, and where, it must leave them when its call
/// ends ([`LEAVE_SCRIPT`](crate::scripts::LEAVE_SCRIPT)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Entries {
    /// The masters that may hold an entry of it after its attempts that
    /// ended, bit `i` for master `i`.
    masters: u64,
    /// A master past the 64th may hold one.
    beyond: bool,
    /// An attempt is under way: any master may queue it.
    attempting: bool,
    /// An attempt of it was refused or failed somewhere.
    contended: bool,
}

impl Entries {
    /// Whether a master may hold an entry: the call leaves the queues when
    /// it ends.
    pub(crate) fn queued(self) -> bool {
        self.attempting || self.masters != 0 || self.beyond
    }

    /// The masters that may hold an entry, bit `i` for master `i` (those
    /// past the 64th are not in it): where the call leaves the queues.
    pub(crate) fn masters(self) -> u64 {
        if self.attempting {
            u64::MAX
        } else {
            self.masters
        }
    }

    /// An attempt is about to be sent: until its round says otherwise, any
    /// master may queue the waiter (a call dropped meanwhile leaves).
    pub(crate) fn attempting(&mut self) {
        self.attempting = true;
    }

    /// An attempt ended as `round`; each master it reached holds an entry
    /// or not by what it answered, and one it never reached (it lagged
    /// behind) keeps what it held. A master that granted took the
    /// waiter's entries off. One still to answer when the round was
    /// decided may have refused it (and queued it) once the wait has met
    /// contention; before that, as on the uncontended path, it is taken to
    /// grant too, so that a lock won at the first attempt sends nothing
    /// more. (Should such a master refuse, its late refusal is read on
    /// the link, which leaves that queue at once once the wait is over:
    /// see `Link::leave_late`.)
    pub(crate) fn note(&mut self, round: &Round) {
        let reached = round.reached();
        let sent = |node: usize| node >= 64 || reached >> node & 1 == 1;
        let nodes = round.nodes();
        self.contended |= nodes.iter().enumerate().any(|(node, state)| {
            !matches!(state, NodeState::Ok | NodeState::Pending) && sent(node)
        });
        let mut beyond = false;
        for (node, state) in nodes.iter().enumerate().filter(|(node, _)| sent(*node)) {
            let queued = match state {
                NodeState::Ok => false,
                NodeState::Pending => self.contended,
                _ => true,
            };
            if node >= 64 {
                beyond |= queued;
            } else {
                self.masters = self.masters & !(1 << node) | u64::from(queued) << node;
            }
        }
        self.beyond = beyond;
        self.attempting = false;
    }
}

/// The attempts of one call that waits for a lock (`lock`, `lock_until`,
/// their async forms): after each failed attempt, whether and until when
/// to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pursuit {
    terms: Terms,
    request_timeout: Duration,
}

impl Pursuit {
    pub(crate) fn new(terms: Terms, request_timeout: Duration) -> Pursuit {
        Pursuit {
            terms,
            request_timeout,
        }
    }

    /// The deadline of the call, if it has one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.terms {
            Terms::Deadline(deadline) => Some(deadline),
            Terms::Retries(_) => None,
        }
    }

    /// An attempt failed at `now`. `retryable`: the error may pass (not a
    /// configuration error). `free_in`: when the keys that refused it
    /// expire ([`free_in`]), if the attempt was queued (a release will
    /// tell). `delay`: a retry delay drawn for this wait. `unit`: a random
    /// number in `[0, 1)` for the jitter on an expiry.
    ///
    /// A caller under a number of retries waits at most the retry delay,
    /// less when the blocking keys expire sooner, so that its documented
    /// bound holds. A caller with a deadline waits for the expiry when it
    /// knows it (a release tells it sooner), else the retry delay; its
    /// wait ends by the latest start that leaves an attempt its whole
    /// request timeout (an attempt started then ends past it, and is the
    /// last).
    pub(crate) fn after_failure(
        &mut self,
        retryable: bool,
        free_in: Option<Duration>,
        delay: Duration,
        unit: f64,
        now: Instant,
    ) -> Next {
        if !retryable {
            return Next::Stop;
        }
        let expiry = free_in.map(|d| {
            let jitter = EXPIRY_JITTER.mul_f64(unit.clamp(0.0, 1.0));
            d.saturating_add(EXPIRY_MARGIN).saturating_add(jitter)
        });
        match &mut self.terms {
            Terms::Retries(0) => Next::Stop,
            Terms::Retries(left) => {
                *left -= 1;
                let wait = expiry.map_or(delay, |e| e.min(delay));
                Next::Until(crate::clock::after(now, wait))
            }
            Terms::Deadline(deadline) => {
                let Some(latest) = deadline.checked_sub(self.request_timeout) else {
                    return Next::Stop;
                };
                if now >= latest {
                    return Next::Stop;
                }
                Next::Until(crate::clock::after(now, expiry.unwrap_or(delay)).min(latest))
            }
        }
    }

    /// The caller was told before its wait's end, at `now`: may it
    /// attempt now? (A deadline's last start may have passed.)
    pub(crate) fn may_attempt(&self, now: Instant) -> bool {
        match self.terms {
            Terms::Retries(_) => true,
            Terms::Deadline(deadline) => crate::clock::after(now, self.request_timeout) <= deadline,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Entries, Next, Pursuit, Terms, free_in};
    use crate::rules::{NodeError, Op, Reply, Round};

    const MS: Duration = Duration::from_millis(1);
    const TIMEOUT: Duration = Duration::from_millis(100);

    /// An acquire that waits over `n` masters, answered as `replies` say
    /// (`None`: no answer yet).
    fn answered(replies: &[Option<Reply>], t0: Instant) -> Round {
        let ttl = Duration::from_secs(10);
        let mut round = Round::new(Op::Acquire, replies.len(), ttl, 2 * MS, TIMEOUT, t0);
        for (node, reply) in replies.iter().enumerate() {
            if let Some(reply) = reply {
                round.handle_reply(node, *reply, t0);
            }
        }
        round
    }

    fn queued(ms: u64) -> Option<Reply> {
        Some(Reply::Queued {
            expires_in_ms: Some(ms),
        })
    }

    #[test]
    fn free_once_enough_blocking_keys_expired_for_a_quorum() {
        let t0 = Instant::now();
        // Three of five refuse: one of them must let go.
        let round = answered(
            &[
                queued(900),
                Some(Reply::Ok),
                queued(300),
                Some(Reply::Ok),
                queued(600),
            ],
            t0,
        );
        assert_eq!(free_in(&round), Some(300 * MS));
        // All five: three must.
        let all = answered(
            &[
                queued(900),
                queued(100),
                queued(300),
                queued(700),
                queued(600),
            ],
            t0,
        );
        assert_eq!(free_in(&all), Some(600 * MS));
        // A key without TTL never lets go: the others must.
        let forever = Some(Reply::Queued {
            expires_in_ms: None,
        });
        let round = answered(&[forever, queued(500), queued(200)], t0);
        assert_eq!(free_in(&round), Some(500 * MS));
        let round = answered(&[forever, forever, queued(200)], t0);
        assert_eq!(free_in(&round), None, "no quorum ever frees");
    }

    #[test]
    fn not_free_in_anything_when_refusals_are_not_what_kept_the_quorum_away() {
        let t0 = Instant::now();
        // One refusal of three, the rest unanswered: a quorum is still
        // possible without that key.
        let round = answered(&[queued(500), None, None], t0);
        assert_eq!(free_in(&round), None);
        // One refusal and a failure: the failure, not the key, kept it.
        let mut round = answered(&[queued(500), Some(Reply::Ok), None], t0);
        round.handle_failure(2, NodeError::Closed, t0);
        assert_eq!(free_in(&round), None);
        assert_eq!(free_in(&answered(&[], t0)), None);
    }

    #[test]
    fn entries_are_left_where_a_master_refused_or_may_have_once_contended() {
        let t0 = Instant::now();
        let mut entries = Entries::default();
        assert!(!entries.queued());
        entries.attempting();
        assert!(entries.queued(), "an attempt under way may queue anywhere");
        assert_eq!(entries.masters(), u64::MAX);
        // Won at the first attempt, one master still to answer: taken to
        // grant, as on the uncontended path (nothing more is sent).
        entries.note(&answered(&[Some(Reply::Ok), Some(Reply::Ok), None], t0));
        assert!(!entries.queued());
        // Refused on one master: queued there, and, contended now, maybe
        // on the one still to answer.
        entries.note(&answered(&[queued(5), Some(Reply::Ok), None], t0));
        assert_eq!((entries.queued(), entries.masters()), (true, 0b101));
        // Once contended, a master still to answer may have queued it.
        entries.note(&answered(&[Some(Reply::Ok), Some(Reply::Ok), None], t0));
        assert_eq!((entries.queued(), entries.masters()), (true, 0b100));
        // Every master answered and granted: they took the entries off.
        entries.note(&answered(&[Some(Reply::Ok); 3], t0));
        assert!(!entries.queued());
        // A failure counts as a refusal: the command may have been run.
        let mut round = answered(&[Some(Reply::Ok), Some(Reply::Ok), None], t0);
        round.handle_failure(2, NodeError::Closed, t0);
        let mut fresh = Entries::default();
        fresh.note(&round);
        assert_eq!((fresh.queued(), fresh.masters()), (true, 0b100));
        // A master the command never reached (lagging) holds what it
        // held: nothing at first, the entry of an attempt it refused later.
        let mut lagging = answered(&[Some(Reply::Ok), Some(Reply::Ok), None], t0);
        lagging.handle_failure(2, NodeError::Lagging, t0);
        let mut fresh = Entries::default();
        fresh.attempting();
        fresh.note(&lagging);
        assert!(!fresh.queued());
        fresh.note(&answered(
            &[Some(Reply::Ok), Some(Reply::Ok), queued(5)],
            t0,
        ));
        fresh.attempting();
        fresh.note(&lagging);
        assert_eq!((fresh.queued(), fresh.masters()), (true, 0b100));
    }

    /// Masters past the 64th have no bit in the mask of where the waiter
    /// may be queued (a leave goes to each of them whatever the mask
    /// says): a refusal from one of them alone still leaves the call
    /// queued, so that its leave is sent; a grant there takes it off.
    #[test]
    fn a_refusal_past_the_64th_master_alone_keeps_the_call_queued() {
        let t0 = Instant::now();
        let mut replies = vec![Some(Reply::Ok); 65];
        replies[64] = queued(5);
        let mut entries = Entries::default();
        entries.note(&answered(&replies, t0));
        assert_eq!((entries.queued(), entries.masters()), (true, 0));
        entries.note(&answered(&[Some(Reply::Ok); 65], t0));
        assert!(!entries.queued());
    }

    #[test]
    fn retries_stop_when_spent_and_wait_at_most_the_retry_delay() {
        let now = Instant::now();
        let delay = 100 * MS;
        let mut pursuit = Pursuit::new(Terms::Retries(2), TIMEOUT);
        assert_eq!(pursuit.deadline(), None);
        assert!(pursuit.may_attempt(now));
        // A key that expires sooner: its expiry, a margin and the jitter.
        assert_eq!(
            pursuit.after_failure(true, Some(30 * MS), delay, 0.5, now),
            Next::Until(now + 30 * MS + MS + MS / 2)
        );
        // One that expires later: the retry delay.
        assert_eq!(
            pursuit.after_failure(true, Some(500 * MS), delay, 0.5, now),
            Next::Until(now + delay)
        );
        assert_eq!(
            pursuit.after_failure(true, None, delay, 0.5, now),
            Next::Stop,
            "two retries spent"
        );
        let mut pursuit = Pursuit::new(Terms::Retries(5), TIMEOUT);
        assert_eq!(
            pursuit.after_failure(false, None, delay, 0.5, now),
            Next::Stop,
            "an error that cannot pass"
        );
        // The jitter's draw is clamped to [0, 1].
        assert_eq!(
            pursuit.after_failure(true, Some(30 * MS), delay, 7.0, now),
            Next::Until(now + 32 * MS)
        );
        assert_eq!(
            pursuit.after_failure(true, Some(30 * MS), delay, -1.0, now),
            Next::Until(now + 31 * MS)
        );
    }

    #[test]
    fn a_deadline_waits_for_the_expiry_up_to_the_last_start_that_fits() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(1);
        let latest = deadline - TIMEOUT;
        let mut pursuit = Pursuit::new(Terms::Deadline(deadline), TIMEOUT);
        assert_eq!(pursuit.deadline(), Some(deadline));
        // No expiry known: the retry delay.
        assert_eq!(
            pursuit.after_failure(true, None, 50 * MS, 0.0, now),
            Next::Until(now + 50 * MS)
        );
        // A known expiry, however far past the retry delay.
        assert_eq!(
            pursuit.after_failure(true, Some(400 * MS), 50 * MS, 0.0, now),
            Next::Until(now + 401 * MS)
        );
        // Never past the last start that leaves a whole request timeout.
        assert_eq!(
            pursuit.after_failure(true, Some(5_000 * MS), 50 * MS, 0.0, now),
            Next::Until(latest)
        );
        assert_eq!(
            pursuit.after_failure(true, None, 50 * MS, 0.0, latest - MS),
            Next::Until(latest)
        );
        assert_eq!(
            pursuit.after_failure(true, None, 50 * MS, 0.0, latest),
            Next::Stop
        );
        assert_eq!(
            pursuit.after_failure(false, None, 50 * MS, 0.0, now),
            Next::Stop
        );
        // Told early: an attempt may start while it fits before the deadline.
        assert!(pursuit.may_attempt(latest));
        assert!(!pursuit.may_attempt(latest + MS));
        // A deadline closer than a request timeout to the clock's origin.
        let mut never = Pursuit::new(Terms::Deadline(now), Duration::MAX);
        assert_eq!(never.after_failure(true, None, MS, 0.0, now), Next::Stop);
    }
}
