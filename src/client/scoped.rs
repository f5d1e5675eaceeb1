//! Scoped holdings: acquire a lock, keep it alive while a closure or a
//! future runs, release it at the end, however the scope ends.
//!
//! Both forms are [`Redlock::keep`] around the caller's code: the code gets
//! the [`Keeper`] (its loss signal and fence), and the release is asked for
//! by a guard, so a panic or a dropped future still releases.

use std::thread;

use super::Redlock;
use super::keeper::{KeepOptions, Keeper};
use crate::error::Error;

impl Redlock {
    /// Acquires `resource` as [`lock`](Self::lock) does (with the client's
    /// retries), for `options`' TTL; keeps it as [`keep`](Self::keep) does
    /// while `f` runs; releases it when `f` returns or panics. Returns
    /// what `f` returned.
    ///
    /// `f` gets the lock's [`Keeper`]: its loss signal
    /// ([`is_lost`](Keeper::is_lost), [`validity`](Keeper::validity),
    /// [`wait_lost`](Keeper::wait_lost), [`lost`](Keeper::lost)) and its
    /// [`fence`](Keeper::fence). The lock cannot stop `f`: check the
    /// signal before each step of the work.
    ///
    /// The release is waited for: once `with_lock` returns (or the panic
    /// goes on), the release's round is over. Its outcome is the final
    /// standing given to [`KeepOptions::on_change`] and counted in
    /// [`stats`](Self::stats): [`Standing::Released`], or
    /// [`Standing::Lost`] if the lock was lost meanwhile (also when only
    /// the release found that out); `f`'s value is returned either way.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{KeepOptions, Redlock};
    ///
    /// let client = Redlock::builder(["redis://h1:6379", "redis://h2:6379", "redis://h3:6379"]).build()?;
    /// let rows = client.with_lock("reports:daily", KeepOptions::new(Duration::from_secs(30)), |keeper| {
    ///     let mut rows = 0;
    ///     for _batch in 0..10 {
    ///         if keeper.is_lost() {
    ///             break;
    ///         }
    ///         rows += 100; // ... one batch of the work ...
    ///     }
    ///     rows
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Standing::Released`]: crate::Standing::Released
    /// [`Standing::Lost`]: crate::Standing::Lost
    ///
    /// # Errors
    ///
    /// As for [`lock`](Self::lock) and [`keep`](Self::keep); `f` is not run
    /// then.
    pub fn with_lock<T>(
        &self,
        resource: impl AsRef<[u8]>,
        options: KeepOptions,
        f: impl FnOnce(&Keeper) -> T,
    ) -> Result<T, Error> {
        let lock = self.lock(resource, options.ttl())?;
        let kept = ReleaseOnExit(self.keep(lock, options)?);
        Ok(f(&kept.0))
    }

    /// [`with_lock`](Self::with_lock) for async code: acquires as
    /// [`lock_async`](Self::lock_async) does, keeps the lock while the
    /// future of `f` runs, then releases it and awaits the end of the
    /// release's round (the executor's thread never blocks on it). Like
    /// every async call it needs no runtime: the keeper's thread wakes the
    /// task.
    ///
    /// `f`'s future gets the lock's [`Keeper`]; [`Keeper::lost`] is the
    /// future to race the work against.
    ///
    /// Cancellation: dropped while acquiring, as the Cancellation section
    /// of [`try_lock_async`](Self::try_lock_async) says; dropped while
    /// `f`'s future runs, or while the release is under way, the keeper is
    /// dropped, so its thread releases the lock on its own, after an
    /// extension in flight, within a request timeout.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redlock_mio::{KeepOptions, Redlock, Standing};
    ///
    /// # async fn send_invoice(_fence: Option<u64>) -> bool { true }
    /// # async fn demo(client: &Redlock) -> Result<(), redlock_mio::Error> {
    /// let options = KeepOptions::new(Duration::from_secs(30));
    /// let sent = client
    ///     .with_lock_async("invoice:42", options, async |keeper| {
    ///         if keeper.is_lost() {
    ///             return false;
    ///         }
    ///         // With tokio, race the work against the loss:
    ///         // `tokio::select! { Standing::Lost = keeper.lost() => false, sent = send_invoice(..) => sent }`
    ///         send_invoice(keeper.fence()).await
    ///     })
    ///     .await?;
    /// # let _ = (sent, Standing::Lost);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`lock_async`](Self::lock_async) and [`keep`](Self::keep);
    /// `f` is not run then.
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
        Ok(value)
    }
}

/// Releases a kept lock when the scope ends, however it ends, and waits for
/// the release's round.
struct ReleaseOnExit(Keeper);

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        if let Some(Err(panic)) = self.0.join() {
            // The callback panicked on the keeper's thread: passed on,
            // unless this thread already unwinds (a second panic would
            // abort).
            if !thread::panicking() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}
