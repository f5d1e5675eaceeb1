//! Client tracking (`CLIENT TRACKING`, `CLIENT CACHING`): which
//! connections track which keys, and the invalidations written to them
//! when such a key changes.
//!
//! As Redis 7.0 does it, in its default mode and `OPTIN`: a connection
//! that tracks remembers the keys its read-only commands name (every read
//! by default; with `OPTIN`, only the command right after `CLIENT CACHING
//! YES`), whether the key exists or not, and so do the read-only commands
//! its scripts call (under `OPTIN`, those of a script run right after
//! `CLIENT CACHING YES`). The table is the server's, by key name across
//! databases, as Redis's is. Any change of a remembered key (written,
//! deleted, its expiry changed, expired on access, evicted) writes
//! `invalidate [key]` to each connection that remembered it and still
//! tracks, and forgets the key for all of them: tracking is one-shot, a
//! connection reads the key again to be told of its next change. With
//! `NOLOOP`, a connection is not told of its own change (nor of one by a
//! script it runs), but forgets the key all the same. `FLUSHALL` writes
//! `invalidate` with a null to every connection that tracks, and forgets
//! every key.
//!
//! As on a server, `CLIENT TRACKING OFF` leaves the keys a connection
//! remembered in the table: turned on again, it is told of their next
//! change. A connection that tracks while it speaks RESP2 (without a
//! redirection, which the model lacks) remembers keys but is written
//! nothing: RESP2 has no pushes. An invalidation a connection's own
//! command causes is written after that command's reply (a server holds
//! it back until the command is done), after the messages the command
//! published to it.

use std::collections::{BTreeMap, BTreeSet};

use crate::pubsub::PubSub;
use crate::reply::{Protocol, Reply};

/// How one connection tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Only the command after `CLIENT CACHING YES` is remembered.
    pub(crate) optin: bool,
    /// The connection's own changes are not told to it.
    pub(crate) noloop: bool,
}

/// A connection that tracks.
#[derive(Debug, Clone, Copy)]
struct Tracker {
    mode: Mode,
    /// It speaks RESP3: only then is it written invalidations.
    resp3: bool,
}

/// A master's tracking table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tracking {
    /// The connections that track, by id.
    clients: BTreeMap<u64, Tracker>,
    /// Which connections remembered each key (those that stopped tracking
    /// since among them).
    keys: BTreeMap<Vec<u8>, BTreeSet<u64>>,
}

impl Tracking {
    /// How connection `client` tracks, if it does.
    pub(crate) fn mode(&self, client: u64) -> Option<Mode> {
        self.clients.get(&client).map(|tracker| tracker.mode)
    }

    /// Connection `client`, which speaks `protocol`, tracks as `mode`
    /// says, from now on (a mode it tracked with before is replaced).
    pub(crate) fn enable(&mut self, client: u64, mode: Mode, protocol: Protocol) {
        let resp3 = protocol == Protocol::Resp3;
        self.clients.insert(client, Tracker { mode, resp3 });
    }

    /// Connection `client` speaks `protocol` from now on (`HELLO`).
    pub(crate) fn set_protocol(&mut self, client: u64, protocol: Protocol) {
        if let Some(tracker) = self.clients.get_mut(&client) {
            tracker.resp3 = protocol == Protocol::Resp3;
        }
    }

    /// Connection `client` stops tracking (`CLIENT TRACKING OFF`, or it
    /// closed): it is told of nothing more until it tracks again. The
    /// keys it remembered stay in the table, as on a server.
    pub(crate) fn disable(&mut self, client: u64) {
        self.clients.remove(&client);
    }

    /// Connection `client` read `key`: it is told of its next change.
    pub(crate) fn remember(&mut self, client: u64, key: &[u8]) {
        if self.clients.contains_key(&client) {
            self.keys.entry(key.to_vec()).or_default().insert(client);
        }
    }

    /// `key` changed, by a command of connection `by` (`None`: by the
    /// server itself, an eviction): writes `invalidate [key]` to every
    /// connection that remembered it and tracks (but `by` if it tracks
    /// with `NOLOOP`), and forgets it.
    pub(crate) fn changed(&mut self, key: &[u8], by: Option<u64>, pubsub: &mut PubSub) {
        let Some(clients) = self.keys.remove(key) else {
            return;
        };
        for client in clients {
            let Some(tracker) = self.clients.get(&client) else {
                continue;
            };
            if tracker.mode.noloop && by == Some(client) {
                continue;
            }
            let keys = Reply::Array(vec![Reply::bulk(key)]);
            let push = Reply::Push(vec![Reply::bulk("invalidate"), keys]);
            Self::write(*tracker, client, by, push, pubsub);
        }
    }

    /// Every key went (`FLUSHALL`, by connection `by`): writes
    /// `invalidate` with a null to every connection that tracks (`by`
    /// too, whatever its mode), and forgets every key.
    pub(crate) fn flushed(&mut self, by: u64, pubsub: &mut PubSub) {
        for (&client, &tracker) in &self.clients {
            let push = Reply::Push(vec![Reply::bulk("invalidate"), Reply::Null]);
            Self::write(tracker, client, Some(by), push, pubsub);
        }
        self.keys.clear();
    }

    /// Writes `push` to `client`, if it speaks RESP3: after the reply of
    /// the command running if that is `client`'s own (`by`), else at once.
    fn write(tracker: Tracker, client: u64, by: Option<u64>, push: Reply, pubsub: &mut PubSub) {
        if !tracker.resp3 {
            return;
        }
        if by == Some(client) {
            pubsub.push_after_reply(client, push);
        } else {
            pubsub.push(client, push);
        }
    }

    /// Every connection closed (a restart).
    pub(crate) fn clear(&mut self) {
        self.clients.clear();
        self.keys.clear();
    }
}
