//! Every record against FORMAT.md, byte for byte, and a mutation harness over each.
//!
//! **Golden bytes.** For each record the test reads its table from FORMAT.md (the first table
//! after the section's heading: `| offset | size | field | meaning |`), builds the bytes each row
//! should hold from a sample record's values, and compares them with what the encoder wrote:
//! every row with a numeric offset and size is checked (reserved rows must be zero, CRC rows the
//! CRC-32C of the bytes before them), the rows must not overlap, and every field the sample names
//! must have a row. A FORMAT.md row that moves, or an encoder that moves a field, fails here.
//!
//! **Mutation harness** (a stable-toolchain fuzzer): fields of a valid copy are changed (random
//! bytes, boundary values) and the copy re-sealed ([`Record::reseal`]) so the decoder gets past
//! its CRC into its validation; [`check_round_trip`] (what the cargo-fuzz targets in `fuzz/` run
//! on raw bytes) must then hold: no panic, and whatever is accepted round-trips.
//! `PROPTEST_CASES` sets the run (scripts/test runs it longer in release).

mod common;

use common::{cases, value};
use proptest::prelude::*;
use stripeguard_checksum::crc32c;
use stripeguard_format::*;

// ---------------------------------------------------------------- FORMAT.md tables

struct Row {
    offset: usize,
    size: usize,
    field: String,
}

/// The numeric rows of the first table after the heading starting with `heading`.
fn table(heading: &str) -> Vec<Row> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../FORMAT.md");
    let text = std::fs::read_to_string(path).expect("FORMAT.md beside the workspace");
    let at = text
        .lines()
        .position(|l| l.starts_with(heading))
        .unwrap_or_else(|| panic!("FORMAT.md has no heading {heading:?}"));
    let rows: Vec<Row> = text
        .lines()
        .skip(at + 1)
        .skip_while(|l| !l.starts_with("| offset"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            Some(Row {
                offset: cells.get(1)?.parse().ok()?,
                size: cells.get(2)?.parse().ok()?,
                field: cells.get(3)?.to_string(),
            })
        })
        .collect();
    assert!(rows.len() >= 4, "{heading}: no table found");
    rows
}

fn le(v: u64, width: usize) -> Vec<u8> {
    v.to_le_bytes()[..width].to_vec()
}

fn text(s: &str, width: usize) -> Vec<u8> {
    let mut b = s.as_bytes().to_vec();
    b.resize(width, 0);
    b
}

/// Check `copy` against the table under `heading`, given the bytes each named field holds.
/// Fields named `reserved` or `zero` must be zero; fields ending in `crc` (and not in
/// `fields`) must be the CRC-32C of every byte before them.
fn golden(heading: &str, copy: &[u8], fields: &[(&str, Vec<u8>)]) {
    let rows = table(heading);
    let mut end = 0;
    for r in &rows {
        assert!(
            r.offset >= end,
            "{heading}: row {:?} overlaps the one before",
            r.field
        );
        end = r.offset + r.size;
        let got = &copy[r.offset..r.offset + r.size];
        let name = r.field.as_str();
        if let Some((_, want)) = fields.iter().find(|(f, _)| *f == name) {
            assert_eq!(
                want.len(),
                r.size,
                "{heading}: field {name:?} has size {}",
                r.size
            );
            assert_eq!(got, &want[..], "{heading}: field {name:?} at {}", r.offset);
        } else if name == "reserved" || name == "zero" {
            assert!(
                got.iter().all(|&x| x == 0),
                "{heading}: reserved bytes at {} not zero",
                r.offset
            );
        } else if name.ends_with("crc") {
            assert_eq!(r.size, 4);
            assert_eq!(
                got,
                crc32c(&copy[..r.offset]).to_le_bytes(),
                "{heading}: {name:?}"
            );
        } else {
            panic!("{heading}: FORMAT.md row {name:?} has no value in this test");
        }
    }
    for (f, _) in fields {
        assert!(
            rows.iter().any(|r| r.field == *f),
            "{heading}: FORMAT.md has no row {f:?}"
        );
    }
}

// ---------------------------------------------------------------- samples

fn layout() -> MetadataLayout {
    MetadataLayout::for_member(1 << 30)
}

fn superblock() -> Superblock {
    let layout = layout();
    Superblock {
        name: "golden-1".into(),
        array_uuid: [3; 16],
        member_index: 2,
        members: 4,
        data_chunks: 3,
        parity_chunks: 1,
        code: CodeId::Xor,
        scheme: Scheme::Hybrid1,
        sector_shift: 12,
        state: ArrayState::Dirty,
        chunk_bytes: 65536,
        data_offset_bytes: layout.data_offset(),
        stripes: 12345,
        sequence_high_water: 1 << 20,
        generation: 9,
        created_unix_seconds: 1_800_000_000,
        cross_check: CrossCheck::All,
        layout,
        journal_slots: JOURNAL_SLOTS,
        write_journal: true,
        untrusted_listed: false,
        zero_stripes: false,
        spares: vec![
            SpareEntry {
                uuid: [5; 16],
                device_bytes: 1 << 31,
                hint: "/dev/disk/by-id/spare-0".into(),
            },
            SpareEntry {
                uuid: [6; 16],
                device_bytes: 3 << 30,
                hint: String::new(),
            },
        ],
        spare_policy: Some(SparePolicy {
            delay_seconds: 45,
            error_threshold: 7,
        }),
        journal_devices: vec![[11; 16], [12; 16]],
        journal_devices_lost: 2,
        reshape: Some(ReshapeFrom {
            members: 3,
            data_chunks: 2,
            parity_chunks: 1,
            code: CodeId::Xor,
            offset_stripes: 0,
            id: 0x0102_0304,
        }),
        member_table: (0..4)
            .map(|i| MemberSlot {
                state: MemberState::Active,
                device: i,
                last_event: 9,
            })
            .collect(),
    }
}

fn owner() -> Owner {
    Owner {
        sequence: 7,
        held: true,
        pid: 4242,
        boot_id: [1; 16],
        holder_id: [2; 16],
        acquired_ms: 10,
        heartbeat_ms: 20,
        interval_ms: 5000,
        host: "node-é".into(),
        command: "stripeguard write m0 m1".into(),
    }
}

fn spare() -> SpareLabel {
    SpareLabel {
        spare_uuid: [4; 16],
        array_uuid: [3; 16],
        generation: 2,
        labelled_unix: 1_800_000_200,
        device_bytes: 5 << 30,
    }
}

fn jdev() -> JournalDeviceLabel {
    JournalDeviceLabel {
        device_uuid: [13; 16],
        array_uuid: [3; 16],
        generation: 4,
        slots: 48,
        mirror_index: 1,
        slot_bytes: 4096 + 66048,
    }
}

fn checkpoint() -> Checkpoint {
    Checkpoint {
        sequence: 3,
        scrub_ran: true,
        finished: false,
        next_stripe: 100,
        stripes: 1000,
        started_unix: 1_800_000_000,
        updated_unix: 1_800_000_100,
        found: 4,
        repaired: 3,
        unrecoverable: 1,
        mismatches: 0,
        rebuild_member: Some(2),
        rebuild_finished: true,
        rebuild_next: 1000,
        rebuild_started_unix: 1_800_000_050,
        rebuild_target: [9; 16],
        reshape: Some(ReshapeProgress {
            finished: false,
            backed_up: true,
            done: 40,
            stripes: 750,
            started_unix: 1_800_000_070,
            backup_chunks: 12,
            backup_crc: 0x1234_5678,
            repaired: 2,
            finishing: true,
            id: 0x0a0b_0c0d,
            zero: vec![(3, 9), (750, 1000)],
            online: true,
        }),
    }
}

fn intent() -> IntentRecord {
    IntentRecord {
        sequence: 11,
        stripes_per_bit: 64,
        bits: 20,
        event_count: 9,
        cleared_at: 8,
        bitmap: vec![0b1010_0001, 0, 0x0f],
    }
}

fn entry() -> EventEntry {
    EventEntry {
        number: 42,
        time_unix_ms: 1_700_000_000_123,
        stripe: 9,
        member: 3,
        position: 4,
        role: EventRole::Checksum,
        kind: EventKind::ChecksumChunk,
        evidence: "table CRC mismatch".into(),
        action: EventAction::Repaired,
    }
}

fn journal() -> JournalHeader {
    JournalHeader {
        kind: JournalKind::UnitWrites,
        sequence: 5,
        stripe: 77,
        position: 2,
        payload_crc: 0xdead_beef,
        event: 9,
        extents: vec![(0, 512), (4096, 1024)],
        touched: [0b101; 32],
        round: (4, 3),
        array_uuid: [3; 16],
    }
}

fn state() -> StateRecord {
    StateRecord {
        sequence: 6,
        entries: vec![UntrustedRange {
            stripe: 5,
            position: 1,
            offset: 4096,
            len: 4096,
            expected_crc: Some(0x1234_5678),
        }],
        zero: vec![ZeroRange {
            first: 9,
            count: 0x1_0000_0002,
        }],
    }
}

fn shard() -> shard::Header {
    shard::Header {
        k: 4,
        m: 2,
        index: 5,
        block_bytes: 4096,
        file_bytes: 100_000,
        set_id: [7; 16],
        stripes: shard::stripes_for(100_000, 4 * 4096).expect("stripes"),
        payload_crc: 0x0102_0304,
        file_name: "photo.jpg".into(),
    }
}

fn appendix_copy() -> (Appendix, Vec<u8>) {
    let chunk = vec![0x5au8; 8192];
    let mut a = Appendix {
        scheme: Scheme::Hybrid1,
        identity: Identity {
            array_uuid: [3; 16],
            member_index: 1,
            role: Role::Parity(1),
            chunk_number: 500,
        },
        tag: 7,
        buddy_crc: 0,
        entries: vec![5, 6, 7],
        block_bytes: 4096,
        blocks: Vec::new(),
    };
    let mut sector = vec![0u8; 4096];
    a.seal(&chunk, &mut sector);
    let back = Appendix::decode_appendix(&sector).expect("a sealed appendix decodes");
    (back, sector)
}

fn cktable() -> CkTable {
    let mut t = CkTable::new(12, [3; 16], 3, 2);
    t.set_blocks(1, 0, &[1u8; 8192], 4096);
    t.writes = 5;
    t
}

fn cktable_copy() -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    cktable().encode(&mut b);
    b
}

// ---------------------------------------------------------------- golden bytes

#[test]
fn superblock_matches_format_md() {
    let sb = superblock();
    let b = sb.to_copy(SUPERBLOCK_BYTES).expect("encodes");
    let l = sb.layout;
    golden(
        "### 2.1 Superblock",
        &b,
        &[
            ("magic", b"SGARRAY\0".to_vec()),
            ("format version", le(2, 4)),
            ("superblock size", le(4096, 4)),
            ("array uuid", vec![3; 16]),
            ("member index", le(2, 2)),
            ("members", le(4, 2)),
            ("data chunks", le(3, 2)),
            ("parity chunks", le(1, 2)),
            ("code", vec![1]),
            ("scheme", vec![Scheme::Hybrid1.id()]),
            ("sector shift", vec![12]),
            ("state", vec![1]),
            ("chunk size", le(65536, 4)),
            ("data offset", le(l.data_offset(), 8)),
            ("stripes", le(12345, 8)),
            ("sequence high-water mark", le(1 << 20, 8)),
            ("event count", le(9, 8)),
            ("created", le(1_800_000_000, 8)),
            ("cross-check", vec![1]),
            // Bits 0 (block CRCs), 1 (write journal), 4 (spares), 5 (journal devices),
            // 6 (reshape).
            ("incompatible features", le(1 | 2 | 16 | 32 | 64, 8)),
            // Bit 0: the name at 168..200; bit 1: the spare policy at 200..208.
            ("compatible features", le(1 | 2, 8)),
            ("name", text("golden-1", 32)),
            ("spare delay", le(45, 4)),
            ("spare error threshold", le(7, 4)),
            ("spares", vec![2]),
            ("journal devices", vec![2]),
            ("journal devices lost", vec![2]),
            (
                "journal device uuids",
                [vec![11u8; 16], vec![12u8; 16]].concat(),
            ),
            ("intent record offset", le(16384, 8)),
            ("intent record size", le(l.intent_bytes, 8)),
            ("event log offset", le(l.log_offset(), 8)),
            ("event log size", le(l.log_bytes, 8)),
            ("journal slots", le(u64::from(JOURNAL_SLOTS), 4)),
            ("stripe-state record offset", le(l.state_offset(), 8)),
            ("stripe-state record size", le(l.state_bytes, 8)),
            ("reshape from members", le(3, 2)),
            ("reshape from data chunks", le(2, 2)),
            ("reshape from parity chunks", le(1, 2)),
            ("reshape from code", vec![1]),
            ("reshape offset", le(0, 4)),
            ("reshape id", le(0x0102_0304, 4)),
        ],
    );
    // The member table (its own table in FORMAT.md: state, reserved, device, last event).
    assert_eq!(
        &b[256 + 12 * 3..256 + 12 * 4],
        &[1, 0, 3, 0, 9, 0, 0, 0, 0, 0, 0, 0]
    );
    // The spare table (its own table in FORMAT.md: uuid, device bytes, path hint), at 3328.
    let mut entry = vec![5u8; 16];
    entry.extend(le(1 << 31, 8));
    entry.extend(text("/dev/disk/by-id/spare-0", 100));
    assert_eq!(&b[3328..3328 + 124], &entry[..]);
    let mut entry = vec![6u8; 16];
    entry.extend(le(3 << 30, 8));
    entry.extend(vec![0; 100]);
    assert_eq!(&b[3328 + 124..3328 + 248], &entry[..]);
    assert!(b[3328 + 248..4092].iter().all(|&x| x == 0));
    assert!(b[256 + 12 * 4..3328].iter().all(|&x| x == 0));
}

#[test]
fn owner_record_matches_format_md() {
    let b = owner().to_copy(Owner::SIZE).expect("encodes");
    golden(
        "### 2.2 Owner record",
        &b,
        &[
            ("magic", b"SGOWNER\0".to_vec()),
            ("version", le(1, 4)),
            ("slot size", le(2048, 4)),
            ("sequence", le(7, 8)),
            ("state", vec![1]),
            ("pid", le(4242, 4)),
            ("boot id", vec![1; 16]),
            ("holder id", vec![2; 16]),
            ("acquired", le(10, 8)),
            ("heartbeat", le(20, 8)),
            ("heartbeat interval", le(5000, 4)),
            ("host", text("node-é", 64)),
            ("command", text("stripeguard write m0 m1", 256)),
        ],
    );
}

#[test]
fn checkpoint_record_matches_format_md() {
    let b = checkpoint().to_copy(Checkpoint::SIZE).expect("encodes");
    golden(
        "### 2.3 Checkpoint record",
        &b,
        &[
            ("magic", b"SGCHKPT\0".to_vec()),
            ("version", le(1, 4)),
            ("slot size", le(2048, 4)),
            ("sequence", le(3, 8)),
            ("scrub state", vec![1]),
            ("next stripe", le(100, 8)),
            ("stripes", le(1000, 8)),
            ("started", le(1_800_000_000, 8)),
            ("updated", le(1_800_000_100, 8)),
            ("units found", le(4, 8)),
            ("units repaired", le(3, 8)),
            ("unrecoverable", le(1, 8)),
            ("mismatches", le(0, 8)),
            ("rebuild member", le(2, 2)),
            ("rebuild state", vec![2]),
            ("rebuild next stripe", le(1000, 8)),
            ("rebuild started", le(1_800_000_050, 8)),
            ("rebuild target", vec![9; 16]),
            ("reshape state", vec![1]),
            ("reshape backup state", vec![1]),
            ("reshape done", le(40, 8)),
            ("reshape stripes", le(750, 8)),
            ("reshape started", le(1_800_000_070, 8)),
            ("reshape backup chunks", le(12, 8)),
            ("reshape backup crc", le(0x1234_5678, 4)),
            ("reshape units repaired", le(2, 8)),
            ("reshape finishing", vec![1]),
            ("reshape online", vec![1]),
            ("reshape id", le(0x0a0b_0c0d, 4)),
            ("reshape zero ranges", le(2, 4)),
            ("reshape zero range table", {
                let mut t = [le(3, 8), le(9, 8), le(750, 8), le(1000, 8)].concat();
                t.resize(1600, 0);
                t
            }),
        ],
    );
}

#[test]
fn spare_label_matches_format_md() {
    let b = spare().to_copy(SpareLabel::SIZE).expect("encodes");
    golden(
        "### 2.11 Spare label",
        &b,
        &[
            ("magic", b"SGSPARE\0".to_vec()),
            ("version", le(1, 4)),
            ("label size", le(4096, 4)),
            ("spare uuid", vec![4; 16]),
            ("array uuid", vec![3; 16]),
            ("generation", le(2, 8)),
            ("labelled", le(1_800_000_200, 8)),
            ("device bytes", le(5 << 30, 8)),
        ],
    );
}

#[test]
fn journal_device_label_matches_format_md() {
    let b = jdev().to_copy(JournalDeviceLabel::SIZE).expect("encodes");
    golden(
        "### 2.12 Journal devices",
        &b,
        &[
            ("magic", b"SGJDEV\0\0".to_vec()),
            ("version", le(1, 4)),
            ("label size", le(4096, 4)),
            ("device uuid", vec![13; 16]),
            ("array uuid", vec![3; 16]),
            ("generation", le(4, 8)),
            ("slots", le(48, 4)),
            ("mirror index", le(1, 4)),
            ("slot bytes", le(4096 + 66048, 8)),
        ],
    );
}

#[test]
fn intent_record_matches_format_md() {
    let copy = 4096;
    let b = intent().to_copy(copy).expect("encodes");
    golden(
        "### 2.4 Write-intent record",
        &b,
        &[
            ("magic", b"SGINTENT".to_vec()),
            ("version", le(1, 4)),
            ("copy size", le(copy as u64, 4)),
            ("sequence", le(11, 8)),
            ("stripes per bit", le(64, 8)),
            ("bits", le(20, 8)),
            ("event count", le(9, 8)),
            ("cleared at", le(8, 8)),
        ],
    );
    // The bitmap at 64 (its size is ceil(bits/8)), zeros, and the CRC in the copy's last four.
    assert_eq!(&b[64..67], &[0b1010_0001, 0, 0x0f]);
    assert!(b[67..copy - 4].iter().all(|&x| x == 0));
    assert_eq!(b[copy - 4..], crc32c(&b[..copy - 4]).to_le_bytes());
}

#[test]
fn event_log_entry_matches_format_md() {
    let b = entry().to_copy(EventEntry::SIZE).expect("encodes");
    golden(
        "### 2.5 Event log",
        &b,
        &[
            ("magic", b"SGEV".to_vec()),
            ("version", vec![1]),
            ("action", vec![1]),
            ("role", vec![5]),
            ("kind code", vec![20]),
            ("number", le(42, 8)),
            ("time", le(1_700_000_000_123, 8)),
            ("stripe", le(9, 8)),
            ("member", le(3, 2)),
            ("position", le(4, 2)),
            ("kind", text("checksum-chunk", 24)),
            ("evidence", text("table CRC mismatch", 188)),
        ],
    );
}

#[test]
fn journal_header_matches_format_md() {
    let b = journal().to_copy(JournalHeader::SIZE).expect("encodes");
    let mut extents = [0u8; 64];
    extents[..16].copy_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 16, 0, 0, 0, 4, 0, 0]);
    assert_eq!(
        &b[88..152],
        &extents[..],
        "extent table at 88, the rest of 88..152 zero"
    );
    golden(
        "### 2.6 Journal",
        &b,
        &[
            ("magic", b"SGJRNL\0\0".to_vec()),
            ("version", le(1, 4)),
            ("header size", le(4096, 4)),
            ("sequence", le(5, 8)),
            ("stripe", le(77, 8)),
            ("position", le(2, 2)),
            ("kind", vec![1]),
            ("payload crc", le(0xdead_beef, 4)),
            ("event count", le(9, 8)),
            ("extents", le(2, 4)),
            ("length", le(1536, 4)),
            ("touched", vec![0b101; 32]),
            ("group first", le(4, 8)),
            ("group records", le(3, 4)),
            ("array uuid", vec![3; 16]),
        ],
    );
}

#[test]
fn stripe_state_record_matches_format_md() {
    let copy = 4096;
    let b = state().to_copy(copy).expect("encodes");
    golden(
        "### 2.7 Stripe-state record",
        &b,
        &[
            ("magic", b"SGSTATE\0".to_vec()),
            ("version", le(1, 4)),
            ("copy size", le(copy as u64, 4)),
            ("sequence", le(6, 8)),
            ("entries", le(2, 4)),
        ],
    );
    // One 24-byte untrusted entry at 64 (FORMAT.md's entry table), the zero range after it
    // (its own table), then zeros, then the CRC.
    let mut e = le(5, 8);
    e.extend(le(1, 2));
    e.extend([1, 1]);
    e.extend(le(4096, 4));
    e.extend(le(4096, 4));
    e.extend(le(0x1234_5678, 4));
    assert_eq!(&b[64..88], &e[..]);
    let mut z = le(9, 8);
    z.extend([0, 0, 2, 0]);
    z.extend(le(0x1_0000_0002, 8));
    z.extend([0; 4]);
    assert_eq!(&b[88..112], &z[..]);
    assert!(b[112..copy - 4].iter().all(|&x| x == 0));
    assert_eq!(b[copy - 4..], crc32c(&b[..copy - 4]).to_le_bytes());
}

#[test]
fn appendix_matches_format_md() {
    let (a, b) = appendix_copy();
    golden(
        "### 2.9 Appendix",
        &b,
        &[
            ("magic", b"SGAX".to_vec()),
            ("layout version", vec![2]),
            ("scheme", vec![Scheme::Hybrid1.id()]),
            ("role", vec![2]),
            ("role index", vec![1]),
            ("array uuid", vec![3; 16]),
            ("member index", le(1, 2)),
            ("entries", le(3, 2)),
            ("blocks", le(2, 2)),
            ("chunk number", le(500, 8)),
            ("tag", le(7, 8)),
            ("buddy checksum", le(0, 4)),
            ("block bytes", le(4096, 4)),
        ],
    );
    let crc = crc32c(&[0x5au8; 4096]);
    let w = Scheme::Hybrid1.entry_bytes();
    assert_eq!(
        &b[56..56 + w],
        &le(5, w)[..],
        "entries at 56, {w} bytes each"
    );
    let table = 56 + a.entries.len() * w;
    assert_eq!(
        &b[table..table + 8],
        &[crc.to_le_bytes(), crc.to_le_bytes()].concat()[..]
    );
    assert_eq!(b[4092..], crc32c(&b[..4092]).to_le_bytes());
}

#[test]
fn checksum_chunk_table_matches_format_md() {
    let b = cktable_copy();
    golden(
        "### 2.10 Checksum chunk",
        &b,
        &[
            ("magic", b"SGCK".to_vec()),
            ("layout", le(1, 2)),
            ("units", le(3, 2)),
            ("blocks per unit", le(2, 4)),
            ("stripe", le(12, 8)),
            ("array uuid", vec![3; 16]),
            ("writes", le(5, 8)),
        ],
    );
    let one = crc32c(&[1u8; 4096]).to_le_bytes();
    assert_eq!(
        &b[48 + 8..48 + 16],
        &[one, one].concat()[..],
        "unit 1's CRCs at 48 + 4(uB + j)"
    );
    assert_eq!(b[72..76], crc32c(&b[..72]).to_le_bytes());
}

#[test]
fn shard_header_matches_format_md() {
    let h = shard();
    let b = h.to_copy(shard::HEADER_BYTES).expect("encodes");
    golden(
        "### Header (128 bytes)",
        &b,
        &[
            ("magic", b"SGSHARD\0".to_vec()),
            ("version", le(1, 2)),
            ("header_bytes", le(128, 2)),
            ("code", vec![1]),
            ("k", le(4, 2)),
            ("m", le(2, 2)),
            ("index", le(5, 2)),
            ("block_bytes", le(4096, 4)),
            ("file_bytes", le(100_000, 8)),
            ("set_id", vec![7; 16]),
            ("stripes", le(h.stripes, 8)),
            ("payload_crc", le(0x0102_0304, 4)),
            ("file_name", text("photo.jpg", 56)),
            ("header_crc", crc32c(&b[..124]).to_le_bytes().to_vec()),
        ],
    );
}

#[test]
fn every_sample_round_trips_and_empty_copies_are_empty() {
    fn both<T: Record + PartialEq + std::fmt::Debug>(copy: &[u8]) {
        assert_eq!(check_round_trip::<T>(copy), Ok(true), "{}", T::NAME);
        assert!(
            matches!(T::read_copy(&vec![0u8; copy.len()]), Ok(None)),
            "{}",
            T::NAME
        );
    }
    both::<Superblock>(&superblock().to_copy(SUPERBLOCK_BYTES).expect("sb"));
    both::<Owner>(&owner().to_copy(Owner::SIZE).expect("owner"));
    both::<Checkpoint>(&checkpoint().to_copy(Checkpoint::SIZE).expect("ckpt"));
    both::<SpareLabel>(&spare().to_copy(SpareLabel::SIZE).expect("spare"));
    both::<JournalDeviceLabel>(&jdev().to_copy(JournalDeviceLabel::SIZE).expect("jdev"));
    both::<IntentRecord>(&intent().to_copy(4096).expect("intent"));
    both::<EventEntry>(&entry().to_copy(EventEntry::SIZE).expect("entry"));
    both::<JournalHeader>(&journal().to_copy(JournalHeader::SIZE).expect("journal"));
    both::<StateRecord>(&state().to_copy(4096).expect("state"));
    both::<Appendix>(&appendix_copy().1);
    both::<CkTable>(&cktable_copy());
    both::<shard::Header>(&shard().to_copy(shard::HEADER_BYTES).expect("shard"));
}

#[test]
fn an_entry_with_a_code_this_build_lacks_is_intact_not_damage() {
    let mut b = entry().to_copy(EventEntry::SIZE).expect("encodes");
    b[6] = 200;
    EventEntry::reseal(&mut b);
    let e = EventEntry::read_copy(&b).expect_err("unknown role");
    assert!(!e.is_damage(), "{e}");
    assert!(!damaged::<EventEntry>(&b), "a metadata scrub must leave it");
    b[100] ^= 1;
    assert!(damaged::<EventEntry>(&b), "a flipped bit is damage");
}

#[test]
fn an_entry_of_an_earlier_build_reads_its_kind_from_the_text() {
    let mut b = entry().to_copy(EventEntry::SIZE).expect("encodes");
    b[7] = 0;
    b[6] = EventRole::Stripe.code();
    EventEntry::reseal(&mut b);
    let e = EventEntry::read_copy(&b)
        .expect("reads")
        .expect("not empty");
    assert_eq!(
        (e.kind, e.role),
        (EventKind::ChecksumChunk, EventRole::Stripe)
    );
}

#[test]
fn newest_takes_the_higher_sequence_and_reports_damage() {
    let mut region = owner().to_copy(Owner::SIZE).expect("owner");
    let mut newer = owner();
    newer.sequence = 8;
    region.extend(newer.to_copy(Owner::SIZE).expect("owner"));
    let mut n = Newest::<Owner>::default();
    n.take(&region, Owner::SIZE, |_| true);
    assert_eq!(n.record.as_ref().map(|o| o.sequence), Some(8));
    assert!(!n.damaged);
    region[Owner::SIZE + 100] ^= 1;
    let mut n = Newest::<Owner>::default();
    n.take(&region, Owner::SIZE, |_| true);
    assert_eq!(
        n.record.map(|o| o.sequence),
        Some(7),
        "the torn newer slot loses"
    );
    assert!(n.damaged);
}

// ---------------------------------------------------------------- mutation harness

/// Poke `pokes` (offset, width, kind, raw) into `valid`, re-seal, and check the promise.
fn mutated<T: Record + PartialEq + std::fmt::Debug>(valid: &[u8], pokes: &[(usize, u8, u8, u64)]) {
    let mut b = valid.to_vec();
    // Pokes land mostly in the header, where the fields are.
    let span = b.len().min(256);
    for &(at, w, kind, raw) in pokes {
        let width = [1usize, 2, 4, 8][usize::from(w % 4)];
        let at = (at % span).min(b.len() - width);
        b[at..at + width].copy_from_slice(&value(kind, width, raw).to_le_bytes()[..width]);
    }
    T::reseal(&mut b);
    if let Err(e) = check_round_trip::<T>(&b) {
        panic!("{e}");
    }
}

fn pokes() -> impl Strategy<Value = Vec<(usize, u8, u8, u64)>> {
    proptest::collection::vec(
        (any::<usize>(), any::<u8>(), any::<u8>(), any::<u64>()),
        1..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn mutated_superblocks(p in pokes()) {
        mutated::<Superblock>(&superblock().to_copy(SUPERBLOCK_BYTES).expect("sb"), &p);
    }

    #[test]
    fn mutated_owner_records(p in pokes()) {
        mutated::<Owner>(&owner().to_copy(Owner::SIZE).expect("owner"), &p);
    }

    #[test]
    fn mutated_checkpoints(p in pokes()) {
        mutated::<Checkpoint>(&checkpoint().to_copy(Checkpoint::SIZE).expect("ckpt"), &p);
    }

    #[test]
    fn mutated_spare_labels(p in pokes()) {
        mutated::<SpareLabel>(&spare().to_copy(SpareLabel::SIZE).expect("spare"), &p);
    }

    #[test]
    fn mutated_journal_device_labels(p in pokes()) {
        mutated::<JournalDeviceLabel>(&jdev().to_copy(JournalDeviceLabel::SIZE).expect("jdev"), &p);
    }

    #[test]
    fn mutated_intent_records(p in pokes()) {
        mutated::<IntentRecord>(&intent().to_copy(4096).expect("intent"), &p);
    }

    #[test]
    fn mutated_event_entries(p in pokes()) {
        mutated::<EventEntry>(&entry().to_copy(EventEntry::SIZE).expect("entry"), &p);
    }

    #[test]
    fn mutated_journal_headers(p in pokes()) {
        mutated::<JournalHeader>(&journal().to_copy(JournalHeader::SIZE).expect("journal"), &p);
    }

    #[test]
    fn mutated_state_records(p in pokes()) {
        mutated::<StateRecord>(&state().to_copy(4096).expect("state"), &p);
    }

    #[test]
    fn mutated_appendices(p in pokes()) {
        mutated::<Appendix>(&appendix_copy().1, &p);
    }

    #[test]
    fn mutated_checksum_tables(p in pokes()) {
        mutated::<CkTable>(&cktable_copy(), &p);
    }

    #[test]
    fn mutated_shard_headers(p in pokes()) {
        mutated::<shard::Header>(&shard().to_copy(shard::HEADER_BYTES).expect("shard"), &p);
    }

    #[test]
    fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        for len in [data.len(), 128, 256] {
            let d = &data[..len.min(data.len())];
            prop_assert!(check_round_trip::<Owner>(d).is_ok());
            prop_assert!(check_round_trip::<Checkpoint>(d).is_ok());
            prop_assert!(check_round_trip::<SpareLabel>(d).is_ok());
            prop_assert!(check_round_trip::<JournalDeviceLabel>(d).is_ok());
            prop_assert!(check_round_trip::<IntentRecord>(d).is_ok());
            prop_assert!(check_round_trip::<EventEntry>(d).is_ok());
            prop_assert!(check_round_trip::<JournalHeader>(d).is_ok());
            prop_assert!(check_round_trip::<StateRecord>(d).is_ok());
            prop_assert!(check_round_trip::<Appendix>(d).is_ok());
            prop_assert!(check_round_trip::<CkTable>(d).is_ok());
            prop_assert!(check_round_trip::<shard::Header>(d).is_ok());
            prop_assert!(check_round_trip::<Superblock>(d).is_ok());
        }
    }
}
