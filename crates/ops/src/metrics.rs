//! Metrics in the Prometheus text exposition format (version 0.0.4; issue 36 §3): for
//! node_exporter's textfile collector (`stripeguard metrics --textfile DIR`, every array found)
//! and on a holder's HTTP endpoint (`serve --metrics ADDR`, its array live). One renderer for
//! both, so the names are the same wherever they are scraped:
//!
//! - `stripeguard_array_info{array,uuid,level,scheme}` 1, `stripeguard_array_healthy` 0/1,
//!   `stripeguard_array_state{state}` 1 per state (`clean`, `degraded`, `rebuilding`, ...);
//! - `stripeguard_members{state="online"|"out"}`;
//! - `stripeguard_units_found_total{kind,member}` (located units by finding kind and member),
//!   `stripeguard_units_repaired_total`, `stripeguard_stripes_unrecoverable_total`,
//!   `stripeguard_checks_failed_total`, `stripeguard_stripes_resynced_total`,
//!   `stripeguard_member_failures_total`;
//! - `stripeguard_progress_ratio{operation}` (a replace, scrub or grow under way, 0..1);
//! - `stripeguard_nbd_*` from the holder's front end (connections, requests, bytes), counters;
//! - `stripeguard_nbd_request_duration_seconds{command}`, a histogram of the front end's request
//!   latency (from the request read to its reply handed to the writer, the wait for a worker
//!   included).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One array's numbers.
#[derive(Clone, Debug, Default)]
pub struct ArrayMetrics {
    pub name: String,
    pub uuid: String,
    /// `raid5`, `raid6`, or `K+M`.
    pub level: String,
    pub scheme: String,
    pub states: Vec<String>,
    pub healthy: bool,
    pub members_online: u64,
    pub members_out: u64,
    /// Located units by (kind, member index).
    pub found: BTreeMap<(String, usize), u64>,
    pub repaired: u64,
    pub unrecoverable: u64,
    pub detected: u64,
    pub resynced: u64,
    pub member_failures: u64,
    /// (operation, done fraction).
    pub progress: Vec<(String, f64)>,
    /// The front end's counters (`connections_total`, `requests_total`, ...).
    pub front_end: Vec<(String, u64)>,
    /// The front end's request latency, by command.
    pub latency: Vec<LatencyHistogram>,
}

/// One command's request latency: the count in each bucket (not cumulative; the last bucket
/// takes everything above the last bound) and the sum.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencyHistogram {
    pub command: String,
    /// Upper bounds of the buckets, in seconds, rising.
    pub bounds_seconds: Vec<f64>,
    /// `bounds_seconds.len() + 1` counts.
    pub counts: Vec<u64>,
    pub sum_seconds: f64,
}

impl ArrayMetrics {
    /// From what a holder reports of itself, with its counters when it is this process.
    pub fn from_live(
        live: &crate::LiveStatus,
        c: Option<&stripeguard_engine::Counters>,
    ) -> ArrayMetrics {
        let states: Vec<String> = live.states().iter().map(|s| s.to_string()).collect();
        let mut found = BTreeMap::new();
        // The holder keeps located units by kind and by member apart: by kind on member "all".
        for (k, n) in c.map(|c| &c.by_kind).into_iter().flatten() {
            found.insert((k.clone(), usize::MAX), *n);
        }
        let mut progress = Vec::new();
        if let Some(g) = live.grow.as_ref().filter(|g| g.running) {
            progress.push(("grow".into(), frac(g.done, g.total)));
        }
        if let Some(r) = live.replace.as_ref().filter(|r| r.running) {
            progress.push(("replace".into(), frac(r.done, r.total)));
        }
        if let Some(s) = live.scrub.as_ref().filter(|s| s.running) {
            progress.push(("scrub".into(), frac(s.done, s.total)));
        }
        ArrayMetrics {
            name: live.name.clone(),
            uuid: live.uuid.clone(),
            level: String::new(),
            scheme: String::new(),
            healthy: states.iter().all(|s| s == "clean"),
            states,
            members_online: live.members.len().saturating_sub(live.out.len()) as u64,
            members_out: live.out.len() as u64,
            found,
            repaired: live.repaired,
            unrecoverable: live.unrecoverable,
            detected: live.detected,
            resynced: live.resynced,
            member_failures: c.map_or(live.out.len() as u64, |c| c.members_failed),
            progress,
            front_end: live.front_end.clone(),
            latency: live.front_end_latency.clone(),
        }
    }
}

fn frac(done: u64, total: u64) -> f64 {
    // (A running operation with a total of 0 has not counted its stripes yet: not done.)
    if total == 0 {
        0.0
    } else {
        done as f64 / total as f64
    }
}

/// A label value, escaped as the exposition format says (backslash, quote, newline).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Every array's metrics, each family's HELP and TYPE once.
pub fn render(arrays: &[ArrayMetrics]) -> String {
    let mut out = String::new();
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
    };
    let id = |a: &ArrayMetrics| format!("array=\"{}\",uuid=\"{}\"", esc(&a.name), esc(&a.uuid));
    family(
        &mut out,
        "stripeguard_array_info",
        "gauge",
        "An array this host knows (always 1).",
    );
    for a in arrays {
        let _ = writeln!(
            out,
            "stripeguard_array_info{{{},level=\"{}\",scheme=\"{}\"}} 1",
            id(a),
            esc(&a.level),
            esc(&a.scheme)
        );
    }
    family(
        &mut out,
        "stripeguard_array_healthy",
        "gauge",
        "1 when the array is clean and complete, else 0.",
    );
    for a in arrays {
        let _ = writeln!(
            out,
            "stripeguard_array_healthy{{{}}} {}",
            id(a),
            u8::from(a.healthy)
        );
    }
    family(
        &mut out,
        "stripeguard_array_state",
        "gauge",
        "1 for each state the array is in.",
    );
    for a in arrays {
        for s in &a.states {
            let _ = writeln!(
                out,
                "stripeguard_array_state{{{},state=\"{}\"}} 1",
                id(a),
                esc(s)
            );
        }
    }
    family(
        &mut out,
        "stripeguard_members",
        "gauge",
        "Members by state.",
    );
    for a in arrays {
        let _ = writeln!(
            out,
            "stripeguard_members{{{},state=\"online\"}} {}",
            id(a),
            a.members_online
        );
        let _ = writeln!(
            out,
            "stripeguard_members{{{},state=\"out\"}} {}",
            id(a),
            a.members_out
        );
    }
    family(
        &mut out,
        "stripeguard_units_found_total",
        "counter",
        "Units found wrong, by finding kind and member (member \"all\": not kept per member).",
    );
    for a in arrays {
        for ((kind, member), n) in &a.found {
            let m = if *member == usize::MAX {
                "all".to_string()
            } else {
                member.to_string()
            };
            let _ = writeln!(
                out,
                "stripeguard_units_found_total{{{},kind=\"{}\",member=\"{m}\"}} {n}",
                id(a),
                esc(kind)
            );
        }
    }
    for (name, help, get) in [
        (
            "stripeguard_units_repaired",
            "Units rebuilt or whose appendix was rewritten, verified.",
            (|a: &ArrayMetrics| a.repaired) as fn(&ArrayMetrics) -> u64,
        ),
        (
            "stripeguard_stripes_unrecoverable",
            "Stripes found unrecoverable.",
            |a| a.unrecoverable,
        ),
        (
            "stripeguard_checks_failed",
            "Checks that failed (each triggers a diagnosis of the stripe).",
            |a| a.detected,
        ),
        (
            "stripeguard_stripes_resynced",
            "Stripes resynced after an unclean shutdown.",
            |a| a.resynced,
        ),
        (
            "stripeguard_member_failures",
            "Members taken out of the array.",
            |a| a.member_failures,
        ),
    ] {
        // The text format's TYPE names the samples' own name (`..._total`), as node_exporter's
        // counters do.
        let name = format!("{name}_total");
        family(&mut out, &name, "counter", help);
        for a in arrays {
            let _ = writeln!(out, "{name}{{{}}} {}", id(a), get(a));
        }
    }
    family(
        &mut out,
        "stripeguard_progress_ratio",
        "gauge",
        "A replace, scrub or grow under way: how far, 0 to 1.",
    );
    for a in arrays {
        for (op, f) in &a.progress {
            let _ = writeln!(
                out,
                "stripeguard_progress_ratio{{{},operation=\"{}\"}} {f:.6}",
                id(a),
                esc(op)
            );
        }
    }
    let mut fe: BTreeMap<&str, Vec<(&ArrayMetrics, u64)>> = BTreeMap::new();
    for a in arrays {
        for (k, v) in &a.front_end {
            fe.entry(k.as_str()).or_default().push((a, *v));
        }
    }
    for (k, rows) in fe {
        let name: String = k
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        // A counter's TYPE line names its samples' own name (`..._total`), as the others do:
        // a parser then types the family as a counter, not as "unknown".
        let (metric, kind) = if name.ends_with("_now") {
            (format!("stripeguard_nbd_{name}"), "gauge")
        } else {
            (
                format!("stripeguard_nbd_{}_total", name.trim_end_matches("_total")),
                "counter",
            )
        };
        family(
            &mut out,
            &metric,
            kind,
            &format!("The NBD front end's {k}."),
        );
        for (a, v) in rows {
            let _ = writeln!(out, "{metric}{{{}}} {v}", id(a));
        }
    }
    let name = "stripeguard_nbd_request_duration_seconds";
    if arrays.iter().any(|a| !a.latency.is_empty()) {
        family(
            &mut out,
            name,
            "histogram",
            "NBD requests by command: from the request read to its reply handed to the writer.",
        );
    }
    for a in arrays {
        for h in &a.latency {
            let labels = format!("{},command=\"{}\"", id(a), esc(&h.command));
            let mut below = 0u64;
            // Exactly one line per bound and a `+Inf` line, whatever the counts' length.
            for i in 0..=h.bounds_seconds.len() {
                below += h.counts.get(i).copied().unwrap_or(0);
                let le = h
                    .bounds_seconds
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |b| format!("{b}"));
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {below}");
            }
            let _ = writeln!(out, "{name}_sum{{{labels}}} {:.6}", h.sum_seconds);
            let _ = writeln!(out, "{name}_count{{{labels}}} {below}");
        }
    }
    out
}

/// The numbers of an array nobody holds, from what a scan found and its durable event log
/// (located units by kind and member, repairs, unrecoverable stripes, member failures).
pub fn from_scan(f: &crate::FoundArray) -> ArrayMetrics {
    let health = f.health();
    let mut m = ArrayMetrics {
        name: f.name.clone(),
        uuid: f.uuid.clone(),
        level: level(f.parity_chunks, &f.code, f.data_chunks),
        scheme: f.scheme.clone(),
        states: vec![health.to_string(), f.state.clone()],
        healthy: health == "complete" && f.state == "clean",
        members_online: f.current() as u64,
        members_out: u64::from(f.members) - f.current() as u64,
        ..ArrayMetrics::default()
    };
    let members = crate::open_member_paths(&f.member_paths(), false);
    log_totals(&mut m, &members);
    m
}

/// The counts of units found by kind and member, repairs, unrecoverable stripes and member
/// failures, from the array's durable event log on `members` — held or not, so a scrape sees
/// the same series whether a holder runs or not (a holder's own session counts would start
/// again at zero each time it starts). Counts come from the entries the log still holds (its
/// ring keeps the newest 320).
pub fn log_totals(m: &mut ArrayMetrics, members: &[stripeguard_disk::DiskRef]) {
    use stripeguard_engine::{EventAction, EventKind};
    let Ok(log) = stripeguard_engine::read_log_of(members) else {
        return;
    };
    m.found.clear();
    m.repaired = 0;
    m.unrecoverable = 0;
    m.member_failures = 0;
    for e in &log.entries {
        match (e.kind, e.action) {
            (EventKind::MemberFailed, _) => m.member_failures += 1,
            (_, EventAction::Unrecoverable) => m.unrecoverable += 1,
            (_, EventAction::Notice | EventAction::Resynced | EventAction::Mismatch) => {}
            (k, a) => {
                *m.found
                    .entry((k.to_string(), e.member as usize))
                    .or_default() += 1;
                if !matches!(a, EventAction::Reread | EventAction::FoundReadOnly) {
                    m.repaired += 1;
                }
            }
        }
    }
}

/// `raid5`, `raid6` (the usual codes) or `K+M code`.
pub fn level(m: u16, code: &str, k: u16) -> String {
    match (m, code) {
        (1, "xor") => "raid5".into(),
        (2, "raid6") => "raid6".into(),
        _ => format!("{k}+{m} {code}"),
    }
}

/// Serve `GET /metrics` on `listener` until `stop` is set: each scrape renders what `now`
/// returns. A minimal HTTP/1.1 server (one request per connection, 2 s to send it, 8 KiB at
/// most): Prometheus and curl are its clients, and nothing it answers changes anything.
pub fn serve_http(
    listener: std::net::TcpListener,
    stop: &std::sync::atomic::AtomicBool,
    now: &(dyn Fn() -> String + Sync),
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _ = listener.set_nonblocking(true);
    let busy = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        while !stop.load(Ordering::Relaxed) {
            let conn = match listener.accept() {
                Ok((c, _)) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
                Err(_) => continue,
            };
            // Each request on a thread of its own, at most 16 at once: a slow or idle client
            // holds its own thread, not the scrapes behind it.
            if busy.load(Ordering::Relaxed) >= 16 {
                drop(conn);
                continue;
            }
            busy.fetch_add(1, Ordering::Relaxed);
            let busy = &busy;
            scope.spawn(move || {
                answer(conn, now);
                busy.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
}

/// One request: read it (2 s in all, 8 KiB at most), answer, close.
fn answer(mut conn: std::net::TcpStream, now: &(dyn Fn() -> String + Sync)) {
    use std::io::{Read, Write};
    let _ = conn.set_nonblocking(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    let complete = loop {
        if req.windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || req.len() >= 8192 {
            break false;
        }
        let _ = conn.set_read_timeout(Some(left));
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break false,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    };
    let text = String::from_utf8_lossy(&req);
    let first = text.lines().next().unwrap_or_default();
    let words: Vec<&str> = first.split_whitespace().collect();
    let path = words
        .get(1)
        .map(|p| p.split('?').next().unwrap_or_default());
    let (status, ctype, body) = match (complete, words.first(), path) {
        (false, ..) => (
            "400 Bad Request",
            "text/plain",
            "an incomplete request\n".to_string(),
        ),
        (_, Some(&"GET"), Some("/metrics")) => {
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", now())
        }
        (_, Some(&"GET"), _) => (
            "404 Not Found",
            "text/plain",
            "only /metrics is here\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".into(),
        ),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ArrayMetrics {
        ArrayMetrics {
            name: "db".into(),
            uuid: "00112233445566778899aabbccddeeff".into(),
            level: "raid6".into(),
            scheme: "hybrid-seq".into(),
            states: vec!["clean".into()],
            healthy: true,
            members_online: 6,
            members_out: 0,
            found: [(("checksum".to_string(), 2), 3)].into_iter().collect(),
            progress: vec![("scrub".into(), 0.5)],
            front_end: vec![("bytes_read".into(), 4096), ("bytes_written".into(), 0)],
            latency: vec![LatencyHistogram {
                command: "read".into(),
                bounds_seconds: vec![0.001, 0.01],
                counts: vec![2, 1, 1],
                sum_seconds: 0.5,
            }],
            ..ArrayMetrics::default()
        }
    }

    #[test]
    fn a_histogram_is_cumulative_and_ends_at_inf() {
        let text = render(&[sample()]);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("stripeguard_nbd_request_duration_seconds"))
            .collect();
        let ends = |l: &&str| l.rsplit(' ').next().unwrap().to_string();
        assert_eq!(
            lines.iter().map(ends).collect::<Vec<_>>(),
            ["2", "3", "4", "0.500000", "4"],
            "{text}"
        );
        assert!(lines[2].contains("le=\"+Inf\""), "{text}");
        assert!(text.contains("# TYPE stripeguard_nbd_request_duration_seconds histogram"));
    }

    /// Every sample belongs to the family its TYPE line names (a counter's samples are that
    /// name, `..._total`; a histogram's its `_bucket`, `_sum` and `_count`), so a parser types
    /// none of them "unknown".
    #[test]
    fn every_sample_is_of_the_family_its_type_line_names() {
        let mut a = sample();
        a.front_end.push(("connections_now".into(), 1));
        a.found.insert(("parity".into(), usize::MAX), 1);
        let text = render(&[a]);
        let mut family = ("", "");
        for l in text.lines() {
            if let Some(t) = l.strip_prefix("# TYPE ") {
                let mut w = t.split(' ');
                family = (w.next().unwrap(), w.next().unwrap());
                continue;
            }
            if l.starts_with('#') {
                continue;
            }
            let name = l.split(['{', ' ']).next().unwrap();
            let ok = match family.1 {
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| name == format!("{}{s}", family.0)),
                _ => name == family.0,
            };
            assert!(ok, "{name} under # TYPE {} {}:\n{text}", family.0, family.1);
        }
    }

    /// The dashboard shipped in packaging/grafana asks only for metrics this renderer writes.
    #[test]
    fn the_grafana_dashboard_names_only_metrics_that_exist() {
        let dash = include_str!("../../../packaging/grafana/stripeguard-dashboard.json");
        let text = render(&[sample()]);
        let v: serde_json::Value = serde_json::from_str(dash).expect("the dashboard is JSON");
        assert!(v["panels"].as_array().is_some_and(|p| p.len() >= 8));
        let mut names = 0;
        for (i, _) in dash.match_indices("stripeguard_") {
            let name: String = dash[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name}{{"))),
                "the dashboard asks for {name}, which no sample has:\n{text}"
            );
            names += 1;
        }
        assert!(names >= 10, "{names}");
    }
}
