//! The receiver against random and truncated streams: every one ends with an error or a clean
//! end, never a panic, and nothing appears outside the receiving directory.

use proptest::prelude::*;
use stripeguard_xfer::proto::{self, FileHeader};
use stripeguard_xfer::{receive, RecvOptions};

/// The hello and the OPTIONS a sender opens with (`flags`: any of the option bits, so that
/// compressed blocks, listings and deletions are taken too).
fn hello(flags: u32) -> Vec<u8> {
    let mut v = b"SGXF".to_vec();
    v.extend_from_slice(&proto::VERSION.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    let o = proto::Options {
        flags,
        quick_secs: 60,
        module: Vec::new(),
    };
    v.extend(frame(proto::T_OPTIONS, &o.encode()));
    v
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Frames of every type with fields drawn from small and hostile values.
fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    let path = prop_oneof![
        Just(b"a".to_vec()),
        Just(b"d/e".to_vec()),
        Just(b"../x".to_vec()),
        Just(b"/abs".to_vec()),
        Just(b".stripeguard-partial/x".to_vec()),
        Just(b"n\xff\n".to_vec()),
        "[a-z./]{0,12}".prop_map(String::into_bytes),
    ];
    prop_oneof![
        (path.clone(), 0u8..9, 0u64..20_000, 0u32..70_000, 0u32..3).prop_map(
            |(p, kind, size, bs, id)| {
                frame(
                    proto::T_FILE,
                    &FileHeader {
                        id,
                        attrs: Default::default(),
                        path: p,
                        kind,
                        size,
                        mode: 0o644,
                        mtime_s: 0,
                        mtime_ns: 0,
                        target: b"t".to_vec(),
                        block_size: bs,
                        hash: [0; 32],
                    }
                    .encode(),
                )
            }
        ),
        (
            0u32..3,
            0u64..8,
            prop::collection::vec(any::<u8>(), 0..5000)
        )
            .prop_map(|(id, i, data)| {
                let mut p = id.to_le_bytes().to_vec();
                p.extend_from_slice(&i.to_le_bytes());
                p.extend_from_slice(&[0u8; 32]);
                p.extend_from_slice(&data);
                frame(proto::T_BLOCK, &p)
            }),
        (0u32..3).prop_map(|id| frame(proto::T_FILE_END, &id.to_le_bytes())),
        (0u32..3, 0u64..8, 0u64..8).prop_map(|(id, i, old)| {
            frame(proto::T_COPY, &proto::encode_copy(id, i, old, &[0; 32]))
        }),
        (0u32..3, 0u64..8, prop::collection::vec(any::<u8>(), 0..200)).prop_map(|(id, i, z)| {
            let mut p = proto::encode_zblock_header(id, i, &[0; 32], 4096);
            p.extend_from_slice(&z);
            frame(proto::T_ZBLOCK, &p)
        }),
        (0u32..3, path.clone())
            .prop_map(|(id, p)| frame(proto::T_LIST, &proto::encode_list(id, &p))),
        (0u32..3, path).prop_map(|(id, p)| frame(proto::T_DELETE, &proto::encode_list(id, &p))),
        Just(frame(proto::T_DONE, &[])),
        (any::<u8>(), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(k, p)| frame(k, &p)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn random_streams_never_panic_and_never_leave_the_directory(
        frames in prop::collection::vec(arb_frame(), 0..8),
        cut in any::<usize>(),
        raw in prop::collection::vec(any::<u8>(), 0..64),
        flags in 0u32..32,
    ) {
        let base = tempfile::Builder::new().prefix("sg-xfer-fuzz-").tempdir_in("/var/tmp").unwrap();
        let dir = base.path().join("dst");
        let mut stream = hello(flags);
        for f in &frames {
            stream.extend_from_slice(f);
        }
        let keep = cut % (stream.len() + 1);
        for input in [&stream[..], &stream[..keep], &raw[..]] {
            let mut opts = RecvOptions::new(dir.clone());
            opts.allow_delete = true;
            let _ = receive(std::io::Cursor::new(input.to_vec()), std::io::sink(), &opts);
        }
        // Only the receiving directory was written.
        let outside: Vec<_> = std::fs::read_dir(base.path()).unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != "dst")
            .collect();
        prop_assert!(outside.is_empty(), "{:?}", outside);
    }
}
