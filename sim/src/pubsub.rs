//! Pub/sub: which connection listens to which channels, and the pushes
//! written to each connection that its reader has not taken yet.
//!
//! Connections are known by their id (`HELLO`'s `id`). A connection that
//! closes is forgotten ([`PubSub::forget`]), as a server forgets the
//! subscriptions of a socket that closed; PUBLISH counts the connections
//! that listen, so a connection left behind would be counted.

use std::collections::{BTreeMap, BTreeSet};

use crate::reply::Reply;

/// The subscriptions of a master's connections, and what was published
/// to them.
#[derive(Debug, Clone, Default)]
pub(crate) struct PubSub {
    /// The channels of each connection that listens to any.
    channels: BTreeMap<u64, BTreeSet<Vec<u8>>>,
    /// Pushes written to a connection, in order, not yet taken.
    outbox: BTreeMap<u64, Vec<Reply>>,
    /// Pushes a connection's own command caused that a server writes
    /// only after that command's reply (invalidations of client
    /// tracking), in order, not yet taken.
    after_reply: BTreeMap<u64, Vec<Reply>>,
}

impl PubSub {
    /// Connection `client` listens to `channel` (again, maybe): how many
    /// channels it listens to now.
    pub(crate) fn subscribe(&mut self, client: u64, channel: &[u8]) -> usize {
        let channels = self.channels.entry(client).or_default();
        channels.insert(channel.to_vec());
        channels.len()
    }

    /// Connection `client` stops listening to `channel` (if it did): how
    /// many channels it listens to now.
    pub(crate) fn unsubscribe(&mut self, client: u64, channel: &[u8]) -> usize {
        let Some(channels) = self.channels.get_mut(&client) else {
            return 0;
        };
        channels.remove(channel);
        let left = channels.len();
        if left == 0 {
            self.channels.remove(&client);
        }
        left
    }

    /// The channels `client` listens to, in byte order.
    pub(crate) fn channels(&self, client: u64) -> impl Iterator<Item = &[u8]> {
        self.channels
            .get(&client)
            .into_iter()
            .flatten()
            .map(Vec::as_slice)
    }

    /// Whether `client` listens to any channel.
    pub(crate) fn listens(&self, client: u64) -> bool {
        self.channels.contains_key(&client)
    }

    /// Writes `message <channel> <message>` to every connection that
    /// listens to `channel`: how many do.
    pub(crate) fn publish(&mut self, channel: &[u8], message: &[u8]) -> i64 {
        let mut receivers = 0;
        for (client, channels) in &self.channels {
            if channels.contains(channel) {
                let push = Reply::Push(vec![
                    Reply::bulk("message"),
                    Reply::bulk(channel),
                    Reply::bulk(message),
                ]);
                self.outbox.entry(*client).or_default().push(push);
                receivers += 1;
            }
        }
        receivers
    }

    /// Writes `push` to connection `client` (an invalidation of client
    /// tracking).
    pub(crate) fn push(&mut self, client: u64, push: Reply) {
        self.outbox.entry(client).or_default().push(push);
    }

    /// Writes `push` to connection `client`, whose command running caused
    /// it, after that command's reply (an invalidation of a key it
    /// tracks).
    pub(crate) fn push_after_reply(&mut self, client: u64, push: Reply) {
        self.after_reply.entry(client).or_default().push(push);
    }

    /// The pushes written to `client` since the last call.
    pub(crate) fn take(&mut self, client: u64) -> Vec<Reply> {
        self.outbox.remove(&client).unwrap_or_default()
    }

    /// The pushes written to `client` to follow the reply of its command,
    /// since the last call.
    pub(crate) fn take_after_reply(&mut self, client: u64) -> Vec<Reply> {
        self.after_reply.remove(&client).unwrap_or_default()
    }

    /// Connection `client` closed: its subscriptions and unread pushes go.
    pub(crate) fn forget(&mut self, client: u64) {
        self.channels.remove(&client);
        self.outbox.remove(&client);
        self.after_reply.remove(&client);
    }

    /// Every connection closed (a restart).
    pub(crate) fn clear(&mut self) {
        self.channels.clear();
        self.outbox.clear();
        self.after_reply.clear();
    }
}
