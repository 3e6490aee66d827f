//! A check for the older proxy wire, shared by the tests and the test components: our proxies
//! accept any wire's envelope, so what tells that a conductor spoke the older wire to one is
//! the lines it was sent.

use acp_rpc::transport::{PipeReader, pipe};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// Passes the lines of `from` on, calling `off_wire` with each one wrapped in an envelope a
/// proxy of the older wire would not take: another wire's, or the older wire's for the other
/// kind (`_proxy/successor/request` is for requests, `_proxy/successor/notification` for
/// notifications).
pub fn older_wire_only(
    from: impl AsyncRead + Send + Unpin + 'static,
    off_wire: impl Fn(&str) + Send + 'static,
) -> PipeReader {
    let (mut to, reads) = pipe(1 << 20);
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let message: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let request = message.get("id").is_some();
            let off = match message["method"].as_str().unwrap_or_default() {
                "proxy/successor" | "_proxy/successor" => true,
                "_proxy/successor/request" => !request,
                "_proxy/successor/notification" => request,
                _ => false,
            };
            if off {
                off_wire(&line);
            }
            if to.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                break;
            }
        }
    });
    reads
}
