//! Turns the result lines of many runs into markdown tables of medians (with min–max).

/// One result line: its kind and tab-separated fields.
struct Row {
    kind: String,
    fields: Vec<String>,
}

impl Row {
    fn num(&self, i: usize) -> f64 {
        self.fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(f64::NAN)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let s = format!("{x:.0}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 && c != '-' {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn fixed(x: f64, decimals: usize) -> String {
    if x.is_finite() { format!("{x:.decimals$}") } else { "–".into() }
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 { format!("{:.1}×", a / b) } else { "–".into() }
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "**met**",
        Some(false) => "**not met**",
        None => "–",
    }
}

/// A server's name in the tables.
fn server_name(label: &str) -> String {
    match label {
        "ours" => "acp-rpc `HttpServer`".into(),
        "official" => "official Rust `AcpHttpServer` 5.0.0".into(),
        "ts" => "official TypeScript `AcpServer` 2.4.0 (node)".into(),
        "before" => "acp-rpc `HttpServer`, the older build (`BEFORE_BIN`)".into(),
        other => other.into(),
    }
}

fn client_name(label: &str) -> &str {
    match label {
        "ours" => "acp-rpc `Remote`",
        "official" => "official Rust `HttpClient` 5.0.0",
        "raw" => "raw frames (WebSocket / SSE read by hand)",
        other => other,
    }
}

pub fn report(path: &str) {
    let text = std::fs::read_to_string(path).expect("results file");
    let rows: Vec<Row> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let kind = f.next()?.to_owned();
            Some(Row { kind, fields: f.map(str::to_owned).collect() })
        })
        .collect();
    let select = |kind: &str, keys: &[(usize, &str)]| -> Vec<&Row> {
        rows.iter()
            .filter(|r| r.kind == kind && keys.iter().all(|(i, k)| r.fields.get(*i).map(String::as_str) == Some(k)))
            .collect()
    };
    let mut order: Vec<(String, String)> = Vec::new();
    for r in rows.iter().filter(|r| r.kind == "tput") {
        let key = (r.fields[0].clone(), r.fields[2].clone());
        if !order.contains(&key) {
            order.push(key);
        }
    }
    let rank = |s: &str| ["ours", "before", "official", "ts"].iter().position(|x| *x == s).unwrap_or(9);
    order.sort_by_key(|(server, client)| (rank(client), rank(server)));

    // ---- throughput ----
    let tput = |server: &str, profile: &str, client: &str| -> Vec<f64> {
        select("tput", &[(0, server), (1, profile), (2, client)]).iter().map(|r| r.num(5)).collect()
    };
    let med_tput = |server: &str, profile: &str, client: &str| median(tput(server, profile, client));
    let n = rows.iter().find(|r| r.kind == "tput").map(|r| r.fields[3].clone()).unwrap_or_default();
    let cpu = |server: &str, profile: &str, client: &str| -> f64 {
        median(select("tput", &[(0, server), (1, profile), (2, client)]).iter().map(|r| r.num(7)).collect())
    };
    slow_table(&rows, rank);
    if order.is_empty() && !rows.iter().any(|r| r.kind == "mem" || r.kind == "rtt") {
        return;
    }
    println!(
        "#### 1. `session/update` throughput to one client, loopback (msg/s; N = {} per turn; median (min–max))",
        thousands(n.parse().unwrap_or(f64::NAN))
    );
    println!();
    println!(
        "| Client | Server | runs | WebSocket | SSE (Streamable HTTP) | WS vs official Rust server | SSE vs official Rust server | server CPU per message, WS / SSE (µs) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (server, client) in &order {
        let cell = |profile: &str| {
            let v = tput(server, profile, client);
            let (lo, hi) = range(&v);
            if v.is_empty() {
                "–".to_owned()
            } else {
                format!("{} ({}–{})", thousands(median(v)), thousands(lo), thousands(hi))
            }
        };
        let runs = select("tput", &[(0, server), (1, "ws"), (2, client)]).len();
        let vs = |profile: &str| ratio(med_tput(server, profile, client), med_tput("official", profile, client));
        println!(
            "| {} | {} | {runs} | {} | {} | {} | {} | {} / {} |",
            client_name(client),
            server_name(server),
            cell("ws"),
            cell("sse"),
            vs("ws"),
            vs("sse"),
            fixed(cpu(server, "ws", client), 1),
            fixed(cpu(server, "sse", client), 1),
        );
    }
    println!();

    // ---- memory ----
    let servers: Vec<String> = {
        let mut s: Vec<String> = Vec::new();
        for r in rows.iter().filter(|r| r.kind == "mem") {
            if !s.contains(&r.fields[0]) {
                s.push(r.fields[0].clone());
            }
        }
        s.sort_by_key(|x| rank(x));
        s
    };
    let mem_col =
        |server: &str, i: usize| -> Vec<f64> { select("mem", &[(0, server)]).iter().map(|r| r.num(i)).collect() };
    if !servers.is_empty() {
        println!("#### 2. Server memory per idle WebSocket connection (each initialized, with a session)");
        println!();
        println!(
            "| Server | runs | connections open | RSS before (MB) | RSS after (MB) | per connection (KiB) | min–max (KiB) | setup time (s) | vs official |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for server in &servers {
            let per = mem_col(server, 4);
            let (lo, hi) = range(&per);
            let kib = |x: f64| x / 1024.0;
            let official = median(mem_col("official", 4));
            println!(
                "| {} | {} | {} | {} | {} | {} | {}–{} | {} | {} |",
                server_name(server),
                per.len(),
                thousands(median(mem_col(server, 1))),
                fixed(median(mem_col(server, 2)) * 1024.0 / 1e6, 1),
                fixed(median(mem_col(server, 3)) * 1024.0 / 1e6, 1),
                fixed(kib(median(per.clone())), 1),
                fixed(kib(lo), 1),
                fixed(kib(hi), 1),
                fixed(median(mem_col(server, 5)), 1),
                if server == "official" { "1.00".to_owned() } else { fixed(median(per) / official, 2) },
            );
        }
        println!();
    }

    // ---- round trip under load ----
    let mut pauses: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.kind == "rtt") {
        if !pauses.contains(&r.fields[1]) {
            pauses.push(r.fields[1].clone());
        }
    }
    let rtt_col = |server: &str, pause: &str, i: usize| -> Vec<f64> {
        select("rtt", &[(0, server), (1, pause)]).iter().map(|r| r.num(i)).collect()
    };
    let streamers = thousands(median(rows.iter().filter(|r| r.kind == "rtt").map(|r| r.num(9)).collect()));
    if !pauses.is_empty() {
        println!(
            "#### 3. Prompt round trip while {streamers} connections stream (ms; median over runs of each run's percentile)"
        );
        println!();
        println!(
            "| Server | streamers' pace | runs × samples | p50 | p99 | max | p99 of each run | updates received /s | server CPU (% of a core) | server RSS during (MB) |"
        );
        println!("|---|---|---:|---:|---:|---:|---|---:|---:|---:|");
        for pause in &pauses {
            for server in &servers {
                let runs = rtt_col(server, pause, 2);
                if runs.is_empty() {
                    continue;
                }
                let pace = match pause.parse::<f64>() {
                    Ok(0.0) => "flat out".to_owned(),
                    Ok(us) => format!("1 update / {} ms each", fixed(us / 1000.0, 0)),
                    Err(_) => pause.clone(),
                };
                let each: Vec<String> = rtt_col(server, pause, 4).iter().map(|x| fixed(*x, 1)).collect();
                println!(
                    "| {} | {pace} | {} × {} | {} | {} | {} | {} | {} | {} | {} |",
                    server_name(server),
                    runs.len(),
                    thousands(median(runs.clone())),
                    fixed(median(rtt_col(server, pause, 3)), 2),
                    fixed(median(rtt_col(server, pause, 4)), 2),
                    fixed(median(rtt_col(server, pause, 5)), 2),
                    each.join(", "),
                    thousands(median(rtt_col(server, pause, 6))),
                    fixed(median(rtt_col(server, pause, 8)), 0),
                    fixed(median(rtt_col(server, pause, 7)) * 1024.0 / 1e6, 1),
                );
            }
        }
        println!();
    }

    // ---- summary ----
    println!("#### Summary (medians; goals from issue 13)");
    println!();
    println!(
        "| Measurement | acp-rpc | official Rust 5.0.0 | official TypeScript 2.4.0 | ours / Rust | ours / TypeScript | Goal (vs the Rust server) | |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---|");
    for (client, how) in [("raw", "raw-frame client"), ("ours", "acp-rpc client")] {
        for (profile, name) in [("ws", "WebSocket"), ("sse", "SSE")] {
            let [a, b, t] = ["ours", "official", "ts"].map(|server| med_tput(server, profile, client));
            let ok = (a.is_finite() && b.is_finite()).then_some(a >= 10.0 * b);
            println!(
                "| `session/update` throughput, {name}, the same {how} for each (msg/s) | {} | {} | {} | {} | {} | ≥ 10× | {} |",
                thousands(a),
                thousands(b),
                thousands(t),
                ratio(a, b),
                ratio(a, t),
                verdict(ok)
            );
        }
    }
    let less = |a: f64, b: f64| {
        if a.is_finite() && b.is_finite() && a > 0.0 { format!("{:.1}× less", b / a) } else { "–".into() }
    };
    for (profile, name) in [("ws", "WebSocket"), ("sse", "SSE")] {
        let [a, b, t] = ["ours", "official", "ts"].map(|server| cpu(server, profile, "raw"));
        println!(
            "| server CPU per `session/update`, {name}, raw-frame client (µs) | {} | {} | {} | {} | {} | | |",
            fixed(a, 2),
            fixed(b, 2),
            fixed(t, 2),
            less(a, b),
            less(a, t),
        );
    }
    let kib = |server: &str| median(mem_col(server, 4)) / 1024.0;
    let [a, b, t] = ["ours", "official", "ts"].map(kib);
    let n_of = |server: &str| thousands(median(mem_col(server, 1)));
    let share = |a: f64, b: f64| if a.is_finite() && b.is_finite() { fixed(a / b, 2) } else { "–".into() };
    if a.is_finite() {
        let ok = b.is_finite().then_some(a <= b / 4.0 && a < 64.0);
        println!(
            "| server RSS per idle WebSocket connection with a session (KiB; at {} / {} / {} connections) | {} | {} | {} | {} | {} | ≤ 1/4 and < 64 KiB | {} |",
            n_of("ours"),
            n_of("official"),
            n_of("ts"),
            fixed(a, 1),
            fixed(b, 1),
            fixed(t, 1),
            share(a, b),
            share(a, t),
            verdict(ok)
        );
    }
    for pause in &pauses {
        let [a, b, t] = ["ours", "official", "ts"].map(|server| median(rtt_col(server, pause, 4)));
        let pace = if pause == "0" {
            "flat out".to_owned()
        } else {
            format!("1 update / {} ms each", fixed(pause.parse::<f64>().unwrap_or(f64::NAN) / 1000.0, 0))
        };
        println!(
            "| prompt round trip p99 while {streamers} connections stream ({pace}) (ms) | {} | {} | {} | {} | {} | < 10 ms | {} |",
            fixed(a, 2),
            fixed(b, 2),
            fixed(t, 2),
            share(a, b),
            share(a, t),
            verdict(a.is_finite().then_some(a < 10.0))
        );
    }

    // ---- A/B against the older build ----
    let has_before = rows.iter().any(|r| r.fields.first().map(String::as_str) == Some("before"));
    if !has_before {
        return;
    }
    println!();
    println!("#### A/B: this build (ours) against the older one (before), same run (medians)");
    println!();
    println!("| Measurement | runs (ours / before) | ours | before | ours / before |");
    println!("|---|---|---:|---:|---:|");
    let line = |what: String, a: Vec<f64>, b: Vec<f64>, decimals: usize| {
        if a.is_empty() && b.is_empty() {
            return;
        }
        let (na, nb) = (a.len(), b.len());
        let (ma, mb) = (median(a), median(b));
        let show = |x: f64| if decimals == 0 { thousands(x) } else { fixed(x, decimals) };
        println!("| {what} | {na} / {nb} | {} | {} | {} |", show(ma), show(mb), share(ma, mb));
    };
    for client in ["raw", "ours", "official"] {
        for (profile, name) in [("ws", "WebSocket"), ("sse", "SSE")] {
            line(
                format!("`session/update` throughput, {name}, {} (msg/s)", client_name(client)),
                tput("ours", profile, client),
                tput("before", profile, client),
                0,
            );
        }
    }
    let per = |server: &str| mem_col(server, 4).iter().map(|x| x / 1024.0).collect::<Vec<_>>();
    line("server RSS per idle WebSocket connection with a session (KiB)".into(), per("ours"), per("before"), 1);
    for pause in &pauses {
        let pace = if pause == "0" { "flat out".to_owned() } else { format!("pause {pause} µs") };
        for (i, p) in [(3, "p50"), (4, "p99")] {
            line(
                format!("prompt round trip {p} under load, {pace} (ms)"),
                rtt_col("ours", pause, i),
                rtt_col("before", pause, i),
                2,
            );
        }
    }
}

/// The slow-client runs (`slow` lines), one row per server.
fn slow_table(rows: &[Row], rank: impl Fn(&str) -> usize) {
    let slow: Vec<&Row> = rows.iter().filter(|r| r.kind == "slow").collect();
    if slow.is_empty() {
        return;
    }
    let mut servers: Vec<&str> = Vec::new();
    for r in &slow {
        if !servers.contains(&r.fields[0].as_str()) {
            servers.push(&r.fields[0]);
        }
    }
    servers.sort_by_key(|s| rank(s));
    let first = &slow[0];
    println!(
        "#### The slow-client run: {} silent and {} slowloris sockets, then {} honest clients (ms from a client's first byte to its turn's answer)",
        first.fields[1], first.fields[2], first.fields[3]
    );
    println!();
    println!(
        "| Server | runs | completed, each run | p50 (median) | p99 (median) | p99 of each run | hostile sockets still open (median) |"
    );
    println!("|---|---:|---|---:|---:|---|---:|");
    for server in servers {
        let of: Vec<&&Row> = slow.iter().filter(|r| r.fields[0] == server).collect();
        let col = |i: usize| of.iter().map(|r| r.num(i)).collect::<Vec<f64>>();
        let done: Vec<String> = of.iter().map(|r| format!("{} of {}", r.fields[4], r.fields[3])).collect();
        let each: Vec<String> = col(6).iter().map(|x| fixed(*x, 0)).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            server_name(server),
            of.len(),
            done.join(", "),
            fixed(median(col(5)), 0),
            fixed(median(col(6)), 0),
            each.join(", "),
            thousands(median(col(8))),
        );
    }
    println!();
}
