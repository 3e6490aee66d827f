//! The server's sockets: each accepted within `max_sockets` and the per-peer bound, its place
//! (which goes first to sockets that have been served), and one HTTP/1.1 or h2c socket served
//! with its deadlines.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;

use super::ServerShared;

/// A socket's place: its permit among [`ServerOptions::max_sockets`] and its peer's count,
/// given back when the last holder drops it (the HTTP connection, or the WebSocket it was
/// upgraded to, which outlives it).
pub(super) struct Place {
    pub(super) _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) _peer: PeerPlace,
}

/// The sockets each peer holds (see [`ServerOptions::max_sockets_per_peer`]).
pub(super) struct Peers {
    pub(super) limit: usize,
    /// Loopback peers are counted too.
    pub(super) loopback: bool,
    pub(super) held: Mutex<HashMap<std::net::IpAddr, usize>>,
}

impl Peers {
    /// A place for one more socket of `ip`, or `None` when it holds its limit.
    pub(super) fn take(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<PeerPlace> {
        let ip = peer_key(ip);
        if ip.is_loopback() && !self.loopback {
            return Some(PeerPlace(None));
        }
        let mut held = self.held.lock().expect("lock");
        let count = held.entry(ip).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(PeerPlace(Some((self.clone(), ip))))
    }
}

/// What one peer is counted as: an IPv4 address (an IPv4-mapped IPv6 one too), or an IPv6
/// address's /64 prefix, since one host is commonly handed a whole /64.
pub(super) fn peer_key(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip.to_canonical() {
        std::net::IpAddr::V6(v6) if !v6.is_loopback() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128)))
        }
        other => other,
    }
}

/// One socket counted for its peer (`None`: not counted), given back when dropped.
pub(super) struct PeerPlace(pub(super) Option<(Arc<Peers>, std::net::IpAddr)>);

impl Drop for PeerPlace {
    fn drop(&mut self) {
        let Some((peers, ip)) = self.0.take() else { return };
        let mut held = peers.held.lock().expect("lock");
        if let Some(count) = held.get_mut(&ip) {
            *count -= 1;
            if *count == 0 {
                held.remove(&ip);
            }
        }
    }
}

/// The sockets that have had no request answered with success yet (silent ones, slow ones,
/// refused ones), oldest first: the ones to close when a new socket needs a place.
#[derive(Default)]
pub(super) struct Unproven {
    pub(super) sockets: Mutex<VecDeque<(u64, CancellationToken)>>,
    pub(super) next: std::sync::atomic::AtomicU64,
}

impl Unproven {
    pub(super) fn register(self: &Arc<Self>) -> Socket {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let evict = CancellationToken::new();
        self.sockets.lock().expect("lock").push_back((id, evict.clone()));
        Socket { registry: Arc::downgrade(self), id, evict }
    }

    /// Closes the oldest socket that has not proven itself, if any.
    pub(super) fn evict_oldest(&self) {
        if let Some((_, evict)) = self.sockets.lock().expect("lock").pop_front() {
            tracing::debug!("all socket places taken: closing the oldest socket without a served request");
            evict.cancel();
        }
    }

    pub(super) fn forget(&self, id: u64) {
        let mut sockets = self.sockets.lock().expect("lock");
        if let Some(at) = sockets.iter().position(|(other, _)| *other == id) {
            sockets.remove(at);
        }
    }
}

/// A socket's place among the [`Unproven`] ones, until a request of its is answered with
/// success (or its end).
pub(super) struct Socket {
    pub(super) registry: std::sync::Weak<Unproven>,
    pub(super) id: u64,
    pub(super) evict: CancellationToken,
}

impl Socket {
    /// Completes when the socket is to be closed to make room.
    pub(super) fn evicted(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.evict.cancelled()
    }

    /// A request of the socket's was served: it is no longer one to close first.
    pub(super) fn proven(&self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.forget(self.id);
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.proven();
    }
}

/// Serves one TCP (or TLS) connection's HTTP requests, HTTP/1.1 or HTTP/2 as the client speaks.
/// Until its first request's head has arrived, the socket is closed when
/// [`ServerOptions::header_read_timeout`] passes; until one of its requests is answered with
/// success, when a new socket needs its place.
pub(super) async fn serve_http_connection<I>(
    shared: Arc<ServerShared>,
    io: I,
    peer: SocketAddr,
    socket: Socket,
    place: Arc<Place>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (header_read_timeout, keep_alive) = (shared.options.header_read_timeout, shared.options.keep_alive);
    // Every stream a connection may hold open at once (its sessions', the provisional ones and
    // its own), with room for the POSTs beside them: a client that carries all of them on one
    // HTTP/2 connection is never short of a stream for a POST.
    let options = &shared.options;
    let streams = options.max_sessions_per_connection + options.max_provisional_sessions + 64;
    let max_streams = u32::try_from(streams).unwrap_or(u32::MAX);
    let first_request = CancellationToken::new();
    let first_seen = first_request.clone();
    // A request that passed every check (auth included) and was answered with success: only
    // then does the socket keep its place. Refused requests (401, 404, ...) earn nothing, so
    // clients without credentials cannot hold places that clients with them need.
    let succeeded = CancellationToken::new();
    let success_seen = succeeded.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        first_seen.cancel();
        // A WebSocket takes the socket's place with it (see `upgrade`).
        req.extensions_mut().insert(place.clone());
        let shared = shared.clone();
        let success_seen = success_seen.clone();
        async move {
            let response = shared.handle(req).await;
            let status = response.status();
            if status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS {
                success_seen.cancel();
            }
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // hyper's timeouts need a timer: without one, a client that never finishes a request's
    // head holds its socket for ever.
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout((!header_read_timeout.is_zero()).then_some(header_read_timeout));
    builder
        .http2()
        .max_concurrent_streams(max_streams)
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval((!keep_alive.is_zero()).then_some(keep_alive));
    let serving = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(serving);
    // Dropping `serving` closes the socket.
    let first_deadline = async {
        if header_read_timeout.is_zero() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(header_read_timeout).await;
    };
    let ended = tokio::select! {
        ended = &mut serving => Some(ended),
        () = first_request.cancelled() => None,
        () = first_deadline => {
            tracing::debug!(%peer, "no request within the header read timeout: closing the socket");
            return;
        }
        () = socket.evicted() => return,
    };
    let ended = match ended {
        Some(ended) => ended,
        None => tokio::select! {
            ended = &mut serving => ended,
            () = succeeded.cancelled() => {
                socket.proven();
                serving.await
            }
            () = socket.evicted() => return,
        },
    };
    if let Err(error) = ended {
        tracing::debug!(%peer, %error, "http connection ended with an error");
    }
}
