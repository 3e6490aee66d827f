//! The slow-client run (issue 32): while `silent` sockets that send nothing and `slowloris`
//! sockets that send a request head one byte a second hold the server's sockets, `clients`
//! honest clients each open a WebSocket connection, initialize, open a session and run one
//! prompt turn of 10 updates. Each client's time is from its first byte to its turn's answer,
//! within `LIMIT`:
//! `slow <server> <silent> <slowloris> <clients> <completed> <p50_ms> <p99_ms> <max_ms> <hostile_still_open>`.
//!
//! Sockets bind 127.0.0.1 … 127.0.0.4 in turn, so the ephemeral ports are not the limit. Every
//! loop is bounded in count and time; everything stops by itself.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::common;
use crate::load::{call, open, prompt, server_addr};

/// How long an honest client may take, and how long the hostile sockets are kept up.
const LIMIT: Duration = Duration::from_secs(60);

pub struct Plan {
    pub url: String,
    pub label: String,
    pub silent: usize,
    pub slowloris: usize,
    pub clients: usize,
}

async fn tcp_from(addr: SocketAddr, source: u8) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, source), 0).into())?;
    socket.connect(addr).await
}

/// A hostile socket: connects, sends `head` one byte a second (nothing when empty), and counts
/// itself in `open` while the server keeps it.
async fn hostile(addr: SocketAddr, source: u8, head: &'static [u8], open_now: Arc<AtomicUsize>, until: Instant) {
    let Ok(mut tcp) = tcp_from(addr, source).await else { return };
    open_now.fetch_add(1, Ordering::Relaxed);
    let mut sent = 0;
    let mut buf = [0u8; 256];
    while Instant::now() < until {
        tokio::select! {
            read = tcp.read(&mut buf) => match read {
                Ok(0) | Err(_) => break, // closed by the server
                Ok(_) => {}
            },
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                if sent < head.len() && tcp.write_all(&head[sent..sent + 1]).await.is_err() {
                    break;
                }
                sent += 1;
            }
        }
    }
    open_now.fetch_sub(1, Ordering::Relaxed);
}

async fn honest(url: String, addr: SocketAddr, source: u8) -> Result<Duration, String> {
    let started = Instant::now();
    let (mut ws, session) = open(&url, addr, source).await?;
    call(&mut ws, 2, &prompt(2, &session, "10"), None).await?;
    Ok(started.elapsed())
}

pub async fn run(plan: Plan) -> Result<(), String> {
    let addr = server_addr(&plan.url)?;
    let until = Instant::now() + LIMIT;
    let open_now = Arc::new(AtomicUsize::new(0));
    let mut hostile_tasks = Vec::new();
    const SLOW_HEAD: &[u8] = b"POST /acp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n";
    for i in 0..plan.silent + plan.slowloris {
        let head: &'static [u8] = if i < plan.silent { b"" } else { SLOW_HEAD };
        hostile_tasks.push(tokio::spawn(hostile(addr, 1 + (i % 4) as u8, head, open_now.clone(), until)));
        if i % 256 == 255 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Let the hostile sockets take their places first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let clients: Vec<_> = (0..plan.clients)
        .map(|i| {
            let url = plan.url.clone();
            tokio::spawn(async move { tokio::time::timeout(LIMIT, honest(url, addr, 1 + (i % 4) as u8)).await })
        })
        .collect();
    let mut times = Vec::new();
    let mut failures = Vec::new();
    for client in clients {
        match client.await {
            Ok(Ok(Ok(time))) => times.push(time),
            Ok(Ok(Err(why))) => failures.push(why),
            Ok(Err(_)) => failures.push(format!("not done within {LIMIT:?}")),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let still_open = open_now.load(Ordering::Relaxed);
    for task in hostile_tasks {
        task.abort();
    }
    times.sort();
    let ms = |p: f64| if times.is_empty() { f64::NAN } else { common::percentile(&times, p).as_secs_f64() * 1e3 };
    let max = times.last().map_or(f64::NAN, |t| t.as_secs_f64() * 1e3);
    if let Some(first) = failures.first() {
        eprintln!("slow: {} of {} clients failed, e.g.: {first}", failures.len(), plan.clients);
    }
    println!(
        "slow\t{}\t{}\t{}\t{}\t{}\t{:.1}\t{:.1}\t{:.1}\t{}",
        plan.label,
        plan.silent,
        plan.slowloris,
        plan.clients,
        times.len(),
        ms(0.5),
        ms(0.99),
        max,
        still_open
    );
    Ok(())
}
