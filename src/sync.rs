//! Taking the crate's mutexes.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking a poisoned one all the same: every state the
/// crate guards with a mutex is consistent between calls (no caller code
/// runs while it is held), so a panic elsewhere never leaves it half
/// changed.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
