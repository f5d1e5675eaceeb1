//! The safety checker: every reported holding of a lock as a window on the
//! monotonic clock, and the proof that no two holdings of one resource
//! overlap.

use std::time::Instant;

use redlock_mio::TOKEN_LEN;

/// One reported holding of a resource.
#[derive(Debug, Clone, Copy)]
pub struct Holding {
    /// Which resource (an index the test chooses).
    pub resource: usize,
    /// Which client thread held it.
    pub thread: usize,
    /// The lock's token.
    pub token: [u8; TOKEN_LEN],
    /// Right after the lock call returned.
    pub start: Instant,
    /// The earlier of the lock's validity end and the moment right before
    /// the unlock call.
    pub end: Instant,
    /// The lock's fence, for a fenced client.
    pub fence: Option<u64>,
}

impl Holding {
    /// The holding of `lock` by `thread`, which began at `start` and ends
    /// now (or at the lock's validity end, if that came first).
    pub fn of(resource: usize, thread: usize, lock: &redlock_mio::Lock, start: Instant) -> Holding {
        Holding {
            resource,
            thread,
            token: *lock.token(),
            start,
            end: Instant::now().min(lock.valid_until()),
            fence: lock.fence(),
        }
    }

    /// "thread T (token …) held [from, to]", with times since `origin`.
    pub fn describe(&self, origin: Instant) -> String {
        format!(
            "thread {} (token {}, fence {:?}) held [{:?}, {:?}]",
            self.thread,
            hex(&self.token),
            self.fence,
            self.start.saturating_duration_since(origin),
            self.end.saturating_duration_since(origin)
        )
    }
}

/// Every pair of holdings of the same resource that overlap, each resource
/// in turn and in order of start. Back-to-back holdings (one ends when the
/// next starts) do not overlap.
pub fn overlaps(holdings: &[Holding]) -> Vec<(Holding, Holding)> {
    let mut sorted = holdings.to_vec();
    sorted.sort_by_key(|h| (h.resource, h.start));
    let mut found = Vec::new();
    let mut latest: Option<Holding> = None;
    for h in sorted {
        match latest {
            Some(prev) if prev.resource == h.resource => {
                if h.start < prev.end {
                    found.push((prev, h));
                }
                if h.end > prev.end {
                    latest = Some(h);
                }
            }
            _ => latest = Some(h),
        }
    }
    found
}

/// Every pair of fenced holdings of the same resource, next to each other
/// in order of start, whose fences do not strictly increase.
pub fn fence_order(holdings: &[Holding]) -> Vec<(Holding, Holding)> {
    let mut sorted: Vec<Holding> = holdings
        .iter()
        .filter(|h| h.fence.is_some())
        .copied()
        .collect();
    sorted.sort_by_key(|h| (h.resource, h.start));
    sorted
        .windows(2)
        .filter(|w| w[0].resource == w[1].resource && w[1].fence <= w[0].fence)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Panics, naming `what` and up to ten pairs, if two holdings of a
/// resource overlap or fences do not grow in the order holdings began
/// (times since `origin`).
pub fn assert_safe(holdings: &[Holding], origin: Instant, what: &str) {
    let described = |pairs: Vec<(Holding, Holding)>| -> Vec<String> {
        pairs
            .iter()
            .take(10)
            .map(|(a, b)| {
                format!(
                    "resource {}: {}, then {}",
                    a.resource,
                    a.describe(origin),
                    b.describe(origin)
                )
            })
            .collect()
    };
    let overlapping = overlaps(holdings);
    assert!(
        overlapping.is_empty(),
        "{what}: {} overlapping holdings: {:#?}",
        overlapping.len(),
        described(overlapping.clone())
    );
    let misordered = fence_order(holdings);
    assert!(
        misordered.is_empty(),
        "{what}: fences not growing in the order holdings began: {:#?}",
        described(misordered.clone())
    );
}
