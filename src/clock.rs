//! The client's clock: a monotonic clock that keeps counting while the
//! host is suspended, where the platform has one.
//!
//! [`Instant`] is `CLOCK_MONOTONIC` on Linux, which stops while the host or
//! VM is suspended: a lock granted before a suspend would claim, after the
//! resume, the validity it had when the host went to sleep, although the
//! masters' TTLs ran on. Everything that decides with time (round starts,
//! validity, deadlines, the keeper's schedule) reads [`now`] instead.
//!
//! On Linux and Android [`now`] follows `CLOCK_BOOTTIME`, which counts
//! suspend: it is an [`Instant`] taken once, moved on by how far
//! `CLOCK_BOOTTIME` has moved since. One clock read per call, as
//! `Instant::now()` costs (both are served by the vDSO). Elsewhere it is
//! `Instant::now()`, and a suspend is not counted (see the crate's
//! guarantees).
//!
//! Unit tests can move the clock on by hand ([`tests::skip`]) to play a
//! suspend.

use std::time::{Duration, Instant};

/// Now, on the client's clock.
#[inline]
pub(crate) fn now() -> Instant {
    let now = imp::now();
    #[cfg(test)]
    let now = now + tests::skipped();
    now
}

/// `now + d`, or `now` if that is beyond what an [`Instant`] can hold
/// (unreachable with the builder's ranges; never a panic).
pub(crate) fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now)
}

/// `at`, an instant the caller took from [`Instant::now`] (a deadline),
/// on the client's clock.
pub(crate) fn from_std(at: Instant) -> Instant {
    at.checked_add(suspended()).unwrap_or(at)
}

/// `at`, on the client's clock, as an instant of [`Instant::now`]'s, for
/// the caller.
pub(crate) fn to_std(at: Instant) -> Instant {
    at.checked_sub(suspended()).unwrap_or(at)
}

/// How far the client's clock is ahead of [`Instant::now`]: the time the
/// host has spent suspended since the client's clock started, to the
/// nearest millisecond. Without a suspend the two clocks differ only by the
/// nanoseconds between their reads, which this rounds away, so that an
/// instant converted twice is the same instant.
fn suspended() -> Duration {
    let (ours, std) = (now(), Instant::now());
    let ahead = ours.saturating_duration_since(std) + Duration::from_micros(500);
    Duration::from_millis(u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod imp {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// The clock's origin: an `Instant`, and `CLOCK_BOOTTIME` read at the
    /// same moment.
    static ORIGIN: OnceLock<(Instant, Duration)> = OnceLock::new();

    pub(super) fn now() -> Instant {
        let &(at, boot) = ORIGIN.get_or_init(|| (Instant::now(), boottime()));
        // CLOCK_BOOTTIME never goes back; saturate all the same rather
        // than panic on a platform bug.
        at + boottime().saturating_sub(boot)
    }

    /// `CLOCK_BOOTTIME`, or zero if the kernel refuses it (it cannot on
    /// any Linux since 2.6.39).
    #[allow(unsafe_code, reason = "the one call std has no safe form of")]
    fn boottime() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call's
        // duration, and CLOCK_BOOTTIME is a valid clock id.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        if rc != 0 {
            return Duration::ZERO;
        }
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
        Duration::new(secs, nanos)
    }

    #[cfg(test)]
    pub(super) fn boot() -> Duration {
        boottime()
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod imp {
    use std::time::Instant;

    pub(super) fn now() -> Instant {
        Instant::now()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    thread_local! {
        static SKIPPED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// Moves this thread's clock on by `by`, as a suspend of the host
    /// would.
    pub(crate) fn skip(by: Duration) {
        SKIPPED.with(|s| s.set(s.get() + by));
    }

    pub(super) fn skipped() -> Duration {
        SKIPPED.with(Cell::get)
    }

    #[test]
    fn the_clock_never_goes_back() {
        let mut last = super::now();
        for _ in 0..1000 {
            let now = super::now();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn a_skip_moves_the_clock_on() {
        let before = super::now();
        skip(Duration::from_secs(3600));
        let after = super::now();
        assert!(after.duration_since(before) >= Duration::from_secs(3600));
    }

    #[test]
    fn instants_move_between_the_clocks() {
        let later = Instant::now() + Duration::from_secs(30);
        assert_eq!(super::from_std(later), later, "no suspend, no shift");
        skip(Duration::from_secs(5));
        let ours = super::from_std(later);
        assert_eq!(ours.duration_since(later), Duration::from_secs(5));
        assert_eq!(super::to_std(ours), later);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_clock_follows_boottime() {
        let (b0, t0) = (super::imp::boot(), super::now());
        let (t1, b1) = (super::now(), super::imp::boot());
        // t1 - t0 is within the boottime interval that encloses both reads.
        assert!(t1.duration_since(t0) <= b1 - b0);
    }
}
