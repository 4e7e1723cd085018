//! A persistent growable vector of plain-data elements.
//!
//! `PVec<T>` is itself plain data (one persistent pointer to a header), so
//! it can sit inside any persistent struct, the root included: this is the
//! pattern for writing one's own structures (see `docs/pmem.md`). Every
//! change takes a [`Tx`], so pushes, pops and growth are all-or-nothing
//! together with whatever else that transaction does.

use bytemuck::{Pod, Zeroable};

use crate::error::{Error, Result};
use crate::{PPtr, Pool, Tx};

/// Where the elements are and how many.
#[repr(C)]
pub struct VecHeader<T> {
    data: PPtr<T>,
    len: u64,
    capacity: u64,
}

impl<T> Clone for VecHeader<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for VecHeader<T> {}

// SAFETY: `repr(C)` with three 8-byte plain fields: no padding, any bits valid.
unsafe impl<T: 'static> Zeroable for VecHeader<T> {}
// SAFETY: as above.
unsafe impl<T: 'static> Pod for VecHeader<T> {}

/// A handle to a persistent vector; copy it into persistent structs freely.
/// The null handle (all zeros) is "not created yet".
#[repr(transparent)]
pub struct PVec<T> {
    header: PPtr<VecHeader<T>>,
}

impl<T> Clone for PVec<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for PVec<T> {}

impl<T> PartialEq for PVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.header == other.header
    }
}

impl<T> std::fmt::Debug for PVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PVec({:#x})", self.header.offset())
    }
}

// SAFETY: transparent over a `PPtr`, which is Pod.
unsafe impl<T: 'static> Zeroable for PVec<T> {}
// SAFETY: as above.
unsafe impl<T: 'static> Pod for PVec<T> {}

impl<T: Pod> PVec<T> {
    /// An empty vector, allocated in `tx`.
    pub fn new(tx: &mut Tx<'_>) -> Result<PVec<T>> {
        let header = tx.alloc(VecHeader { data: PPtr::null(), len: 0, capacity: 0 })?;
        Ok(PVec { header })
    }

    pub fn is_created(self) -> bool {
        !self.header.is_null()
    }

    fn header(self, pool: &Pool) -> Result<VecHeader<T>> {
        Ok(*pool.get(self.header)?)
    }

    pub fn len(self, pool: &Pool) -> Result<u64> {
        Ok(self.header(pool)?.len)
    }

    pub fn is_empty(self, pool: &Pool) -> Result<bool> {
        Ok(self.len(pool)? == 0)
    }

    pub fn get(self, pool: &Pool, index: u64) -> Result<Option<T>> {
        let header = self.header(pool)?;
        if index >= header.len {
            return Ok(None);
        }
        Ok(Some(*pool.get(header.data.at(index))?))
    }

    pub fn as_slice(self, pool: &Pool) -> Result<&[T]> {
        let header = self.header(pool)?;
        if header.len == 0 {
            return Ok(&[]);
        }
        pool.get_slice(header.data, header.len)
    }

    /// Appends `value`, doubling the storage when full.
    pub fn push(self, tx: &mut Tx<'_>, value: T) -> Result<()> {
        let mut header = *tx.get(self.header)?;
        if header.len == header.capacity {
            let capacity = header.capacity.saturating_mul(2).max(4);
            let data = tx.alloc_slice_zeroed::<T>(capacity)?;
            if header.len > 0 {
                let old: Vec<T> = tx.get_slice(header.data, header.len)?.to_vec();
                tx.get_slice_mut(data, header.len)?.copy_from_slice(&old);
                tx.free(header.data)?;
            }
            header.data = data;
            header.capacity = capacity;
        }
        tx.set(header.data.at(header.len), value)?;
        header.len += 1;
        tx.set(self.header, header)
    }

    pub fn pop(self, tx: &mut Tx<'_>) -> Result<Option<T>> {
        let mut header = *tx.get(self.header)?;
        if header.len == 0 {
            return Ok(None);
        }
        header.len -= 1;
        let value = *tx.get(header.data.at(header.len))?;
        tx.set(self.header, header)?;
        Ok(Some(value))
    }

    pub fn set(self, tx: &mut Tx<'_>, index: u64, value: T) -> Result<()> {
        let header = *tx.get(self.header)?;
        if index >= header.len {
            return Err(Error::BadPointer {
                path: tx.pool().path().to_path_buf(),
                offset: header.data.at(index).offset(),
                len: std::mem::size_of::<T>() as u64,
                reason: "is past the end of the vector",
            });
        }
        tx.set(header.data.at(index), value)
    }

    /// Frees the elements and the header.
    pub fn destroy(self, tx: &mut Tx<'_>) -> Result<()> {
        let header = *tx.get(self.header)?;
        if !header.data.is_null() {
            tx.free(header.data)?;
        }
        tx.free(self.header)
    }
}
