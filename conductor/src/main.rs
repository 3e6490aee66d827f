//! `acp-conductor`: runs a chain of ACP proxies in front of an agent and is one agent to the
//! editor on stdin/stdout. The command line follows the official conductor's, so an editor
//! configured for one runs the other:
//!
//! ```text
//! acp-conductor agent "proxy1 --flag" "proxy2" "agent --acp"
//! acp-conductor -- "proxy1 --flag" "proxy2" "agent --acp"
//! acp-conductor agent "acp-conductor proxy proxy1 proxy2" "agent --acp"   # nested
//! ```
//!
//! Each component is one argument: split like a shell splits words, leading `NAME=value` words
//! set its environment, or a JSON object `{"command":..,"args":[..],"env":{..}}`. The last
//! one is the agent. The routing, the wire and what happens when a component ends are
//! documented in `acp_rpc::proxy::conductor`.
//!
//! `--trace FILE`, `--serve` (the trace in the browser, see `viewer`), `--debug` and `--log`
//! are the official conductor's flags, with its file formats.
//!
//! MCP over ACP is bridged for agents that do not speak it (unless `--no-mcp-bridge`): the
//! agent is given stdio MCP servers running `acp-conductor mcp-bridge --socket .. --server-id
//! ..`, which relay to the conductor (see `acp_rpc::mcp::bridge`).

use std::time::Duration;

use acp_rpc::proxy::conductor::debug_log::DebugLog;
use acp_rpc::proxy::conductor::{ChainEnd, ComponentCommand, Conductor, run_commands};
use clap::{Parser, Subcommand};

mod own_log;
#[cfg(unix)]
mod signals;
mod viewer;

#[derive(Parser, Debug)]
#[command(name = "acp-conductor", version, about = "Runs ACP proxies in front of an agent, as one agent to the editor")]
struct Args {
    /// How long a cancelled request waits for the chain's own answer, in milliseconds, before
    /// the conductor answers it (for `session/prompt`: `{"stopReason":"cancelled"}`).
    #[arg(long, default_value_t = 1000, global = true)]
    cancel_grace_ms: u64,

    /// How long a component has to exit once its input is closed, and then between SIGTERM
    /// and SIGKILL, in milliseconds.
    #[arg(long, default_value_t = 2000, global = true)]
    kill_grace_ms: u64,

    /// Do not bridge MCP over ACP for an agent without `mcpCapabilities.acp` (the client then
    /// sees the agent's own capabilities, and `acp` MCP servers reach the agent as they are).
    #[arg(long, global = true)]
    no_mcp_bridge: bool,
    /// Write every message between the chain's places to this file, as newline-delimited JSON
    /// in the official conductor's trace format (its sequence-diagram viewer reads it).
    /// Credentials in MCP server definitions are redacted.
    #[arg(long, value_name = "PATH", global = true)]
    trace: Option<std::path::PathBuf>,
    /// Log every line each component reads, writes and prints to stderr, and what the client
    /// sends and gets, to `<debug dir>/<UTC date-time>.log` (the official conductor's `--debug`
    /// layout). Credentials in MCP server definitions are redacted.
    #[arg(long, global = true)]
    debug: bool,
    /// The folder for `--debug` logs (created if missing; default: the current folder).
    #[arg(long, value_name = "DIR", global = true)]
    debug_dir: Option<std::path::PathBuf>,
    /// The conductor's own log, as a `tracing` filter: a level (`trace`, `debug`, `info`,
    /// `warn`, `error`) or per-module directives (`acp_rpc::proxy=debug,warn`). With `--debug`
    /// it goes into the debug log as `C !` lines (default `info`); without, to stderr (off
    /// unless given).
    #[arg(long, value_name = "FILTER", global = true)]
    log: Option<String>,
    /// Show the trace as a sequence diagram in the browser, updated while the chain runs: from
    /// the `--trace` file when given, from memory otherwise. The page is served on a loopback
    /// address (`--serve-addr`) for as long as the conductor runs.
    #[arg(long, global = true)]
    serve: bool,
    /// Where `--serve` listens: a loopback address and port (port 0: any free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", global = true)]
    serve_addr: std::net::SocketAddr,
    /// With `--serve`, print the viewer's address without opening a browser.
    #[arg(long, global = true)]
    no_browser: bool,

    #[command(subcommand)]
    mode: Option<Mode>,

    /// The chain, as with `agent`: proxies, then the agent.
    #[arg(value_name = "COMPONENT", last = true)]
    components: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Run as a terminal agent: the editor sends `initialize`; the last component is the agent.
    Agent {
        /// A name for logs (accepted for compatibility with the official conductor).
        #[arg(short, long, default_value = "conductor")]
        name: String,
        /// The chain: proxies, then the agent.
        #[arg(value_name = "COMPONENT", required = true)]
        components: Vec<String>,
    },
    /// Run as a proxy in a larger chain: initialized by another conductor (with
    /// `proxy/initialize`, `sacp`'s `_proxy/initialize`, or the older wire's marked
    /// `initialize`); every component is a proxy, and the last one's successor is ours.
    Proxy {
        /// A name for logs (accepted for compatibility with the official conductor).
        #[arg(short, long, default_value = "conductor")]
        name: String,
        /// The proxies.
        #[arg(value_name = "PROXY", required = true)]
        components: Vec<String>,
    },
    /// The stdio MCP server an agent starts for a bridged MCP-over-ACP server (the conductor
    /// writes this command into `session/new`): relays MCP between stdin/stdout and the
    /// conductor.
    McpBridge {
        /// The conductor's socket.
        #[arg(long)]
        socket: std::path::PathBuf,
        /// The `serverId` of the MCP server.
        #[arg(long)]
        server_id: String,
    },
}

fn main() {
    let args = Args::try_parse().unwrap_or_else(|e| {
        use clap::error::ErrorKind;
        // The chain given without `agent` or `--` (the commonest slip): say where it goes.
        if matches!(e.kind(), ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand) {
            let _ = e.print();
            eprintln!("\nhint: the chain goes after `agent` (or `--`): acp-conductor agent PROXY... AGENT");
            std::process::exit(2);
        }
        e.exit()
    });
    // One thread: a conductor serves one editor, and its work per message is small next to
    // the cross-thread wake-ups a multi-thread runtime adds to every hop (see BENCHMARKS.md).
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("acp-conductor: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(run(args));
    // Not a return: tokio's stdin reads on a blocking thread that a runtime shutdown waits
    // for, and the editor need not close its side just because the chain ended.
    std::process::exit(code)
}

async fn run(args: Args) -> i32 {
    let (texts, proxy_mode) = match args.mode {
        Some(Mode::McpBridge { socket, server_id }) => return mcp_bridge(&socket, &server_id).await,
        Some(Mode::Agent { components, .. }) => (components, false),
        Some(Mode::Proxy { components, .. }) => (components, true),
        None if !args.components.is_empty() => (args.components, false),
        None => {
            eprintln!("acp-conductor: no components; usage: acp-conductor agent PROXY... AGENT");
            return 2;
        }
    };
    let mut commands = Vec::with_capacity(texts.len());
    for text in &texts {
        match ComponentCommand::parse(text) {
            Ok(command) => commands.push(command),
            Err(e) => {
                eprintln!("acp-conductor: {e}");
                return 2;
            }
        }
    }
    let mut conductor = Conductor::new().cancel_grace(Duration::from_millis(args.cancel_grace_ms));
    if proxy_mode {
        conductor = conductor.proxy_mode();
    }
    let mut debug_log = None;
    if args.debug {
        match open_debug_log(args.debug_dir.as_deref(), &texts) {
            Ok((path, file)) => {
                eprintln!("Debug logging to: {}", path.display());
                let log = DebugLog::new(file);
                conductor = conductor.debug_log_to(log.clone());
                debug_log = Some(log);
            }
            Err(e) => {
                eprintln!("acp-conductor: cannot write the debug log: {e}");
                return 2;
            }
        }
    }
    // As the official conductor: with `--debug`, its own log at `info` unless told otherwise.
    let filter = args.log.as_deref().or(debug_log.as_ref().map(|_| "info"));
    if let Some(filter) = filter {
        if let Err(e) = own_log::install(filter, debug_log) {
            eprintln!("acp-conductor: --log {filter:?}: {e}");
            return 2;
        }
        tracing::info!(
            pid = std::process::id(),
            components = texts.len(),
            proxy_mode,
            "acp-conductor {} starting",
            env!("CARGO_PKG_VERSION")
        );
    }
    if let Some(path) = &args.trace {
        match std::fs::File::create(path) {
            Ok(file) => conductor = conductor.trace(std::io::BufWriter::new(file)),
            Err(e) => {
                eprintln!("acp-conductor: cannot write the trace to {}: {e}", path.display());
                return 2;
            }
        }
    }
    if args.serve {
        let source = match &args.trace {
            Some(path) => viewer::Source::File(path.clone()),
            None => {
                let memory = viewer::MemoryTrace::default();
                conductor = conductor.trace(memory.clone());
                viewer::Source::Memory(memory)
            }
        };
        match viewer::Viewer::bind(args.serve_addr, source).await {
            Ok(viewer) => {
                let url = viewer.url();
                eprintln!("Trace viewer at {url}");
                if !args.no_browser {
                    viewer::open_browser(&url);
                }
                tokio::spawn(viewer.serve());
            }
            Err(e) => {
                eprintln!("acp-conductor: --serve on {}: {e}", args.serve_addr);
                return 2;
            }
        }
    }
    // A conductor in proxy mode has no agent of its own to bridge for.
    #[cfg(unix)]
    if !args.no_mcp_bridge && !proxy_mode {
        match std::env::current_exe() {
            Ok(exe) => {
                let shim = acp_rpc::mcp::bridge::McpBridge::new(exe.to_string_lossy(), ["mcp-bridge"]);
                conductor = conductor.mcp_bridge(shim);
            }
            Err(e) => eprintln!("acp-conductor: MCP over ACP is not bridged (cannot find this executable: {e})"),
        }
    }
    let (stdin, stdout) = acp_rpc::transport::stdio();
    #[cfg(unix)]
    let signalled = match signals::Signals::listen() {
        Ok(signals) => {
            conductor = conductor.shutdown_on(signals.token);
            signals.signalled
        }
        Err(e) => {
            eprintln!("acp-conductor: cannot handle signals: {e}");
            return 1;
        }
    };
    let kill_grace = Duration::from_millis(args.kill_grace_ms);
    match run_commands(conductor, stdin, stdout, &commands, kill_grace).await {
        Ok(exit) => match &exit.end {
            #[cfg(unix)]
            ChainEnd::ShutDown => {
                let signal = signalled.get().copied().unwrap_or_default();
                tracing::info!(signal, "a signal ended the chain");
                128 + signal
            }
            ChainEnd::ClientClosed => {
                tracing::info!("the client closed its side; the chain is closed");
                0
            }
            ChainEnd::ComponentEnded { index, name } => {
                let status = exit.statuses.get(*index).copied().flatten();
                let how = status.map_or_else(|| "ended".to_owned(), |s| format!("ended ({s})"));
                eprintln!("acp-conductor: component {index} `{name}` {how}; the chain is closed");
                1
            }
            _ => 1,
        },
        Err(e) => {
            eprintln!("acp-conductor: {e}");
            1
        }
    }
}

/// Creates `<dir>/<YYYYmmdd-HHMMSS>.log` (UTC) with the official conductor's header: when,
/// and the components (a JSON one with its credentials redacted).
fn open_debug_log(
    dir: Option<&std::path::Path>,
    components: &[String],
) -> std::io::Result<(std::path::PathBuf, std::io::BufWriter<std::fs::File>)> {
    use std::io::Write;
    let dir = dir.unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let now = utc_now();
    let path = dir.join(format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}.log",
        now.year, now.month, now.day, now.hour, now.minute, now.second
    ));
    let mut file = std::io::BufWriter::new(std::fs::OpenOptions::new().create(true).append(true).open(&path)?);
    writeln!(file, "=== Conductor Debug Log ===")?;
    writeln!(
        file,
        "Started: {:04}-{:02}-{:02}T{:02}:{:02}:{:02}+00:00",
        now.year, now.month, now.day, now.hour, now.minute, now.second
    )?;
    writeln!(file, "Components:")?;
    for (index, component) in components.iter().enumerate() {
        let shown = match serde_json::from_str::<serde_json::Value>(component) {
            Ok(mut json) if json.is_object() => {
                acp_rpc::proxy::conductor::trace::redact_credentials(&mut json);
                json.to_string()
            }
            _ => component.clone(),
        };
        writeln!(file, "  {index}: {shown}")?;
    }
    writeln!(file, "========================")?;
    file.flush()?;
    Ok((path, file))
}

/// The current UTC date and time, to the second.
struct UtcTime {
    year: i64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
}

fn utc_now() -> UtcTime {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    UtcTime { year, month, day, hour: rest / 3_600, minute: rest % 3_600 / 60, second: rest % 60 }
}

/// The `mcp-bridge` subcommand: the shim's exit code.
async fn mcp_bridge(socket: &std::path::Path, server_id: &str) -> i32 {
    #[cfg(unix)]
    let result = acp_rpc::mcp::bridge::run_shim(socket, server_id).await;
    #[cfg(not(unix))]
    let result: std::io::Result<()> = {
        let _ = (socket, server_id);
        Err(std::io::Error::other("the MCP bridge needs unix sockets"))
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("acp-conductor mcp-bridge: {e}");
            1
        }
    }
}
