//! The ids of the rounds in flight and of the waits, two spaces of ids
//! made the same way by their tables (`flights`): a slot's index in the
//! low 16 bits, a sequence above, so that an id is never reused. Each is a
//! type of its own, so that a wait's id never names a round, nor the
//! reverse; both are a `u64` at run time.

/// Bits of an id that hold its slot's index.
pub(crate) const INDEX_BITS: u32 = 16;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// The id of a round in flight: its slot's index in the low 16 bits, a
/// sequence above, so that an id is never reused and a late outcome for an
/// ended round finds no round. Apart from `WaitId`s, which are made the
/// same way in a table of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct RoundId(u64);

/// The id of a wait (a caller waiting to be told, see `flights::Waits`): made as
/// a [`RoundId`] is, in the table of waits. It is what the masters keep in
/// their queue entries and publish when they hand the lock over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct WaitId(u64);

/// The id of a watch over one held key (see `flights::Watches`): a
/// sequence, never reused while the client lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(not(feature = "sim"), allow(unreachable_pub))]
pub struct WatchId(pub u64);

impl RoundId {
    /// The id of no round: a free slot's.
    pub(crate) const FREE: RoundId = RoundId(0);

    pub(crate) fn new(seq: u64, index: u64) -> RoundId {
        RoundId((seq << INDEX_BITS) | index)
    }

    /// Its slot's index.
    pub(crate) fn index(self) -> usize {
        (self.0 & INDEX_MASK) as usize
    }

    /// The id as a number (an embedded client's ticket).
    pub(crate) fn get(self) -> u64 {
        self.0
    }
}

// In hexadecimal, as traces show ids: the slot's index in the last four
// digits.
impl std::fmt::LowerHex for RoundId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::LowerHex::fmt(&self.0, f)
    }
}

impl WaitId {
    /// The id of no wait: a free slot's.
    pub(crate) const FREE: WaitId = WaitId(0);

    pub(crate) fn new(seq: u64, index: u64) -> WaitId {
        WaitId((seq << INDEX_BITS) | index)
    }

    /// The id a master sent back (in a wake-up); it names a wait only if
    /// that wait is still in its slot.
    pub(crate) const fn from_wire(id: u64) -> WaitId {
        WaitId(id)
    }

    /// Its slot's index.
    pub(crate) fn index(self) -> usize {
        (self.0 & INDEX_MASK) as usize
    }

    /// The id as sent to the masters (in a waiting acquire's arguments).
    pub(crate) fn get(self) -> u64 {
        self.0
    }
}

#[cfg(any(test, feature = "fuzzing"))]
impl RoundId {
    /// Round id `id` as a number, for the tests and the fuzz harnesses
    /// that make up their rounds.
    pub(crate) fn from_raw(id: u64) -> RoundId {
        RoundId(id)
    }
}
