//! One database of a master: its keys, their values and their expiry, on
//! the master's own clock.
//!
//! Expiry follows Redis: a key whose expiry time `at` (ms) has passed
//! (`now > at`, so still there at `now == at`) is absent to every access,
//! and the access deletes it. There is no background expiry: a key no
//! command touches stays in memory, which nothing can observe, since every
//! command that could see it deletes it first.

use std::collections::{BTreeMap, VecDeque};

use crate::zset::Zset;

/// The master's wall clock during one command: microseconds since the
/// Unix epoch. A script sees the clock of its start throughout, as on a
/// real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Now(pub(crate) u64);

impl Now {
    /// Milliseconds since the epoch, the unit of key expiry.
    pub(crate) fn ms(self) -> i64 {
        // u64 microseconds / 1000 fits in i64.
        (self.0 / 1000) as i64
    }

    /// Whole seconds since the epoch.
    pub(crate) fn secs(self) -> u64 {
        self.0 / 1_000_000
    }
}

/// What a key holds.
///
/// The strings are what the lock's keys, the fence counter and the marks
/// hold; the sorted sets are the wait queues; lists stand for "a key of
/// another type" (`WRONGTYPE` where a script expects a string or a sorted
/// set). New types go here, each with its `TYPE` name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Str(Vec<u8>),
    List(VecDeque<Vec<u8>>),
    Zset(Zset),
}

impl Value {
    /// The name `TYPE` gives it.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Zset(_) => "zset",
        }
    }
}

/// A key of the wrong type for the command (`WRONGTYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrongType;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Value,
    /// When the key expires, in ms at the master's clock; `None` for never.
    expires_at: Option<i64>,
}

/// One database (`SELECT`): the keys, in order, so that a snapshot or a
/// debug listing is the same at every run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The keys changed since the master last took them
    /// ([`take_changed`](Self::take_changed)), for client tracking:
    /// written, deleted, expired on access, evicted. Empty between
    /// commands, so a snapshot never holds any.
    changed: Vec<Vec<u8>>,
}

impl Keyspace {
    /// The entry of `key` if it is live at `now`; an expired one is
    /// deleted first, as a real server does on access.
    fn live(&mut self, key: &[u8], now: Now) -> Option<&mut Entry> {
        let expired = self
            .entries
            .get(key)
            .and_then(|entry| entry.expires_at)
            .is_some_and(|at| now.ms() > at);
        if expired {
            self.entries.remove(key);
            self.changed.push(key.to_vec());
        }
        self.entries.get_mut(key)
    }

    /// The value of `key` if it is live at `now`, without deleting an
    /// expired one (for inspection).
    pub(crate) fn peek(&self, key: &[u8], now: Now) -> Option<&Value> {
        let entry = self.entries.get(key)?;
        let expired = entry.expires_at.is_some_and(|at| now.ms() > at);
        (!expired).then_some(&entry.value)
    }

    /// The value of `key`, if it is live.
    pub(crate) fn value(&mut self, key: &[u8], now: Now) -> Option<&Value> {
        self.live(key, now).map(|entry| &entry.value)
    }

    /// The string `key` holds: `Ok(None)` if it is missing, `WrongType` if
    /// it holds another type.
    pub(crate) fn string(&mut self, key: &[u8], now: Now) -> Result<Option<&[u8]>, WrongType> {
        match self.value(key, now) {
            None => Ok(None),
            Some(Value::Str(bytes)) => Ok(Some(bytes)),
            Some(_) => Err(WrongType),
        }
    }

    /// The list `key` holds, created empty if missing (the caller pushes
    /// into it at once: a server keeps no empty list).
    pub(crate) fn list(
        &mut self,
        key: &[u8],
        now: Now,
    ) -> Result<&mut VecDeque<Vec<u8>>, WrongType> {
        if self.live(key, now).is_none() {
            let value = Value::List(VecDeque::new());
            self.set(key, value, None);
        }
        // A key of another type is left as it was: no change to tell.
        if !matches!(
            self.entries.get(key),
            Some(Entry {
                value: Value::List(_),
                ..
            })
        ) {
            return Err(WrongType);
        }
        self.touch(key);
        match self.entries.get_mut(key).map(|entry| &mut entry.value) {
            Some(Value::List(list)) => Ok(list),
            _ => Err(WrongType),
        }
    }

    /// The sorted set `key` holds: `Ok(None)` if it is missing, `WrongType`
    /// if it holds another type.
    pub(crate) fn zset(&mut self, key: &[u8], now: Now) -> Result<Option<&mut Zset>, WrongType> {
        match self.live(key, now).map(|entry| &mut entry.value) {
            None => Ok(None),
            Some(Value::Zset(zset)) => Ok(Some(zset)),
            Some(_) => Err(WrongType),
        }
    }

    /// The sorted set `key` holds, created empty if missing (the caller
    /// adds to it at once: a server keeps no empty sorted set).
    pub(crate) fn zset_or_new(&mut self, key: &[u8], now: Now) -> Result<&mut Zset, WrongType> {
        if self.live(key, now).is_none() {
            self.set(key, Value::Zset(Zset::default()), None);
        }
        self.zset(key, now)?.ok_or(WrongType)
    }

    /// Sets `key` to `value`, replacing whatever it held, with the expiry
    /// `expires_at` (ms; `None` for none).
    pub(crate) fn set(&mut self, key: &[u8], value: Value, expires_at: Option<i64>) {
        self.entries
            .insert(key.to_vec(), Entry { value, expires_at });
        self.touch(key);
    }

    /// Records that `key` changed, for a change made through a reference
    /// the keyspace handed out (a sorted set's members).
    pub(crate) fn touch(&mut self, key: &[u8]) {
        self.changed.push(key.to_vec());
    }

    /// The keys changed since the last call, in the order they changed
    /// (a key changed twice is there twice).
    pub(crate) fn take_changed(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.changed)
    }

    /// Replaces the value of a live `key`, keeping its expiry (`INCR`,
    /// `SET KEEPTTL`); sets it without expiry if missing.
    pub(crate) fn replace(&mut self, key: &[u8], value: Value, now: Now) {
        match self.live(key, now) {
            Some(entry) => entry.value = value,
            None => self.set(key, value, None),
        }
        self.touch(key);
    }

    /// Deletes `key`; whether it was live.
    pub(crate) fn remove(&mut self, key: &[u8], now: Now) -> bool {
        let removed = self.live(key, now).is_some() && self.entries.remove(key).is_some();
        if removed {
            self.touch(key);
        }
        removed
    }

    /// The expiry of `key`: `None` if missing, `Some(None)` if it never
    /// expires.
    pub(crate) fn expiry(&mut self, key: &[u8], now: Now) -> Option<Option<i64>> {
        self.live(key, now).map(|entry| entry.expires_at)
    }

    /// Sets the expiry of a live `key`; whether it was live.
    pub(crate) fn set_expiry(&mut self, key: &[u8], at: Option<i64>, now: Now) -> bool {
        match self.live(key, now) {
            Some(entry) => {
                entry.expires_at = at;
                self.touch(key);
                true
            }
            None => false,
        }
    }

    /// Every key live at `now`, in order, with its expiry time (ms; `None`
    /// for none), without deleting an expired one (for inspection).
    pub(crate) fn live_keys(&self, now: Now) -> impl Iterator<Item = (&[u8], Option<i64>)> {
        self.entries
            .iter()
            .filter(move |(_, entry)| entry.expires_at.is_none_or(|at| now.ms() <= at))
            .map(|(key, entry)| (key.as_slice(), entry.expires_at))
    }

    /// Evicts the `pick`-th (modulo their number, in key order) of the
    /// keys live at `now` that a server may evict, those with an expiry
    /// only if `volatile`: the key, if there was one.
    pub(crate) fn evict(&mut self, volatile: bool, pick: u64, now: Now) -> Option<Vec<u8>> {
        let candidates = || {
            self.live_keys(now)
                .filter(|(_, expires)| !volatile || expires.is_some())
        };
        let n = candidates().count() as u64;
        let (key, _) = candidates().nth(pick.checked_rem(n)? as usize)?;
        let key = key.to_vec();
        self.entries.remove(&key);
        self.touch(&key);
        Some(key)
    }

    /// Deletes the keys expired at `now` without telling anyone: a master
    /// that loads an RDB file skips them.
    pub(crate) fn drop_expired(&mut self, now: Now) {
        self.entries
            .retain(|_, entry| entry.expires_at.is_none_or(|at| now.ms() <= at));
    }

    /// Deletes every key (`FLUSHALL`, a restart): the caller tells the
    /// tracking connections, all at once.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.changed.clear();
    }
}
