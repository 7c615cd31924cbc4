//! The configuration file (issue 36 §1): `/etc/stripeguard/stripeguard.conf`, or the path in
//! `STRIPEGUARD_CONFIG`. TOML, so its errors carry line and column, and `scan --config` writes
//! it. What it says:
//!
//! ```toml
//! # Globs scanned for members (default, when absent: every block device of this host).
//! devices = ["/dev/disk/by-id/ata-*", "/srv/arrays/*.img"]
//!
//! [array.backup]                       # the name `--array backup` and `list` use
//! uuid = "3f2a9c01d4e5f60718293a4b5c6d7e8f"   # which array it is (a name can be reused)
//! members = ["nbd://10.0.0.2/m3"]      # extra candidates a glob cannot find (NBD exports)
//! wait = "30s"                         # `serve --array` waits this long for late members
//! scrub_rate = "50M"                   # the scrub timer's --rate, bytes per second
//! hook = "/usr/local/bin/on-event"     # `monitor` runs it for each new event
//! metrics = "127.0.0.1:9750"           # `serve --array` serves metrics there
//! spare_group = "rack1"                # arrays of one group share hot spares (`monitor`)
//! ```
//!
//! Unknown keys are errors (a misspelt key silently ignored is a setting silently lost).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the file is when `STRIPEGUARD_CONFIG` does not say.
pub const DEFAULT_CONFIG: &str = "/etc/stripeguard/stripeguard.conf";

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Globs scanned for members; empty: every block device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// The arrays by name.
    #[serde(default, rename = "array")]
    pub arrays: BTreeMap<String, ArrayConf>,
}

/// One array's settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArrayConf {
    /// The array's uuid, 32 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Member paths or NBD URIs to try besides the globs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// How long `serve --array` waits for members that are not there yet (`30s`, `2m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// The scheduled scrub's rate limit (bytes per second, `50M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrub_rate: Option<String>,
    /// A program `monitor` runs for each new event (as `events --exec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// Where `serve --array` serves Prometheus metrics (`127.0.0.1:9750`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// Arrays with the same spare group share their hot spares: `monitor` moves a spare from
    /// one to another that has a member out and no spare of its own (FORMAT.md §2.11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare_group: Option<String>,
}

impl Config {
    /// The file at `path`, or at `STRIPEGUARD_CONFIG`, or at [`DEFAULT_CONFIG`]. A file that is
    /// not there is an empty configuration, unless it was named explicitly.
    pub fn load(path: Option<&Path>) -> Result<(PathBuf, Config), String> {
        let (path, named) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => match std::env::var_os("STRIPEGUARD_CONFIG").filter(|p| !p.is_empty()) {
                Some(p) => (PathBuf::from(p), true),
                None => (PathBuf::from(DEFAULT_CONFIG), false),
            },
        };
        // A configuration is a few lines: a bigger file is a wrong path (a disk image named by
        // mistake), not something to read into memory.
        const MAX_CONFIG_BYTES: u64 = 1 << 20;
        // Only a regular file (a FIFO would block for ever, a device read without end).
        if let Ok(m) = std::fs::metadata(&path) {
            if !m.is_file() {
                return Err(format!("{}: not a regular file", path.display()));
            }
        }
        let read = std::fs::File::open(&path).and_then(|f| {
            use std::io::Read;
            let mut t = String::new();
            f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut t)?;
            Ok(t)
        });
        let text = match read {
            Ok(t) if t.len() as u64 > MAX_CONFIG_BYTES => {
                return Err(format!(
                    "{}: over {} KiB, too big for a configuration file (is it the right path?)",
                    path.display(),
                    MAX_CONFIG_BYTES >> 10
                ))
            }
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => {
                return Ok((path, Config::default()))
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let cfg = Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((path, cfg))
    }

    /// Parse the text of a file; errors name the line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| one_line(&e))?;
        let mut uuids: std::collections::HashMap<[u8; 16], &str> = Default::default();
        for (name, a) in &cfg.arrays {
            let at = |what: String| format!("[array.{name}]: {what}");
            stripeguard_format::check_name(name).map_err(at)?;
            if let Some(u) = &a.uuid {
                let bytes =
                    parse_uuid(u).ok_or_else(|| at(format!("uuid {u:?} is not 32 hex digits")))?;
                // One array, two names: which settings apply would be a guess.
                if let Some(other) = uuids.insert(bytes, name) {
                    return Err(at(format!(
                        "uuid {u} is also [array.{other}]'s: one array, one section"
                    )));
                }
            }
            if let Some(w) = &a.wait {
                parse_duration(w)
                    .ok_or_else(|| at(format!("wait {w:?} is not a duration (30s, 2m, 1h)")))?;
            }
            if let Some(m) = &a.metrics {
                m.parse::<std::net::SocketAddr>().map_err(|_| {
                    at(format!(
                        "metrics {m:?} is not an address and port (127.0.0.1:9750)"
                    ))
                })?;
            }
            if let Some(g) = &a.spare_group {
                stripeguard_format::check_name(g).map_err(|e| at(format!("spare_group: {e}")))?;
            }
            if let Some(r) = &a.scrub_rate {
                parse_rate(r).ok_or_else(|| {
                    at(format!(
                        "scrub_rate {r:?} is not a rate in bytes per second (50M)"
                    ))
                })?;
            }
        }
        Ok(cfg)
    }

    /// The text of this configuration (what `scan --config` prints).
    pub fn to_text(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// The array called `key` here (by its table name), with its name.
    pub fn array(&self, key: &str) -> Option<(&str, &ArrayConf)> {
        self.arrays
            .iter()
            .find(|(n, _)| n.as_str() == key)
            .map(|(n, a)| (n.as_str(), a))
    }

    /// The name this file gives the array with `uuid`.
    pub fn name_of(&self, uuid: &[u8; 16]) -> Option<&str> {
        self.arrays
            .iter()
            .find(|(_, a)| a.uuid.as_deref().and_then(parse_uuid) == Some(*uuid))
            .map(|(n, _)| n.as_str())
    }
}

/// A TOML error on one line: "line 3, column 7: expected ...".
fn one_line(e: &toml::de::Error) -> String {
    let msg = e.message().replace('\n', " ");
    match e.span() {
        Some(_) => {
            // toml's Display has "TOML parse error at line L, column C" first.
            let first = e.to_string();
            let at = first
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("TOML parse error at "))
                .unwrap_or("")
                .to_string();
            if at.is_empty() {
                msg
            } else {
                format!("{at}: {msg}")
            }
        }
        None => msg,
    }
}

/// 32 hex digits (dashes allowed, as `blkid` prints uuids).
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// `30s`, `2m`, `1h`, `500ms`, or bare seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    // At most a day: a longer wait is a mistake, and a huge one would not fit a Duration.
    (secs.is_finite() && (0.0..=86_400.0).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// `50M`, `1G`, `4096` bytes per second (binary units, as everywhere in the tool).
pub fn parse_rate(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim_end_matches(['B', 'i']) {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    v.checked_mul(mult).filter(|&r| r > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_and_errors_name_the_line() {
        let text = r#"
devices = ["/dev/loop*"]

[array.backup]
uuid = "3f2a9c01d4e5f60718293a4b5c6d7e8f"
members = ["nbd://10.0.0.2/m3"]
wait = "30s"
"#;
        let c = Config::parse(text).unwrap();
        assert_eq!(c.devices, ["/dev/loop*"]);
        let (name, a) = c.array("backup").unwrap();
        assert_eq!(name, "backup");
        assert_eq!(
            parse_duration(a.wait.as_deref().unwrap()),
            Some(Duration::from_secs(30))
        );
        assert_eq!(Config::parse(&c.to_text()).unwrap(), c);
        let e = Config::parse("devices = [\"a\"]\n[array.x]\nuid = \"1\"\n").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("uid"), "{e}");
        let e = Config::parse("[array.x]\nwait = \"soon\"\n").unwrap_err();
        assert!(e.contains("[array.x]") && e.contains("soon"), "{e}");
        let e = Config::parse("[array.\"a b\"]\n").unwrap_err();
        assert!(e.contains("name"), "{e}");
        let e = Config::parse("devices = [\n").unwrap_err();
        assert!(e.contains("line "), "{e}");
        let u = "00112233445566778899aabbccddeeff";
        let e = Config::parse(&format!(
            "[array.a]\nuuid = \"{u}\"\n[array.b]\nuuid = \"{u}\"\n"
        ))
        .unwrap_err();
        assert!(e.contains("one array, one section"), "{e}");
    }

    #[test]
    fn units() {
        assert_eq!(parse_rate("50M"), Some(50 << 20));
        assert_eq!(parse_rate("0"), None);
        assert_eq!(parse_rate("5x"), None);
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("-1"), None);
        assert_eq!(
            parse_uuid("3f2a9c01-d4e5-f607-1829-3a4b5c6d7e8f").map(|u| u[0]),
            Some(0x3f)
        );
        assert_eq!(parse_uuid("3f2a"), None);
    }
}
