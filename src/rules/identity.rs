//! Who a master is, and whether its grants can be trusted yet.
//!
//! At every (re)connect the handshake asks each master `INFO server
//! replication cluster`; with the restart guard on, it sets a marker key
//! once (`SET redlock-mio:marker <value> NX GET`); with the guard or
//! fencing on, it sets the deployment's longest TTL once
//! (`SET redlock-mio:longest-ttl <ms> NX GET`). From the answers:
//!
//! - a replica, a cluster-mode node, or the same server reached through two
//!   addresses (same `run_id`) is refused with a configuration error;
//! - a master that may have lost its keys since a lock was granted on it is
//!   **quarantined** for the longest TTL in use plus its drift: its grants
//!   do not count toward a quorum, its refusals do, releases still go to
//!   it. That is the Redlock "delayed restart" rule, applied by the client
//!   instead of the operator. A master is suspect when:
//!   - its `run_id` differs from the one this client saw before: it
//!     restarted (with persistence it may have kept its keys, but the
//!     client cannot tell);
//!   - the marker key is missing, or holds another value than the one this
//!     client saw on it before: the data set was flushed or lost, which
//!     `INFO` alone does not show;
//!   - on first sight, it has been up for less than the longest TTL, and
//!     its marker was set by a client: it may have restarted, empty, while
//!     another client held a lock on it, and the marker be one that a
//!     client set again since. A marker that no client wrote (its value
//!     does not start with `client:`) was provisioned by an operator
//!     before the master granted any lock: the master has kept it, so it
//!     has lost nothing since (a master keeps every write or loses its
//!     whole data set), and a short uptime means a restart that kept its
//!     data;
//! - a master that keeps another longest TTL than this client's refuses
//!   the client ([`NodeError::LongestTtl`]); one whose marker or longest TTL
//!   key holds something this crate never writes there (another type, a
//!   TTL that is not a number) is refused as foreign
//!   ([`NodeError::ForeignKey`]). The connection stays up, and every round
//!   but releases fails on that master.
//!
//! Everything here is pure: the link feeds in the parsed replies and the
//! time.

use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::commands::{LONGEST_TTL_KEY, MARKER_KEY};
use crate::rules::NodeError;

/// How every marker a client sets begins; any other value was provisioned
/// by an operator.
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub const CLIENT_MARKER: &[u8] = b"client:";

/// What `INFO server replication cluster` says of a server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Info {
    /// The server's `run_id` (40 hex digits), new at every start.
    pub(crate) run_id: Option<[u8; 40]>,
    /// `role:slave`.
    pub(crate) replica: bool,
    /// `cluster_enabled:1`.
    pub(crate) cluster: bool,
    /// `uptime_in_seconds`.
    pub(crate) uptime: Option<Duration>,
}

impl Info {
    /// Parses the text of an `INFO` reply: `field:value` lines; unknown
    /// fields, comments and malformed lines are ignored.
    pub(crate) fn parse(text: &[u8]) -> Info {
        let mut info = Info::default();
        for line in text.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let (field, value) = (&line[..colon], &line[colon + 1..]);
            match field {
                b"run_id" => {
                    info.run_id = <[u8; 40]>::try_from(value)
                        .ok()
                        .filter(|id| id.iter().all(u8::is_ascii_hexdigit));
                }
                b"role" => info.replica = value == b"slave",
                b"cluster_enabled" => info.cluster = value == b"1",
                b"uptime_in_seconds" => {
                    info.uptime = std::str::from_utf8(value)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(Duration::from_secs);
                }
                _ => {}
            }
        }
        info
    }
}

/// A marker value kept inline (this client's own are 31 bytes).
pub(crate) type MarkerValue = SmallVec<[u8; 32]>;

/// What a handshake found in a key it sets unless it exists (`SET NX GET`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// The key was missing; the client's value was set.
    Missing,
    /// The key held this value.
    Holds(MarkerValue),
    /// The key holds another type (`WRONGTYPE`).
    Foreign,
}

/// Why a master was quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suspicion {
    /// Its `run_id` changed: it restarted.
    Restarted,
    /// The marker key was missing or replaced: its data was lost or flushed.
    MarkerLost,
    /// First seen with an uptime below the longest TTL.
    RecentStart,
}

/// What one client remembers of one master across its connections.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sighting {
    run_id: Option<[u8; 40]>,
    marker: Option<MarkerValue>,
    quarantined_until: Option<Instant>,
    suspicions: u64,
    /// Why the master refuses this client, as the last handshake found.
    refusal: Option<NodeError>,
}

impl Sighting {
    /// A handshake completed at `now` with `info`; if the guard sent it,
    /// what the marker held (`ours` was set if it was missing); if the
    /// guard or fencing sent it, what the longest TTL key held and this
    /// client's value in milliseconds. With `guard` (the longest TTL in
    /// use plus its drift) a suspect master is quarantined until
    /// `now + guard`. Returns the suspicion, if any; the refusal, if any,
    /// is kept ([`refusal`](Self::refusal)).
    pub(crate) fn handle_handshake(
        &mut self,
        info: Option<&Info>,
        marker: Option<&Found>,
        ours: &[u8],
        longest: Option<(&Found, u64)>,
        guard: Option<Duration>,
        now: Instant,
    ) -> Option<Suspicion> {
        self.refusal = refusal(marker, longest);
        let first_sight = self.run_id.is_none() && self.marker.is_none();
        let mut suspicion = None;
        if let Some(run_id) = info.and_then(|i| i.run_id) {
            if self.run_id.is_some_and(|old| old != run_id) {
                suspicion = Some(Suspicion::Restarted);
            }
            self.run_id = Some(run_id);
        }
        let mut provisioned = false;
        let previous = match marker {
            Some(Found::Missing) => Some(None),
            Some(Found::Holds(value)) => Some(Some(value.as_slice())),
            // Refused as foreign: nothing to learn from it.
            Some(Found::Foreign) | None => None,
        };
        if let Some(previous) = previous {
            let now_holds: &[u8] = previous.unwrap_or(ours);
            let lost = match (&self.marker, previous) {
                (_, None) => true,
                (Some(known), Some(value)) => known.as_slice() != value,
                (None, Some(_)) => false,
            };
            if lost {
                suspicion.get_or_insert(Suspicion::MarkerLost);
            }
            provisioned = !now_holds.starts_with(CLIENT_MARKER);
            self.marker = Some(MarkerValue::from_slice(now_holds));
        }
        // An operator's marker found on first sight: the data set has
        // survived since before any lock, so a short uptime is a restart
        // that kept it.
        if first_sight && suspicion.is_none() && !provisioned {
            if let (Some(uptime), Some(guard)) = (info.and_then(|i| i.uptime), guard) {
                if uptime < guard {
                    suspicion = Some(Suspicion::RecentStart);
                }
            }
        }
        if let (Some(_), Some(guard)) = (suspicion, guard) {
            // The builder bounds the guard to an hour: no overflow.
            let until = crate::clock::after(now, guard);
            self.quarantined_until = Some(self.quarantined_until.map_or(until, |u| u.max(until)));
        }
        if suspicion.is_some() {
            self.suspicions += 1;
        }
        suspicion
    }

    /// Why the master refuses this client (every round but releases fails
    /// on it), as the last handshake found.
    pub(crate) fn refusal(&self) -> Option<&NodeError> {
        self.refusal.as_ref()
    }

    /// Whether the master's grants must not count at `now`.
    pub(crate) fn is_quarantined(&self, now: Instant) -> bool {
        self.quarantined_until.is_some_and(|until| now < until)
    }

    /// How many times the master was found suspect.
    pub(crate) fn suspicions(&self) -> u64 {
        self.suspicions
    }

    /// The `run_id` seen at the last handshake.
    pub(crate) fn run_id(&self) -> Option<&[u8; 40]> {
        self.run_id.as_ref()
    }
}

/// Why a master refuses a client, from what its handshake found in the
/// marker and the longest TTL key (with this client's value in
/// milliseconds).
fn refusal(marker: Option<&Found>, longest: Option<(&Found, u64)>) -> Option<NodeError> {
    if marker == Some(&Found::Foreign) {
        return Some(NodeError::ForeignKey(MARKER_KEY));
    }
    let (found, ours) = longest?;
    let deployed = match found {
        Found::Missing => return None,
        Found::Foreign => None,
        Found::Holds(value) => std::str::from_utf8(value)
            .ok()
            .filter(|text| text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0'))
            .and_then(|text| text.parse::<u64>().ok()),
    };
    match deployed {
        None => Some(NodeError::ForeignKey(LONGEST_TTL_KEY)),
        Some(ms) if ms == ours => None,
        Some(ms) => Some(NodeError::LongestTtl {
            deployed: Duration::from_millis(ms),
            configured: Duration::from_millis(ours),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &[u8] = b"# Server\r\nredis_version:7.0.15\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\nuptime_in_seconds:3600\r\n\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\r\n# Cluster\r\ncluster_enabled:0\r\n";

    fn held(value: &[u8]) -> Found {
        Found::Holds(MarkerValue::from_slice(value))
    }

    fn id(c: u8) -> [u8; 40] {
        [c; 40]
    }

    fn info(run: u8, uptime: u64) -> Info {
        Info {
            run_id: Some(id(run)),
            replica: false,
            cluster: false,
            uptime: Some(Duration::from_secs(uptime)),
        }
    }

    #[test]
    fn parses_the_fields_it_needs() {
        let parsed = Info::parse(INFO);
        assert_eq!(
            parsed.run_id.as_ref().map(|r| &r[..]),
            Some(&b"0123456789abcdef0123456789abcdef01234567"[..])
        );
        assert_eq!(parsed.uptime, Some(Duration::from_secs(3600)));
        assert!(!parsed.replica && !parsed.cluster);
        let replica = Info::parse(b"role:slave\r\ncluster_enabled:1\r\n");
        assert!(replica.replica && replica.cluster);
        assert_eq!(replica.run_id, None);
        // Garbage is ignored, not trusted.
        let junk = Info::parse(b"run_id:xyz\r\nuptime_in_seconds:-1\r\n:::\r\nnocolon\n");
        assert_eq!(junk, Info::default());
        let short = Info::parse(b"run_id:0123456789abcdef0123456789abcdef0123456z\r\n");
        assert_eq!(short.run_id, None);
    }

    #[test]
    fn a_new_run_id_quarantines_for_the_guard() {
        let t0 = Instant::now();
        let guard = Some(Duration::from_secs(10));
        let mut s = Sighting::default();
        assert_eq!(
            s.handle_handshake(Some(&info(1, 3600)), None, b"m", None, guard, t0),
            None
        );
        assert!(!s.is_quarantined(t0));
        // Reconnected to the same server: nothing.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            s.handle_handshake(Some(&info(1, 3601)), None, b"m", None, guard, t1),
            None
        );
        // Restarted.
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(
            s.handle_handshake(Some(&info(2, 0)), None, b"m", None, guard, t2),
            Some(Suspicion::Restarted)
        );
        assert!(s.is_quarantined(t2));
        assert!(s.is_quarantined(t2 + Duration::from_millis(9_999)));
        assert!(!s.is_quarantined(t2 + Duration::from_secs(10)));
        assert_eq!(s.run_id(), Some(&id(2)));
    }

    #[test]
    fn without_a_guard_nothing_is_quarantined() {
        let t0 = Instant::now();
        let mut s = Sighting::default();
        s.handle_handshake(Some(&info(1, 0)), None, b"m", None, None, t0);
        assert_eq!(
            s.handle_handshake(Some(&info(2, 0)), None, b"m", None, None, t0),
            Some(Suspicion::Restarted)
        );
        assert!(!s.is_quarantined(t0));
    }

    #[test]
    fn a_recent_start_quarantines_on_first_sight_only() {
        let t0 = Instant::now();
        let guard = Some(Duration::from_secs(30));
        let mut s = Sighting::default();
        assert_eq!(
            s.handle_handshake(Some(&info(1, 29)), None, b"m", None, guard, t0),
            Some(Suspicion::RecentStart)
        );
        assert!(s.is_quarantined(t0 + Duration::from_secs(29)));
        let mut old = Sighting::default();
        assert_eq!(
            old.handle_handshake(Some(&info(1, 30)), None, b"m", None, guard, t0),
            None
        );
        // Seen before: a short uptime with the same run_id is no news.
        assert_eq!(
            old.handle_handshake(Some(&info(1, 0)), None, b"m", None, guard, t0),
            None
        );
    }

    #[test]
    fn a_missing_or_replaced_marker_quarantines() {
        let t0 = Instant::now();
        let guard = Some(Duration::from_secs(10));
        // First sight, marker present: trusted, remembered.
        let mut s = Sighting::default();
        let seen = s.handle_handshake(
            Some(&info(1, 3600)),
            Some(&held(b"theirs")),
            b"ours",
            None,
            guard,
            t0,
        );
        assert_eq!(seen, None);
        // Same server, same marker.
        let same = s.handle_handshake(
            Some(&info(1, 3600)),
            Some(&held(b"theirs")),
            b"ours",
            None,
            guard,
            t0,
        );
        assert_eq!(same, None);
        // Flushed: the marker is gone, the run_id unchanged.
        assert_eq!(
            s.handle_handshake(
                Some(&info(1, 3600)),
                Some(&Found::Missing),
                b"ours",
                None,
                guard,
                t0
            ),
            Some(Suspicion::MarkerLost)
        );
        assert!(s.is_quarantined(t0));
        // Ours was set then; another value later means another flush.
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(
            s.handle_handshake(
                Some(&info(1, 3600)),
                Some(&held(b"ours")),
                b"ours",
                None,
                guard,
                t1
            ),
            None
        );
        assert_eq!(
            s.handle_handshake(
                Some(&info(1, 3600)),
                Some(&held(b"x")),
                b"ours",
                None,
                guard,
                t1
            ),
            Some(Suspicion::MarkerLost)
        );
        // A missing marker on first sight is suspect too: new or flushed.
        let mut fresh = Sighting::default();
        assert_eq!(
            fresh.handle_handshake(
                Some(&info(1, 3600)),
                Some(&Found::Missing),
                b"ours",
                None,
                guard,
                t0
            ),
            Some(Suspicion::MarkerLost)
        );
        assert_eq!(fresh.suspicions(), 1);
    }

    #[test]
    fn quarantine_is_never_shortened() {
        let t0 = Instant::now();
        let mut s = Sighting::default();
        s.handle_handshake(
            Some(&info(1, 0)),
            None,
            b"m",
            None,
            Some(Duration::from_secs(60)),
            t0,
        );
        s.handle_handshake(
            Some(&info(2, 0)),
            None,
            b"m",
            None,
            Some(Duration::from_secs(1)),
            t0,
        );
        assert!(s.is_quarantined(t0 + Duration::from_secs(59)));
        assert!(!s.is_quarantined(t0 + Duration::from_secs(60)));
    }

    #[test]
    fn an_operators_marker_spares_a_recent_start_a_clients_does_not() {
        let t0 = Instant::now();
        let guard = Some(Duration::from_secs(30));
        let fresh = info(1, 2);
        // Provisioned by an operator: the data set survived since.
        let mut s = Sighting::default();
        let seen = s.handle_handshake(
            Some(&fresh),
            Some(&held(b"1")),
            b"client:me",
            None,
            guard,
            t0,
        );
        assert_eq!(seen, None);
        assert!(!s.is_quarantined(t0));
        // Set by a client, maybe right after a restart that lost a lock.
        let mut s = Sighting::default();
        let seen = s.handle_handshake(
            Some(&fresh),
            Some(&held(b"client:other")),
            b"client:me",
            None,
            guard,
            t0,
        );
        assert_eq!(seen, Some(Suspicion::RecentStart));
        // Set by this client just now: missing, so lost or new.
        let mut s = Sighting::default();
        let seen = s.handle_handshake(
            Some(&fresh),
            Some(&Found::Missing),
            b"client:me",
            None,
            guard,
            t0,
        );
        assert_eq!(seen, Some(Suspicion::MarkerLost));
        // The operator's marker replaced later is a loss all the same.
        let mut s = Sighting::default();
        s.handle_handshake(
            Some(&fresh),
            Some(&held(b"1")),
            b"client:me",
            None,
            guard,
            t0,
        );
        let seen = s.handle_handshake(
            Some(&fresh),
            Some(&held(b"client:other")),
            b"client:me",
            None,
            guard,
            t0,
        );
        assert_eq!(seen, Some(Suspicion::MarkerLost));
    }

    #[test]
    fn a_foreign_key_or_another_longest_ttl_refuses_the_client() {
        let t0 = Instant::now();
        let guard = Some(Duration::from_secs(30));
        let up = info(1, 3600);
        let mut s = Sighting::default();
        s.handle_handshake(
            Some(&up),
            Some(&Found::Foreign),
            b"client:me",
            None,
            guard,
            t0,
        );
        assert_eq!(s.refusal(), Some(&NodeError::ForeignKey(MARKER_KEY)));
        for (found, refusal) in [
            (Found::Missing, None),
            (held(b"30000"), None),
            (
                held(b"60000"),
                Some(NodeError::LongestTtl {
                    deployed: Duration::from_secs(60),
                    configured: Duration::from_secs(30),
                }),
            ),
            (held(b"30s"), Some(NodeError::ForeignKey(LONGEST_TTL_KEY))),
            (held(b""), Some(NodeError::ForeignKey(LONGEST_TTL_KEY))),
            (
                held(b"030000"),
                Some(NodeError::ForeignKey(LONGEST_TTL_KEY)),
            ),
            (Found::Foreign, Some(NodeError::ForeignKey(LONGEST_TTL_KEY))),
        ] {
            s.handle_handshake(
                Some(&up),
                Some(&held(b"1")),
                b"client:me",
                Some((&found, 30_000)),
                guard,
                t0,
            );
            assert_eq!(s.refusal(), refusal.as_ref(), "{found:?}");
        }
        // Each handshake says afresh: fixed, the refusal is gone.
        s.handle_handshake(Some(&up), Some(&held(b"1")), b"client:me", None, guard, t0);
        assert_eq!(s.refusal(), None);
    }
}
