//! Buffers whose memory is aligned for direct I/O.
//!
//! `O_DIRECT` needs the buffer's address, the file offset and the length aligned to what the
//! device and filesystem ask (`statx` `STATX_DIOALIGN`: typically 512 or 4096 for the offset,
//! 4 to 4096 for memory). A `Vec<u8>` is only as aligned as `malloc` makes it (16 bytes), so
//! the engine's unit buffers are these instead; a misaligned buffer would cost every direct
//! write a bounce through an aligned copy (and a read of the cover first).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// An owned, zero-initialised byte buffer whose address is a multiple of its alignment.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
}

// SAFETY: the buffer owns its memory exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read through Deref, like &[u8].
unsafe impl Sync for AlignedBuf {}

/// The alignment every buffer gets at least (a cache line), so two buffers never share one.
pub const MIN_ALIGN: usize = 64;

impl AlignedBuf {
    /// `len` zero bytes aligned to `align` (a power of two; raised to [`MIN_ALIGN`]).
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        let align = align.max(MIN_ALIGN).next_power_of_two();
        let layout = Layout::from_size_align(len.max(1), align).expect("a buffer layout");
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p) else {
            std::alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len, align }
    }

    /// A copy of `bytes`, aligned to `align`.
    pub fn from_slice(bytes: &[u8], align: usize) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(bytes.len(), align);
        b.copy_from_slice(bytes);
        b
    }

    /// The alignment of this buffer's address.
    pub fn align(&self) -> usize {
        self.align
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to len initialised (zeroed at allocation) bytes owned by self
        // and freed only on drop; Layout::from_size_align checked len <= isize::MAX.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self, self.align)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes, align {})", self.len, self.align)
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &AlignedBuf) -> bool {
        self[..] == other[..]
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), self.align).expect("a buffer layout");
        // SAFETY: allocated in zeroed() with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_independent() {
        for align in [1, 512, 4096] {
            let mut a = AlignedBuf::zeroed(65536 + 512, align);
            assert_eq!(a.as_ptr() as usize % align.max(MIN_ALIGN), 0);
            assert!(a.iter().all(|&b| b == 0));
            a[7] = 9;
            let b = a.clone();
            a[7] = 1;
            assert_eq!(b[7], 9);
            assert_eq!(b.as_ptr() as usize % align.max(MIN_ALIGN), 0);
        }
        assert_eq!(AlignedBuf::zeroed(0, 4096).len(), 0);
    }
}
