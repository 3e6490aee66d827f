//! SIGTERM, SIGINT and SIGHUP end the chain as the client closing its side does: requests in
//! flight are answered, every component's input is closed, then their process groups get
//! SIGTERM and SIGKILL after the grace period, and every one is reaped; the conductor exits
//! 128 + the signal's number. (The default action would end the conductor at once and leave
//! what the components started running: each component has a process group of its own, which
//! a terminal's Ctrl-C does not reach either.)
//!
//! The signal cancels a token the chain watches ([`Conductor::shutdown_on`]), rather than
//! ending the client's input: a chain whose agent stopped reading stops reading its client
//! too (backpressure), and would never see that end.
//!
//! [`Conductor::shutdown_on`]: acp_rpc::proxy::conductor::Conductor::shutdown_on

use std::io;
use std::sync::{Arc, OnceLock};

use acp_rpc::CancellationToken;
use tokio::signal::unix::{SignalKind, signal};

/// The first of the three signals, once it comes.
pub struct Signals {
    /// Cancelled at the signal.
    pub token: CancellationToken,
    /// The signal's number, set before the token is cancelled.
    pub signalled: Arc<OnceLock<i32>>,
}

impl Signals {
    /// Installs the handlers now, and waits for a signal on a task of its own.
    pub fn listen() -> io::Result<Self> {
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let token = CancellationToken::new();
        let signalled = Arc::new(OnceLock::new());
        tokio::spawn({
            let (token, signalled) = (token.clone(), signalled.clone());
            async move {
                let number = tokio::select! {
                    _ = term.recv() => 15,
                    _ = interrupt.recv() => 2,
                    _ = hangup.recv() => 1,
                };
                let _ = signalled.set(number);
                token.cancel();
            }
        });
        Ok(Signals { token, signalled })
    }
}
