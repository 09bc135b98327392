//! Locking a mutex without letting poisoning spread: a panicked handler must
//! not take the whole emulator down with it.

use std::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
