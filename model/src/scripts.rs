//! The library's scripts (`src/scripts/*.lua`) as steps on one master, each
//! atomic as a Lua script is, with the reply already classified as
//! `commands::classify` does. Only what the model can reach is kept: the
//! `FOREIGNKEY` checks guard against values nobody writes here, and a
//! lock here has one key. The release is the compare-and-delete; the
//! hand-off to a waiter that follows it (queues and reservations) is not
//! modelled: to the fence protocol a reservation is a held key, one more
//! refusal. A test (`tie/scripts.rs`) runs these steps beside the real
//! scripts on a `redis-server` and compares replies and keys.

use crate::config::{ClockStart, N};
use crate::state::{Key, Master, Node, Request, Token, loss_id};

/// Where a script runs: the master (and its index), its `TIME` in
/// microseconds, and the rule of a start from the clocks.
pub(crate) struct Site<'a> {
    pub(crate) master: &'a mut Master,
    pub(crate) index: usize,
    pub(crate) time: u64,
    pub(crate) clock_start: ClockStart,
}

impl Site<'_> {
    /// Runs `request`; its classified reply (none for a release, which no
    /// round waits for here).
    pub(crate) fn run(&mut self, request: Request) -> Option<Node> {
        match request {
            Request::Read => Some(self.read()),
            Request::Sync { value, start, ids } => Some(self.sync(value, start, &ids)),
            Request::Acquire { token, expires } => Some(self.acquire(token, expires)),
            Request::Raise { token, fence } => Some(self.raise(token, fence)),
            Request::Release { token } => {
                self.release(token);
                None
            }
        }
    }

    /// `FENCED_ACQUIRE_SCRIPT`: where the key does not exist, sets it
    /// (`PX ttl`: it may expire from `expires` on), then `INCR`s the
    /// counter and replies with it; with no counter, replies minus the
    /// loss id (set if absent).
    fn acquire(&mut self, token: Token, expires: u8) -> Node {
        let m = &mut *self.master;
        if m.key.is_some() {
            return Node::Refused;
        }
        let counter = m.counter;
        m.key = Some(Key { token, expires });
        if let Some(c) = counter {
            m.counter = Some(c + 1);
            return Node::Ok(c + 1);
        }
        let id = *m.lost.get_or_insert(loss_id(self.index, m.losses));
        Node::Unsynced {
            lost: id,
            clock: 0,
            time: 0,
        }
    }

    /// `RAISE_SCRIPT`: where the key holds the token, raises the counter
    /// to at least the fence and deletes the loss id; `-1` (no counter)
    /// is `Unsynced(0)`.
    fn raise(&mut self, token: Token, fence: u64) -> Node {
        let m = &mut *self.master;
        if m.key.map(|k| k.token) != Some(token) {
            return Node::Refused;
        }
        let Some(counter) = m.counter else {
            return Node::Unsynced {
                lost: 0,
                clock: 0,
                time: 0,
            };
        };
        m.lost = None;
        if counter < fence {
            m.counter = Some(fence);
        }
        Node::Ok(0)
    }

    /// `FENCE_READ_SCRIPT`: the counter if it exists without a loss id;
    /// else `"<loss id> <TIME> <counter or 0>"` (the loss id set if
    /// absent), which `read_unsynced` classifies with the larger of the
    /// clock and the counter.
    fn read(&mut self) -> Node {
        let m = &mut *self.master;
        if let (Some(c), None) = (m.counter, m.lost) {
            return Node::Ok(c);
        }
        m.time_reads += 1;
        let id = *m.lost.get_or_insert(loss_id(self.index, m.losses));
        Node::Unsynced {
            lost: id,
            clock: self.time.max(m.counter.unwrap_or(0)),
            time: self.time,
        }
    }

    /// `FENCE_SYNC_SCRIPT`: 1 if the counter exists without a loss id;
    /// else, if the loss id is one of `ids`, sets the counter to the
    /// larger of `value` and itself, deletes the loss id unless `start`,
    /// and replies 1; else 0. (With [`ClockStart::Own`], the rule before
    /// the fix, `value` is this master's `TIME`.)
    fn sync(&mut self, value: u64, start: bool, ids: &[u64; N]) -> Node {
        let m = &mut *self.master;
        let Some(lost) = m.lost else {
            // No loss id: in sync if the counter exists, else nothing
            // can match (`ARGV[i] == false` never holds).
            return if m.counter.is_some() {
                Node::Ok(0)
            } else {
                Node::Refused
            };
        };
        if !ids.contains(&lost) {
            return Node::Refused;
        }
        let value = if start && self.clock_start == ClockStart::Own {
            m.time_reads += 1;
            self.time
        } else {
            value
        };
        if m.counter.is_none_or(|c| c < value) {
            m.counter = Some(value);
        }
        if !start {
            m.lost = None;
        }
        Node::Ok(0)
    }

    /// `RELEASE_SCRIPT`: deletes the key if it holds the token.
    fn release(&mut self, token: Token) {
        let m = &mut *self.master;
        if m.key.map(|k| k.token) == Some(token) {
            m.key = None;
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each script against what `src/scripts.rs` says it does (as
    //! `tests/fencing.rs` checks the real ones on a real server).

    use super::Site;
    use crate::config::{ClockStart, N};
    use crate::state::{Key, Master, Node, Request, Token, loss_id};

    const A: Token = Token {
        client: 0,
        attempt: 1,
    };
    const B: Token = Token {
        client: 1,
        attempt: 1,
    };
    const TIME: u64 = 5_000;

    fn empty() -> Master {
        Master {
            key: None,
            counter: None,
            lost: None,
            offset: 0,
            losses: 0,
            steps: 0,
            time_reads: 0,
        }
    }

    fn run(master: &mut Master, request: Request) -> Option<Node> {
        Site {
            master,
            index: 1,
            time: TIME,
            clock_start: ClockStart::Largest,
        }
        .run(request)
    }

    fn acquire(token: Token) -> Request {
        Request::Acquire { token, expires: 3 }
    }

    fn sync(value: u64, start: bool, id: u64) -> Request {
        let mut ids = [0; N];
        ids[0] = id;
        Request::Sync { value, start, ids }
    }

    #[test]
    fn an_acquire_sets_the_key_and_counts_or_names_the_loss() {
        let mut m = empty();
        let id = loss_id(1, 0);
        let unsynced = Node::Unsynced {
            lost: id,
            clock: 0,
            time: 0,
        };
        assert_eq!(run(&mut m, acquire(A)), Some(unsynced));
        assert_eq!(
            m.key,
            Some(Key {
                token: A,
                expires: 3
            })
        );
        assert_eq!((m.counter, m.lost), (None, Some(id)));
        // Held: refused, nothing changes.
        let before = m;
        assert_eq!(run(&mut m, acquire(B)), Some(Node::Refused));
        assert_eq!(m, before);
        // With a counter: INCR, and the loss id is left alone.
        m.key = None;
        m.counter = Some(7);
        assert_eq!(run(&mut m, acquire(B)), Some(Node::Ok(8)));
        assert_eq!((m.counter, m.lost), (Some(8), Some(id)));
    }

    #[test]
    fn a_raise_needs_the_token_and_a_counter_and_deletes_the_loss_id() {
        let mut m = empty();
        m.key = Some(Key {
            token: A,
            expires: 3,
        });
        assert_eq!(
            run(&mut m, Request::Raise { token: B, fence: 9 }),
            Some(Node::Refused)
        );
        let no_counter = Node::Unsynced {
            lost: 0,
            clock: 0,
            time: 0,
        };
        assert_eq!(
            run(&mut m, Request::Raise { token: A, fence: 9 }),
            Some(no_counter)
        );
        m.counter = Some(4);
        m.lost = Some(loss_id(1, 0));
        assert_eq!(
            run(&mut m, Request::Raise { token: A, fence: 9 }),
            Some(Node::Ok(0))
        );
        assert_eq!((m.counter, m.lost), (Some(9), None));
        // Never lowers.
        assert_eq!(
            run(&mut m, Request::Raise { token: A, fence: 2 }),
            Some(Node::Ok(0))
        );
        assert_eq!(m.counter, Some(9));
    }

    #[test]
    fn a_read_counts_in_sync_and_reports_the_clock_otherwise() {
        let mut m = empty();
        let id = loss_id(1, 0);
        let missing = Node::Unsynced {
            lost: id,
            clock: TIME,
            time: TIME,
        };
        assert_eq!(run(&mut m, Request::Read), Some(missing));
        assert_eq!(m.lost, Some(id));
        // A clock start not raised since: the larger of clock and counter.
        m.counter = Some(TIME + 10);
        let started = Node::Unsynced {
            lost: id,
            clock: TIME + 10,
            time: TIME,
        };
        assert_eq!(run(&mut m, Request::Read), Some(started));
        m.lost = None;
        assert_eq!(run(&mut m, Request::Read), Some(Node::Ok(TIME + 10)));
    }

    #[test]
    fn a_sync_repairs_only_the_loss_it_names() {
        let mut m = empty();
        let id = loss_id(1, 0);
        m.lost = Some(id);
        assert_eq!(
            run(&mut m, sync(50, false, loss_id(1, 1))),
            Some(Node::Refused)
        );
        assert_eq!(m.counter, None);
        // A start keeps the loss id beside the counter.
        assert_eq!(run(&mut m, sync(50, true, id)), Some(Node::Ok(0)));
        assert_eq!((m.counter, m.lost), (Some(50), Some(id)));
        // A repair takes the larger value and deletes it.
        assert_eq!(run(&mut m, sync(40, false, id)), Some(Node::Ok(0)));
        assert_eq!((m.counter, m.lost), (Some(50), None));
        // In sync: done, whatever the ids.
        assert_eq!(run(&mut m, sync(90, false, 0)), Some(Node::Ok(0)));
        assert_eq!(m.counter, Some(50));
    }

    #[test]
    fn a_release_deletes_only_its_own_key() {
        let mut m = empty();
        m.key = Some(Key {
            token: A,
            expires: 3,
        });
        assert_eq!(run(&mut m, Request::Release { token: B }), None);
        assert!(m.key.is_some());
        assert_eq!(run(&mut m, Request::Release { token: A }), None);
        assert!(m.key.is_none());
    }
}
