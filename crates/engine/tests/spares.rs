//! Hot spares in the engine (FORMAT.md §2.1 spare table, §2.11 label): listed in every
//! superblock across reassembly, labelled on the device, taken off the table by the replace
//! that rebuilds onto them, and the refusals.

use std::sync::Arc;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{read_spare_label, Array, ArrayConfig, ReplaceForce};
use stripeguard_format::SparePolicy;
use stripeguard_integrity::Scheme;

fn rig() -> (ArrayConfig, Vec<DiskRef>) {
    let cfg = ArrayConfig::new(3, 1, Scheme::HybridSeq, 4096, 16);
    let mems = (0..4)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())) as DiskRef)
        .collect();
    (cfg, mems)
}

#[test]
fn spares_are_listed_labelled_kept_across_assembly_and_taken_off_by_their_replace() {
    let (cfg, mems) = rig();
    let a = Array::create(mems.clone(), &cfg, true, &mut |_, _| {}).unwrap();
    let uuid = a.superblock().array_uuid;
    let s0 = Arc::new(MemDisk::new("s0", cfg.member_bytes())) as DiskRef;
    let s1 = Arc::new(MemDisk::new("s1", cfg.member_bytes() + 4096)) as DiskRef;
    let e0 = a.add_spare(&s0, "/dev/s0").unwrap();
    let e1 = a.add_spare(&s1, &"x".repeat(101)).unwrap();
    assert_eq!(e1.hint, "", "a hint over 100 bytes is not kept");
    let label = read_spare_label(s0.as_ref()).0.expect("labelled");
    assert_eq!((label.spare_uuid, label.array_uuid), (e0.uuid, uuid));
    a.set_spare_policy(SparePolicy {
        delay_seconds: 5,
        error_threshold: 2,
    })
    .unwrap();
    // Too small, and the seventh, are refused.
    let small = Arc::new(MemDisk::new("small", cfg.member_bytes() - 1)) as DiskRef;
    let e = a.add_spare(&small, "small").unwrap_err().to_string();
    assert!(e.contains("too small"), "{e}");
    for i in 2..6 {
        let d = Arc::new(MemDisk::new(format!("s{i}"), cfg.member_bytes())) as DiskRef;
        a.add_spare(&d, &format!("s{i}")).unwrap();
    }
    let d = Arc::new(MemDisk::new("s6", cfg.member_bytes())) as DiskRef;
    assert!(a
        .add_spare(&d, "s6")
        .unwrap_err()
        .to_string()
        .contains("6 spares"));
    a.close().unwrap();

    let b = Array::assemble(mems.clone(), &Default::default()).unwrap();
    assert_eq!(b.spares().len(), 6);
    assert_eq!(b.spares()[0], e0);
    assert_eq!(b.spare_policy().delay_seconds, 5);
    assert!(b.is_spare_of_this(s0.as_ref(), &e0));
    assert!(
        !b.is_spare_of_this(s1.as_ref(), &e0),
        "another spare's label"
    );
    // Removing one lists it no more (in every superblock).
    b.remove_spare(&e1.uuid).unwrap();
    assert!(b.remove_spare(&e1.uuid).is_err(), "not listed twice");
    // A replace onto spare 0 takes it off the table with the slot.
    b.replace(
        1,
        Arc::clone(&s0),
        ReplaceForce {
            retire: true,
            spare: Some(e0.uuid),
            ..ReplaceForce::NONE
        },
        &mut |_, _| {},
    )
    .unwrap();
    assert!(b.spares().iter().all(|s| s.uuid != e0.uuid));
    assert_eq!(b.spares().len(), 4);
    b.close().unwrap();
    let mut now = mems.clone();
    now[1] = Arc::clone(&s0);
    let c = Array::assemble(now, &Default::default()).unwrap();
    assert_eq!(c.spares().len(), 4);
    assert!(
        read_spare_label(s0.as_ref()).0.is_none(),
        "the rebuilt member's superblock replaced the label"
    );
    c.close().unwrap();
}

#[test]
fn a_read_only_assembly_changes_no_spare() {
    let (cfg, mems) = rig();
    Array::create(mems.clone(), &cfg, true, &mut |_, _| {})
        .unwrap()
        .close()
        .unwrap();
    let ro = Array::assemble(
        mems,
        &stripeguard_engine::AssembleOptions {
            writable: false,
            ..Default::default()
        },
    )
    .unwrap();
    let s = Arc::new(MemDisk::new("s", cfg.member_bytes())) as DiskRef;
    assert!(ro.add_spare(&s, "s").is_err());
    assert!(read_spare_label(s.as_ref()).0.is_none(), "nothing written");
}
