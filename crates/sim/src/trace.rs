//! Streaming trace readers. Each yields [`Request`]s one line at a time (constant memory, any
//! file size); a malformed line is an error naming its line number, or, with `skip_bad`, is
//! skipped and counted. A line that is not UTF-8, or a request whose size or end does not fit in
//! 64 bits, is a malformed line. Every request yielded has `len > 0` and an end (`offset + len`)
//! that fits in a `u64`.
//!
//! | format | line | units |
//! |---|---|---|
//! | MSR Cambridge CSV | `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` | bytes; Type `Read`/`Write`; device = DiskNumber |
//! | SPC / UMass | `ASU,LBA,Size,Opcode,Timestamp[,...]` | LBA in 512 B blocks, Size in bytes; `R`/`W`; device = ASU |
//! | DiskSim / MQSim ASCII | `arrival_ns device lba sectors type` | 512 B sectors; type 0 = write, 1 = read |
//! | blkparse text | `maj,min cpu seq time pid action rwbs sector + nsectors [proc]` | 512 B sectors; only `D` (or `Q`) events with R or W in rwbs; device = `maj,min` |
//! | fio iolog v2 / v3 | `fio version 2 iolog` then `file action [offset length]` (v3: `time file action ...`) | bytes; `read`/`write`; device = file |

use serde::Serialize;
use std::io::BufRead;
use std::str::FromStr;
use stripeguard_plan::Op;

/// One user request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    /// Read or write.
    pub op: Op,
    /// Byte offset.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// A trace format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// MSR Cambridge CSV.
    Msr,
    /// SPC / UMass CSV.
    Spc,
    /// DiskSim / MQSim ASCII.
    Disksim,
    /// blkparse default text output.
    Blkparse,
    /// fio iolog version 2.
    FioV2,
    /// fio iolog version 3.
    FioV3,
}

impl FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "msr" => TraceFormat::Msr,
            "spc" | "umass" => TraceFormat::Spc,
            "disksim" | "mqsim" => TraceFormat::Disksim,
            "blkparse" => TraceFormat::Blkparse,
            "fio" | "fio2" | "fio-v2" => TraceFormat::FioV2,
            "fio3" | "fio-v3" => TraceFormat::FioV3,
            _ => {
                return Err(format!(
                    "unknown trace format `{s}` (auto, msr, spc, disksim, blkparse, fio-v2, fio-v3)"
                ))
            }
        })
    }
}

impl TraceFormat {
    /// Every format.
    pub const ALL: [TraceFormat; 6] = [
        TraceFormat::Msr,
        TraceFormat::Spc,
        TraceFormat::Disksim,
        TraceFormat::Blkparse,
        TraceFormat::FioV2,
        TraceFormat::FioV3,
    ];

    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Msr => "msr",
            TraceFormat::Spc => "spc",
            TraceFormat::Disksim => "disksim",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::FioV2 => "fio-v2",
            TraceFormat::FioV3 => "fio-v3",
        }
    }

    /// Guess the format from the first non-empty line.
    pub fn detect(line: &str) -> Option<TraceFormat> {
        let t = line.trim();
        if t.starts_with("fio version 2 iolog") {
            return Some(TraceFormat::FioV2);
        }
        if t.starts_with("fio version 3 iolog") {
            return Some(TraceFormat::FioV3);
        }
        let ws: Vec<&str> = t.split_whitespace().collect();
        if ws.len() >= 10 && ws[0].contains(',') && ws.contains(&"+") {
            return Some(TraceFormat::Blkparse);
        }
        if t.contains(',') {
            let f: Vec<&str> = t.split(',').map(str::trim).collect();
            if is_msr_header(t) {
                return Some(TraceFormat::Msr);
            }
            // Some MSR files drop the trailing ResponseTime: 6 fields.
            if f.len() >= 6
                && (f[3].eq_ignore_ascii_case("read") || f[3].eq_ignore_ascii_case("write"))
            {
                return Some(TraceFormat::Msr);
            }
            if f.len() >= 5 && matches!(f[3], "R" | "r" | "W" | "w") {
                return Some(TraceFormat::Spc);
            }
            return None;
        }
        // DiskSim: the arrival time may be fractional (milliseconds in DiskSim's own traces).
        if ws.len() == 5
            && ws[0]
                .parse::<f64>()
                .is_ok_and(|t| t.is_finite() && t >= 0.0)
            && ws[1..].iter().all(|w| w.parse::<u64>().is_ok())
        {
            return Some(TraceFormat::Disksim);
        }
        None
    }
}

/// `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` (any case, any spacing).
fn is_msr_header(line: &str) -> bool {
    let f: Vec<String> = line
        .split(',')
        .map(|x| x.trim().to_ascii_lowercase())
        .collect();
    f.len() >= 6 && f[0] == "timestamp" && f[3] == "type" && f[4] == "offset"
}

/// A malformed trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A line that does not parse.
    #[error("line {line}: {message}: {text:?}")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
        /// The line (truncated).
        text: String,
    },
    /// Reading failed.
    #[error("reading the trace: {0}")]
    Io(#[from] std::io::Error),
    /// The format could not be recognised.
    #[error("cannot tell the trace format from its first line {0:?}; pass --format")]
    Unknown(String),
}

/// Reader options.
#[derive(Clone, Debug, Default)]
pub struct TraceOptions {
    /// Keep only requests of this device (DiskNumber, ASU, device number, `maj,min` or file).
    pub device: Option<String>,
    /// blkparse: replay `Q` events instead of `D`.
    pub blkparse_queue: bool,
    /// Skip malformed lines (counted) instead of failing.
    pub skip_bad: bool,
    /// Stop after this many requests.
    pub limit: Option<u64>,
}

/// A streaming reader.
pub struct TraceReader<R: BufRead> {
    input: R,
    format: TraceFormat,
    opts: TraceOptions,
    line: String,
    /// The raw bytes of the line being read (a line that is not UTF-8 is a malformed line).
    raw: Vec<u8>,
    line_no: u64,
    /// Malformed lines skipped (with `skip_bad`).
    pub skipped_bad: u64,
    /// Lines that were not requests (other devices, events, non-data operations).
    pub ignored: u64,
    yielded: u64,
    pending_first: Option<String>,
    /// The input has a line that is not blank.
    has_text: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// A reader of `format`, or detect it from the first non-empty line when `None`.
    pub fn new(
        mut input: R,
        format: Option<TraceFormat>,
        opts: TraceOptions,
    ) -> Result<Self, TraceError> {
        let mut first = String::new();
        let mut raw = Vec::new();
        let mut line_no = 0;
        let mut has_text = false;
        loop {
            raw.clear();
            if input.read_until(b'\n', &mut raw)? == 0 {
                first.clear();
                break;
            }
            line_no += 1;
            // Detection looks at text; a first line that is not UTF-8 is read lossily here and
            // reported with its line number when parsed.
            first = String::from_utf8_lossy(&raw).into_owned();
            if !first.trim().is_empty() {
                has_text = true;
                break;
            }
        }
        let format = match format {
            Some(f) => f,
            // Nothing to tell the format from, and nothing to read either.
            None if !has_text => TraceFormat::Disksim,
            None => TraceFormat::detect(&first)
                .ok_or_else(|| TraceError::Unknown(first.trim().chars().take(120).collect()))?,
        };
        Ok(TraceReader {
            input,
            format,
            opts,
            line: String::new(),
            raw,
            // The first non-blank line is read again by `next`; the blank ones before it are not
            // requests.
            line_no: if has_text { line_no - 1 } else { line_no },
            skipped_bad: 0,
            ignored: if has_text { line_no - 1 } else { line_no },
            yielded: 0,
            pending_first: has_text.then_some(first),
            has_text,
        })
    }

    /// Whether the input has a line that is not blank (false for an empty file).
    pub fn has_text(&self) -> bool {
        self.has_text
    }

    /// Requests yielded so far.
    pub fn yielded(&self) -> u64 {
        self.yielded
    }

    /// The format being read.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.line_no
    }

    fn bad(&self, message: impl Into<String>) -> TraceError {
        TraceError::Malformed {
            line: self.line_no,
            message: message.into(),
            text: self.line.trim_end().chars().take(120).collect(),
        }
    }

    /// Parse the current line: `Ok(None)` = not a request.
    fn parse(&self) -> Result<Option<Request>, TraceError> {
        let t = self.line.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(None);
        }
        let num = |s: &str, what: &str| -> Result<u64, TraceError> {
            s.trim()
                .parse::<u64>()
                .map_err(|_| self.bad(format!("{what} {s:?} is not a number")))
        };
        let dev_ok = |d: &str| {
            self.opts
                .device
                .as_deref()
                .is_none_or(|want| want == d.trim())
        };
        match self.format {
            TraceFormat::Msr => {
                if is_msr_header(t) {
                    return Ok(None);
                }
                let f: Vec<&str> = t.split(',').collect();
                if f.len() < 6 {
                    return Err(self.bad(
                        "expected Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
                    ));
                }
                if !dev_ok(f[2]) {
                    return Ok(None);
                }
                let op = match f[3].trim() {
                    x if x.eq_ignore_ascii_case("read") => Op::Read,
                    x if x.eq_ignore_ascii_case("write") => Op::Write,
                    x => return Err(self.bad(format!("type {x:?} is neither Read nor Write"))),
                };
                Ok(Some(Request {
                    op,
                    offset: num(f[4], "offset")?,
                    len: num(f[5], "size")?,
                }))
            }
            TraceFormat::Spc => {
                let f: Vec<&str> = t.split(',').collect();
                if f.len() < 5 {
                    return Err(self.bad("expected ASU,LBA,Size,Opcode,Timestamp"));
                }
                if !dev_ok(f[0]) {
                    return Ok(None);
                }
                let op = match f[3].trim() {
                    "R" | "r" => Op::Read,
                    "W" | "w" => Op::Write,
                    x => return Err(self.bad(format!("opcode {x:?} is neither R nor W"))),
                };
                let lba = num(f[1], "LBA")?;
                Ok(Some(Request {
                    op,
                    offset: lba
                        .checked_mul(512)
                        .ok_or_else(|| self.bad("LBA overflows"))?,
                    len: num(f[2], "size")?,
                }))
            }
            TraceFormat::Disksim => {
                let f: Vec<&str> = t.split_whitespace().collect();
                if f.len() != 5 {
                    return Err(self.bad("expected 5 fields: arrival_ns device lba sectors type"));
                }
                if !dev_ok(f[1]) {
                    return Ok(None);
                }
                let op = match f[4] {
                    "0" => Op::Write,
                    "1" => Op::Read,
                    x => {
                        return Err(
                            self.bad(format!("type {x:?} is neither 0 (write) nor 1 (read)"))
                        )
                    }
                };
                let lba = num(f[2], "lba")?;
                let sectors = num(f[3], "size")?;
                Ok(Some(Request {
                    op,
                    offset: lba
                        .checked_mul(512)
                        .ok_or_else(|| self.bad("lba overflows"))?,
                    len: sectors
                        .checked_mul(512)
                        .ok_or_else(|| self.bad("size passes 2^64 bytes"))?,
                }))
            }
            TraceFormat::Blkparse => {
                let f: Vec<&str> = t.split_whitespace().collect();
                // Summary sections ("CPU0 (8,0):", "Total (8,0):", ...) and other events are not requests.
                if f.len() < 10 || !f[0].contains(',') || f[8] != "+" {
                    return Ok(None);
                }
                let want = if self.opts.blkparse_queue { "Q" } else { "D" };
                if f[5] != want || !dev_ok(f[0]) {
                    return Ok(None);
                }
                let op = if f[6].contains('W') {
                    Op::Write
                } else if f[6].contains('R') {
                    Op::Read
                } else {
                    return Ok(None); // flush, discard, no-data
                };
                let sector = num(f[7], "sector")?;
                let n = num(f[9], "sectors")?;
                Ok(Some(Request {
                    op,
                    offset: sector
                        .checked_mul(512)
                        .ok_or_else(|| self.bad("sector overflows"))?,
                    len: n
                        .checked_mul(512)
                        .ok_or_else(|| self.bad("size passes 2^64 bytes"))?,
                }))
            }
            TraceFormat::FioV2 | TraceFormat::FioV3 => {
                if t.starts_with("fio version") {
                    return Ok(None);
                }
                let f: Vec<&str> = t.split_whitespace().collect();
                let f = if self.format == TraceFormat::FioV3 {
                    if f.len() < 3 {
                        return Err(self.bad("expected: time file action [offset length]"));
                    }
                    num(f[0], "timestamp")?;
                    &f[1..]
                } else {
                    &f[..]
                };
                if f.len() < 2 {
                    return Err(self.bad("expected: file action [offset length]"));
                }
                if !dev_ok(f[0]) {
                    return Ok(None);
                }
                let op = match f[1] {
                    "read" => Op::Read,
                    "write" => Op::Write,
                    "add" | "open" | "close" | "sync" | "datasync" | "trim" | "wait" => {
                        return Ok(None)
                    }
                    x => return Err(self.bad(format!("unknown action {x:?}"))),
                };
                if f.len() < 4 {
                    return Err(self.bad("read/write needs offset and length"));
                }
                Ok(Some(Request {
                    op,
                    offset: num(f[2], "offset")?,
                    len: num(f[3], "length")?,
                }))
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.opts.limit.is_some_and(|l| self.yielded >= l) {
                return None;
            }
            let utf8 = match self.pending_first.take() {
                Some(first) => {
                    self.line = first;
                    std::str::from_utf8(&self.raw).is_ok()
                }
                None => {
                    self.raw.clear();
                    match self.input.read_until(b'\n', &mut self.raw) {
                        Ok(0) => return None,
                        Ok(_) => {}
                        Err(e) => return Some(Err(e.into())),
                    }
                    match std::str::from_utf8(&self.raw) {
                        Ok(t) => {
                            self.line.clear();
                            self.line.push_str(t);
                            true
                        }
                        Err(_) => {
                            self.line = String::from_utf8_lossy(&self.raw).into_owned();
                            false
                        }
                    }
                }
            };
            self.line_no += 1;
            let parsed = if utf8 {
                self.parse().and_then(|r| match r {
                    Some(r) if r.offset.checked_add(r.len).is_none() => {
                        Err(self.bad("offset + size passes 2^64 bytes"))
                    }
                    r => Ok(r),
                })
            } else {
                Err(self.bad("the line is not UTF-8 text"))
            };
            match parsed {
                Ok(Some(r)) if r.len > 0 => {
                    self.yielded += 1;
                    return Some(Ok(r));
                }
                Ok(_) => self.ignored += 1,
                Err(e) if self.opts.skip_bad => {
                    let _ = e;
                    self.skipped_bad += 1;
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str, opts: TraceOptions) -> (TraceFormat, Vec<Request>) {
        let r = TraceReader::new(text.as_bytes(), None, opts).unwrap();
        let f = r.format();
        (f, r.map(|x| x.unwrap()).collect())
    }

    #[test]
    fn every_format_is_detected_and_parsed() {
        let w = |offset, len| Request {
            op: Op::Write,
            offset,
            len,
        };
        let r = |offset, len| Request {
            op: Op::Read,
            offset,
            len,
        };
        let cases: [(&str, TraceFormat, Vec<Request>); 6] = [
            (
                "128166372003061629,rsrch,0,Read,7014609920,24576,41286\n128166372016382155,rsrch,0,Write,4096,512,1\n",
                TraceFormat::Msr,
                vec![r(7014609920, 24576), w(4096, 512)],
            ),
            ("0,20941264,8192,W,0.551706\n1,8,4096,r,0.6\n", TraceFormat::Spc, vec![w(20941264 * 512, 8192), r(4096, 4096)]),
            ("938513000 4 264719034 16 0\n938828000 3 8 16 1\n", TraceFormat::Disksim, vec![w(264719034 * 512, 8192), r(4096, 8192)]),
            (
                "  8,0    3        1     0.000000000  1234  Q   W 2048 + 8 [dd]\n  8,0    3        2     0.000001000  1234  D   W 2048 + 8 [dd]\n  8,0    1        3     0.000002000  99  D   RS 64 + 16 [kworker]\n  8,0    1        4     0.000003000  99  D   FN 0 + 0 [kworker]\nCPU0 (8,0):\n Reads Queued:           0,        0KiB\n",
                TraceFormat::Blkparse,
                vec![w(2048 * 512, 4096), r(64 * 512, 8192)],
            ),
            ("fio version 2 iolog\n/dev/x add\n/dev/x open\n/dev/x write 0 4096\n/dev/x read 8192 512\n/dev/x close\n", TraceFormat::FioV2, vec![w(0, 4096), r(8192, 512)]),
            ("fio version 3 iolog\n0 /dev/x add\n10 /dev/x open\n20 /dev/x read 4096 4096\n", TraceFormat::FioV3, vec![r(4096, 4096)]),
        ];
        for (text, format, want) in cases {
            let (f, got) = read_all(text, TraceOptions::default());
            assert_eq!(f, format);
            assert_eq!(got, want, "{format:?}");
        }
    }

    #[test]
    fn device_filter_limit_and_blkparse_queue_events() {
        let (_, got) = read_all(
            "1 4 8 16 0\n2 3 8 16 1\n3 4 16 16 1\n4 4 24 16 1\n",
            TraceOptions {
                device: Some("4".into()),
                limit: Some(2),
                ..Default::default()
            },
        );
        assert_eq!(got.len(), 2);
        assert!(got
            .iter()
            .all(|r| r.offset == 8 * 512 || r.offset == 16 * 512));
        let text = "  8,0    3        1     0.0  1  Q   W 2048 + 8 [dd]\n  8,0    3        2     0.1  1  D   W 4096 + 8 [dd]\n";
        let (_, q) = read_all(
            text,
            TraceOptions {
                blkparse_queue: true,
                ..Default::default()
            },
        );
        assert_eq!(q[0].offset, 2048 * 512);
    }

    #[test]
    fn malformed_lines_name_their_line_or_are_skipped_and_counted() {
        let text = "1 4 8 16 0\n2 4 x 16 1\n3 4 8 16 7\n4 4 8 16 1\n";
        let mut r = TraceReader::new(text.as_bytes(), None, TraceOptions::default()).unwrap();
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("line 2:"), "{e}");
        let mut r = TraceReader::new(
            text.as_bytes(),
            None,
            TraceOptions {
                skip_bad: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.by_ref().count(), 2);
        assert_eq!(r.skipped_bad, 2);
        assert!(
            TraceReader::new("hello world\n".as_bytes(), None, TraceOptions::default()).is_err()
        );
    }

    #[test]
    fn a_request_past_the_end_of_u64_is_a_malformed_line() {
        let cases = [
            // 2^55 sectors: the length in bytes does not fit in 64 bits.
            (None, "1 0 8 36028797018963968 0\n"),
            (
                Some(TraceFormat::Blkparse),
                "  8,0 3 1 0.0 1 D W 8 + 36028797018963968 [dd]\n",
            ),
            // Offset + size past 2^64.
            (None, "1,h,0,Read,18446744073709551000,4096,1\n"),
            (
                None,
                "fio version 2 iolog\n/dev/x write 18446744073709551615 1\n",
            ),
        ];
        for (format, text) in cases {
            let r = TraceReader::new(text.as_bytes(), format, TraceOptions::default()).unwrap();
            let got: Vec<_> = r.collect();
            assert_eq!(got.len(), 1, "{text}");
            let e = got[0].as_ref().expect_err(text).to_string();
            assert!(e.starts_with("line ") && e.contains("2^64"), "{e}");
        }
    }

    #[test]
    fn the_shared_traces_parse() {
        for (name, requests) in [("tpcc-small.trace", 6999), ("wsrch-small.trace", 24783)] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/traces")
                .join(name);
            let Ok(f) = std::fs::File::open(&path) else {
                eprintln!(
                    "skipping: {} not found (../shared is not beside the checkout)",
                    path.display()
                );
                continue;
            };
            let r = TraceReader::new(std::io::BufReader::new(f), None, TraceOptions::default())
                .unwrap();
            assert_eq!(r.format(), TraceFormat::Disksim);
            let all: Vec<Request> = r.collect::<Result<_, _>>().unwrap();
            assert_eq!(all.len(), requests, "{name}");
        }
    }
}
