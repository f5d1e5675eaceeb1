//! A sorted set: members ordered by score, then by their bytes (as
//! `memcmp` orders them), as Redis keeps one.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// A member's score: a double, never NaN (`ZADD` refuses one) and never
/// a negative zero (read as zero), so that its total order is the
/// numeric one.
#[derive(Debug, Clone, Copy)]
struct Score(f64);

impl PartialEq for Score {
    fn eq(&self, other: &Score) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Score) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Score) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One sorted set. It is never kept empty: the command that takes its
/// last member deletes the key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Zset {
    scores: BTreeMap<Vec<u8>, Score>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

impl Zset {
    /// Members (`ZCARD`).
    pub(crate) fn len(&self) -> usize {
        self.scores.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// The score of `member` (`ZSCORE`).
    pub(crate) fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).map(|score| score.0)
    }

    /// Sets the score of `member` (not NaN), adding it if new.
    pub(crate) fn insert(&mut self, member: &[u8], score: f64) {
        let score = Score(score + 0.0);
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(old, member.to_vec()));
        }
        self.order.insert((score, member.to_vec()));
    }

    /// Takes `member` out; whether it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(score) => self.order.remove(&(score, member.to_vec())),
            None => false,
        }
    }

    /// The rank of `member` (`ZRANK`): how many members come before it.
    pub(crate) fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = *self.scores.get(member)?;
        Some(self.order.range(..(score, member.to_vec())).count())
    }

    /// The members from rank `start` to rank `stop`, both included, in
    /// order (`reverse`: from the highest); a negative rank counts from
    /// the end, as `ZRANGE` reads it.
    pub(crate) fn range(&self, start: i64, stop: i64, reverse: bool) -> Vec<(&[u8], f64)> {
        let len = self.len() as i64;
        let start = if start < 0 { start + len } else { start }.max(0);
        let stop = if stop < 0 { stop + len } else { stop }.min(len - 1);
        if start > stop || start >= len {
            return Vec::new();
        }
        let (skip, take) = (start as usize, (stop - start + 1) as usize);
        let members = self.order.iter().map(|(score, m)| (m.as_slice(), score.0));
        if reverse {
            members.rev().skip(skip).take(take).collect()
        } else {
            members.skip(skip).take(take).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Zset;

    #[test]
    fn members_order_by_score_then_bytes() {
        let mut zset = Zset::default();
        for (member, score) in [(&b"b"[..], 1.0), (b"a", 1.0), (b"ab", 1.0), (b"z", -1.0)] {
            zset.insert(member, score);
        }
        zset.insert(b"z", 2.0);
        let members: Vec<&[u8]> = zset
            .range(0, -1, false)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        assert_eq!(members, [&b"a"[..], b"ab", b"b", b"z"]);
        assert_eq!(zset.range(-2, 100, true), [(&b"ab"[..], 1.0), (b"a", 1.0)]);
        assert!(zset.range(3, 1, false).is_empty());
        assert!(zset.remove(b"a") && !zset.remove(b"a"));
        assert_eq!(zset.len(), 3);
    }
}
