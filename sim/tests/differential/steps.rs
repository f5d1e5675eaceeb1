//! The steps of a case, and how they print: what a failure shows.

use std::fmt;

use redlock_mio::scripts::*;

/// One command.
#[derive(Clone)]
pub(crate) struct Command {
    pub(crate) words: Vec<Vec<u8>>,
}

/// One step of a case.
#[derive(Clone)]
pub(crate) enum Step {
    /// Opens connection `i` (of [`CONNS`](super::case::CONNS)) anew, on
    /// both sides; an open one is closed first.
    Connect(usize),
    /// Commands sent pipelined on a connection; the model receives the
    /// bytes cut at `cuts` (fractions of 1000 of their length).
    Send {
        conn: usize,
        commands: Vec<Command>,
        cuts: Vec<u64>,
    },
    /// Moves both clocks forward, in microseconds.
    Advance(u64),
    /// Keeps the data set (`SAVE` on the server).
    Snapshot,
    /// Kills the master and starts it again, empty or from the snapshot.
    Restart { from_snapshot: bool },
}

/// The lock's scripts, as the handshake loads them.
pub(crate) fn lock_scripts() -> &'static [(&'static str, &'static str)] {
    &[
        (RELEASE_SCRIPT, RELEASE_SHA1),
        (EXTEND_SCRIPT, EXTEND_SHA1),
        (ACQUIRE_MANY_SCRIPT, ACQUIRE_MANY_SHA1),
        (RELEASE_MANY_SCRIPT, RELEASE_MANY_SHA1),
        (EXTEND_MANY_SCRIPT, EXTEND_MANY_SHA1),
    ]
}

/// The fence scripts, which the handshake loads with fencing on.
pub(crate) fn fence_scripts() -> &'static [(&'static str, &'static str)] {
    &[
        (FENCED_ACQUIRE_SCRIPT, FENCED_ACQUIRE_SHA1),
        (RAISE_SCRIPT, RAISE_SHA1),
        (FENCE_READ_SCRIPT, FENCE_READ_SHA1),
        (FENCE_SYNC_SCRIPT, FENCE_SYNC_SHA1),
    ]
}

/// The scripts of callers that wait, which the handshake loads when
/// releases tell waiters.
pub(crate) fn wait_scripts() -> &'static [(&'static str, &'static str)] {
    &[
        (WAIT_ACQUIRE_SCRIPT, WAIT_ACQUIRE_SHA1),
        (LEAVE_SCRIPT, LEAVE_SHA1),
    ]
}

/// The fenced acquire that waits, which the handshake loads when
/// releases tell waiters and fencing is on.
pub(crate) fn fenced_wait_scripts() -> &'static [(&'static str, &'static str)] {
    &[(FENCED_WAIT_ACQUIRE_SCRIPT, FENCED_WAIT_ACQUIRE_SHA1)]
}

/// A word for humans: a script's text by the script's name, printable
/// bytes as they are, others escaped.
fn show(word: &[u8]) -> String {
    let scripts = lock_scripts()
        .iter()
        .chain(fence_scripts())
        .chain(wait_scripts())
        .chain(fenced_wait_scripts());
    if let Some((_, sha)) = scripts.clone().find(|(text, _)| text.as_bytes() == word) {
        return format!("<script {}>", &sha[..8]);
    }
    format!("{:?}", word.escape_ascii().to_string())
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self.words.iter().map(|w| show(w)).collect();
        f.write_str(&shown.join(" "))
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Connect(conn) => write!(f, "connect c{conn}"),
            Step::Send {
                conn,
                commands,
                cuts,
            } => {
                write!(f, "c{conn} sends (model cuts at {cuts:?}/1000):")?;
                for command in commands {
                    write!(f, "\n        {command}")?;
                }
                Ok(())
            }
            Step::Advance(us) => write!(f, "clock +{us} µs"),
            Step::Snapshot => f.write_str("snapshot (SAVE)"),
            Step::Restart { from_snapshot } => {
                let from = if *from_snapshot {
                    "from the snapshot"
                } else {
                    "empty"
                };
                write!(f, "restart {from}")
            }
        }
    }
}
