//! `--pin`: the local masters on one CPU, the benchmark (its measuring
//! threads, the clients and their threads) on the others.
//!
//! By default the five `redis-server` processes and the clients share every
//! CPU of the machine, so a client's CPU time is time the masters wait for,
//! and every wake-up may land behind a master on a busy CPU. On a small
//! machine that sharing, not the client's round trip, sets part of the
//! ratios to the floors. Pinned, the client gets CPUs of its own, as it
//! would on a host of its own; the masters, all on one CPU, are slower, for
//! every variant and the floors alike. Comparisons are only valid within
//! one run, pinned or not.
//!
//! Linux only (`sched_setaffinity`); each thread of a process is pinned
//! (`/proc/<pid>/task`), and threads started later inherit the mask of the
//! thread that starts them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The CPU the masters run on, plus one (0: not pinned).
static MASTERS_CPU: AtomicUsize = AtomicUsize::new(0);

/// The CPUs this process may run on.
fn allowed() -> Result<Vec<usize>, String> {
    // SAFETY: an all-zero `cpu_set_t` is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a `cpu_set_t` of the size passed; pid 0 is this thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(format!(
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE and `set` is initialised.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Pins every thread of process `pid` (0: this process) to `cpus`.
fn pin_process(pid: u32, cpus: &[usize]) -> Result<(), String> {
    // SAFETY: an all-zero `cpu_set_t` is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` came from `allowed`, below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    let dir = if pid == 0 {
        "/proc/self/task".to_owned()
    } else {
        format!("/proc/{pid}/task")
    };
    let tasks = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
    for task in tasks {
        let task = task.map_err(|e| format!("{dir}: {e}"))?;
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // SAFETY: `set` is an initialised `cpu_set_t` of the size passed.
        let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
        if rc != 0 {
            return Err(format!(
                "sched_setaffinity({tid}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Pins the masters `pids` to the first CPU this process may use and this
/// process to the others; returns what it did, for the report.
pub(crate) fn split(pids: impl IntoIterator<Item = u32>) -> Result<String, String> {
    let cpus = allowed()?;
    let Some((&first, rest)) = cpus.split_first().filter(|(_, rest)| !rest.is_empty()) else {
        return Err(format!(
            "--pin needs two CPUs or more, this process may use {cpus:?}"
        ));
    };
    MASTERS_CPU.store(first + 1, Ordering::Relaxed);
    let mut masters = 0;
    for pid in pids {
        pin_process(pid, &[first])?;
        masters += 1;
    }
    pin_process(0, rest)?;
    Ok(format!(
        "pinned: {masters} masters on CPU {first}, this benchmark on CPUs {rest:?}"
    ))
}

/// Pins masters started after [`split`] beside the others (nothing when
/// not pinned).
#[allow(dead_code, reason = "only the latency bench starts masters later")]
pub(crate) fn follow(pids: impl IntoIterator<Item = u32>) -> Result<(), String> {
    let Some(cpu) = MASTERS_CPU.load(Ordering::Relaxed).checked_sub(1) else {
        return Ok(());
    };
    pids.into_iter()
        .try_for_each(|pid| pin_process(pid, &[cpu]))
}
