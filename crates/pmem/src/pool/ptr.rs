//! Typed persistent pointers: an offset from the start of the pool, never
//! an address, so they stay valid when the pool is mapped elsewhere.

use std::marker::PhantomData;

/// A pointer to a `T` inside a [`Pool`](crate::Pool), stored as the
/// object's byte offset in the pool file. Offset 0 (the pool header) is the
/// null pointer. Dereferencing goes through the pool, which checks bounds
/// and alignment, so a pointer read back from a damaged file can give an
/// error but never reach outside the heap.
#[repr(transparent)]
pub struct PPtr<T> {
    offset: u64,
    _type: PhantomData<fn() -> T>,
}

impl<T> PPtr<T> {
    pub const fn null() -> PPtr<T> {
        PPtr { offset: 0, _type: PhantomData }
    }

    /// A pointer to the object at `offset`. Safe: every dereference is
    /// checked and pool objects are plain data valid for any bytes.
    pub const fn from_offset(offset: u64) -> PPtr<T> {
        PPtr { offset, _type: PhantomData }
    }

    pub const fn offset(self) -> u64 {
        self.offset
    }

    pub const fn is_null(self) -> bool {
        self.offset == 0
    }

    /// The `index`-th `T` after this one, for arrays allocated with
    /// `alloc_slice`. Overflow yields an offset no dereference accepts.
    pub fn at(self, index: u64) -> PPtr<T> {
        let step = (std::mem::size_of::<T>() as u64).checked_mul(index);
        PPtr::from_offset(step.and_then(|s| self.offset.checked_add(s)).unwrap_or(u64::MAX))
    }
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PPtr<T> {}

impl<T> PartialEq for PPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}

impl<T> Eq for PPtr<T> {}

impl<T> std::hash::Hash for PPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.offset.hash(state)
    }
}

impl<T> std::fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PPtr<{}>({:#x})", std::any::type_name::<T>(), self.offset)
    }
}

impl<T> Default for PPtr<T> {
    fn default() -> Self {
        PPtr::null()
    }
}

// SAFETY: `PPtr<T>` is `repr(transparent)` over a `u64` (PhantomData is a
// zero-sized, alignment-1 field), so the zero bit pattern is valid (null).
unsafe impl<T: 'static> bytemuck::Zeroable for PPtr<T> {}
// SAFETY: as above: no padding, every bit pattern is a valid offset, Copy.
unsafe impl<T: 'static> bytemuck::Pod for PPtr<T> {}
