//! The receiver's verification records (`send --quick`; FORMAT.md §5 "Verification
//! records"): for each file it proved from the device, what the file was then (inode, size,
//! times, ctime included, and its hashes), so that a later `--quick` session can trust the
//! file without reading it while none of that has changed. One record file per directory of
//! DIR, holding a line per file: one read per directory, not per file (a cold no-op re-run of
//! 10,000 files was dominated by 10,000 record reads). Records are read only when no other
//! user can have written them (`Root::read_record`).

use crate::beneath::Root;
use crate::manifest::{escape, unescape};
use crate::proto::{hex, unhex};
use std::collections::HashMap;

/// Verification records by directory: one file per directory of DIR holds a line per file
/// (one read per directory, not per file: a cold no-op re-run of 10,000 files was dominated by
/// 10,000 record reads).
#[derive(Default)]
pub(crate) struct Records {
    read: HashMap<Vec<u8>, HashMap<Vec<u8>, Record>>,
    new: HashMap<Vec<u8>, Vec<(Vec<u8>, Record)>>,
}

/// A path's directory and name (the directory empty for DIR itself).
fn split_rel(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&[], rel),
    }
}

impl Records {
    /// The record of `rel` if one at most `max_age` seconds old is there (its directory's
    /// file read once per session).
    pub(crate) fn get(&mut self, root: &Root, rel: &[u8], max_age: u64) -> Option<Record> {
        let (dir, name) = split_rel(rel);
        self.read
            .entry(dir.to_vec())
            .or_insert_with(|| Record::parse_dir(root.read_record(dir).as_deref(), dir))
            .get(name)
            .filter(|r| r.young(max_age))
            .cloned()
    }

    /// A file proved from the device, to record.
    pub(crate) fn note(&mut self, rel: &[u8], rec: Record) {
        let (dir, name) = split_rel(rel);
        self.new
            .entry(dir.to_vec())
            .or_default()
            .push((name.to_vec(), rec));
    }

    /// The records noted so far, by directory.
    pub(crate) fn take_new(&mut self) -> HashMap<Vec<u8>, Vec<(Vec<u8>, Record)>> {
        std::mem::take(&mut self.new)
    }
}

/// Write records noted: each directory's file read again and merged, so that a concurrent
/// session's records are kept unless it wrote the same directory at the same moment (then one
/// set is lost, which only costs a read from the device later).
pub(crate) fn write(root: &Root, new: HashMap<Vec<u8>, Vec<(Vec<u8>, Record)>>) {
    for (dir, entries) in new {
        let mut all = Record::parse_dir(root.read_record(&dir).as_deref(), &dir);
        all.extend(entries);
        let _ = root.write_record(&dir, &Record::dir_text(&dir, &all));
    }
}

/// A verification record (`--quick`; FORMAT.md §5 "Verification records"): a file as it was
/// when this receiver last proved it from the device.
#[derive(Clone)]
pub(crate) struct Record {
    /// Seconds since the epoch when it was written.
    pub(crate) at: i64,
    size: u64,
    mtime: (i64, u64),
    ctime: (i64, u64),
    dev: u64,
    ino: u64,
    pub(crate) block: u64,
    pub(crate) hash: [u8; 32],
    /// Every block's hash (kept for files of at most RECORD_BLOCKS blocks).
    pub(crate) blocks: Option<Vec<[u8; 32]>>,
}

/// Records keep block hashes for files of at most this many blocks (256 KiB of text).
const RECORD_BLOCKS: usize = 4096;

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Record {
    pub(crate) fn of(
        st: &rustix::fs::Stat,
        block: u64,
        hash: [u8; 32],
        hashes: &[[u8; 32]],
    ) -> Record {
        Record {
            at: now_secs(),
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            dev: st.st_dev,
            ino: st.st_ino,
            block,
            hash,
            blocks: (hashes.len() <= RECORD_BLOCKS).then(|| hashes.to_vec()),
        }
    }

    /// One line of a directory's record file: the name (escaped as in a manifest: one token
    /// whatever its bytes), then the fields.
    fn line(&self, name: &[u8]) -> String {
        let blocks = match &self.blocks {
            Some(b) => b.iter().map(|h| hex(h)).collect::<String>(),
            None => "-".into(),
        };
        format!(
            "{} {} {} {} {} {} {} {} {} {} {} {blocks}\n",
            escape(name),
            self.at,
            self.size,
            self.mtime.0,
            self.mtime.1,
            self.ctime.0,
            self.ctime.1,
            self.dev,
            self.ino,
            self.block,
            hex(&self.hash),
        )
    }

    fn parse_line(line: &str) -> Option<(Vec<u8>, Record)> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 12 {
            return None;
        }
        let name = unescape(f[0])?;
        let blocks = if f[11] == "-" {
            None
        } else {
            let b = unhex(f[11])?;
            if !b.len().is_multiple_of(32) {
                return None;
            }
            Some(
                b.chunks_exact(32)
                    .map(|c| <[u8; 32]>::try_from(c).ok())
                    .collect::<Option<Vec<_>>>()?,
            )
        };
        Some((
            name,
            Record {
                at: f[1].parse().ok()?,
                size: f[2].parse().ok()?,
                mtime: (f[3].parse().ok()?, f[4].parse().ok()?),
                ctime: (f[5].parse().ok()?, f[6].parse().ok()?),
                dev: f[7].parse().ok()?,
                ino: f[8].parse().ok()?,
                block: f[9].parse().ok()?,
                hash: unhex32(f[10])?,
                blocks,
            },
        ))
    }

    /// A directory's record file: its header, then a line per file (a malformed line is
    /// skipped; a file of another directory, or another version, holds nothing).
    fn parse_dir(text: Option<&str>, dir: &[u8]) -> HashMap<Vec<u8>, Record> {
        let mut out = HashMap::new();
        let Some(text) = text else { return out };
        let mut lines = text.lines();
        if lines.next() != Some("stripeguard-verified 2")
            || lines.next() != Some(format!("dir {}", hex(blake3::hash(dir).as_bytes())).as_str())
        {
            return out;
        }
        for l in lines {
            if let Some((name, r)) = Record::parse_line(l) {
                out.insert(name, r);
            }
        }
        out
    }

    fn dir_text(dir: &[u8], all: &HashMap<Vec<u8>, Record>) -> String {
        let mut names: Vec<&Vec<u8>> = all.keys().collect();
        names.sort();
        let mut t = format!(
            "stripeguard-verified 2\ndir {}\n",
            hex(blake3::hash(dir).as_bytes())
        );
        for n in names {
            t.push_str(&all[n].line(n));
        }
        t
    }

    /// Written within the last `secs` seconds (and not in the future).
    pub(crate) fn young(&self, secs: u64) -> bool {
        let now = now_secs();
        self.at <= now.saturating_add(60)
            && now.saturating_sub(self.at) <= i64::try_from(secs).unwrap_or(i64::MAX)
    }

    /// The file under the name is still the one recorded: same inode, size, and times (a
    /// write or a change of attributes moves ctime, which no user can set back).
    pub(crate) fn same_file(&self, st: &rustix::fs::Stat) -> bool {
        self.size == st.st_size as u64
            && self.mtime == (st.st_mtime, st.st_mtime_nsec)
            && self.ctime == (st.st_ctime, st.st_ctime_nsec)
            && self.dev == st.st_dev
            && self.ino == st.st_ino
    }
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    unhex(s)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(blocks: Option<Vec<[u8; 32]>>) -> Record {
        Record {
            at: 1_800_000_000,
            size: 12345,
            mtime: (1_700_000_000, 5),
            ctime: (1_700_000_001, 999_999_999),
            dev: 2049,
            ino: 77,
            block: 4096,
            hash: [7; 32],
            blocks,
        }
    }

    #[test]
    fn a_directory_record_round_trips_and_holds_any_name() {
        let mut all = HashMap::new();
        all.insert(b"a b\n\xff".to_vec(), rec(Some(vec![[1; 32], [2; 32]])));
        all.insert(b"plain".to_vec(), rec(None));
        let text = Record::dir_text(b"d/e", &all);
        let back = Record::parse_dir(Some(&text), b"d/e");
        assert_eq!(back.len(), 2);
        let r = &back[&b"a b\n\xff".to_vec()];
        assert_eq!(
            (r.size, r.ctime, r.ino),
            (12345, (1_700_000_001, 999_999_999), 77)
        );
        assert_eq!(r.blocks.as_deref(), Some(&[[1; 32], [2; 32]][..]));
        assert!(back[&b"plain".to_vec()].blocks.is_none());
        // Another directory's file, another version, and damaged lines hold nothing.
        assert!(Record::parse_dir(Some(&text), b"d").is_empty());
        assert!(
            Record::parse_dir(Some(&text.replace("verified 2", "verified 1")), b"d/e").is_empty()
        );
        let cut: String = text
            .lines()
            .take(3)
            .map(|l| format!("{}\n", &l[..l.len() / 2]))
            .collect();
        assert!(Record::parse_dir(Some(&cut), b"d/e").len() <= 1);
        assert!(Record::parse_line("zz 1 2 3 4 5 6 7 8 9 aa -").is_none());
    }

    #[test]
    fn split_names_the_directory_and_the_file() {
        assert_eq!(split_rel(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split_rel(b"top"), (&b""[..], &b"top"[..]));
    }
}
