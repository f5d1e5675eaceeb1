//! The commands on the server as a whole: who it is, its clock, and
//! wiping it.

use super::{Ctx, syntax_error};
use crate::reply::Reply;

/// `INFO [section...]`: the fields a client reads to know whom it talks
/// to (`run_id`, `uptime_in_seconds`, `role`, `cluster_enabled`), whatever
/// the sections asked.
pub(super) fn info(c: &mut Ctx<'_>) -> Reply {
    // Whole seconds of each instant, subtracted, as Redis computes it.
    let uptime = c.now.secs() as i64 - c.server.started.secs() as i64;
    let text = format!(
        "# Server\r\n\
         redis_version:{version}\r\n\
         redis_mode:standalone\r\n\
         run_id:{run_id}\r\n\
         server_time_usec:{now}\r\n\
         uptime_in_seconds:{uptime}\r\n\
         uptime_in_days:{days}\r\n\
         \r\n\
         # Replication\r\n\
         role:master\r\n\
         connected_slaves:0\r\n\
         \r\n\
         # Cluster\r\n\
         cluster_enabled:0\r\n",
        version = crate::VERSION,
        run_id = c.server.run_id,
        now = c.now.0,
        days = uptime / 86_400,
    );
    Reply::Verbatim(text.into_bytes())
}

/// `TIME`: seconds and microseconds of the master's clock.
pub(super) fn time(c: &mut Ctx<'_>) -> Reply {
    Reply::Array(vec![
        Reply::bulk(c.now.secs().to_string()),
        Reply::bulk((c.now.0 % 1_000_000).to_string()),
    ])
}

/// `FLUSHALL [ASYNC|SYNC]`: every key of every database (the scripts
/// stay); every connection that tracks keys is told, with a null.
pub(super) fn flushall(c: &mut Ctx<'_>) -> Reply {
    match c.words {
        [_] => {}
        [_, mode] if mode.eq_ignore_ascii_case(b"ASYNC") || mode.eq_ignore_ascii_case(b"SYNC") => {}
        _ => return syntax_error(),
    }
    for db in &mut c.server.dbs {
        db.clear();
    }
    c.server
        .tracking
        .flushed(c.session.id, &mut c.server.pubsub);
    Reply::OK
}
