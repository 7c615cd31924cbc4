//! Checked conversions between the engine's integer widths, each with the bound that makes it
//! infallible stated once; and the three kinds of index the engine passes around — a stripe
//! ([`StripeIx`]), a position within a stripe ([`Pos`]) and a member ([`MemberIx`]) — as
//! newtypes, so that a position cannot be passed where a member index is taken (`member_of`
//! and `position_of` map between the two) without the compiler saying so.

// The engine addresses member bytes, stripes and chunks in u64 and indexes memory in usize; it
// is built for 64-bit targets only (io_uring, O_DIRECT, multi-TiB members), so every u64 that
// indexes memory fits. This says so at compile time, and usize_of is the one checked conversion.
const _: () = assert!(
    usize::BITS >= 64,
    "stripeguard's engine needs a 64-bit target"
);

/// `v` as a memory index or length (checked; infallible on the 64-bit targets the assertion
/// above requires). Public: the crates above the engine (campaigns, the server) index memory
/// by the engine's byte counts too.
pub fn usize_of(v: u64) -> usize {
    usize::try_from(v).expect("a 64-bit target: usize holds every u64")
}

/// A member index or stripe position as stored (u16): at most 255 members, checked at create
/// and at assembly (the member table's bound).
pub(crate) fn index_u16(v: usize) -> u16 {
    u16::try_from(v).expect("at most 255 members")
}

/// A byte offset or length within one unit as stored (u32): a chunk is at most 16 MiB plus its
/// appendix, checked at create and by the superblock decoder.
pub(crate) fn in_unit_u32(v: impl TryInto<u32>) -> u32 {
    v.try_into()
        .ok()
        .expect("within one unit (at most 16 MiB and its appendix)")
}

/// The CRC-32C a tag of the `checksum` mirror kind holds: those tags are CRCs widened to u64.
#[allow(
    clippy::cast_possible_truncation,
    reason = "a checksum-mirror tag is a CRC-32C widened to u64: its low 32 bits are the value"
)]
pub(crate) fn crc_of_tag(tag: u64) -> u32 {
    tag as u32
}

/// Unix milliseconds of `d` (saturating far past the year 584 million).
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A newtype over one kind of index: transparent, `Copy`, ordered and hashable like the integer
/// it wraps, shown as the bare number (in messages, events and errors exactly as the integer
/// was). `new` and `get` are its only conversions.
macro_rules! index_type {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub(crate) struct $name($int);

        impl $name {
            /// The index `v`.
            #[inline]
            pub(crate) const fn new(v: $int) -> Self {
                $name(v)
            }

            /// The bare number (at a seam with another crate, or to index memory).
            #[inline]
            pub(crate) const fn get(self) -> $int {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

index_type!(
    /// A stripe of the array (0 .. stripes): the unit at the same offset on every member.
    StripeIx(u64)
);

index_type!(
    /// A position within a stripe: `0..k` the data chunks, `k..k + m` the parity units, and
    /// `k + m` the checksum member's unit (in arrays with a checksum member). Which member
    /// holds it depends on the stripe (`Array::member_of`).
    Pos(usize)
);

index_type!(
    /// A member of the array: its slot in the member table (the order the members were
    /// given in), the same in every stripe. `Array::position_of` gives the position it holds
    /// in a stripe.
    MemberIx(usize)
);

impl Pos {
    /// This position and the ones after it, in order (the units of a run: a write's new
    /// chunks from its first, the parity units from `k`).
    pub(crate) fn onward(self) -> impl Iterator<Item = Pos> {
        (self.0..).map(Pos)
    }

    /// Positions `0 .. end`, in order.
    pub(crate) fn upto(end: usize) -> impl DoubleEndedIterator<Item = Pos> + ExactSizeIterator {
        (0..end).map(Pos)
    }
}

impl MemberIx {
    /// Members `0 .. end`, in order.
    pub(crate) fn upto(
        end: usize,
    ) -> impl DoubleEndedIterator<Item = MemberIx> + ExactSizeIterator {
        (0..end).map(MemberIx)
    }
}

// Transparent: an index costs exactly the integer it wraps.
const _: () = assert!(std::mem::size_of::<StripeIx>() == std::mem::size_of::<u64>());
const _: () = assert!(std::mem::size_of::<Pos>() == std::mem::size_of::<usize>());
const _: () = assert!(std::mem::size_of::<MemberIx>() == std::mem::size_of::<usize>());

/// A piece of a request within one stripe: the stripe, its array byte offset, its length, and
/// where its bytes are in the request's buffer.
pub(crate) type Piece = (StripeIx, u64, u64, usize);

#[cfg(test)]
mod tests {
    use super::{MemberIx, Pos, StripeIx};

    #[test]
    fn an_index_shows_as_its_bare_number() {
        assert_eq!(StripeIx::new(42).to_string(), "42");
        assert_eq!(format!("{:>4}", Pos::new(7)), "   7");
        assert_eq!(format!("member {}", MemberIx::new(3)), "member 3");
        assert_eq!(
            Pos::new(2)
                .onward()
                .take(3)
                .map(Pos::get)
                .collect::<Vec<_>>(),
            [2, 3, 4]
        );
    }
}
