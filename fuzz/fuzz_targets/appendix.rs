//! Any bytes as a chunk and its appendix: reject or accept, never panic; an accepted appendix
//! re-encodes to one that decodes the same, and checking any block range never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_format::Appendix;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map(|&b| b as usize * 16).unwrap_or(0).min(data.len());
    let (chunk, sector) = data.split_at(split);
    if let Ok((a, crc)) = Appendix::decode(chunk, sector) {
        let mut again = vec![0u8; sector.len()];
        a.encode(&mut again);
        assert_eq!(Appendix::decode(chunk, &again), Ok((a, crc)));
    }
    if let Ok(a) = Appendix::decode_appendix(sector) {
        let n = a.blocks.len();
        let _ = a.check_blocks(chunk, 0..n);
        let _ = a.check_blocks(chunk, n / 2..n);
        let _ = a.chunk_crc();
    }
});
