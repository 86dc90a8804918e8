//! A counting global allocator: `std::alloc::System` behind two atomic
//! counters (calls that allocate, and bytes asked for), so that a block of
//! locks can be divided into allocations per lock. It counts every thread
//! of the process (a lock's node threads and an async client's runtime
//! too); a block reads the counters before and after, like the `/proc`
//! counters. The cost is one relaxed atomic add per call, the same for
//! every client.

// A `GlobalAlloc` implementation cannot be written without `unsafe`: each
// method only forwards to `System` with the caller's own arguments.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Calls that returned new memory: `alloc`, `alloc_zeroed` and `realloc`
/// (a grown buffer is a new block; a shrink in place counts too).
static CALLS: AtomicU64 = AtomicU64::new(0);
/// Bytes those calls asked for (`realloc`: the new size).
static BYTES: AtomicU64 = AtomicU64::new(0);

struct Counting;

fn count(size: usize) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the same arguments and
// returns its result; the counters do not touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded unchanged, under the caller's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded unchanged, under the caller's contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged, under the caller's contract.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: forwarded unchanged, under the caller's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The process's allocations so far: (calls, bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocs {
    pub calls: u64,
    pub bytes: u64,
}

impl Allocs {
    pub fn now() -> Self {
        Self {
            calls: CALLS.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    /// `later - self`.
    pub fn since(self, later: Allocs) -> Allocs {
        Allocs {
            calls: later.calls.saturating_sub(self.calls),
            bytes: later.bytes.saturating_sub(self.bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_this_threads_allocations() {
        let before = Allocs::now();
        let v: Vec<u64> = Vec::with_capacity(1000);
        let d = before.since(Allocs::now());
        assert!(d.calls >= 1);
        assert!(d.bytes >= 8000);
        drop(v);
    }
}
