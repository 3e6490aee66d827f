//! Turns the result lines of many runs into markdown tables of medians.

use std::collections::BTreeMap;

/// The official SDK's version, as the lock file resolved it (`build.rs`).
const OFFICIAL: &str = env!("OFFICIAL_SDK_VERSION");

/// One result line: kind, impl, n, then numbers.
struct Row {
    kind: String,
    imp: String,
    n: u64,
    vals: Vec<f64>,
}

/// `x` to one decimal, or a dash when it was not measured.
fn one_decimal(x: f64) -> String {
    if x.is_nan() { "–".to_owned() } else { format!("{x:.1}") }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

struct Data {
    rows: Vec<Row>,
}

impl Data {
    /// Column `col` of every run of (kind, impl, n).
    fn col(&self, kind: &str, imp: &str, n: Option<u64>, col: usize) -> Vec<f64> {
        self.rows
            .iter()
            .filter(|r| r.kind == kind && r.imp == imp && n.is_none_or(|n| r.n == n))
            .filter_map(|r| r.vals.get(col).copied())
            .collect()
    }
    fn med(&self, kind: &str, imp: &str, n: Option<u64>, col: usize) -> f64 {
        median(self.col(kind, imp, n, col))
    }
    fn runs(&self, kind: &str, imp: &str, n: Option<u64>) -> usize {
        self.col(kind, imp, n, 0).len()
    }
    fn range(&self, kind: &str, imp: &str, n: Option<u64>, col: usize) -> (f64, f64) {
        let v = self.col(kind, imp, n, col);
        (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
    }
}

fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mb(kib: f64) -> String {
    if kib.is_finite() { format!("{:.1}", kib * 1024.0 / 1e6) } else { "–".into() }
}

fn yes(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**not met**" }
}

pub fn report(path: &str) {
    let text = std::fs::read_to_string(path).expect("results file");
    let rows: Vec<Row> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() < 4 {
                return None;
            }
            Some(Row {
                kind: f[0].into(),
                imp: f[1].into(),
                n: f[2].parse().ok()?,
                vals: f[3..].iter().filter_map(|v| v.parse().ok()).collect(),
            })
        })
        .collect();
    let d = Data { rows };
    // A run may hold v1 lines, v2 lines or both (see run.sh's modes).
    if d.rows.iter().any(|r| !is_v2(&r.kind)) {
        report_v1(&d);
    }
    if d.rows.iter().any(|r| is_v2(&r.kind)) {
        report_v2(&d);
    }
}

/// Protocol v2 lines: `pipe2`, `rtt2`, `rtt2-ct`, `rtt2-task`.
fn is_v2(kind: &str) -> bool {
    kind == "pipe2" || kind.starts_with("rtt2")
}

/// The pipe sizes measured for `kind`, ascending.
fn sizes(d: &Data, kind: &str) -> Vec<u64> {
    let mut ns: Vec<u64> = d.rows.iter().filter(|r| r.kind == kind).map(|r| r.n).collect();
    ns.sort_unstable();
    ns.dedup();
    ns
}

fn report_v1(d: &Data) {
    // pipe columns: 0 secs, 1 msgs/s, 2 client KiB, 3 agent KiB
    let ns = sizes(d, "pipe");
    let big = ns.last().copied().unwrap_or(0);
    let small = ns.first().copied().unwrap_or(0);
    let n_tp = if ns.contains(&100_000) { 100_000 } else { big };

    // ---- summary against the goals ----
    let tp_ours = d.med("pipe", "ours", Some(n_tp), 1);
    let tp_off = d.med("pipe", "official", Some(n_tp), 1);
    let tp_raw = d.med("pipe", "raw", Some(n_tp), 1);
    let rss_max_ours = [small, big]
        .iter()
        .flat_map(|&n| [d.med("pipe", "ours", Some(n), 2), d.med("pipe", "ours", Some(n), 3)])
        .fold(0.0, f64::max);
    let rtt = |kind: &str, imp: &str| d.med(kind, imp, None, 0);
    let c = |kind: &str, imp: &str, col: usize| d.med(kind, imp, None, col) / 1000.0;

    println!("### Summary (medians; goals from the brief)\n");
    println!("MT = tokio multi-thread runtime (2 workers), CT = current-thread runtime.\n");
    println!("| # | Measurement | acp-rpc | official {OFFICIAL} | Ratio ours / official | Goal | |");
    println!("|---|---|---:|---:|---:|---|---|");
    println!(
        "| 1 | `session/update` throughput over stdio pipes, N = {} (msg/s) | {} | {} | {:.1}× | ≥ 10× | {} |",
        thousands(n_tp as f64),
        thousands(tp_ours),
        thousands(tp_off),
        tp_ours / tp_off,
        yes(tp_ours / tp_off >= 10.0)
    );
    println!(
        "| 2 | peak RSS, larger of client/agent, N = {} / {} (MB) | {} / {} | {} / {} | | flat, < 20 MB | {} |",
        thousands(small as f64),
        thousands(big as f64),
        mb(d.med("pipe", "ours", Some(small), 2).max(d.med("pipe", "ours", Some(small), 3))),
        mb(d.med("pipe", "ours", Some(big), 2).max(d.med("pipe", "ours", Some(big), 3))),
        mb(d.med("pipe", "official", Some(small), 2).max(d.med("pipe", "official", Some(small), 3))),
        mb(d.med("pipe", "official", Some(big), 2).max(d.med("pipe", "official", Some(big), 3))),
        yes(rss_max_ours * 1024.0 / 1e6 < 20.0)
    );
    for (kind, rt) in [
        ("rtt", "MT, caller on the main thread (`block_on`)"),
        ("rtt-task", "MT, caller in a worker task"),
        ("rtt-ct", "CT"),
    ] {
        let (o, f) = (rtt(kind, "ours"), rtt(kind, "official"));
        if o.is_nan() || f.is_nan() {
            continue;
        }
        println!(
            "| 3 | request round trip in memory, {rt}, p50 (µs) | {o:.1} | {f:.1} | {:.2} | ≤ 0.33 | {} |",
            o / f,
            yes(o / f <= 1.0 / 3.0)
        );
    }
    // The floor (no runtime at all, see src/raw.rs) is what the transport and the scheduler
    // cost; what lies above it is what each implementation adds.
    for (kind, rt) in [("rtt", "MT, `block_on`"), ("rtt-task", "MT, task"), ("rtt-ct", "CT")] {
        let (o, f, floor) = (rtt(kind, "ours"), rtt(kind, "official"), rtt(kind, "raw"));
        if o.is_nan() || f.is_nan() || floor.is_nan() {
            continue;
        }
        println!(
            "| 3 | the same, {rt}, above the floor (no runtime: {floor:.1} µs) | {:.1} | {:.1} | {:.2} | | |",
            o - floor,
            f - floor,
            (o - floor) / (f - floor)
        );
    }
    for (kind, rt) in [("cancel", "MT"), ("cancel-ct", "CT")] {
        println!(
            "| 4 | `session/cancel` → `cancelled`, typed handler ignores its token, default settings, {rt}, p99 (ms) | {:.3} | n/a (SDK never answers) | | < 1 ms | {} |",
            c(kind, "ours-typed-ignore", 1),
            yes(c(kind, "ours-typed-ignore", 1) < 1.0)
        );
    }
    println!(
        "| 4 | same, raw `Handler` (its token use cannot be seen), default grace, MT, p99 (ms) | {:.2} | n/a (SDK never answers) | | < 1 ms | {} |",
        c("cancel", "ours-ignore", 1),
        yes(c("cancel", "ours-ignore", 1) < 1.0)
    );
    for (kind, rt) in [("cancel", "MT"), ("cancel-ct", "CT")] {
        println!(
            "| 4 | same, `cancel_grace(0)`, {rt}, p99 (ms) | {:.2} | n/a | | < 1 ms | {} |",
            c(kind, "ours-ignore-grace0", 1),
            yes(c(kind, "ours-ignore-grace0", 1) < 1.0)
        );
    }
    for (kind, rt) in [("cancel", "MT"), ("cancel-ct", "CT")] {
        let (o, f) = (c(kind, "ours-coop", 1), c(kind, "official", 1));
        println!(
            "| 4 | cooperative handler (ours) vs hand-written `session/cancel` handler (official), {rt}, p99 (ms) | {o:.3} | {f:.3} | {:.3} | < 1 ms | {} |",
            o / f,
            yes(o < 1.0)
        );
    }
    println!(
        "| 5 | ceiling: bare serde_json encode → pipe → decode, N = {} (msg/s) | {} (= {:.0} % of ceiling) | {} (= {:.1} %) | | | |",
        thousands(n_tp as f64),
        thousands(tp_ours),
        100.0 * tp_ours / tp_raw,
        thousands(tp_off),
        100.0 * tp_off / tp_raw
    );
    println!("\nCeiling itself: {} msg/s.", thousands(tp_raw));

    // ---- details ----
    println!("\n### 1. Throughput, agent → client `session/update` over stdio pipes (msg/s)\n");
    println!(
        "| N | runs | acp-rpc | official {OFFICIAL} | ours / official | ceiling (bare serde_json) | ours / ceiling |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &ns {
        let (o, f, r) = (
            d.med("pipe", "ours", Some(n), 1),
            d.med("pipe", "official", Some(n), 1),
            d.med("pipe", "raw", Some(n), 1),
        );
        let (olo, ohi) = d.range("pipe", "ours", Some(n), 1);
        let (flo, fhi) = d.range("pipe", "official", Some(n), 1);
        println!(
            "| {} | {} | {} ({}–{}) | {} ({}–{}) | {:.1}× | {} | {:.0} % |",
            thousands(n as f64),
            d.runs("pipe", "ours", Some(n)),
            thousands(o),
            thousands(olo),
            thousands(ohi),
            thousands(f),
            thousands(flo),
            thousands(fhi),
            o / f,
            thousands(r),
            100.0 * o / r
        );
    }

    println!("\n### 2. Peak RSS (VmHWM, MB = 10^6 bytes; median of runs)\n");
    println!(
        "| N | acp-rpc client | acp-rpc agent | official client | official agent | ceiling client | ceiling agent |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &ns {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            thousands(n as f64),
            mb(d.med("pipe", "ours", Some(n), 2)),
            mb(d.med("pipe", "ours", Some(n), 3)),
            mb(d.med("pipe", "official", Some(n), 2)),
            mb(d.med("pipe", "official", Some(n), 3)),
            mb(d.med("pipe", "raw", Some(n), 2)),
            mb(d.med("pipe", "raw", Some(n), 3)),
        );
    }

    println!("\n### 3. Request round trip in memory (µs; median over runs of each run's percentile)\n");
    println!("MT task = multi-thread runtime with the caller in a spawned task (`BENCH_CALLER=task`).\n");
    println!(
        "| Implementation | runs × round trips | MT p50 | MT p99 | MT task p50 | MT task p99 | CT p50 | CT p99 | CT p50 vs ours |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let rtt_n = d.rows.iter().find(|r| r.kind == "rtt").map(|r| r.n).unwrap_or(0);
    for (imp, label) in [
        ("ours", "acp-rpc, `tokio::io::duplex`"),
        ("official", "official, `ByteStreams` on `tokio::io::duplex`"),
        ("official-channel", "official, `Channel::duplex` (frames, no bytes)"),
        ("raw", "floor: no runtime, serde_json over `tokio::io::duplex`"),
    ] {
        println!(
            "| {label} | {} × {} | {:.1} | {:.1} | {} | {} | {:.1} | {:.1} | {:.1}× |",
            d.runs("rtt", imp, None),
            thousands(rtt_n as f64),
            d.med("rtt", imp, None, 0),
            d.med("rtt", imp, None, 1),
            one_decimal(d.med("rtt-task", imp, None, 0)),
            one_decimal(d.med("rtt-task", imp, None, 1)),
            d.med("rtt-ct", imp, None, 0),
            d.med("rtt-ct", imp, None, 1),
            d.med("rtt-ct", imp, None, 0) / rtt("rtt-ct", "ours"),
        );
    }

    println!("\n### 4. `session/cancel` → prompt response, in memory (ms; median over runs)\n");
    println!("| Agent | runs × turns | MT p50 | MT p99 | MT max | CT p50 | CT p99 | CT max |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut cancel_ns: BTreeMap<&str, u64> = BTreeMap::new();
    for r in d.rows.iter().filter(|r| r.kind == "cancel") {
        cancel_ns.insert(&r.imp, r.n);
    }
    let ms = |x: f64| if x.is_finite() { format!("{x:.3}") } else { "–".into() };
    for (imp, label) in [
        (
            "ours-typed-ignore",
            "acp-rpc, typed handler ignores its token, default settings (no grace: it never asked for its token)",
        ),
        ("ours-ignore", "acp-rpc, raw handler ignores its token, default `cancel_grace` (100 ms)"),
        ("ours-ignore-grace0", "acp-rpc, handler ignores its token, `cancel_grace(Duration::ZERO)`"),
        ("ours-coop", "acp-rpc, handler returns `cancelled` when its token fires"),
        ("official", "official, hand-written `session/cancel` handler answers the parked prompt"),
    ] {
        println!(
            "| {label} | {} × {} | {} | {} | {} | {} | {} | {} |",
            d.runs("cancel", imp, None),
            cancel_ns.get(imp).copied().unwrap_or(0),
            ms(c("cancel", imp, 0)),
            ms(c("cancel", imp, 1)),
            ms(c("cancel", imp, 2)),
            ms(c("cancel-ct", imp, 0)),
            ms(c("cancel-ct", imp, 1)),
            ms(c("cancel-ct", imp, 2)),
        );
    }
}

/// The protocol v2 lines (`pipe2`, `rtt2*`): summary against the goals, then the details.
fn report_v2(d: &Data) {
    let ns = sizes(d, "pipe2");
    let n_tp = if ns.contains(&100_000) { 100_000 } else { ns.last().copied().unwrap_or(0) };
    let tp = |imp: &str, n: u64| d.med("pipe2", imp, Some(n), 1);
    let rss = |imp: &str, n: u64| d.med("pipe2", imp, Some(n), 2).max(d.med("pipe2", imp, Some(n), 3));
    let rtt = |kind: &str, imp: &str, col: usize| d.med(kind, imp, None, col);

    println!("\n### Protocol v2: summary (medians; goals from the brief)\n");
    println!("| # | Measurement | acp-rpc | official {OFFICIAL} | Ratio ours / official | Goal | |");
    println!("|---|---|---:|---:|---:|---|---|");
    if !ns.is_empty() {
        let (o, f) = (tp("ours", n_tp), tp("official", n_tp));
        println!(
            "| 1 | `session/update` throughput over stdio pipes, N = {} (msg/s) | {} | {} | {:.1}× | ≥ 10× | {} |",
            thousands(n_tp as f64),
            thousands(o),
            thousands(f),
            o / f,
            yes(o / f >= 10.0)
        );
        let (small, big) = (ns[0], ns[ns.len() - 1]);
        println!(
            "| 1 | peak RSS, larger of client/agent, N = {} / {} (MB) | {} / {} | {} / {} | | | |",
            thousands(small as f64),
            thousands(big as f64),
            mb(rss("ours", small)),
            mb(rss("ours", big)),
            mb(rss("official", small)),
            mb(rss("official", big)),
        );
    }
    for (kind, rt) in [
        ("rtt2", "MT, caller on the main thread (`block_on`)"),
        ("rtt2-task", "MT, caller in a worker task"),
        ("rtt2-ct", "CT"),
    ] {
        let (o, f) = (rtt(kind, "ours", 0), rtt(kind, "official", 0));
        if o.is_nan() || f.is_nan() {
            continue;
        }
        println!(
            "| 2 | `session/list` round trip in memory, {rt}, p50 (µs) | {o:.1} | {f:.1} | {:.2} | ≤ 0.33 | {} |",
            o / f,
            yes(o / f <= 1.0 / 3.0)
        );
    }
    for (kind, rt) in [("rtt2", "MT, `block_on`"), ("rtt2-task", "MT, task"), ("rtt2-ct", "CT")] {
        let (o, f, floor) = (rtt(kind, "ours", 0), rtt(kind, "official", 0), rtt(kind, "raw", 0));
        if o.is_nan() || f.is_nan() || floor.is_nan() {
            continue;
        }
        println!(
            "| 2 | the same, {rt}, above the floor (no runtime: {floor:.1} µs) | {:.1} | {:.1} | {:.2} | | |",
            o - floor,
            f - floor,
            (o - floor) / (f - floor)
        );
    }

    if !ns.is_empty() {
        println!("\n### Protocol v2: 1. throughput, agent → client `session/update` over stdio pipes (msg/s)\n");
        println!(
            "| N | runs | acp-rpc (`Turn` → `serve_client`) | acp-rpc agent, raw `Handler` client | official {OFFICIAL} | ours / official | ceiling (bare serde_json) | ours / ceiling | raw client / ceiling |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &n in &ns {
            let (o, oraw, f, r) = (tp("ours", n), tp("ours-raw-client", n), tp("official", n), tp("raw", n));
            let range = |imp: &str| {
                let (lo, hi) = d.range("pipe2", imp, Some(n), 1);
                format!("({}–{})", thousands(lo), thousands(hi))
            };
            println!(
                "| {} | {} | {} {} | {} {} | {} {} | {:.1}× | {} | {:.0} % | {:.0} % |",
                thousands(n as f64),
                d.runs("pipe2", "ours", Some(n)),
                thousands(o),
                range("ours"),
                thousands(oraw),
                range("ours-raw-client"),
                thousands(f),
                range("official"),
                o / f,
                thousands(r),
                100.0 * o / r,
                100.0 * oraw / r,
            );
        }
        println!("\n### Protocol v2: peak RSS (VmHWM, MB = 10^6 bytes; median of runs)\n");
        println!(
            "| N | acp-rpc client | acp-rpc agent | raw-client variant: client | official client | official agent | ceiling client | ceiling agent |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &n in &ns {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                thousands(n as f64),
                mb(d.med("pipe2", "ours", Some(n), 2)),
                mb(d.med("pipe2", "ours", Some(n), 3)),
                mb(d.med("pipe2", "ours-raw-client", Some(n), 2)),
                mb(d.med("pipe2", "official", Some(n), 2)),
                mb(d.med("pipe2", "official", Some(n), 3)),
                mb(d.med("pipe2", "raw", Some(n), 2)),
                mb(d.med("pipe2", "raw", Some(n), 3)),
            );
        }
    }

    if d.runs("rtt2", "ours", None) + d.runs("rtt2-ct", "ours", None) > 0 {
        println!(
            "\n### Protocol v2: 2. `session/list` round trip in memory (µs; median over runs of each run's percentile)\n"
        );
        println!(
            "| Implementation | runs × round trips | MT p50 | MT p99 | MT task p50 | MT task p99 | CT p50 | CT p99 | CT p50 vs ours |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let rtt_n = d.rows.iter().find(|r| r.kind.starts_with("rtt2")).map(|r| r.n).unwrap_or(0);
        for (imp, label) in [
            ("ours", "acp-rpc v2 (`serve_client` ↔ `serve_agent`), `tokio::io::duplex`"),
            ("official", "official v2 (`Client.v2()` ↔ `Agent.v2()`), `ByteStreams` on `tokio::io::duplex`"),
            ("raw", "floor: no runtime, serde_json over `tokio::io::duplex`"),
        ] {
            println!(
                "| {label} | {} × {} | {} | {} | {} | {} | {} | {} | {:.1}× |",
                d.runs("rtt2-ct", imp, None).max(d.runs("rtt2", imp, None)),
                thousands(rtt_n as f64),
                one_decimal(rtt("rtt2", imp, 0)),
                one_decimal(rtt("rtt2", imp, 1)),
                one_decimal(rtt("rtt2-task", imp, 0)),
                one_decimal(rtt("rtt2-task", imp, 1)),
                one_decimal(rtt("rtt2-ct", imp, 0)),
                one_decimal(rtt("rtt2-ct", imp, 1)),
                rtt("rtt2-ct", imp, 0) / rtt("rtt2-ct", "ours", 0),
            );
        }
    }
}
