//! The state commands work on: a master's databases, script cache and
//! identity, and one connection's session.

use std::collections::BTreeSet;

use crate::keyspace::{Keyspace, Now};
use crate::pubsub::PubSub;
use crate::reply::Protocol;
use crate::scripts::Interpreter;
use crate::tracking::Tracking;

/// Databases a master has (`SELECT 0` to `SELECT 15`), as Redis by default.
pub(crate) const DATABASES: usize = 16;

/// A master's state, which its commands read and change.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) dbs: Vec<Keyspace>,
    /// The SHA-1s of the scripts loaded (`SCRIPT LOAD`, `EVAL`).
    pub(crate) scripts: BTreeSet<&'static str>,
    /// The Lua state the scripts run in, made at the first one.
    pub(crate) lua: Interpreter,
    /// 40 hex digits, new at every start.
    pub(crate) run_id: String,
    /// When the process started, on its clock (`uptime_in_seconds`).
    pub(crate) started: Now,
    /// `requirepass`: `None` lets every connection in without `AUTH`.
    pub(crate) password: Option<Vec<u8>>,
    /// The id of the last connection (`HELLO`'s `id`).
    pub(crate) last_client: u64,
    /// Who listens to which channels, and what was published to them.
    pub(crate) pubsub: PubSub,
    /// Which connections track which keys (`CLIENT TRACKING`).
    pub(crate) tracking: Tracking,
    /// Which keys a script's reads have tracked.
    pub(crate) script_reads: crate::ScriptReads,
    /// The keys the script running declared (`KEYS`).
    pub(crate) declared: Vec<Vec<u8>>,
    /// A deliberate fault: `SET NX` sets a key that exists (see
    /// [`Master::with_double_grants`](crate::Master::with_double_grants)).
    pub(crate) double_grants: bool,
    /// A deliberate fault of the hand-off (see
    /// [`Master::with_handoff_fault`](crate::Master::with_handoff_fault)).
    pub(crate) handoff_fault: Option<crate::HandoffFault>,
}

impl Server {
    /// A server started at `now`, empty.
    pub(crate) fn new(run_id: String, started: Now, password: Option<Vec<u8>>) -> Server {
        Server {
            dbs: vec![Keyspace::default(); DATABASES],
            scripts: BTreeSet::new(),
            lua: Interpreter::default(),
            run_id,
            started,
            password,
            last_client: 0,
            pubsub: PubSub::default(),
            tracking: Tracking::default(),
            script_reads: crate::ScriptReads::default(),
            declared: Vec::new(),
            double_grants: false,
            handoff_fault: None,
        }
    }

    /// The database `session` has selected.
    pub(crate) fn db(&mut self, session: &Session) -> &mut Keyspace {
        // `SELECT` keeps `session.db` below DATABASES.
        &mut self.dbs[session.db]
    }

    /// Tells the connections that track the keys changed since the last
    /// call (by a command of connection `by`; `None`: by the server
    /// itself) that they changed.
    pub(crate) fn signal_changes(&mut self, by: Option<u64>) {
        for db in 0..self.dbs.len() {
            for key in self.dbs[db].take_changed() {
                self.tracking.changed(&key, by, &mut self.pubsub);
            }
        }
    }

    /// Whether `session` is in subscribe mode: a RESP2 connection that
    /// listens to a channel, which may send only the pub/sub commands,
    /// `PING` and `QUIT`.
    pub(crate) fn subscribe_mode(&self, session: &Session) -> bool {
        session.protocol == Protocol::Resp2 && self.pubsub.listens(session.id)
    }

    /// A new connection's session: logged in if no password is set.
    pub(crate) fn open_session(&mut self) -> Session {
        self.last_client += 1;
        Session {
            db: 0,
            authenticated: self.password.is_none(),
            protocol: Protocol::Resp2,
            id: self.last_client,
            closing: false,
            caching: false,
        }
    }
}

/// What a server knows of one connection.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The selected database.
    pub(crate) db: usize,
    pub(crate) authenticated: bool,
    pub(crate) protocol: Protocol,
    pub(crate) id: u64,
    /// `QUIT` was received: the connection closes after its reply.
    pub(crate) closing: bool,
    /// `CLIENT CACHING YES` was the last command: the next one's reads
    /// are tracked (`OPTIN`).
    pub(crate) caching: bool,
}
