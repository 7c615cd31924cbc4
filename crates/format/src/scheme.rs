//! The integrity schemes and which primitives each one uses (docs/DESIGN.md, "Integrity schemes").

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// An integrity protection scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// Bare RAID: no integrity metadata. The negative control.
    None,
    /// Checksum mirroring only (buddy + every parity holds a copy of each chunk's checksum).
    Pure,
    /// Self-checksum + physical identity + version mirroring.
    Hybrid1,
    /// Self-checksum + physical identity + checksum mirroring.
    Hybrid2,
    /// Self-checksum + physical identity + array-wide sequence-number mirroring.
    HybridSeq,
    /// Kroth & Yang's checksum chunk (RAID5C/6C): no appendix; one more member holds, per
    /// stripe, the CRC-32C of every checksum block of every data and parity unit (FORMAT.md
    /// §2.10). Not one of Li & Lee's schemes: the simulator counts it with its own model.
    ChecksumChunk,
}

/// What a parity appendix (and, for checksums, the buddy) mirrors about each data chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorKind {
    /// A per-chunk version (hybrid1) or an array-wide sequence number (hybrid-seq); larger is newer.
    Version,
    /// The CRC-32C of the chunk's bytes (pure, hybrid2); copies vote.
    Checksum,
}

impl Scheme {
    /// Every scheme, in the order reports list them.
    pub const ALL: [Scheme; 5] = [
        Scheme::None,
        Scheme::Pure,
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::HybridSeq,
    ];

    /// Every scheme the engine runs: Li & Lee's five and the checksum chunk.
    pub const ENGINE: [Scheme; 6] = [
        Scheme::None,
        Scheme::Pure,
        Scheme::Hybrid1,
        Scheme::Hybrid2,
        Scheme::HybridSeq,
        Scheme::ChecksumChunk,
    ];

    /// Members beyond data and parity: the checksum chunk's own member.
    pub fn extra_members(self) -> usize {
        (self == Scheme::ChecksumChunk) as usize
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::None => "none",
            Scheme::Pure => "pure",
            Scheme::Hybrid1 => "hybrid1",
            Scheme::Hybrid2 => "hybrid2",
            Scheme::HybridSeq => "hybrid-seq",
            Scheme::ChecksumChunk => "checksum-chunk",
        }
    }

    /// The id stored on disk (FORMAT.md §2.1).
    pub fn id(self) -> u8 {
        match self {
            Scheme::None => 0,
            Scheme::Pure => 1,
            Scheme::Hybrid1 => 2,
            Scheme::Hybrid2 => 3,
            Scheme::HybridSeq => 4,
            Scheme::ChecksumChunk => 5,
        }
    }

    /// The scheme with on-disk id `id`.
    pub fn from_id(id: u8) -> Option<Scheme> {
        Scheme::ENGINE.into_iter().find(|s| s.id() == id)
    }

    /// Whether units carry an appendix sector.
    pub fn has_appendix(self) -> bool {
        !matches!(self, Scheme::None | Scheme::ChecksumChunk)
    }

    /// Whether a read of a subsequent-read chunk may be trusted on its own appendix alone
    /// (self-checksum + physical identity). Pure always cross-checks.
    pub fn self_checking(self) -> bool {
        matches!(self, Scheme::Hybrid1 | Scheme::Hybrid2 | Scheme::HybridSeq)
    }

    /// What is mirrored, or `None` for bare RAID.
    pub fn mirror(self) -> Option<MirrorKind> {
        match self {
            Scheme::None | Scheme::ChecksumChunk => None,
            Scheme::Pure | Scheme::Hybrid2 => Some(MirrorKind::Checksum),
            Scheme::Hybrid1 | Scheme::HybridSeq => Some(MirrorKind::Version),
        }
    }

    /// Whether the scheme can protect an array of `k` (at least 1) data chunks: checksum
    /// mirroring keeps a copy of each chunk's checksum on a buddy data chunk, so it needs two or
    /// more (with one, the buddy is the chunk itself, written in the same I/O). The one place
    /// this rule is stated: [`crate::Superblock::validate`] and the engine's `create_accepts`
    /// ask it.
    pub fn fits_data_chunks(self, k: usize) -> bool {
        !(k == 1 && self.mirror() == Some(MirrorKind::Checksum))
    }

    /// Bytes per entry of a parity appendix's list.
    pub fn entry_bytes(self) -> usize {
        match self.mirror() {
            Some(MirrorKind::Version) => 8,
            Some(MirrorKind::Checksum) => 4,
            None => 0,
        }
    }

    /// Whether a data appendix's self checksum covers only the appendix (pure: the buddy copy is
    /// updated by a blind write of the appendix sector).
    pub fn data_self_checksum_covers_chunk(self) -> bool {
        self != Scheme::Pure
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Scheme::None),
            "pure" => Ok(Scheme::Pure),
            "hybrid1" | "hybrid-1" => Ok(Scheme::Hybrid1),
            "hybrid2" | "hybrid-2" => Ok(Scheme::Hybrid2),
            "hybrid-seq" | "hybridseq" | "seq" => Ok(Scheme::HybridSeq),
            "checksum-chunk" | "ck-chunk" | "raid5c" | "raid6c" => Ok(Scheme::ChecksumChunk),
            _ => Err(format!(
                "unknown scheme `{s}` (choose none, pure, hybrid1, hybrid2, hybrid-seq or checksum-chunk)"
            )),
        }
    }
}
