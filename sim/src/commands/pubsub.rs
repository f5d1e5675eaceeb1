//! The pub/sub commands: `SUBSCRIBE` and `UNSUBSCRIBE`, which the client's
//! handshake and other clients send, and `PUBLISH`, which the scripts'
//! hand-off calls. Each channel a `SUBSCRIBE` or `UNSUBSCRIBE` names is
//! confirmed by a push of its own (`<kind> <channel> <channels left>`),
//! which is the command's whole reply.

use super::Ctx;
use crate::reply::Reply;

/// A confirmation: `subscribe` or `unsubscribe`, the channel (`Null`
/// when an `UNSUBSCRIBE` of every channel found none), and the channels
/// the connection listens to after it.
fn confirm(kind: &str, channel: Reply, left: usize) -> Reply {
    Reply::Push(vec![
        Reply::bulk(kind),
        channel,
        Reply::Integer(left as i64),
    ])
}

/// `SUBSCRIBE channel...`.
pub(super) fn subscribe(c: &mut Ctx<'_>) -> Reply {
    let id = c.session.id;
    let pubsub = &mut c.server.pubsub;
    Reply::Frames(
        c.words[1..]
            .iter()
            .map(|channel| {
                let left = pubsub.subscribe(id, channel);
                confirm("subscribe", Reply::bulk(channel), left)
            })
            .collect(),
    )
}

/// `UNSUBSCRIBE [channel...]`: the channels named, or every channel the
/// connection listens to (in byte order, where a server goes in the
/// order of its hash table).
pub(super) fn unsubscribe(c: &mut Ctx<'_>) -> Reply {
    let id = c.session.id;
    let pubsub = &mut c.server.pubsub;
    let named: Vec<Vec<u8>> = if c.words.len() > 1 {
        c.words[1..].to_vec()
    } else {
        pubsub.channels(id).map(<[u8]>::to_vec).collect()
    };
    if named.is_empty() {
        return Reply::Frames(vec![confirm("unsubscribe", Reply::Null, 0)]);
    }
    Reply::Frames(
        named
            .into_iter()
            .map(|channel| {
                let left = pubsub.unsubscribe(id, &channel);
                confirm("unsubscribe", Reply::Bulk(channel), left)
            })
            .collect(),
    )
}

/// `PUBLISH channel message`: how many connections listen.
pub(super) fn publish(c: &mut Ctx<'_>) -> Reply {
    Reply::Integer(c.server.pubsub.publish(&c.words[1], &c.words[2]))
}
