//! An extend reported as a success leaves the lock validity: its new
//! `valid_until` is after the moment its client took the result, on that
//! client's clock. An extend that took longer than the validity it asked
//! for is no success, whatever a quorum answered.

use std::time::Instant;

/// Whether an extend reported as a success at `now` leaves validity
/// until `valid_until`.
pub(crate) fn leaves_validity(valid_until: Instant, now: Instant) -> bool {
    valid_until > now
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::leaves_validity;

    #[test]
    fn a_success_must_end_after_its_result_was_taken() {
        let now = Instant::now();
        let ms = Duration::from_millis(1);
        assert!(leaves_validity(now + ms, now));
        assert!(!leaves_validity(now, now));
        assert!(!leaves_validity(now, now + ms));
    }
}
