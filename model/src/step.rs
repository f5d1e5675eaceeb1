//! The steps of the system: which are enabled in a state, and what each
//! does, with the invariants checked on the way.

use std::fmt;

use crate::client::{self, show_token};
use crate::config::{Config, N, Order, STEP_TICKS};
use crate::log::Log;
use crate::scripts::Site;
use crate::state::{Issued, Master, Msg, Node, Phase, Request, State};

/// One atomic step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// An idle client starts a fenced acquire attempt.
    Begin {
        /// The client.
        client: u8,
    },
    /// A master runs the first request a client queued on it; its reply
    /// reaches the client's round, or, with `lose`, is lost.
    Run {
        /// The client whose request runs.
        client: u8,
        /// The master.
        master: u8,
        /// Whether the reply is lost.
        lose: bool,
    },
    /// Every master runs a client's fence read, in one step (with
    /// [`Config::atomic_reads`](crate::config::Config::atomic_reads)).
    ReadAll {
        /// The client.
        client: u8,
    },
    /// A client takes how its decided round ended and sends the next
    /// (`pick`: the master whose clock a start from one clock takes).
    Handle {
        /// The client.
        client: u8,
        /// The master whose clock a [`ClockStart::One`](crate::config::ClockStart::One) start takes.
        pick: u8,
    },
    /// A master that has not answered a client's round in progress
    /// times out (its connection failed, or the round's deadline came).
    TimeOut {
        /// The client.
        client: u8,
        /// The master.
        master: u8,
    },
    /// A holder releases its lock.
    Release {
        /// The client.
        client: u8,
    },
    /// A lock key expires (its holder's validity has ended).
    Expire {
        /// The master.
        master: u8,
    },
    /// A master restarts with no data.
    Restart {
        /// The master.
        master: u8,
    },
    /// A connection is reset: the requests queued on it are lost.
    Reset {
        /// The client.
        client: u8,
        /// The master.
        master: u8,
    },
    /// The time moves on by a tick.
    Tick,
    /// A master's wall clock steps.
    Step {
        /// The master.
        master: u8,
        /// Whether it steps back.
        back: bool,
    },
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A holding began with a fence not above that of a holding that
    /// began before it.
    FenceNotAbove {
        /// The new holding's fence.
        fence: u64,
        /// The earlier holding's fence.
        earlier: u64,
    },
    /// A holding began with a fence not above that of a holding that had
    /// ended before its acquire round began.
    FenceNotAboveEnded {
        /// The new holding's fence.
        fence: u64,
        /// The ended holding's fence.
        earlier: u64,
    },
    /// A master that kept its data lowered or lost its counter.
    CounterBack {
        /// The master.
        master: usize,
        /// The counter before.
        from: u64,
        /// The counter after (`None`: gone).
        to: Option<u64>,
    },
    /// Invariant (I) of the proof: a master of a fence's raise quorum has
    /// a counter below that fence.
    BelowRaised {
        /// The master.
        master: usize,
        /// Its counter.
        counter: u64,
        /// The fence it raised.
        fence: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::FenceNotAbove { fence, earlier } => write!(
                f,
                "a holding began with fence {fence}, not above the fence {earlier} of a holding \
                 that began before it ({} below)",
                earlier - fence
            ),
            Violation::FenceNotAboveEnded { fence, earlier } => write!(
                f,
                "a holding began with fence {fence}, not above the fence {earlier} of a holding \
                 that had ended before its acquire began ({} below)",
                earlier - fence
            ),
            Violation::CounterBack { master, from, to } => write!(
                f,
                "master m{master} kept its data but its counter went from {from} to {to:?}"
            ),
            Violation::BelowRaised {
                master,
                counter,
                fence,
            } => write!(
                f,
                "invariant (I): master m{master} raised fence {fence} but has counter {counter}"
            ),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Action::Begin { client } => write!(f, "c{client} begins"),
            Action::Run {
                client,
                master,
                lose,
            } => write!(
                f,
                "m{master} runs c{client}'s request{}",
                if lose { " (reply lost)" } else { "" }
            ),
            Action::ReadAll { client } => write!(f, "every master runs c{client}'s read"),
            Action::Handle { client, .. } => write!(f, "c{client} takes its round's end"),
            Action::TimeOut { client, master } => {
                write!(f, "m{master} times out in c{client}'s round")
            }
            Action::Release { client } => write!(f, "c{client} releases"),
            Action::Expire { master } => write!(f, "the key on m{master} expires"),
            Action::Restart { master } => write!(f, "m{master} restarts empty"),
            Action::Reset { client, master } => {
                write!(f, "the connection c{client}-m{master} is reset")
            }
            Action::Tick => f.write_str("a tick passes"),
            Action::Step { master, back } => write!(
                f,
                "m{master}'s clock steps {} {STEP_TICKS} ticks",
                if back { "back" } else { "ahead" }
            ),
        }
    }
}

impl Action {
    /// The steps of the connection of `client` to `master` that `config`
    /// allows: the master runs the first request (its reply kept, or
    /// lost), the connection is reset.
    pub(crate) fn of_connection(
        client: u8,
        master: u8,
        config: &Config,
    ) -> impl Iterator<Item = Action> {
        let run = |lose| Action::Run {
            client,
            master,
            lose,
        };
        [
            Some(run(false)),
            config.lost_replies.then(|| run(true)),
            config.resets.then_some(Action::Reset { client, master }),
        ]
        .into_iter()
        .flatten()
    }

    /// The clock steps of `master` that `config` allows.
    pub(crate) fn steps_of(master: u8, config: &Config) -> impl Iterator<Item = Action> {
        [
            Some(Action::Step {
                master,
                back: false,
            }),
            config
                .step_back
                .then_some(Action::Step { master, back: true }),
        ]
        .into_iter()
        .flatten()
    }
}

impl State {
    /// The steps enabled in this state, in a fixed order.
    pub fn actions(&self, config: &Config, out: &mut Vec<Action>) {
        out.clear();
        for (c, client) in self.clients().iter().enumerate() {
            let cu = c as u8;
            match (client.phase, &client.round) {
                (Phase::Idle, _) if client.attempts < config.attempts => {
                    out.push(Action::Begin { client: cu });
                }
                (Phase::Holding { .. }, _) => out.push(Action::Release { client: cu }),
                (_, Some(round)) if round.decided.is_some() => {
                    for pick in 0..client::picks(self, c, config) {
                        out.push(Action::Handle {
                            client: cu,
                            pick: pick as u8,
                        });
                    }
                }
                (_, Some(round)) if config.timeouts => {
                    for m in 0..N {
                        if round.nodes[m] == Node::Pending {
                            out.push(Action::TimeOut {
                                client: cu,
                                master: m as u8,
                            });
                        }
                    }
                }
                _ => {}
            }
            if config.atomic_reads && self.reads_ahead(cu) {
                out.push(Action::ReadAll { client: cu });
            }
            for m in 0..N as u8 {
                let Some(i) = self.head(cu, m) else {
                    continue;
                };
                if config.atomic_reads && self.wire[i].request == Request::Read {
                    continue;
                }
                let awaited = self.awaited(&self.wire[i]);
                out.extend(
                    Action::of_connection(cu, m, config)
                        .filter(|a| awaited || !matches!(a, Action::Run { lose: true, .. })),
                );
            }
        }
        for (m, master) in self.masters.iter().enumerate() {
            let m8 = m as u8;
            if master.key.is_some_and(|k| k.expires <= self.now) {
                out.push(Action::Expire { master: m8 });
            }
            // A restart of a master with no data changes nothing.
            let data = master.key.is_some() || master.counter.is_some() || master.lost.is_some();
            if master.losses < config.restarts && data {
                out.push(Action::Restart { master: m8 });
            }
            if master.steps < config.steps {
                out.extend(Action::steps_of(m8, config));
            }
        }
        if self.now < config.ticks {
            out.push(Action::Tick);
        }
    }

    /// Whether a fence read of `client` is first on each of its
    /// connections.
    pub(crate) fn reads_ahead(&self, client: u8) -> bool {
        (0..N as u8).all(|m| {
            self.head(client, m)
                .is_some_and(|i| self.wire[i].request == Request::Read)
        })
    }

    /// Whether a round waits for `msg`'s reply.
    pub(crate) fn awaited(&self, msg: &Msg) -> bool {
        msg.live
            && self.clients[usize::from(msg.client)]
                .round
                .is_some_and(|r| r.nodes[usize::from(msg.master)] == Node::Pending)
    }

    /// The state after `action`, or the invariant it breaks.
    pub(crate) fn apply(
        &self,
        action: Action,
        config: &Config,
        log: &mut Log,
    ) -> Result<State, Violation> {
        let mut next = self.clone();
        let mut began = None;
        let mut restarted = None;
        match action {
            Action::Begin { client } => client::begin(&mut next, usize::from(client), config, log),
            Action::Run {
                client,
                master,
                lose,
            } => next.run(client, master, lose, config, log),
            Action::ReadAll { client } => {
                for master in 0..N as u8 {
                    next.run(client, master, false, config, log);
                }
            }
            Action::Handle { client, pick } => {
                began = client::handle(&mut next, usize::from(client), pick.into(), config, log);
            }
            Action::TimeOut { client, master } => {
                let now = next.now;
                if let Some(round) = next.clients[usize::from(client)].round.as_mut() {
                    round.record(usize::from(master), Node::Failed, now, config.validity);
                }
            }
            Action::Release { client } => client::release(&mut next, usize::from(client), log),
            Action::Expire { master } => next.masters[usize::from(master)].key = None,
            Action::Restart { master } => {
                let m = &mut next.masters[usize::from(master)];
                *m = Master {
                    key: None,
                    counter: None,
                    lost: None,
                    losses: m.losses + 1,
                    ..*m
                };
                restarted = Some(usize::from(master));
            }
            Action::Reset { client, master } => next
                .wire
                .retain(|msg| (msg.client, msg.master) != (client, master)),
            Action::Tick => next.now += 1,
            Action::Step { master, back } => {
                let m = &mut next.masters[usize::from(master)];
                m.offset += if back { -STEP_TICKS } else { STEP_TICKS };
                m.steps += 1;
            }
        }
        self.counters_kept(&next, restarted)?;
        if let Some(issued) = began {
            let after = next.clients[usize::from(issued.token.client)].after;
            next.hand_out(issued, after, config.order)?;
        }
        if config.invariant {
            next.raised_kept()?;
        }
        Ok(next)
    }

    /// Master `master` runs the first request of `client` queued on it.
    fn run(&mut self, client: u8, master: u8, lose: bool, config: &Config, log: &mut Log) {
        let Some(i) = self.head(client, master) else {
            return;
        };
        let msg = self.wire.remove(i);
        let m = usize::from(master);
        let (time, now) = (self.clock(m), self.now);
        let reply = Site {
            master: &mut self.masters[m],
            index: m,
            time,
            clock_start: config.clock_start,
        }
        .run(msg.request);
        let master_after = self.masters[m];
        log.note(|| describe(&msg, reply, time, &master_after));
        if let (Some(reply), true, false) = (reply, msg.live, lose) {
            if let Some(round) = self.clients[usize::from(client)].round.as_mut() {
                round.record(m, reply, now, config.validity);
            }
        }
    }

    /// Counters never go back, nor vanish, on a master that kept its data.
    fn counters_kept(&self, next: &State, restarted: Option<usize>) -> Result<(), Violation> {
        for m in (0..N).filter(|m| Some(*m) != restarted) {
            if let Some(from) = self.masters[m].counter {
                let to = next.masters[m].counter;
                if to.is_none_or(|to| to < from) {
                    return Err(Violation::CounterBack {
                        master: m,
                        from,
                        to,
                    });
                }
            }
        }
        Ok(())
    }

    /// A holding began with `issued`, whose acquire round came after the
    /// holdings of fences up to `after` had ended: its fence must be above
    /// the fences `order` names (with [`Order::Began`], every fence handed
    /// out before, so no fence is handed out twice either).
    fn hand_out(&mut self, issued: Issued, after: u64, order: Order) -> Result<(), Violation> {
        let fence = issued.fence;
        match order {
            Order::Began => {
                if let Some(earlier) = self.issued.iter().map(|i| i.fence).max() {
                    if fence <= earlier {
                        return Err(Violation::FenceNotAbove { fence, earlier });
                    }
                }
            }
            Order::Ended => {
                if after > 0 && fence <= after {
                    return Err(Violation::FenceNotAboveEnded {
                        fence,
                        earlier: after,
                    });
                }
            }
        }
        self.issued.push(issued);
        Ok(())
    }

    /// Invariant (I) of the proof: every master of a fence's raise quorum
    /// that has a counter has one at least that fence.
    fn raised_kept(&self) -> Result<(), Violation> {
        for issued in &self.issued {
            for (m, master) in self.masters.iter().enumerate() {
                if issued.raised & (1 << m) == 0 {
                    continue;
                }
                if let Some(counter) = master.counter.filter(|c| *c < issued.fence) {
                    return Err(Violation::BelowRaised {
                        master: m,
                        counter,
                        fence: issued.fence,
                    });
                }
            }
        }
        Ok(())
    }
}

/// A request run on a master, its reply, and the master after it.
fn describe(msg: &Msg, reply: Option<Node>, time: u64, after: &Master) -> String {
    let request = match msg.request {
        Request::Read => "FENCE_READ".to_string(),
        Request::Sync { value, start, ids } => format!(
            "FENCE_SYNC {} {value} ids {ids:?}",
            if start { "start" } else { "repair" }
        ),
        Request::Acquire { token, .. } => format!("FENCED_ACQUIRE {}", show_token(token)),
        Request::Raise { token, fence } => format!("RAISE {} {fence}", show_token(token)),
        Request::Release { token } => format!("RELEASE {}", show_token(token)),
    };
    let reply = match reply {
        None => String::new(),
        Some(reply) => format!(" -> {reply:?}{}", if msg.live { "" } else { " (dropped)" }),
    };
    format!(
        "m{} runs c{}'s {request} at TIME {time}{reply}; m{} now {}",
        msg.master,
        msg.client,
        msg.master,
        show_master(after)
    )
}

/// A master's data as a trace shows it.
pub(crate) fn show_master(m: &Master) -> String {
    let key = m.key.map_or("none".to_string(), |k| {
        format!("{} (expires from tick {})", show_token(k.token), k.expires)
    });
    let counter = m.counter.map_or("none".to_string(), |c| c.to_string());
    let lost = m.lost.map_or("none".to_string(), |l| l.to_string());
    format!("key {key}, counter {counter}, loss id {lost}")
}
