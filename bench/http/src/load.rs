//! The many-connections load generator: raw WebSocket frames (tokio-tungstenite), no ACP
//! client library, so that 10,000 connections cost the generator little. Each connection is
//! honest all the same: the RFD's WebSocket profile (`GET /acp` with `Upgrade: websocket`,
//! one JSON-RPC message per text frame), `initialize`, then `session/new`, each answer awaited
//! and checked; afterwards it keeps reading (which answers the server's pings).
//!
//! 1. **Memory.** The server's `VmRSS` is read before the first connection and again once all
//!    N connections are open, initialized, hold a session, and have been idle for 2 s:
//!    `mem <server> <n_open> <rss_before_kib> <rss_after_kib> <bytes_per_conn> <setup_secs> <failed>`.
//! 2. **Round trip under load.** For each pause P in the plan: `streamers` of the connections
//!    run prompt turns back to back, each streaming `per_prompt` updates P µs apart (P = 0: as
//!    fast as the server sends them), and read every update. After 2 s of that, `probes` other
//!    connections (opened by a second thread with its own runtime, so a probe's answer never
//!    waits behind the streams' frames in the generator) each send a prompt of one update,
//!    wait for its answer, pause 5 ms, and again, until `samples` are taken in all (or 20 s
//!    have passed); each sample is the time from sending the prompt to its answer:
//!    `rtt <server> <pause_us> <samples> <p50_ms> <p99_ms> <max_ms> <updates_per_s> <rss_kib>
//!    <server_cpu_pct> <streamers>` (updates received by the streamers during the probes, the server's
//!    `VmRSS` at their end, and the server's CPU time over the probes in % of one core).
//!
//! Source addresses: the connections bind 127.0.0.1 … 127.0.0.`sources` in turn (port 0), so
//! the 28,232 ephemeral ports of each address are not the limit.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::common;

type Socket = WebSocketStream<TcpStream>;

/// What one `load` run does (see the module docs).
pub struct Plan {
    pub url: String,
    pub pid: String,
    pub label: String,
    pub n: usize,
    pub streamers: usize,
    pub probes: usize,
    pub samples: usize,
    /// The phases of part 2: the pause between a streamer's updates, in µs (0: none).
    pub pauses: Vec<u64>,
    pub per_prompt: u64,
    pub sources: u8,
}

/// Setups in flight at once (handshake + initialize + session/new).
const SETUP_CONCURRENCY: usize = 256;
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(2);
const WARM_UP: Duration = Duration::from_secs(2);
/// The pause between one probe connection's prompts.
const PROBE_GAP: Duration = Duration::from_millis(5);
/// The longest a phase's probing lasts (a saturated server may answer slowly).
const PROBE_LIMIT: Duration = Duration::from_secs(20);

pub(crate) fn server_addr(url: &str) -> Result<SocketAddr, String> {
    let rest = url.strip_prefix("ws://").ok_or("the url must be ws://HOST:PORT/PATH")?;
    let host_port = rest.split('/').next().unwrap_or("");
    host_port.parse().map_err(|e| format!("{host_port}: {e}"))
}

fn rss_kib(pid: &str) -> Result<u64, String> {
    common::status_kib(pid, "VmRSS").ok_or_else(|| format!("cannot read /proc/{pid}/status"))
}

/// Opens one connection from 127.0.0.`source`: WebSocket handshake, `initialize`,
/// `session/new`. Returns the socket and the session id.
pub(crate) async fn open(url: &str, addr: SocketAddr, source: u8) -> Result<(Socket, String), String> {
    let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
    socket.set_reuseaddr(true).map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    let from = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, source), 0);
    socket.bind(from.into()).map_err(|e| format!("bind {from}: {e}"))?;
    let tcp = socket.connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    // A small read buffer: tungstenite zero-fills it before every read.
    let config = WebSocketConfig::default().read_buffer_size(16 * 1024);
    let (mut ws, response) = tokio_tungstenite::client_async_with_config(url, tcp, Some(config))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    if response.headers().get("acp-connection-id").is_none() {
        return Err("the 101 has no Acp-Connection-Id".into());
    }
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    call(&mut ws, 0, &init, None).await?;
    let new = json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}});
    let answer = call(&mut ws, 1, &new, None).await?;
    let session = answer["result"]["sessionId"].as_str().ok_or("session/new answered without a sessionId")?;
    Ok((ws, session.to_owned()))
}

/// Sends one request and reads until its answer (a frame with its id and a result), counting
/// the `session/update`s that come first. Returns the answer.
pub(crate) async fn call(
    ws: &mut Socket,
    id: u64,
    request: &Value,
    updates: Option<&AtomicU64>,
) -> Result<Value, String> {
    ws.send(Message::text(request.to_string())).await.map_err(|e| format!("send: {e}"))?;
    loop {
        let text = match ws.next().await {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | None => return Err("the server closed the socket".into()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(format!("read: {e}")),
        };
        // Updates are most of the traffic: recognised without building a value.
        if text.as_str().contains("\"session/update\"") {
            if let Some(updates) = updates {
                updates.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let message: Value = serde_json::from_str(text.as_str()).map_err(|e| format!("bad JSON: {e}"))?;
        if message.get("method").is_none() && message["id"] == id {
            if let Some(error) = message.get("error") {
                return Err(format!("request {id} failed: {error}"));
            }
            return Ok(message);
        }
    }
}

pub(crate) fn prompt(id: u64, session: &str, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": text}]}})
}

/// Reads (and drops) what comes until the socket ends: an idle connection.
async fn idle(mut ws: Socket, load: Arc<Load>) {
    while let Some(Ok(_)) = ws.next().await {}
    load.closed.fetch_add(1, Ordering::Relaxed);
}

/// A streaming connection: waits for a phase (`Some(pause)`), runs prompt turns back to back
/// while it lasts, then waits again.
async fn stream(
    mut ws: Socket,
    session: String,
    per_prompt: u64,
    mut phase: watch::Receiver<Option<u64>>,
    load: Arc<Load>,
) {
    let mut id = 2;
    loop {
        let pause = loop {
            if let Some(pause) = *phase.borrow_and_update() {
                break pause;
            }
            tokio::select! {
                changed = phase.changed() => if changed.is_err() { return },
                frame = ws.next() => if !matches!(frame, Some(Ok(_))) {
                    load.closed.fetch_add(1, Ordering::Relaxed);
                    return;
                },
            }
        };
        load.active.fetch_add(1, Ordering::Relaxed);
        let text = format!("{per_prompt} {pause}");
        while phase.borrow().is_some() {
            if let Err(error) = call(&mut ws, id, &prompt(id, &session, &text), Some(&load.updates)).await {
                eprintln!("a streaming connection failed: {error}");
                load.errors.fetch_add(1, Ordering::Relaxed);
                load.active.fetch_sub(1, Ordering::Relaxed);
                return;
            }
            id += 1;
        }
        load.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Load {
    updates: AtomicU64,
    active: AtomicUsize,
    errors: AtomicU64,
    /// Connections the server closed while they were waiting.
    closed: AtomicUsize,
}

/// Opens `count` connections on the current runtime, `SETUP_CONCURRENCY` at a time; each
/// becomes a task (`make_task`) once set up. Returns how many failed.
pub(crate) async fn open_many<F, Fut>(
    url: &str,
    addr: SocketAddr,
    count: usize,
    first: usize,
    sources: u8,
    make_task: F,
) -> usize
where
    F: Fn(usize, Socket, String) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let gate = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Result<(usize, Socket, String), String>>();
    for i in first..first + count {
        let gate = gate.clone();
        let done = done_tx.clone();
        let url = url.to_owned();
        let source = 1 + (i % sources as usize) as u8;
        tokio::task::spawn_local(async move {
            let _permit = gate.acquire_owned().await.expect("semaphore");
            let result = match tokio::time::timeout(SETUP_TIMEOUT, open(&url, addr, source)).await {
                Ok(Ok((ws, session))) => Ok((i, ws, session)),
                Ok(Err(error)) => Err(error),
                Err(_) => Err("setup timed out".into()),
            };
            let _ = done.send(result);
        });
    }
    drop(done_tx);
    let mut failed = 0;
    let mut first_error = None;
    while let Some(result) = done_rx.recv().await {
        match result {
            Ok((i, ws, session)) => {
                tokio::task::spawn_local(make_task(i, ws, session));
            }
            Err(error) => {
                failed += 1;
                first_error.get_or_insert(error);
            }
        }
    }
    if let Some(error) = first_error {
        eprintln!("{failed} of {count} connections failed; the first: {error}");
    }
    failed
}

/// The probe connections: `count` of them, numbered from `first` (which picks their source
/// addresses), taking `samples` round trips in all per phase.
struct Probes {
    url: String,
    addr: SocketAddr,
    first: usize,
    count: usize,
    sources: u8,
    samples: usize,
}

/// The probe thread: opens the probe connections, then for each request on `go` takes the
/// round trips and sends them back.
fn probe_thread(
    probes: Probes,
    ready: oneshot::Sender<Result<(), String>>,
    mut go: mpsc::UnboundedReceiver<oneshot::Sender<Result<Vec<Duration>, String>>>,
) -> std::thread::JoinHandle<()> {
    let Probes { url, addr, first, count, sources, samples } = probes;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        rt.block_on(async move {
            let mut conns = Vec::with_capacity(count);
            for i in first..first + count {
                match open(&url, addr, 1 + (i % sources as usize) as u8).await {
                    Ok(conn) => conns.push(conn),
                    Err(error) => {
                        let _ = ready.send(Err(format!("a probe connection failed: {error}")));
                        return;
                    }
                }
            }
            let _ = ready.send(Ok(()));
            let mut next_id = 2;
            while let Some(reply) = go.recv().await {
                // Every probe connection takes its turns on its own, PROBE_GAP apart, until
                // `samples` are taken in all (or PROBE_LIMIT has passed).
                let taken = std::cell::RefCell::new(Vec::with_capacity(samples));
                let deadline = Instant::now() + PROBE_LIMIT;
                let first_id = next_id;
                let probes = conns.iter_mut().map(|(ws, session)| {
                    let taken = &taken;
                    async move {
                        let mut id = first_id;
                        while taken.borrow().len() < samples && Instant::now() < deadline {
                            let t = Instant::now();
                            call(ws, id, &prompt(id, session, "1"), None).await?;
                            taken.borrow_mut().push(t.elapsed());
                            id += 1;
                            tokio::time::sleep(PROBE_GAP).await;
                        }
                        Ok::<u64, String>(id)
                    }
                });
                let mut result = Ok(());
                for done in futures_util::future::join_all(probes).await {
                    match done {
                        Ok(id) => next_id = next_id.max(id),
                        Err(error) => result = Err(error),
                    }
                }
                let _ = reply.send(result.map(|()| taken.into_inner()));
            }
        });
    })
}

pub fn run(plan: Plan) -> Result<(), String> {
    let addr = server_addr(&plan.url)?;
    let probes = plan.probes.max(1);
    if plan.n < probes + plan.streamers {
        return Err(format!("--n {} is less than --probes {probes} + --streamers {}", plan.n, plan.streamers));
    }
    let main_count = plan.n - probes;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let _context = rt.enter();
    let local = tokio::task::LocalSet::new();
    let rss_before = rss_kib(&plan.pid)?;
    let t0 = Instant::now();

    let load = Arc::new(Load::default());
    let (phase_tx, phase_rx) = watch::channel(None::<u64>);
    let failed = local.block_on(&rt, async {
        let (streamers, per_prompt) = (plan.streamers, plan.per_prompt);
        let make_task = |i: usize, ws: Socket, session: String| {
            let (phase, load) = (phase_rx.clone(), load.clone());
            async move {
                if i < streamers {
                    stream(ws, session, per_prompt, phase, load).await;
                } else {
                    idle(ws, load).await;
                }
            }
        };
        open_many(&plan.url, addr, main_count, 0, plan.sources, make_task).await
    });
    let (ready_tx, ready_rx) = oneshot::channel();
    let (go_tx, go_rx) = mpsc::unbounded_channel();
    let setup = Probes {
        url: plan.url.clone(),
        addr,
        first: main_count,
        count: probes,
        sources: plan.sources,
        samples: plan.samples,
    };
    let prober = probe_thread(setup, ready_tx, go_rx);
    let probes_ready = local.block_on(&rt, ready_rx).map_err(|_| "the probe thread ended".to_string())?;
    let setup_secs = t0.elapsed().as_secs_f64();
    let open_count = plan.n - failed - if probes_ready.is_ok() { 0 } else { probes };

    // Part 1: idle connections.
    local.block_on(&rt, tokio::time::sleep(SETTLE));
    let rss_after = rss_kib(&plan.pid)?;
    let closed = load.closed.load(Ordering::Relaxed);
    if closed > 0 {
        return Err(format!("the server closed {closed} idle connections before the reading"));
    }
    let per_conn = (rss_after.saturating_sub(rss_before) * 1024) as f64 / open_count.max(1) as f64;
    println!(
        "mem\t{}\t{open_count}\t{rss_before}\t{rss_after}\t{per_conn:.0}\t{setup_secs:.2}\t{}",
        plan.label,
        plan.n - open_count
    );
    probes_ready?;
    if failed > 0 {
        return Err(format!("{failed} connections failed: no round-trip measurement"));
    }

    // Part 2: round trips while `streamers` connections stream.
    for &pause in &plan.pauses {
        if plan.streamers == 0 || plan.samples == 0 {
            break;
        }
        let result = local.block_on(&rt, async {
            phase_tx.send_replace(Some(pause));
            tokio::time::sleep(WARM_UP).await;
            let (u0, t) = (load.updates.load(Ordering::Relaxed), Instant::now());
            let cpu0 = common::cpu_time(&plan.pid);
            let (reply_tx, reply_rx) = oneshot::channel();
            go_tx.send(reply_tx).map_err(|_| "the probe thread ended".to_string())?;
            let samples = reply_rx.await.map_err(|_| "the probe thread ended".to_string())??;
            let secs = t.elapsed().as_secs_f64();
            let rate = (load.updates.load(Ordering::Relaxed) - u0) as f64 / secs;
            let busy = match (cpu0, common::cpu_time(&plan.pid)) {
                (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64() / secs * 100.0,
                _ => f64::NAN,
            };
            let rss = rss_kib(&plan.pid)?;
            // Let the turns in flight end before the next phase.
            phase_tx.send_replace(None);
            let deadline = Instant::now() + Duration::from_secs(120);
            while load.active.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok::<_, String>((samples, rate, rss, busy))
        });
        let (mut samples, rate, rss, busy) = result?;
        let errors = load.errors.load(Ordering::Relaxed);
        if errors > 0 {
            return Err(format!("{errors} streaming connections failed"));
        }
        samples.sort_unstable();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "rtt\t{}\t{pause}\t{}\t{:.3}\t{:.3}\t{:.3}\t{rate:.0}\t{rss}\t{busy:.0}\t{}",
            plan.label,
            samples.len(),
            ms(common::percentile(&samples, 0.50)),
            ms(common::percentile(&samples, 0.99)),
            ms(*samples.last().expect("samples")),
            plan.streamers,
        );
    }
    drop(go_tx);
    let _ = prober.join();
    // 10,000 sockets are closed by the exit itself; no graceful close of each.
    std::process::exit(0);
}
