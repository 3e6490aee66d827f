//! The conductor's own log (`--log`): its `tracing` events and the runtime's, filtered by an
//! `EnvFilter` directive, written into the `--debug` log as `C !` lines (as the official
//! conductor does) or, without `--debug`, to stderr.

use std::io::Write;

use acp_rpc::proxy::conductor::debug_log::DebugLog;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Installs the process's `tracing` subscriber. Fails on a filter that does not parse.
pub fn install(filter: &str, debug_log: Option<DebugLog>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = EnvFilter::builder().parse(filter)?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_target(true);
    match debug_log {
        // Each line already carries its milliseconds since the start.
        Some(log) => builder.without_time().with_writer(IntoDebugLog(log)).try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    }
}

/// Makes, for each event, a writer that hands its complete lines to the debug log.
struct IntoDebugLog(DebugLog);

impl<'a> MakeWriter<'a> for IntoDebugLog {
    type Writer = EventLines;

    fn make_writer(&'a self) -> EventLines {
        EventLines { log: self.0.clone(), text: Vec::new() }
    }
}

/// One event's text, written to the log line by line when the formatter is done with it.
struct EventLines {
    log: DebugLog,
    text: Vec<u8>,
}

impl Write for EventLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        for line in String::from_utf8_lossy(&self.text).lines() {
            self.log.conductor_line(line);
        }
        self.text.clear();
        Ok(())
    }
}

impl Drop for EventLines {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}
