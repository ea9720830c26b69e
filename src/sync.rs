//! Locks that outlive a panicking holder: every lock in this crate guards plain data that a panic cannot
//! leave half-written (a map entry, a counter, a snapshot), so a poisoned lock is used as it is.

use std::sync::{Mutex, MutexGuard, RwLock};

/// `mutex`, locked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A copy of what `slot` holds.
pub fn read<T: Clone>(slot: &RwLock<T>) -> T {
    slot.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
}

/// Put `value` in `slot`.
pub fn replace<T>(slot: &RwLock<T>, value: T) {
    *slot.write().unwrap_or_else(std::sync::PoisonError::into_inner) = value;
}
