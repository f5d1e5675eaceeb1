//! The wire: delivering what is due on each connection, at the master's
//! end (connects, requests, closes; the replies and the pushes it writes
//! back) and at the client's (connects accepted or refused, replies, the
//! ends of streams).

use super::net::{Down, Up};
use super::{Ev, World};

impl World {
    /// Schedules the delivery of `conn`'s front segment toward the master
    /// (`up`) or the client, unless one is scheduled: when it is due, or
    /// once what holds it up (a partition, a pause) is over.
    pub(crate) fn arm(&mut self, conn: usize, up: bool) {
        let k = &self.net.conns[conn];
        let (front, armed) = if up {
            (k.up.front(), k.up.armed)
        } else {
            (k.down.front(), k.down.armed)
        };
        let Some(mut at) = front else {
            return;
        };
        if armed {
            return;
        }
        at = at.max(self.held_until(conn, up));
        if up {
            self.net.conns[conn].up.armed = true;
        } else {
            self.net.conns[conn].down.armed = true;
        }
        self.at(at, Ev::Pump { conn, up });
    }

    /// Until when `conn`'s segments toward the master (`up`) or the client
    /// are held up now: a partition (then until the sender's next
    /// retransmission after it heals), a paused master (which reads
    /// nothing, though its host accepts connects), a paused client.
    fn held_until(&self, conn: usize, up: bool) -> u64 {
        let k = &self.net.conns[conn];
        let syn = matches!(k.up.segs.front(), Some((_, Up::Syn)));
        let cut = match self.net.cut(conn, self.t) {
            Some(heal) => {
                let sent = if up { k.up.front() } else { k.down.front() };
                retransmission(sent.unwrap_or(self.t), heal, syn && up)
            }
            None => 0,
        };
        let paused = if up {
            if syn {
                0
            } else {
                self.masters[self.params.proc_of[k.master]].paused_until
            }
        } else {
            self.clients[k.client].paused_until
        };
        cut.max(paused)
    }

    /// Delivers what is due on `conn` toward its master.
    pub(crate) fn pump_up(&mut self, conn: usize) {
        self.net.conns[conn].up.armed = false;
        while self.net.conns[conn]
            .up
            .front()
            .is_some_and(|at| at <= self.t)
        {
            if self.held_until(conn, true) > self.t {
                break;
            }
            let Some((_, seg)) = self.net.conns[conn].up.segs.pop_front() else {
                break;
            };
            self.at_master(conn, seg);
        }
        self.arm(conn, true);
    }

    /// `seg` reaches the master's end of `conn`.
    fn at_master(&mut self, conn: usize, seg: Up) {
        let m = self.params.proc_of[self.net.conns[conn].master];
        if self.net.conns[conn].dead {
            return;
        }
        match seg {
            Up::Syn if self.masters[m].down => {
                self.net.conns[conn].dead = true;
                self.send_down(conn, Down::Refused);
            }
            Up::Syn => {
                let model = self.masters[m].model.connect();
                self.net.conns[conn].model = Some(model);
                self.masters[m].conns.push(conn);
                self.send_down(conn, Down::SynAck);
            }
            Up::Data(data) => self.serve(conn, &data),
            Up::Fin => {
                if let Some(model) = self.net.conns[conn].model.take() {
                    self.masters[m].model.close(model);
                    self.masters[m].conns.retain(|&k| k != conn);
                }
            }
        }
    }

    /// The master runs the requests `data` completes on `conn`, and
    /// writes back the replies, and the pushes they caused to every
    /// connection that listens.
    fn serve(&mut self, conn: usize, data: &[u8]) {
        let m = self.params.proc_of[self.net.conns[conn].master];
        let now_us = self.masters[m].clock.now_us(self.t);
        let (c, a, t) = (
            self.net.conns[conn].client,
            self.net.conns[conn].master,
            self.t,
        );
        let Some(model) = self.net.conns[conn].model.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        let (leftovers, places) = (&mut self.leftovers, &mut self.places);
        let state = self.masters[m].model.handle_observed(
            model,
            data,
            now_us,
            &mut out,
            &mut |master, words, moment| {
                places.ran(m, t, master, now_us, words, moment);
                if moment == crate::Moment::After {
                    leftovers.ran(c, a, t, master, now_us, words);
                }
            },
        );
        self.note(|| {
            format!(
                "master {m} (clock {}) from client {c} on {conn}: {} -> {}",
                now_us / 1000,
                data.escape_ascii(),
                out.escape_ascii()
            )
        });
        if !out.is_empty() {
            self.send_down(conn, Down::Data(out));
        }
        if state == crate::ConnState::Closed {
            self.net.conns[conn].model = None;
            self.masters[m].conns.retain(|&k| k != conn);
            self.send_down(conn, Down::Fin);
        }
        self.deliver_pushes(m);
    }

    /// Master `m` writes the pushes waiting for its connections.
    pub(crate) fn deliver_pushes(&mut self, m: usize) {
        for j in 0..self.masters[m].conns.len() {
            let other = self.masters[m].conns[j];
            let Some(model) = self.net.conns[other].model.as_ref() else {
                continue;
            };
            let mut out = Vec::new();
            self.masters[m].model.take_pushes(model, &mut out);
            if !out.is_empty() {
                let c = self.net.conns[other].client;
                self.note(|| format!("master {m} pushes to client {c}: {}", out.escape_ascii()));
                self.send_down(other, Down::Data(out));
            }
        }
    }

    /// The master's end of `conn` (or its host) sends `seg`.
    pub(crate) fn send_down(&mut self, conn: usize, seg: Down) {
        let delay = self.net.delay(conn, self.t, &mut self.rng);
        self.net.conns[conn].down.push(self.t, delay, seg);
        self.arm(conn, false);
    }

    /// Delivers what is due on `conn` toward its client.
    pub(crate) fn pump_down(&mut self, conn: usize) {
        self.net.conns[conn].down.armed = false;
        let c = self.net.conns[conn].client;
        let mut delivered = false;
        while self.net.conns[conn]
            .down
            .front()
            .is_some_and(|at| at <= self.t)
        {
            if self.held_until(conn, false) > self.t {
                break;
            }
            let Some((_, seg)) = self.net.conns[conn].down.segs.pop_front() else {
                break;
            };
            self.at_client(conn, seg);
            delivered = true;
        }
        self.arm(conn, false);
        if delivered {
            self.settle(c);
        }
    }

    /// `seg` reaches the client's end of `conn`: dropped if the client
    /// closed that socket since.
    fn at_client(&mut self, conn: usize, seg: Down) {
        let (c, i) = (self.net.conns[conn].client, self.net.conns[conn].master);
        if self.clients[c].socks[i] != Some(conn) {
            return;
        }
        match seg {
            Down::SynAck => {
                self.net.conns[conn].connected = true;
                let now = self.local(c);
                self.clients[c].client.handle_connected(i, now);
                self.write(c, i);
            }
            Down::Refused => self.client_fail(c, i, World::refused_error()),
            Down::Data(data) => self.read(c, i, &data),
            Down::Fin => self.read_end(c, i),
            Down::Reset => self.client_fail(c, i, World::reset_error()),
        }
    }
}

/// When a segment first due at `sent` and lost to a partition until `heal`
/// gets through: at its sender's first retransmission after `heal`, the
/// timeout doubling from 200 ms (1 s for a connect), as TCP's does. A
/// socket the client has closed meanwhile still retransmits what it had
/// written: late, it may reach the server after what a newer connection
/// sent.
fn retransmission(sent: u64, heal: u64, connect: bool) -> u64 {
    const MAX: u64 = 120_000_000_000;
    let mut timeout: u64 = if connect { 1_000_000_000 } else { 200_000_000 };
    let mut at = sent + timeout;
    while at < heal && timeout < MAX {
        timeout *= 2;
        at += timeout;
    }
    at.max(heal)
}
