//! A kept lock's schedule, free of I/O: when the keeper extends, when it
//! stops, and what each extension's outcome and the release's mean for the
//! lock's standing.
//!
//! The keeping of a lock (`calls::Keeping`) drives it: it has its keeper
//! wait until [`Schedule::poll_wake`] (or until the holder asks for the
//! release), send the extensions and the release, and feeds what the
//! keeper sees back in with the time. The rules of the schedule are taken
//! here, so that each can be tested with instants made up by the test.

use std::time::{Duration, Instant};

use crate::clock::after;

/// The least period between extensions.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// What the keeper does on waking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Extend the lock now, then report the outcome
    /// ([`Schedule::handle_extended`]).
    Extend,
    /// Nothing to do: wait until [`Schedule::poll_wake`] again.
    Wait,
    /// The validity ran out: report the lock lost. Only the release is
    /// left.
    Lost,
}

/// What an extension came to, as the schedule needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extension {
    /// A quorum extended the lock.
    Extended,
    /// The lock is gone: a quorum said the token no longer owns the
    /// resource, or the lock had expired before the extension was sent.
    Gone,
    /// The client's limit on extensions is reached: nothing was sent, and
    /// no extension ever will be.
    Limit,
    /// The extension missed a quorum for any other reason (masters
    /// unreachable or too slow): it may pass at the next try.
    Failed,
}

/// How a kept lock stands.
///
/// `Lost` and `Released` are final: once either is reported, the standing
/// never changes again. More variants may come: match with a wildcard arm.
///
/// ```
/// use redlock_mio::Standing;
///
/// fn may_write(standing: Standing) -> bool {
///     match standing {
///         Standing::Held => true,
///         Standing::AtRisk => true, // still valid; get ready to stop
///         Standing::Lost | Standing::Released => false,
///         _ => false, // a standing added later: be safe
///     }
/// }
/// assert!(may_write(Standing::AtRisk));
/// assert!(!may_write(Standing::Lost) && Standing::Lost.is_final());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[must_use = "a final standing says whether the lock was lost or released"]
pub enum Standing {
    /// The last extension reached a quorum.
    Held,
    /// The last extension missed a quorum (masters unreachable or too
    /// slow): the lock still has validity left, and the keeper keeps
    /// trying, but the holder should get ready to stop.
    AtRisk,
    /// The lock is gone while the holder still counted on it: a quorum
    /// said its token no longer owns the resource (at an extension, or at
    /// the release), its validity ran out, or the hold limit was reached.
    /// Final.
    Lost,
    /// The holder released the lock ([`Keeper::release`](crate::Keeper::release), or the keeper
    /// dropped) while it was still held: the end of a normal holding, not
    /// a loss. Final. Reported once the release's round is over, whatever
    /// its outcome, except a quorum saying the token no longer owned the
    /// resource, which is [`Lost`](Self::Lost).
    Released,
}

impl Standing {
    /// Whether the standing is final ([`Lost`](Self::Lost) or
    /// [`Released`](Self::Released)): it never changes after that.
    pub fn is_final(self) -> bool {
        matches!(self, Standing::Lost | Standing::Released)
    }

    /// The standing as a number (kept in an atomic).
    pub(crate) fn code(self) -> u8 {
        match self {
            Standing::Held => 0,
            Standing::AtRisk => 1,
            Standing::Lost => 2,
            Standing::Released => 3,
        }
    }

    /// The standing of [`code`](Self::code).
    pub(crate) fn from_code(code: u8) -> Standing {
        match code {
            0 => Standing::Held,
            1 => Standing::AtRisk,
            2 => Standing::Lost,
            _ => Standing::Released,
        }
    }
}

/// The schedule of one kept lock, from the keeper's start to its release.
///
/// It keeps the lock's validity end as it was last passed in, so that it
/// can say when to wake without asking the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// Time between the starts of two extensions in a row.
    period: Duration,
    /// Past this instant the keeper no longer extends: the lock expires at
    /// the end of its last validity.
    hold_until: Option<Instant>,
    /// The end of the lock's validity, as last passed in.
    valid_until: Instant,
    /// When the keeper next extends (or, once it no longer extends, the
    /// validity's end).
    next: Instant,
    /// When the keeper last woke to extend: the next extension is counted
    /// from there, so that the time an extension takes does not delay the
    /// one after it.
    woke: Instant,
    /// The lock is lost: nothing is left to wake for but the release.
    lost: bool,
    /// The holder asked for the release: nothing is left to wake for.
    releasing: bool,
}

impl Schedule {
    /// The period between extensions: `asked`, or a third of the `ttl`
    /// each extension sets (which leaves two thirds of the validity to the
    /// retries of a failed one); never under a millisecond, so that a tiny
    /// TTL never makes the keeper spin.
    pub(crate) fn period(ttl: Duration, asked: Option<Duration>) -> Duration {
        asked.unwrap_or(ttl / 3).max(MIN_PERIOD)
    }

    /// A schedule that starts at `now`, for a lock valid until
    /// `valid_until`: the first extension is due a `period` from now, and
    /// none starts at or past `hold_until`.
    pub(crate) fn new(
        period: Duration,
        hold_until: Option<Instant>,
        valid_until: Instant,
        now: Instant,
    ) -> Schedule {
        Schedule {
            period,
            hold_until,
            valid_until,
            next: after(now, period),
            woke: now,
            lost: false,
            releasing: false,
        }
    }

    /// When the keeper must wake next: for the next extension, or for the
    /// validity's end if that comes first. `None` once the lock is lost
    /// (then only the holder's release wakes it) or being released.
    pub(crate) fn poll_wake(&self) -> Option<Instant> {
        let done = self.lost || self.releasing;
        (!done).then(|| self.next.min(self.valid_until))
    }

    /// The keeper woke at `now` (not for the release), the lock valid until
    /// `valid_until`: extend, wait on, or report the lock lost.
    ///
    /// Woken before the next extension is due (for the validity's end), or
    /// past the hold limit, it no longer extends and waits for the
    /// validity's end instead, which then says lost.
    pub(crate) fn handle_wake(&mut self, now: Instant, valid_until: Instant) -> Action {
        self.valid_until = valid_until;
        if self.lost || self.releasing {
            return Action::Wait;
        }
        if now >= valid_until {
            self.lost = true;
            return Action::Lost;
        }
        if now < self.next || self.hold_until.is_some_and(|end| now >= end) {
            self.next = valid_until;
            return Action::Wait;
        }
        self.woke = now;
        Action::Extend
    }

    /// The extension asked for by [`handle_wake`](Self::handle_wake) came
    /// to `outcome`; at `now`, the lock is valid until `valid_until`. Says
    /// what to report, if anything changes.
    ///
    /// After a failure the keeper tries again after a quarter period: the
    /// lock is at risk, or lost if its validity ran out meanwhile. After
    /// the limit on extensions it waits for the validity's end.
    pub(crate) fn handle_extended(
        &mut self,
        outcome: Extension,
        now: Instant,
        valid_until: Instant,
    ) -> Option<Standing> {
        self.valid_until = valid_until;
        match outcome {
            Extension::Extended => {
                self.next = after(self.woke, self.period);
                Some(Standing::Held)
            }
            Extension::Gone => {
                self.lost = true;
                Some(Standing::Lost)
            }
            Extension::Limit => {
                self.next = valid_until;
                None
            }
            Extension::Failed => {
                self.next = after(self.woke, self.period / 4);
                if now >= valid_until {
                    self.lost = true;
                    Some(Standing::Lost)
                } else {
                    Some(Standing::AtRisk)
                }
            }
        }
    }

    /// The lock's loss watch found it lost (fewer masters than a quorum
    /// can still hold its token): nothing is left to wake for but the
    /// release. Says what to report: lost, unless it was lost before or is
    /// being released.
    pub(crate) fn handle_lost(&mut self) -> Option<Standing> {
        if self.lost || self.releasing {
            return None;
        }
        self.lost = true;
        Some(Standing::Lost)
    }

    /// The holder asked for the release, at `now`, the lock valid until
    /// `valid_until`: the lock is lost if its validity ran out before the
    /// keeper woke for it. After this, the keeper never wakes on its own.
    pub(crate) fn handle_release(
        &mut self,
        now: Instant,
        valid_until: Instant,
    ) -> Option<Standing> {
        self.releasing = true;
        if self.lost || now < valid_until {
            return None;
        }
        self.lost = true;
        Some(Standing::Lost)
    }

    /// The release's round is over: the keeper's last word. The lock was
    /// released, unless it was lost before, or `gone` (a quorum said the
    /// token no longer owned the resource: it was gone before its
    /// release). A release that failed otherwise is still a release: the
    /// keys that it missed expire at their TTL.
    pub(crate) fn handle_released(&self, gone: bool) -> Standing {
        if self.lost || gone {
            Standing::Lost
        } else {
            Standing::Released
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Action, Extension, Schedule, Standing};

    const MS: Duration = Duration::from_millis(1);
    const PERIOD: Duration = Duration::from_millis(100);
    /// The validity a successful extension grants: three periods.
    const VALIDITY: Duration = Duration::from_millis(300);

    /// A schedule started at `t0` for a lock valid for [`VALIDITY`].
    fn started(t0: Instant, hold_until: Option<Instant>) -> Schedule {
        Schedule::new(PERIOD, hold_until, t0 + VALIDITY, t0)
    }

    /// A schedule started at `t0`, woken a period later for its first
    /// extension; and that wake.
    fn extending(t0: Instant) -> (Schedule, Instant) {
        let mut schedule = started(t0, None);
        let wake = t0 + PERIOD;
        assert_eq!(schedule.poll_wake(), Some(wake));
        assert_eq!(schedule.handle_wake(wake, t0 + VALIDITY), Action::Extend);
        (schedule, wake)
    }

    #[test]
    fn the_period_is_a_third_of_the_ttl_unless_asked_and_never_under_a_millisecond() {
        let ttl = Duration::from_secs(30);
        assert_eq!(Schedule::period(ttl, None), Duration::from_secs(10));
        assert_eq!(Schedule::period(ttl, Some(5 * MS)), 5 * MS);
        assert_eq!(Schedule::period(2 * MS, None), MS);
        assert_eq!(Schedule::period(ttl, Some(Duration::ZERO)), MS);
    }

    #[test]
    fn healthy_extensions_come_a_period_after_the_last_wake() {
        let t0 = Instant::now();
        let mut schedule = started(t0, None);
        assert_eq!(schedule.poll_wake(), Some(t0 + PERIOD));
        let mut wake = t0 + PERIOD;
        for _ in 0..3 {
            assert_eq!(schedule.handle_wake(wake, wake + 200 * MS), Action::Extend);
            // The extension took 20 ms: the next is counted from the wake.
            let end = wake + 20 * MS;
            assert_eq!(
                schedule.handle_extended(Extension::Extended, end, end + VALIDITY),
                Some(Standing::Held)
            );
            assert_eq!(schedule.poll_wake(), Some(wake + PERIOD));
            wake += PERIOD;
        }
    }

    #[test]
    fn the_validity_end_wakes_the_keeper_when_it_comes_before_the_next_extension() {
        let t0 = Instant::now();
        let end = t0 + 60 * MS;
        let mut schedule = Schedule::new(PERIOD, None, end, t0);
        assert_eq!(schedule.poll_wake(), Some(end));
        // An early wake, before the extension is due, with the validity
        // still running: no extension, the keeper waits for the end.
        assert_eq!(schedule.handle_wake(end - MS, end), Action::Wait);
        assert_eq!(schedule.poll_wake(), Some(end));
        assert_eq!(schedule.handle_wake(end, end), Action::Lost);
        assert_eq!(schedule.poll_wake(), None, "lost: only the release is left");
    }

    #[test]
    fn a_failed_extension_puts_the_lock_at_risk_and_is_retried_after_a_quarter_period() {
        let t0 = Instant::now();
        let (mut schedule, wake) = extending(t0);
        let end = wake + 30 * MS;
        assert_eq!(
            schedule.handle_extended(Extension::Failed, end, t0 + VALIDITY),
            Some(Standing::AtRisk)
        );
        let retry = wake + PERIOD / 4;
        assert_eq!(schedule.poll_wake(), Some(retry));
        // The retry passes: held again, on the period from its wake.
        assert_eq!(schedule.handle_wake(retry, t0 + VALIDITY), Action::Extend);
        assert_eq!(
            schedule.handle_extended(Extension::Extended, retry + MS, retry + VALIDITY),
            Some(Standing::Held)
        );
        assert_eq!(schedule.poll_wake(), Some(retry + PERIOD));
    }

    #[test]
    fn a_failed_extension_past_the_validity_loses_the_lock() {
        let t0 = Instant::now();
        let (mut schedule, wake) = extending(t0);
        // The failed extension capped the validity, which ran out meanwhile.
        let capped = wake + 10 * MS;
        assert_eq!(
            schedule.handle_extended(Extension::Failed, capped, capped),
            Some(Standing::Lost)
        );
        assert_eq!(schedule.poll_wake(), None);
    }

    #[test]
    fn a_lock_gone_at_an_extension_is_lost_and_never_extended_again() {
        let t0 = Instant::now();
        let (mut schedule, wake) = extending(t0);
        assert_eq!(
            schedule.handle_extended(Extension::Gone, wake + MS, wake),
            Some(Standing::Lost)
        );
        assert_eq!(schedule.poll_wake(), None);
        // Woken all the same (not for the release): nothing to do.
        let later = t0 + 10 * PERIOD;
        assert_eq!(schedule.handle_wake(later, later + VALIDITY), Action::Wait);
        assert_eq!(schedule.poll_wake(), None);
        assert_eq!(schedule.handle_release(later, wake), None, "already lost");
        assert_eq!(schedule.handle_released(false), Standing::Lost);
    }

    #[test]
    fn at_the_extension_limit_the_keeper_waits_for_the_validity_end() {
        let t0 = Instant::now();
        let (mut schedule, wake) = extending(t0);
        let end = t0 + VALIDITY;
        assert_eq!(schedule.handle_extended(Extension::Limit, wake, end), None);
        assert_eq!(schedule.poll_wake(), Some(end));
        assert_eq!(schedule.handle_wake(end - MS, end), Action::Wait);
        assert_eq!(schedule.handle_wake(end, end), Action::Lost);
        assert_eq!(schedule.poll_wake(), None);
    }

    #[test]
    fn past_the_hold_limit_the_keeper_stops_extending_and_the_validity_end_loses_the_lock() {
        let t0 = Instant::now();
        let hold_until = t0 + PERIOD + MS;
        let mut schedule = started(t0, Some(hold_until));
        // Before the limit: extended as usual.
        let wake = t0 + PERIOD;
        assert_eq!(schedule.handle_wake(wake, t0 + VALIDITY), Action::Extend);
        let end = wake + VALIDITY;
        assert_eq!(
            schedule.handle_extended(Extension::Extended, wake, end),
            Some(Standing::Held)
        );
        // At the limit (2 * PERIOD is past it): no extension, the end.
        let wake = t0 + 2 * PERIOD;
        assert_eq!(schedule.handle_wake(wake, end), Action::Wait);
        assert_eq!(schedule.poll_wake(), Some(end));
        assert_eq!(schedule.handle_wake(end, end), Action::Lost);
        assert_eq!(schedule.poll_wake(), None);
        // A wake at the limit itself does not extend either.
        let mut schedule = started(t0, Some(t0 + PERIOD));
        assert_eq!(
            schedule.handle_wake(t0 + PERIOD, t0 + VALIDITY),
            Action::Wait
        );
    }

    #[test]
    fn a_release_ends_in_released_unless_the_lock_was_gone() {
        let t0 = Instant::now();
        let end = t0 + VALIDITY;
        let mut schedule = started(t0, None);
        assert_eq!(schedule.handle_release(t0 + MS, end), None);
        assert_eq!(schedule.poll_wake(), None, "no wake after the release");
        assert_eq!(schedule.handle_wake(t0 + PERIOD, end), Action::Wait);
        assert_eq!(schedule.handle_released(false), Standing::Released);
        // A quorum said the token no longer owned the resource.
        assert_eq!(schedule.handle_released(true), Standing::Lost);
    }

    #[test]
    fn a_release_after_the_validity_ran_out_is_a_loss() {
        let t0 = Instant::now();
        let end = t0 + VALIDITY;
        let mut schedule = started(t0, None);
        // The keeper had not woken for the validity's end yet.
        assert_eq!(schedule.handle_release(end, end), Some(Standing::Lost));
        assert_eq!(schedule.handle_released(false), Standing::Lost);
    }

    /// Every standing, in order.
    const STANDINGS: [Standing; 4] = [
        Standing::Held,
        Standing::AtRisk,
        Standing::Lost,
        Standing::Released,
    ];

    /// The keeper keeps its standing in an atomic as a number: each
    /// standing comes back from its number as itself, or the holder would
    /// read another standing than the keeper set.
    #[test]
    fn each_standing_comes_back_from_its_number() {
        for standing in STANDINGS {
            assert_eq!(Standing::from_code(standing.code()), standing);
        }
    }

    /// The keeper changes nothing once the standing is final, and wakes
    /// whoever waits for a final one: a loss or a release is final, never
    /// a lock still held or at risk.
    #[test]
    fn only_a_loss_or_a_release_is_final() {
        let finals = STANDINGS.map(Standing::is_final);
        assert_eq!(finals, [false, false, true, true]);
    }
}
