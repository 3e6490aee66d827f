//! TLS for the client (features `http-client` and `http-tls`): the rustls configurations a
//! connection uses (the platform's certificate verifier by default, or the user's
//! [`ClientConfig`]), the connector that gives hyper's pooled client HTTPS, and the stream
//! both profiles run over, plain or encrypted.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls_platform_verifier::BuilderVerifierExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;

/// The ALPN protocol ids.
const H2: &[u8] = b"h2";
const HTTP_1_1: &[u8] = b"http/1.1";

/// The TLS settings of one [`Remote`](super::Remote): the configuration per profile (they
/// differ in ALPN only) and the bound on the handshake.
#[derive(Clone)]
pub(super) struct Tls {
    connector: TlsConnector,
    handshake_timeout: Duration,
}

impl Tls {
    /// For Streamable HTTP: ALPN offers `h2` and `http/1.1` unless `config` lists its own
    /// protocols (as the server's side does), so the server picks HTTP/2 where it can.
    pub(super) fn for_http(config: Option<&ClientConfig>, handshake_timeout: Duration) -> Result<Tls, String> {
        let mut config = base_config(config)?;
        if config.alpn_protocols.is_empty() {
            config.alpn_protocols = vec![H2.to_vec(), HTTP_1_1.to_vec()];
        }
        Ok(Tls { connector: TlsConnector::from(Arc::new(config)), handshake_timeout })
    }

    /// For WebSocket: ALPN offers `http/1.1` alone, whatever `config` lists, as the upgrade is
    /// an HTTP/1.1 exchange (a server that picked `h2` could not answer it).
    pub(super) fn for_websocket(config: Option<&ClientConfig>, handshake_timeout: Duration) -> Result<Tls, String> {
        let mut config = base_config(config)?;
        config.alpn_protocols = vec![HTTP_1_1.to_vec()];
        Ok(Tls { connector: TlsConnector::from(Arc::new(config)), handshake_timeout })
    }

    /// The TLS handshake over `tcp` with `host` (a DNS name, or an IP address without
    /// brackets), bounded by the handshake timeout. The error says what failed, e.g. `invalid
    /// peer certificate: UnknownIssuer`.
    pub(super) async fn handshake(&self, host: &str, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is no TLS server name: {e}")))?;
        let after = self.handshake_timeout;
        match tokio::time::timeout(after, self.connector.connect(name, tcp)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(io::Error::new(e.kind(), format!("the TLS handshake with {host} failed: {e}"))),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the TLS handshake with {host} took longer than {after:?}"),
            )),
        }
    }
}

/// The user's configuration, or the default: rustls with `ring`, its safe protocol versions,
/// and the platform's verifier (the operating system's trust store; see the module docs of
/// `client` for why).
fn base_config(config: Option<&ClientConfig>) -> Result<ClientConfig, String> {
    if let Some(config) = config {
        return Ok(config.clone());
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|e| {
            format!(
                "cannot set up the platform's certificate verification: {e} (on Linux the trust store is read from \
                 the usual files, or SSL_CERT_FILE / SSL_CERT_DIR; or give a rustls::ClientConfig with \
                 Remote::tls_config)"
            )
        })?
        .with_no_client_auth();
    Ok(config)
}

/// A connection to the server, plain (`http://`, `ws://`) or encrypted (`https://`, `wss://`).
pub(super) enum MaybeTls {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for MaybeTls {
    fn connected(&self) -> Connected {
        match self {
            MaybeTls::Plain(tcp) => tcp.connected(),
            MaybeTls::Tls(stream) => {
                let (tcp, session) = stream.get_ref();
                let connected = tcp.connected();
                // What ALPN agreed on decides the HTTP version of the pooled connection.
                if session.alpn_protocol() == Some(H2) { connected.negotiated_h2() } else { connected }
            }
        }
    }
}

impl AsyncRead for MaybeTls {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            MaybeTls::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeTls {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            MaybeTls::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(tcp) => tcp.is_write_vectored(),
            MaybeTls::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            MaybeTls::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            MaybeTls::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// hyper's [`HttpConnector`] for TCP, then, when the client was given [`Tls`] (an `https://`
/// endpoint), the TLS handshake.
#[derive(Clone)]
pub(super) struct HttpsConnector {
    http: HttpConnector,
    tls: Option<Tls>,
}

impl HttpsConnector {
    pub(super) fn new(mut http: HttpConnector, tls: Option<Tls>) -> Self {
        // HttpConnector refuses any scheme but `http` unless told otherwise.
        http.enforce_http(false);
        HttpsConnector { http, tls }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for HttpsConnector {
    type Response = TokioIo<MaybeTls>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<MaybeTls>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let stream = match tls {
                None => MaybeTls::Plain(tcp),
                Some(tls) => MaybeTls::Tls(Box::new(tls.handshake(&host, tcp).await?)),
            };
            Ok(TokioIo::new(stream))
        })
    }
}
