//! Scoped holdings: acquire a lock, keep it alive while a closure or a
//! future runs, release it at the end, however the scope ends.
//!
//! Both forms are [`Redlock::keep`] around the caller's code: the code gets
//! the [`Keeper`] (its loss signal and fence), and the release is asked for
//! by a guard, so a panic or a dropped future still releases. The keeper's
//! final standing decides the call's outcome: a loss fails it.

use std::thread;

use super::Redlock;
use super::keeper::{KeepOptions, Keeper, Standing};
use crate::error::Error;

impl Redlock {
    /// Acquires `resource` as [`lock`](Self::lock) does (with the client's
    /// retries), for `options`' TTL; keeps it as [`keep`](Self::keep) does
    /// while `f` runs; releases it when `f` returns or panics. Returns
    /// what `f` returned, or [`Error::Lost`] if the lock was lost
    /// meanwhile.
    ///
    /// `f` gets the lock's [`Keeper`]: its loss signal
    /// ([`is_lost`](Keeper::is_lost), [`validity`](Keeper::validity),
    /// [`wait_lost`](Keeper::wait_lost), [`lost`](Keeper::lost)) and its
    /// [`fence`](Keeper::fence). The lock cannot stop `f`: check the
    /// signal before each step of the work, and stop once it says lost.
    ///
    /// The release is waited for: once `with_lock` returns (or the panic
    /// goes on), the release's round is over. Its outcome is the final
    /// standing given to [`KeepOptions::on_change`] and counted in
    /// [`stats`](Self::stats): [`Standing::Released`], and `f`'s value is
    /// returned; or [`Standing::Lost`] if the lock was lost while `f` ran
    /// (also when only the release found that out: a quorum said the
    /// token no longer owned the resource), and the call fails with
    /// [`Error::Lost`], `f`'s value dropped.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{Error, KeepOptions, Redlock};
    ///
    /// let client = Redlock::builder(["redis://h1:6379", "redis://h2:6379", "redis://h3:6379"]).build()?;
    /// let done = client.with_lock("reports:daily", KeepOptions::new(Duration::from_secs(30)), |keeper| {
    ///     let mut rows = 0;
    ///     for _batch in 0..10 {
    ///         if keeper.is_lost() {
    ///             break; // the call fails with Error::Lost
    ///         }
    ///         rows += 100; // ... one batch of the work ...
    ///     }
    ///     rows
    /// });
    /// match done {
    ///     Ok(rows) => println!("{rows} rows"),
    ///     Err(Error::Lost) => eprintln!("lost the lock midway: check what was written"),
    ///     Err(other) => return Err(other.into()), // not acquired: the closure did not run
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Standing::Released`]: crate::Standing::Released
    /// [`Standing::Lost`]: crate::Standing::Lost
    ///
    /// # Errors
    ///
    /// As for [`lock`](Self::lock) and [`keep`](Self::keep), and `f` is
    /// not run then; [`Error::Lost`] after `f` ran, if the lock was lost.
    pub fn with_lock<T>(
        &self,
        resource: impl AsRef<[u8]>,
        options: KeepOptions,
        f: impl FnOnce(&Keeper) -> T,
    ) -> Result<T, Error> {
        let lock = self.lock(resource, options.ttl())?;
        let mut kept = ReleaseOnExit(self.keep(lock, options)?);
        let value = f(&kept.0);
        kept.release();
        match kept.0.standing() {
            Standing::Lost => Err(Error::Lost),
            _ => Ok(value),
        }
    }

    /// [`with_lock`](Self::with_lock) for async code: acquires as
    /// [`lock_async`](Self::lock_async) does, keeps the lock while the
    /// future of `f` runs, then releases it and awaits the end of the
    /// release's round (the executor's thread never blocks on it). Like
    /// every async call it needs no runtime: the keeper's thread wakes the
    /// task. Returns the future's value, or [`Error::Lost`] if the lock
    /// was lost meanwhile (the value dropped), as `with_lock` does.
    ///
    /// `f`'s future gets the lock's [`Keeper`]; [`Keeper::lost`] is the
    /// future to race the work against, the abort signal of the work.
    ///
    /// Cancellation: dropped while acquiring, as the Cancellation section
    /// of [`try_lock_async`](Self::try_lock_async) says; dropped while
    /// `f`'s future runs, or while the release is under way, the keeper is
    /// dropped, so its thread releases the lock on its own, after an
    /// extension in flight, within a request timeout.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{Error, KeepOptions, Redlock, Standing};
    ///
    /// # async fn send_invoice(_fence: Option<u64>) -> bool { true }
    /// # async fn demo(client: &Redlock) -> Result<(), redlock_mio::Error> {
    /// let options = KeepOptions::new(Duration::from_secs(30));
    /// let sent = client
    ///     .with_lock_async("invoice:42", options, async |keeper| {
    ///         // With tokio, race the work against the loss:
    ///         // `tokio::select! { Standing::Lost = keeper.lost() => false, sent = send_invoice(..) => sent }`
    ///         send_invoice(keeper.fence()).await
    ///     })
    ///     .await;
    /// match sent {
    ///     Ok(sent) => println!("sent: {sent}"),
    ///     Err(Error::Lost) => eprintln!("lost the lock while sending: check the invoice"),
    ///     Err(other) => return Err(other),
    /// }
    /// # let _ = Standing::Lost;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`lock_async`](Self::lock_async) and [`keep`](Self::keep),
    /// and `f` is not run then; [`Error::Lost`] after `f`'s future
    /// completed, if the lock was lost.
    pub async fn with_lock_async<T>(
        &self,
        resource: impl AsRef<[u8]>,
        options: KeepOptions,
        f: impl AsyncFnOnce(&Keeper) -> T,
    ) -> Result<T, Error> {
        let lock = self.lock_async(resource, options.ttl()).await?;
        let mut keeper = self.keep(lock, options)?;
        let value = f(&keeper).await;
        keeper.detach();
        keeper.finished().await;
        match keeper.standing() {
            Standing::Lost => Err(Error::Lost),
            _ => Ok(value),
        }
    }
}

/// Releases a kept lock when the scope ends, however it ends, and waits for
/// the release's round.
struct ReleaseOnExit(Keeper);

impl ReleaseOnExit {
    /// Releases the lock and waits for the release's round; a panic of
    /// the keeper's callback goes on, unless this thread already unwinds
    /// (a second panic would abort). Does nothing the second time.
    fn release(&mut self) {
        if let Some(Err(panic)) = self.0.join() {
            if !thread::panicking() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        self.release();
    }
}
