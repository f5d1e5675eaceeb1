//! The checks of a call's arguments, made before anything is sent: one
//! set, which every front end (the simulator's client too) asks.

use std::time::{Duration, Instant};

use crate::client::{MAX_RESOURCE_LEN, MAX_TTL};
use crate::commands;
use crate::error::Error;
use crate::rules;

/// The longest TTL a client accepts and keeps on the masters, given the
/// restart guard's and fencing's (the same when both are on, as the
/// builder requires): a longer lock could outlive a quarantine or a fence
/// counter's repair.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn longest_ttl(restart_guard: Option<Duration>, fencing: Option<Duration>) -> Option<Duration> {
    restart_guard.or(fencing)
}

/// What a client's settings bound a call's arguments by.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct Limits {
    /// How long a round waits for the masters.
    pub request_timeout: Duration,
    /// The clock drift allowed, a fraction of the TTL.
    pub drift_factor: f64,
    /// The longest TTL ([`longest_ttl`]), if the restart guard or fencing
    /// is on.
    pub longest_ttl: Option<Duration>,
    /// How often one lock may be extended, if there is a limit.
    pub max_extensions: Option<u32>,
}

#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
impl Limits {
    /// Checks a TTL: the TTL in whole milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`], saying why.
    pub fn ttl(&self, ttl: Duration) -> Result<u64, Error> {
        let invalid = |reason| Err(Error::InvalidTtl { ttl, reason });
        if ttl > MAX_TTL {
            return invalid("longer than MAX_TTL (2^31 - 1 ms)");
        }
        let ttl_ms = ttl.as_millis() as u64;
        if ttl_ms == 0 {
            return invalid("shorter than 1 ms");
        }
        let whole = Duration::from_millis(ttl_ms);
        if whole <= self.request_timeout {
            return invalid(
                "it must be longer than the request timeout (Builder::request_timeout)",
            );
        }
        let drift = rules::drift(whole, self.drift_factor);
        if rules::validity(whole, self.request_timeout, drift).is_none() {
            return invalid(
                "too short: no validity would be left after the request timeout and the drift allowance (use a longer TTL or a shorter request timeout)",
            );
        }
        if self.longest_ttl.is_some_and(|longest| ttl > longest) {
            // Both rest on it: a longer lock (or extension) could outlive a
            // quarantine or a fence counter's repair.
            return invalid(
                "longer than the longest TTL given to Builder::restart_guard or fencing",
            );
        }
        Ok(ttl_ms)
    }

    /// Checks an acquire of `resource` for `ttl`: the TTL in milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResource`], [`Error::ReservedResource`],
    /// [`Error::InvalidTtl`].
    pub(crate) fn acquire(&self, resource: &[u8], ttl: Duration) -> Result<u64, Error> {
        check_resource(resource)?;
        self.ttl(ttl)
    }

    /// Checks an acquire of every one of `resources` for `ttl`, all or
    /// nothing, packing their names into `packed`: the TTL in
    /// milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidResources`] for none or more than
    /// [`commands::MAX_KEYS`], else as [`acquire`](Self::acquire).
    pub(crate) fn acquire_all<'r>(
        &self,
        resources: impl ExactSizeIterator<Item = &'r [u8]>,
        ttl: Duration,
        packed: &mut impl Extend<u8>,
    ) -> Result<u64, Error> {
        pack_names(resources, packed)?;
        self.ttl(ttl)
    }

    /// Checks an extend to `ttl` at `now` of a lock valid until
    /// `valid_until` and extended `extensions` times (the TTL apart: it
    /// still has validity left, and is below the limit on extensions):
    /// the TTL in milliseconds.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTtl`], [`Error::Expired`],
    /// [`Error::ExtensionLimit`].
    pub(crate) fn extend(
        &self,
        ttl: Duration,
        valid_until: Instant,
        extensions: u32,
        now: Instant,
    ) -> Result<u64, Error> {
        let ttl_ms = self.ttl(ttl)?;
        if now >= valid_until {
            return Err(Error::Expired);
        }
        match self.max_extensions {
            Some(limit) if extensions >= limit => Err(Error::ExtensionLimit { limit }),
            _ => Ok(ttl_ms),
        }
    }
}

/// Checks the names of a lock over several resources and packs them
/// into `packed`, in order.
///
/// # Errors
///
/// [`Error::InvalidResources`] for none or more than
/// `commands::MAX_KEYS`; [`Error::InvalidResource`] or
/// [`Error::ReservedResource`] for a bad name.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn pack_names<'r>(
    resources: impl ExactSizeIterator<Item = &'r [u8]>,
    packed: &mut impl Extend<u8>,
) -> Result<(), Error> {
    let count = resources.len();
    if count == 0 || count > commands::MAX_KEYS {
        return Err(Error::InvalidResources { count });
    }
    for resource in resources {
        check_resource(resource)?;
        commands::pack_key(packed, resource);
    }
    Ok(())
}

/// Checks a resource name: its length, and that it stays out of the
/// crate's own key space.
///
/// # Errors
///
/// [`Error::InvalidResource`], [`Error::ReservedResource`].
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub fn check_resource(resource: &[u8]) -> Result<(), Error> {
    if resource.is_empty() || resource.len() > MAX_RESOURCE_LEN {
        return Err(Error::InvalidResource {
            len: resource.len(),
        });
    }
    if resource.starts_with(commands::RESERVED_PREFIX.as_bytes()) {
        return Err(Error::ReservedResource);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Limits, MAX_RESOURCE_LEN, MAX_TTL, check_resource, longest_ttl, pack_names};
    use crate::commands::{MAX_KEYS, RESERVED_PREFIX};
    use crate::error::Error;

    fn limits(restart_guard: Option<u64>, fencing: Option<u64>) -> Limits {
        let secs = |s: Option<u64>| s.map(Duration::from_secs);
        Limits {
            request_timeout: Duration::from_millis(50),
            drift_factor: 0.01,
            longest_ttl: longest_ttl(secs(restart_guard), secs(fencing)),
            max_extensions: Some(2),
        }
    }

    /// The longest TTL bounds a lock whether the restart guard or fencing
    /// gave it.
    #[test]
    fn the_restart_guard_or_fencing_bounds_the_ttl() {
        let long = Duration::from_secs(20);
        for limits in [limits(Some(10), None), limits(None, Some(10))] {
            assert!(matches!(limits.ttl(long), Err(Error::InvalidTtl { .. })));
            assert_eq!(limits.ttl(Duration::from_secs(10)).ok(), Some(10_000));
        }
        assert_eq!(limits(None, None).ttl(long).ok(), Some(20_000));
    }

    #[test]
    fn a_ttl_must_leave_validity_after_the_timeout_and_drift() {
        let limits = limits(None, None);
        for ttl in [0, 50, 51] {
            let ttl = Duration::from_millis(ttl);
            assert!(matches!(limits.ttl(ttl), Err(Error::InvalidTtl { .. })));
        }
        assert!(limits.ttl(Duration::from_secs(1)).is_ok());
    }

    /// An extend is refused before anything is sent once the lock has
    /// expired or was extended as often as allowed.
    #[test]
    fn an_extend_is_refused_when_expired_or_at_its_limit() {
        let limits = limits(None, None);
        let now = crate::clock::now();
        let later = now + Duration::from_secs(1);
        let ttl = Duration::from_secs(1);
        assert_eq!(limits.extend(ttl, later, 1, now).ok(), Some(1_000));
        assert!(matches!(
            limits.extend(ttl, now, 0, now),
            Err(Error::Expired)
        ));
        assert!(matches!(
            limits.extend(ttl, later, 2, now),
            Err(Error::ExtensionLimit { limit: 2 })
        ));
    }

    #[test]
    fn several_resources_are_checked_and_packed() {
        let limits = limits(None, None);
        let ttl = Duration::from_secs(1);
        let mut packed = Vec::new();
        let names: [&[u8]; 2] = [b"a", b"bc"];
        assert!(
            limits
                .acquire_all(names.into_iter(), ttl, &mut packed)
                .is_ok()
        );
        assert_eq!(packed, b"\0\x01a\0\x02bc");
        let none: [&[u8]; 0] = [];
        assert!(matches!(
            limits.acquire_all(none.into_iter(), ttl, &mut Vec::new()),
            Err(Error::InvalidResources { count: 0 })
        ));
        let bad: [&[u8]; 2] = [b"a", b""];
        assert!(matches!(
            limits.acquire_all(bad.into_iter(), ttl, &mut Vec::new()),
            Err(Error::InvalidResource { len: 0 })
        ));
    }

    /// Each bound is inclusive: the largest TTL, the longest name and the
    /// most resources pass; one more fails.
    #[test]
    fn every_bound_takes_its_largest_value_and_refuses_one_more() {
        let limits = limits(None, None);
        assert!(limits.ttl(MAX_TTL).is_ok());
        let over = MAX_TTL + Duration::from_millis(1);
        assert!(matches!(limits.ttl(over), Err(Error::InvalidTtl { .. })));
        let longest = vec![b'r'; MAX_RESOURCE_LEN];
        assert!(check_resource(&longest).is_ok());
        let len = MAX_RESOURCE_LEN + 1;
        assert!(matches!(
            check_resource(&vec![b'r'; len]),
            Err(Error::InvalidResource { len: l }) if l == len
        ));
        let names: Vec<Vec<u8>> = (0..=MAX_KEYS).map(|i| i.to_string().into_bytes()).collect();
        let most = names[..MAX_KEYS].iter().map(Vec::as_slice);
        assert!(pack_names(most, &mut Vec::new()).is_ok());
        let count = MAX_KEYS + 1;
        assert!(matches!(
            pack_names(names.iter().map(Vec::as_slice), &mut Vec::new()),
            Err(Error::InvalidResources { count: c }) if c == count
        ));
    }

    /// An acquire checks its name, then its TTL.
    #[test]
    fn an_acquire_checks_its_name_and_its_ttl() {
        let limits = limits(None, None);
        let ttl = Duration::from_secs(1);
        assert_eq!(limits.acquire(b"orders", ttl).ok(), Some(1_000));
        let reserved = [RESERVED_PREFIX.as_bytes(), b"x"].concat();
        assert!(matches!(
            limits.acquire(&reserved, ttl),
            Err(Error::ReservedResource)
        ));
        assert!(matches!(
            limits.acquire(b"orders", Duration::ZERO),
            Err(Error::InvalidTtl { .. })
        ));
    }
}
