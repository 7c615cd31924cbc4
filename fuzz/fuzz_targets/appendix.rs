//! Any bytes as a chunk and its appendix sector: reject or accept, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stripeguard_integrity::Appendix;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map(|&b| b as usize * 16).unwrap_or(0).min(data.len());
    let (chunk, sector) = data.split_at(split);
    if let Ok((a, crc)) = Appendix::decode(chunk, sector) {
        let mut again = vec![0u8; sector.len()];
        a.encode(chunk, &mut again);
        assert_eq!(Appendix::decode(chunk, &again), Ok((a, crc)));
    }
});
