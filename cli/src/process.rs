//! The command under the lock, run as a process group of its own and
//! watched until nothing of it is left.
//!
//! - The command leads a new process group, so that one signal reaches it
//!   and everything it starts that stays in the group (a shell's children,
//!   a pipeline).
//! - SIGINT, SIGTERM and SIGHUP to `redlock` are caught by a handler that
//!   only sets a bit in an atomic; the main loop forwards them to the
//!   group.
//! - Linux: the command gets SIGKILL when `redlock` dies, even by SIGKILL
//!   (`PR_SET_PDEATHSIG`), and `redlock` is a child subreaper, so that the
//!   group's orphans become its children and it reaps them: "the group is
//!   gone" then means that every member has been reaped. Other Unix
//!   systems get neither: a `redlock` killed by SIGKILL leaves the command
//!   running, and a member left a zombie by its parent counts as present
//!   until the bounded wait after SIGKILL ends.
//! - When standard input is a terminal and `redlock` is in its foreground,
//!   the terminal goes to the command's group while it runs (the command
//!   can read from it; Ctrl-C and Ctrl-Z reach it directly), and a stop of
//!   the command from the terminal stops `redlock` too, until it is
//!   continued.

use std::io;
use std::mem;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use libc::{c_int, pid_t};
use redlock_mio::Keeper;

/// The signals forwarded to the command's group.
const FORWARDED: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// How often the main loop looks at the command, the signals and the lock.
const POLL: Duration = Duration::from_millis(20);

/// How long to wait, after SIGKILL, for the group to be gone before the
/// lock is released anyway (what is left is dead but not yet reaped, or in
/// an uninterruptible sleep that ends with its system call).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// One bit per caught signal number, set by the handler, taken by
/// [`take_signals`].
static PENDING: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(signo: c_int) {
    // Async-signal-safe: one lock-free atomic operation; no allocation, no
    // lock, errno untouched.
    if (0..32).contains(&signo) {
        PENDING.fetch_or(1 << signo, Ordering::SeqCst);
    }
}

/// Catches SIGINT, SIGTERM and SIGHUP from now on, except those this
/// process was started with ignored (`nohup`, `&` in a script): they stay
/// ignored, for `redlock` and for the command.
///
/// # Errors
///
/// What `sigaction` says.
pub(crate) fn catch_signals() -> io::Result<()> {
    for signo in FORWARDED {
        // SAFETY: sigaction with a valid signal number and zeroed (valid)
        // sigaction structs; the handler installed is async-signal-safe.
        unsafe {
            let mut old: libc::sigaction = mem::zeroed();
            if libc::sigaction(signo, ptr::null(), &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            if old.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            let mut action: libc::sigaction = mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signo, &action, ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The signals caught since the last call, in the order SIGINT, SIGTERM,
/// SIGHUP.
pub(crate) fn take_signals() -> impl Iterator<Item = c_int> {
    let bits = PENDING.swap(0, Ordering::SeqCst);
    FORWARDED
        .into_iter()
        .filter(move |&signo| bits & (1 << signo) != 0)
}

/// The signal's name, for messages.
pub(crate) fn signal_name(signo: c_int) -> &'static str {
    match signo {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGKILL => "SIGKILL",
        _ => "a signal",
    }
}

/// How the command's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The command ended by itself, with this exit code (128 + N if
    /// signal N ended it); what it left in its group was stopped.
    Exited(u8),
    /// `redlock` got this signal, forwarded it, and the group is gone.
    Signalled(c_int),
    /// The lock was lost, and the group was stopped.
    Lost,
}

/// The command's process group: the command is its leader.
pub(crate) struct Group {
    /// The command's process id, which is the group's id.
    pid: pid_t,
    /// The command's wait status once it has ended.
    status: Option<c_int>,
    /// Whether the terminal was handed to the group.
    terminal: bool,
}

impl Group {
    /// Starts `command` as the leader of a new process group.
    ///
    /// # Errors
    ///
    /// As for [`Command::spawn`].
    pub(crate) fn spawn(command: &mut Command) -> io::Result<Group> {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        let terminal = in_foreground();
        #[cfg(any(target_os = "linux", target_os = "android"))]
        // SAFETY: prctl with an option that takes one integer argument.
        // Best effort: without it, orphans of the group go to init, and
        // the group is still waited for (its zombies then until KILL_WAIT
        // if init does not reap them).
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        // SAFETY: the hook runs in the child between fork and exec and
        // calls only async-signal-safe functions; it allocates nothing.
        unsafe {
            command.pre_exec(move || in_child(parent, terminal));
        }
        // `spawn` returns once the command has been executed, so the group
        // exists and has the terminal by then. The `Child` is dropped
        // without waiting: this module reaps with waitpid.
        let child = command.spawn()?;
        let pid = pid_t::try_from(child.id()).map_err(io::Error::other)?;
        Ok(Group {
            pid,
            status: None,
            terminal,
        })
    }

    /// Sends `signo` to every member of the group, then SIGCONT (a stopped
    /// process acts on no other signal). Errors are ignored: the group may
    /// be gone already.
    fn signal(&self, signo: c_int) {
        // SAFETY: killpg with the group this process created (its leader
        // is not reaped while members are counted) and valid signals.
        unsafe {
            libc::killpg(self.pid, signo);
            if signo != libc::SIGKILL {
                libc::killpg(self.pid, libc::SIGCONT);
            }
        }
    }

    /// Reaps every child that has ended: the command (its status is kept)
    /// and orphans handed to this process. Returns whether the command was
    /// stopped from the terminal.
    fn reap(&mut self) -> bool {
        let mut stopped = false;
        let flags = libc::WNOHANG | if self.terminal { libc::WUNTRACED } else { 0 };
        loop {
            let mut status: c_int = 0;
            // SAFETY: waitpid with a valid out pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
            // 0: none has ended; -1: none left (ECHILD) or interrupted,
            // the next poll comes back.
            if pid <= 0 {
                return stopped;
            }
            if pid == self.pid {
                if libc::WIFSTOPPED(status) {
                    stopped = true;
                } else if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                    self.status = Some(status);
                }
            }
        }
    }

    /// Whether no member of the group is left (reaped, on Linux).
    fn is_gone(&self) -> bool {
        if self.status.is_none() {
            return false;
        }
        // SAFETY: signal 0 only checks that the group exists.
        let found = unsafe { libc::killpg(self.pid, 0) } == 0;
        !found && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// The command was stopped from the terminal (Ctrl-Z): takes the
    /// terminal back and stops `redlock` too, so that the shell gets its
    /// prompt; once continued, gives the terminal back if `redlock` is in
    /// the foreground again (`fg`) and continues the command. The lock is
    /// not extended while `redlock` is stopped.
    fn suspend(&self) {
        // SAFETY: terminal calls on standard input, and raise/killpg with
        // valid signals.
        unsafe {
            if libc::tcgetpgrp(libc::STDIN_FILENO) == self.pid {
                set_foreground(libc::getpgrp());
            }
            libc::raise(libc::SIGTSTP);
            if libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp() {
                set_foreground(self.pid);
            }
            libc::killpg(self.pid, libc::SIGCONT);
        }
    }

    /// Takes the terminal back if the group still has it.
    fn finish(&self) {
        // SAFETY: terminal calls on standard input.
        unsafe {
            if self.terminal && libc::tcgetpgrp(libc::STDIN_FILENO) == self.pid {
                set_foreground(libc::getpgrp());
            }
        }
    }

    /// Watches the command until it ends, a caught signal or the loss of
    /// the lock stops it, and then until its whole group is gone: a stopped
    /// group gets SIGTERM (or the caught signal), and SIGKILL once `grace`
    /// has passed. The lock is kept (by `keeper`) all along.
    pub(crate) fn supervise(&mut self, keeper: &Keeper, grace: Duration) -> End {
        let mut end: Option<End> = None;
        let mut kill_at: Option<Instant> = None;
        let mut killed_at: Option<Instant> = None;
        loop {
            if self.reap() {
                self.suspend();
                continue;
            }
            let now = Instant::now();
            for signo in take_signals() {
                self.signal(signo);
                if end.is_none() {
                    eprintln!(
                        "redlock: got {}; sent it to the command's process group",
                        signal_name(signo)
                    );
                    end = Some(End::Signalled(signo));
                }
                kill_at.get_or_insert(later(now, grace));
            }
            if end.is_none() {
                if keeper.is_lost() {
                    eprintln!("redlock: lost the lock; stopping the command's process group");
                    self.signal(libc::SIGTERM);
                    end = Some(End::Lost);
                    kill_at = Some(later(now, grace));
                } else if let Some(status) = self.status {
                    let code = exit_code(status);
                    if self.is_gone() {
                        self.finish();
                        return End::Exited(code);
                    }
                    eprintln!(
                        "redlock: the command left processes in its process group; stopping them"
                    );
                    self.signal(libc::SIGTERM);
                    end = Some(End::Exited(code));
                    kill_at = Some(later(now, grace));
                }
            }
            if let Some(end) = end {
                if self.is_gone() {
                    self.finish();
                    return end;
                }
                match (kill_at, killed_at) {
                    (Some(at), None) if now >= at => {
                        eprintln!(
                            "redlock: the command's process group is still there after {grace:?}; sending SIGKILL"
                        );
                        self.signal(libc::SIGKILL);
                        killed_at = Some(now);
                    }
                    (_, Some(at)) if now >= at + KILL_WAIT => {
                        eprintln!(
                            "redlock: processes of the command's group are still there {KILL_WAIT:?} after SIGKILL; releasing the lock anyway"
                        );
                        self.finish();
                        return end;
                    }
                    _ => {}
                }
                thread::sleep(POLL);
            } else {
                keeper.wait_lost(POLL);
            }
        }
    }
}

/// `now + delay`, or a time that never comes if that cannot be told.
fn later(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)))
}

/// Whether standard input is a terminal whose foreground process group is
/// this process's.
fn in_foreground() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp on standard input.
    unsafe {
        libc::isatty(libc::STDIN_FILENO) == 1
            && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
    }
}

/// Makes `pgid` the terminal's foreground group, with SIGTTOU blocked (a
/// process outside the foreground group would otherwise be stopped by it).
/// Async-signal-safe.
///
/// # Safety
///
/// Only async-signal-safe calls; none has preconditions beyond valid
/// pointers.
unsafe fn set_foreground(pgid: pid_t) -> c_int {
    // SAFETY: signal set operations on local sets, sigprocmask with valid
    // pointers, tcsetpgrp on standard input.
    unsafe {
        let mut block: libc::sigset_t = mem::zeroed();
        let mut old: libc::sigset_t = mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &block, &mut old);
        let done = libc::tcsetpgrp(libc::STDIN_FILENO, pgid);
        libc::sigprocmask(libc::SIG_SETMASK, &old, ptr::null_mut());
        done
    }
}

/// In the child, before exec: a process group of its own; on Linux,
/// SIGKILL when `redlock` dies; the terminal if `redlock` had it. Only
/// async-signal-safe calls, no allocation.
fn in_child(parent: pid_t, terminal: bool) -> io::Result<()> {
    // SAFETY: setpgid, prctl, getppid, getpid: no preconditions.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            // The signal is tied to the thread that forked: the main
            // thread, which lives as long as `redlock`.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // `redlock` may have died before the signal was armed: then
            // this process has another parent already, and must not run.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = parent;
        if terminal && set_foreground(libc::getpid()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The exit code for a wait status: the exit status, or 128 + the signal
/// that ended the process.
fn exit_code(status: c_int) -> u8 {
    if libc::WIFEXITED(status) {
        u8::try_from(libc::WEXITSTATUS(status) & 0xff).unwrap_or(1)
    } else if libc::WIFSIGNALED(status) {
        u8::try_from((128 + libc::WTERMSIG(status)) & 0xff).unwrap_or(1)
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_sets_one_bit_per_signal() {
        on_signal(libc::SIGHUP);
        on_signal(libc::SIGTERM);
        on_signal(libc::SIGHUP);
        let taken: Vec<c_int> = take_signals().collect();
        assert_eq!(taken, [libc::SIGTERM, libc::SIGHUP]);
        assert_eq!(take_signals().count(), 0);
    }
}
