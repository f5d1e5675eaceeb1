//! The clocks: the simulation's global time in nanoseconds, and each
//! process's own clock, which runs at its own rate (and, for a master's
//! wall clock, may be stepped).

use std::time::{Duration, Instant};

const MILLION: i128 = 1_000_000;

/// The global time `t` as a process whose clock runs `ppm` parts per
/// million fast (slow if negative) counts it, from `offset` ns.
fn scaled(t: u64, offset: u64, ppm: i64) -> u64 {
    let t = i128::from(t);
    let counted = i128::from(offset) + t + t * i128::from(ppm) / MILLION;
    counted.max(0) as u64
}

/// A client's monotonic clock (the `Instant`s its core sees) and its wall
/// clock (the place of its waiters in the masters' queues).
#[derive(Debug, Clone)]
pub(crate) struct ClientClock {
    base: Instant,
    offset: u64,
    ppm: i64,
    /// Its wall clock at global time 0, in microseconds since the epoch.
    wall_us: u64,
}

impl ClientClock {
    pub(crate) fn new(base: Instant, offset: u64, ppm: i64, wall_us: u64) -> ClientClock {
        ClientClock {
            base,
            offset,
            ppm,
            wall_us,
        }
    }

    /// Its clock at global time `t`.
    pub(crate) fn local(&self, t: u64) -> Instant {
        self.base + Duration::from_nanos(scaled(t, self.offset, self.ppm))
    }

    /// The first global time at which its clock reads `at` or later.
    pub(crate) fn global(&self, at: Instant) -> u64 {
        let target = at.saturating_duration_since(self.base).as_nanos() as u64;
        if target <= self.offset {
            return 0;
        }
        let guess = i128::from(target - self.offset) * MILLION / (MILLION + i128::from(self.ppm));
        let mut t = guess.max(0) as u64;
        while scaled(t, self.offset, self.ppm) < target {
            t += 1;
        }
        while t > 0 && scaled(t - 1, self.offset, self.ppm) >= target {
            t -= 1;
        }
        t
    }

    /// Its wall clock at global time `t`, in microseconds since the epoch.
    pub(crate) fn wall_us(&self, t: u64) -> u64 {
        self.wall_us + scaled(t, 0, self.ppm) / 1000
    }
}

/// A master's wall clock: microseconds since the epoch, at its own rate,
/// moved by steps.
#[derive(Debug, Clone)]
pub(crate) struct MasterClock {
    epoch_us: u64,
    ppm: i64,
    /// The steps so far, in microseconds.
    step_us: i64,
}

impl MasterClock {
    pub(crate) fn new(epoch_us: u64, ppm: i64) -> MasterClock {
        MasterClock {
            epoch_us,
            ppm,
            step_us: 0,
        }
    }

    /// Its reading at global time `t`.
    pub(crate) fn now_us(&self, t: u64) -> u64 {
        let us = self.epoch_us + scaled(t, 0, self.ppm) / 1000;
        us.saturating_add_signed(self.step_us)
    }

    /// Moves it by `us` microseconds (back if negative).
    pub(crate) fn step(&mut self, us: i64) {
        self.step_us += us;
    }

    /// How much longer than `d` of its own time may pass in global time.
    pub(crate) fn global_len(&self, d: Duration) -> Duration {
        if self.ppm >= 0 {
            return d;
        }
        let ns = d.as_nanos() as i128 * MILLION / (MILLION + i128::from(self.ppm)) + 1;
        Duration::from_nanos(ns as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_clock_maps_back_to_the_first_global_time_it_reads() {
        let base = Instant::now();
        for ppm in [-4000, 0, 3999] {
            let clock = ClientClock::new(base, 123_456, ppm, 0);
            for t in [0u64, 1, 999, 1_000_000_007, 77_777_777_777] {
                let at = clock.local(t);
                let g = clock.global(at);
                assert!(g <= t, "{ppm} {t} {g}");
                assert!(clock.local(g) >= at);
                assert!(g == 0 || clock.local(g - 1) < at);
            }
        }
    }
}
