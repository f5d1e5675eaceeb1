//! The faults: pauses of clients and masters, crashes and restarts,
//! connections reset, partitions, `FLUSHALL`, a master's clock stepped
//! back, evictions, and the other clients' writes.

use redlock_mio::resp::{Arg, encode_command};
use redlock_mio::{FENCE_KEY, FENCE_LOST_KEY};

use super::history::secs;
use super::masters::foreign_write;
use super::net::Down;
use super::{Ev, World};

/// Whose waiters a disturbance may hold up: one client's or anyone's,
/// one resource's or any, and whether it takes entries out of the queues
/// (see `history::Disturbance`).
pub(crate) type Whose = (Option<usize>, Option<usize>, bool);

impl World {
    /// The next fault, drawn by the weights.
    pub(crate) fn fault(&mut self) {
        let w = self.params.weights;
        let total = w.client_pause
            + w.master_pause
            + w.crash
            + w.reset
            + w.partition
            + w.flushall
            + w.step_back
            + w.evict;
        let mut pick = self.rng.below(total);
        let longest = self.params.longest().as_nanos() as u64;
        let rt = self.params.settings.request_timeout.as_nanos() as u64;
        for (weight, fault) in [
            (w.client_pause, 0),
            (w.master_pause, 1),
            (w.crash, 2),
            (w.reset, 3),
            (w.partition, 4),
            (w.flushall, 5),
            (w.step_back, 6),
            (w.evict, 7),
        ] {
            if pick >= weight {
                pick -= weight;
                continue;
            }
            match fault {
                0 => {
                    let c = self.rng.index(self.clients.len());
                    let mean = 2 * rt + self.rng.below(longest);
                    let until = self.fault_end(mean);
                    self.note(|| format!("client {c} pauses until {:.6}", secs(until)));
                    self.pause_client(c, until);
                }
                1 => {
                    let m = self.rng.index(self.masters.len());
                    let mean = 2 * rt + self.rng.below(longest);
                    let until = self.fault_end(mean).max(self.masters[m].paused_until);
                    self.note(|| format!("master {m} pauses until {:.6}", secs(until)));
                    self.masters[m].paused_until = until;
                    let after = self.params.reconnect_bound();
                    self.disturb((None, None, false), until + after, "a master's pause");
                }
                2 => {
                    let m = self.rng.index(self.masters.len());
                    self.crash(m);
                }
                3 => self.reset_one(),
                4 => {
                    let mean = 3 * rt + self.rng.below(longest);
                    let until = self.fault_end(mean);
                    self.partition(until);
                }
                5 => {
                    let m = self.rng.index(self.masters.len());
                    if self.command(m, &[b"FLUSHALL"]) {
                        self.note(|| format!("master {m}: FLUSHALL"));
                        self.disturb((None, None, true), self.t + self.settle_time(), "FLUSHALL");
                        self.history.losses[m].push(self.t);
                        self.history.wipes[m].push(self.t);
                    }
                }
                7 => {
                    let m = self.rng.index(self.masters.len());
                    self.evict(m);
                    self.disturb(
                        (None, None, true),
                        self.t + self.settle_time(),
                        "an eviction",
                    );
                }
                _ => {
                    let m = self.rng.index(self.masters.len());
                    let back = self.rng.range(1, 50_000);
                    self.note(|| format!("master {m}'s clock steps back {back} us"));
                    self.masters[m].clock.step(-(back as i64));
                    self.masters[m].stepped_back += back * 1000;
                    let to = self.t + back * 1000 + self.settle_time();
                    self.disturb((None, None, false), to, "a clock's step back");
                    self.history.steps.push(self.t);
                }
            }
            return;
        }
    }

    /// When a fault of mean length `mean` that starts now ends: never
    /// after the faults do.
    pub(crate) fn fault_end(&mut self, mean: u64) -> u64 {
        let d = self.rng.exp(mean);
        (self.t + d).min(self.params.duration)
    }

    /// Client `c` stops until `until`: its events wait, its clock runs on.
    pub(crate) fn pause_client(&mut self, c: usize, until: u64) {
        let until = until.max(self.clients[c].paused_until);
        let from = self.t.max(self.clients[c].paused_until);
        self.clients[c].paused_until = until;
        self.clients[c].pauses.push((from, until));
    }

    /// Master `m`'s process dies: its connections end (a FIN or a reset
    /// each, after what it wrote before), and it restarts later, empty or
    /// from one of its older snapshots.
    fn crash(&mut self, m: usize) {
        if self.masters[m].down {
            return;
        }
        let conns = std::mem::take(&mut self.masters[m].conns);
        for conn in conns {
            let k = &mut self.net.conns[conn];
            k.dead = true;
            k.model = None;
            k.up.clear();
            let end = if self.rng.chance(0.5) {
                Down::Fin
            } else {
                Down::Reset
            };
            self.send_down(conn, end);
        }
        let master = &mut self.masters[m];
        master.fence_keys = master.fence_keys(self.t);
        master.down = true;
        master.writer = None;
        let d = self.params.restart_delay(&mut self.rng);
        self.note(|| format!("master {m} crashes, restarts in {:.6}s", secs(d)));
        self.at(self.t + d, Ev::Restart { master: m });
        // (With the restart guard, the master it restarts as counts for
        // nothing until the guard is over.)
        let guard = self.params.settings.restart_guard.unwrap_or_default();
        let to = self.t + d + self.params.reconnect_bound() + guard.as_nanos() as u64;
        self.disturb((None, None, true), to, "a master's crash");
    }

    /// Master `m` starts again: empty, or from an older snapshot.
    pub(crate) fn restart(&mut self, m: usize) {
        if !self.masters[m].down {
            return;
        }
        let now_us = self.masters[m].clock.now_us(self.t);
        let master = &mut self.masters[m];
        let from = if master.snapshots.is_empty() || self.rng.chance(0.4) {
            None
        } else {
            Some(self.rng.index(master.snapshots.len()))
        };
        match from {
            Some(k) => {
                let snapshot = master.snapshots[k].1.clone();
                master.model.restore(&snapshot, now_us);
                // An old counter or loss id back, where the master had
                // acknowledged another: outside what fencing assumes.
                if master.fence_keys(self.t) != master.fence_keys {
                    self.history.breaks[m].push(self.t);
                }
            }
            None => master.model.restart(now_us),
        }
        master.down = false;
        self.history.wipes[m].push(self.t);
        self.note(|| format!("master {m} restarts from snapshot {from:?}"));
        // Without the restart guard, only a restart delayed past the
        // longest TTL keeps what the lock assumes; the guard quarantines
        // a master that restarted, whatever it came back with.
        let guarded = self.params.settings.restart_guard.is_some();
        if !guarded && !self.params.delayed_restarts {
            self.history.losses[m].push(self.t);
        }
    }

    /// Master `m`, short of memory, evicts one to three keys as its
    /// `maxmemory-policy` lets it. A lock's key evicted is a grant lost,
    /// as in a crash; the fence counter or its loss id evicted (only an
    /// `allkeys` policy can) is outside what fencing assumes.
    fn evict(&mut self, m: usize) {
        let Some(policy) = self.params.eviction else {
            return;
        };
        if !self.masters[m].runs(self.t) {
            return;
        }
        let now_us = self.masters[m].clock.now_us(self.t);
        for _ in 0..self.rng.range(1, 3) {
            let pick = self.rng.next_u64();
            let Some(key) = self.masters[m].model.evict(0, policy, pick, now_us) else {
                return;
            };
            self.note(|| format!("master {m} evicts {}", super::show(&key)));
            if self.params.resources.contains(&key) {
                self.history.losses[m].push(self.t);
            }
            if key == FENCE_KEY.as_bytes() || key == FENCE_LOST_KEY.as_bytes() {
                self.history.wipes[m].push(self.t);
                self.history.breaks[m].push(self.t);
            }
        }
    }

    /// One connection, open at both ends, is reset: both ends learn. In a
    /// world of the waiters' own troubles, half the time every connection
    /// of that one's client is (its network went away for a moment).
    fn reset_one(&mut self) {
        let open: Vec<usize> = self
            .masters
            .iter()
            .flat_map(|m| m.conns.iter().copied())
            .collect();
        if open.is_empty() {
            return;
        }
        let conn = open[self.rng.index(open.len())];
        if self.params.waits_only && self.rng.chance(0.5) {
            let c = self.net.conns[conn].client;
            for other in open {
                if self.net.conns[other].client == c {
                    self.reset_conn(other);
                }
            }
            return;
        }
        self.reset_conn(conn);
    }

    /// Connection `conn`, open at both ends, is reset.
    fn reset_conn(&mut self, conn: usize) {
        let m = self.params.proc_of[self.net.conns[conn].master];
        if let Some(model) = self.net.conns[conn].model.take() {
            self.masters[m].model.close(model);
        }
        self.masters[m].conns.retain(|&k| k != conn);
        let k = &mut self.net.conns[conn];
        k.dead = true;
        k.up.clear();
        self.note(|| format!("connection {conn} to master {m} is reset"));
        let c = self.net.conns[conn].client;
        let to = self.t + self.params.reconnect_bound();
        self.disturb((Some(c), None, false), to, "a reset");
        self.send_down(conn, Down::Reset);
    }

    /// Cuts, until `until`, the paths of one client to some masters, or of
    /// one master to every client.
    fn partition(&mut self, until: u64) {
        if self.rng.chance(0.5) {
            let m = self.rng.index(self.params.masters);
            self.note(|| format!("master address {m} is cut off until {:.6}", secs(until)));
            for row in &mut self.net.cut_until {
                row[m] = row[m].max(until);
            }
            let to = until + self.params.reconnect_bound();
            self.disturb((None, None, false), to, "a master cut off");
        } else {
            let c = self.rng.index(self.clients.len());
            self.note(|| {
                format!(
                    "client {c} is cut off from some masters until {:.6}",
                    secs(until)
                )
            });
            let to = until + self.params.reconnect_bound();
            self.disturb((Some(c), None, false), to, "a client cut off");
            for m in 0..self.params.masters {
                if self.rng.chance(0.5) {
                    let cut = &mut self.net.cut_until[c][m];
                    *cut = (*cut).max(until);
                }
            }
        }
    }

    /// Records that something other than the hand-off may hold waiters
    /// up from now until `to`: those of `client` only, of `resource`
    /// only, if given, and those queued before it too if it `wipes`
    /// entries out of the queues.
    pub(crate) fn disturb(
        &mut self,
        (client, resource, wipes): Whose,
        to: u64,
        what: &'static str,
    ) {
        let from = self.t;
        self.note(|| format!("{what}: waiters may be held up until {:.6}", secs(to)));
        let d = super::history::Disturbance {
            client,
            resource,
            wipes,
            from,
            to,
        };
        self.history.disturbed.push(d);
        self.watching.cut(what, client, from, to);
    }

    /// How long a fault of a moment may hold waiters up after it: a
    /// request timeout's round that met it, the round after, and a
    /// hand-off's trips.
    fn settle_time(&self) -> u64 {
        let rt = self.params.settings.request_timeout.as_nanos() as u64;
        2 * rt + 8 * self.params.one_way()
    }

    /// Whose waiters `words`, another client's write, may hold up, and
    /// for how long: `None` if nobody's. A key it writes lives as long as
    /// its `PX` or `PEXPIRE` says; a queue's key written, or its expiry
    /// shortened, takes its entries out; a wake-up nobody sent makes its
    /// waiter try at another time; dead waiters added to a queue hold
    /// nobody up.
    fn foreign_effect(&self, words: &[Vec<u8>]) -> Option<(Whose, u64)> {
        let word = |i: usize| words.get(i).map(Vec::as_slice);
        let number = |w: Option<&[u8]>| {
            w.and_then(|w| std::str::from_utf8(w).ok()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let key = word(1).unwrap_or_default();
        let queue = key.strip_prefix(b"redlock-mio:queue:".as_slice());
        let resource = self
            .params
            .resources
            .iter()
            .position(|r| Some(r.as_slice()) == queue || r == key);
        let settle = self.settle_time();
        match word(0)? {
            b"PING" | b"ZADD" | b"ZADDDEAD" => None,
            b"SET" if key == b"other:key" => None,
            b"SET" => {
                let px = words.iter().position(|w| w == b"PX");
                let ms = number(px.and_then(|i| word(i + 1)));
                Some(((None, resource, false), ms * 1_000_000 + settle))
            }
            b"PUBLISH" => {
                let c = self.clients.iter().position(|c| c.channel == key);
                Some(((c, None, false), settle))
            }
            b"PEXPIRE" => {
                let ms = number(word(2));
                Some(((None, resource, queue.is_some()), ms * 1_000_000 + settle))
            }
            b"RPUSH" => Some(((None, resource, queue.is_some()), settle)),
            _ => Some(((None, None, false), settle)),
        }
    }

    /// The other clients write to a master that runs.
    pub(crate) fn foreign_write(&mut self) {
        let m = self.rng.index(self.masters.len());
        let channels: Vec<Vec<u8>> = self.clients.iter().map(|c| c.channel.clone()).collect();
        let max_ttl = self.params.longest().as_millis() as u64;
        let dead_only = self.params.waits_only;
        let resources = &self.params.resources;
        let mut commands = foreign_write(&mut self.rng, resources, &channels, max_ttl, dead_only);
        if self.params.regression == super::Regression::ForeignLeak {
            commands.push(vec![b"SET".to_vec(), b"other:leak".to_vec(), b"v".to_vec()]);
        }
        for words in commands {
            if !self.masters[m].runs(self.t) {
                return;
            }
            if let Some((whose, lasts)) = self.foreign_effect(&words) {
                self.disturb(whose, self.t + lasts, "another client's write");
            }
            if words[0] == b"ZADDDEAD" {
                // Dead waiters join a queue that is there (one made here
                // would never expire).
                let now_us = self.masters[m].clock.now_us(self.t);
                let there = self.masters[m]
                    .model
                    .keys(0, now_us)
                    .iter()
                    .any(|(k, _)| *k == words[1].as_slice());
                if !there {
                    return;
                }
                let mut zadd = words.clone();
                zadd[0] = b"ZADD".to_vec();
                let zadd: Vec<&[u8]> = zadd.iter().map(Vec::as_slice).collect();
                self.note(|| {
                    format!(
                        "master {m}: {} dead waiters join a queue",
                        zadd.len() / 2 - 1
                    )
                });
                self.command(m, &zadd);
                continue;
            }
            if words[0] == b"RPUSH" && !words[1].starts_with(b"redlock-mio:") {
                // Never where a lock's key is.
                let now_us = self.masters[m].clock.now_us(self.t);
                if self.masters[m].model.get(0, &words[1], now_us).is_some() {
                    return;
                }
            }
            let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            self.note(|| {
                format!(
                    "master {m}: a foreign {:?}",
                    words.iter().map(|w| super::show(w)).collect::<Vec<_>>()
                )
            });
            self.command(m, &words);
        }
    }

    /// Master `m`, if it runs, runs `words` from the other clients'
    /// connection, and writes the pushes it caused; whether it ran.
    pub(crate) fn command(&mut self, m: usize, words: &[&[u8]]) -> bool {
        if !self.masters[m].runs(self.t) {
            return false;
        }
        let args: Vec<Arg<'_>> = words.iter().map(|w| Arg::Bytes(w)).collect();
        let mut request = Vec::new();
        encode_command(&mut request, &args);
        let now_us = self.masters[m].clock.now_us(self.t);
        let mut out = Vec::new();
        let master = &mut self.masters[m];
        let mut conn = master
            .writer
            .take()
            .unwrap_or_else(|| master.model.connect());
        if master.model.handle(&mut conn, &request, now_us, &mut out) == crate::ConnState::Open {
            master.writer = Some(conn);
        }
        self.deliver_pushes(m);
        true
    }
}
