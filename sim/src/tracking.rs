//! Client tracking (`CLIENT TRACKING`, `CLIENT CACHING`): which
//! connections track which keys, and the invalidations written to them
//! when such a key changes.
//!
//! As Redis 7.0 does it, in its default mode and `OPTIN`: a connection
//! that tracks remembers the keys its read-only commands name (every read
//! by default; with `OPTIN`, only the command right after `CLIENT CACHING
//! YES`), whether the key exists or not. The table is the server's, by key
//! name across databases, as Redis's is. Any change of a remembered key
//! (written, deleted, its expiry changed, expired on access, evicted) writes
//! `invalidate [key]` to each connection that remembered it and forgets it
//! for all of them: tracking is one-shot, a connection reads the key again
//! to be told of its next change. With `NOLOOP`, a connection is not told
//! of its own change (nor of one by a script it runs), but forgets the key
//! all the same. `FLUSHALL` writes `invalidate` with a null to every
//! connection that tracks, and forgets every key.

use std::collections::{BTreeMap, BTreeSet};

use crate::pubsub::PubSub;
use crate::reply::Reply;

/// How one connection tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Only the command after `CLIENT CACHING YES` is remembered.
    pub(crate) optin: bool,
    /// The connection's own changes are not told to it.
    pub(crate) noloop: bool,
}

/// A master's tracking table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tracking {
    /// The connections that track, by id.
    clients: BTreeMap<u64, Mode>,
    /// Which connections remembered each key.
    keys: BTreeMap<Vec<u8>, BTreeSet<u64>>,
}

impl Tracking {
    /// How connection `client` tracks, if it does.
    pub(crate) fn mode(&self, client: u64) -> Option<Mode> {
        self.clients.get(&client).copied()
    }

    /// Connection `client` tracks, as `mode` says.
    pub(crate) fn enable(&mut self, client: u64, mode: Mode) {
        self.clients.insert(client, mode);
    }

    /// Connection `client` stops tracking (`CLIENT TRACKING OFF`, or it
    /// closed): it is told of nothing more.
    pub(crate) fn disable(&mut self, client: u64) {
        self.clients.remove(&client);
        self.keys.retain(|_, clients| {
            clients.remove(&client);
            !clients.is_empty()
        });
    }

    /// Connection `client` read `key`: it is told of its next change.
    pub(crate) fn remember(&mut self, client: u64, key: &[u8]) {
        if self.clients.contains_key(&client) {
            self.keys.entry(key.to_vec()).or_default().insert(client);
        }
    }

    /// `key` changed, by a command of connection `by` (`None`: by the
    /// server itself, an eviction): writes `invalidate [key]` to every
    /// connection that remembered it (but `by` if it tracks with
    /// `NOLOOP`), and forgets it.
    pub(crate) fn changed(&mut self, key: &[u8], by: Option<u64>, pubsub: &mut PubSub) {
        let Some(clients) = self.keys.remove(key) else {
            return;
        };
        for client in clients {
            let Some(mode) = self.clients.get(&client) else {
                continue;
            };
            if mode.noloop && by == Some(client) {
                continue;
            }
            let keys = Reply::Array(vec![Reply::bulk(key)]);
            pubsub.push(client, Reply::Push(vec![Reply::bulk("invalidate"), keys]));
        }
    }

    /// Every key went (`FLUSHALL`): writes `invalidate` with a null to
    /// every connection that tracks, and forgets every key.
    pub(crate) fn flushed(&mut self, pubsub: &mut PubSub) {
        for &client in self.clients.keys() {
            pubsub.push(
                client,
                Reply::Push(vec![Reply::bulk("invalidate"), Reply::Null]),
            );
        }
        self.keys.clear();
    }

    /// Every connection closed (a restart).
    pub(crate) fn clear(&mut self) {
        self.clients.clear();
        self.keys.clear();
    }
}
