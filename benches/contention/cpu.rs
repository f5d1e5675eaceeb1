//! CPU time spent by the bench's process and by the masters, so that a
//! cell can say what an acquisition costs the machine: on two CPUs shared
//! by the client and five masters, acquisitions/s under contention is
//! bounded by the CPU each one takes, not only by round trips.

use std::sync::OnceLock;
use std::time::Duration;

/// The masters' process ids, set once at start.
static MASTERS: OnceLock<Vec<u32>> = OnceLock::new();

/// Counts the CPU time of these processes (the masters) from now on.
pub(crate) fn watch_masters(pids: Vec<u32>) {
    let _ = MASTERS.set(pids);
}

/// CPU time used so far, or over an interval.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Cpu {
    /// This process: every worker, client and runtime thread.
    pub(crate) client: Duration,
    /// The masters together.
    pub(crate) masters: Duration,
}

impl Cpu {
    /// The CPU used since `earlier`.
    pub(crate) fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(earlier.client),
            masters: self.masters.saturating_sub(earlier.masters),
        }
    }

    /// Adds `other` to this.
    pub(crate) fn add(&mut self, other: Cpu) {
        self.client += other.client;
        self.masters += other.masters;
    }

    /// Per acquisition, in microseconds: `client + masters`, or `–`.
    pub(crate) fn per(self, acquisitions: usize) -> String {
        if acquisitions == 0 {
            return "–".to_owned();
        }
        let us = |d: Duration| d.as_secs_f64() * 1e6 / acquisitions as f64;
        format!("{:.0} + {:.0}", us(self.client), us(self.masters))
    }
}

/// The CPU time used so far by this process and by the masters.
pub(crate) fn now() -> Cpu {
    Cpu {
        client: own(),
        masters: MASTERS.get().map_or(Duration::ZERO, |pids| {
            pids.iter().filter_map(|&pid| process(pid)).sum()
        }),
    }
}

/// User and system time of this process, all threads.
fn own() -> Duration {
    // SAFETY: `usage` is a valid rusage to write to.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// User and system time of process `pid`, from `/proc/<pid>/stat` (in
/// clock ticks: 10 ms at the usual 100 Hz, fine over a cell of seconds).
fn process(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ..." — comm may hold anything: go from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&hz| hz > 0)?;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}
