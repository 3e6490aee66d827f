//! `acp-check`: checks that any ACP agent follows the spec's MUSTs and SHOULDs, for protocol
//! v1, v2 or whichever of them the agent serves.
//!
//! ```text
//! acp-check [--protocol 1|2|auto] [--json] [--timeout-ms N] [-v] -- <agent command...>
//! acp-check [--protocol 1|2|auto] [--json] [--timeout-ms N] --url <http://... | ws://...>
//! ```
//!
//! The agent is spawned over stdio (several times: each group of checks gets a fresh process)
//! and driven by a minimal client that allows permission requests and advertises no
//! capabilities, except in two v1 runs where it offers `fs/*` (confined to the session's
//! directory) and `terminal/*` (simulated: no command is run) and checks how the agent uses
//! them. With `--protocol auto` (the default) it first asks a fresh process for version 2 and
//! another for version 1, reports which versions the agent serves, and runs the v1 checks (in
//! `checks.rs`; skipped when the agent serves v2 only), then the v2 checks (in `v2/`) when it
//! serves v2. `--protocol 1` and `--protocol 2` run one suite without asking first.
//!
//! The report lists each check as PASS, FAIL (a MUST that does not hold), WARN (a SHOULD that
//! does not hold, or an inconclusive check) or SKIP; the summary says how many MUST checks were
//! inconclusive or skipped. A version probe that gets no answer in time leaves that version
//! unknown: its checks are listed as inconclusive, and the run as incomplete. Exit status: 0
//! when no MUST fails (a MUST check that is inconclusive or skipped does not fail), 1 when one
//! fails, 2 on a usage error or when the agent cannot be started, 3 when none fails but a
//! protocol version went unchecked because its probe timed out, 130 (143) when interrupted by
//! SIGINT (SIGTERM): the agents are stopped and the scratch directory removed first.

mod checks;
mod scratch;
mod serve;
mod shape;
mod v2;
mod wire;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use checks::{Level, Options, Protocol, Status, Unchecked};
use serde_json::json;

/// `println!` that does not panic when stdout is gone (piped into `head`, say): the report is
/// then lost either way, and the exit status still says how the run went.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

const USAGE: &str = "\
usage: acp-check [--protocol 1|2|auto] [--json] [--timeout-ms N] [--work-prompt TEXT]... [-v] -- <agent command...>
       acp-check [--protocol 1|2|auto] [--json] [--timeout-ms N] [--work-prompt TEXT]... --url <http://... | ws://...>

Spawns the agent over stdio and checks what the ACP spec asks of it.

Protocol v1: initialize and version negotiation, session/new, a prompt turn and its
session/update shapes, cancellation, unknown and extension methods, a malformed line,
notifications, invalid params and unknown sessions, exiting when stdin closes, whether the
advertised capabilities are honest, and how the agent uses the client's fs and terminal methods
when they are offered.

Protocol v2 (serves-v2 and the checks named v2-*): v2 capabilities, the prompt lifecycle (the
answer at acceptance, user_message, state_update running ... idle with the stop reason), the
shape and order of the upserts, cancellation and permissions, $/cancel_request, session/close,
the baseline methods and JSON-RPC batches, background work, and, with --work-prompt,
tool_call/cancel and terminal/cancel.

  --protocol P    1: the v1 checks only; 2: the v2 checks only (an agent that does not answer
                  2 fails serves-v2, and the rest is skipped); auto (the default): ask fresh
                  processes for 2 and for 1, report which versions the agent serves, and run
                  the checks of each (v1's also when it serves neither); a version whose probe
                  gets no answer in time is unknown, and its checks inconclusive
  --json          print the report as JSON
  --timeout-ms N  how long to wait for each answer, a whole prompt turn included (default 10000);
                  raise it for an agent that is slow to start (built on its first run, say)
  --work-prompt TEXT
                  (v2) a prompt that makes the agent start a tool call or terminal it advertises
                  as cancellable; each is sent on a new session, and what it offers is cancelled
                  (repeat it for more prompts); without it the cancel checks are skipped
  -v, --verbose   show the agent's stderr

exit status: 0 when no MUST fails (an inconclusive or skipped check does not fail), 1 when one
fails, 2 on a usage error or when the agent cannot be started, 3 when none fails but a protocol
version went unchecked because its probe got no answer in time, 130/143 when interrupted";

struct Cli {
    protocol: Protocol,
    json: bool,
    timeout: Duration,
    verbose: bool,
    command: Vec<String>,
    work_prompts: Vec<String>,
    /// A remote agent's endpoint instead of a command.
    url: Option<String>,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Cli>, String> {
    let mut cli = Cli {
        protocol: Protocol::Auto,
        json: false,
        timeout: Duration::from_millis(10_000),
        verbose: false,
        command: Vec::new(),
        work_prompts: Vec::new(),
        url: None,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--" => {
                cli.command.extend(args.by_ref());
                break;
            }
            "-h" | "--help" => return Ok(None),
            "--json" => cli.json = true,
            "-v" | "--verbose" => cli.verbose = true,
            "--protocol" => {
                let value = args.next().ok_or("--protocol needs a value: 1, 2 or auto")?;
                cli.protocol = protocol(&value)?;
            }
            other if other.starts_with("--protocol=") => cli.protocol = protocol(&other["--protocol=".len()..])?,
            "--url" => {
                cli.url = Some(args.next().ok_or("--url needs the agent's endpoint, e.g. http://127.0.0.1:8080/acp")?)
            }
            "--work-prompt" => cli.work_prompts.push(args.next().ok_or("--work-prompt needs the prompt's text")?),
            other if other.starts_with("--work-prompt=") => {
                cli.work_prompts.push(other["--work-prompt=".len()..].to_owned())
            }
            other if other.starts_with("--url=") => cli.url = Some(other["--url=".len()..].to_owned()),
            "--timeout-ms" => {
                let value = args.next().ok_or("--timeout-ms needs a value")?;
                let ms: u64 = value.parse().map_err(|_| format!("--timeout-ms: {value:?} is not a number"))?;
                cli.timeout = Duration::from_millis(ms.max(1));
            }
            other if other.starts_with("--timeout-ms=") => {
                let value = &other["--timeout-ms=".len()..];
                let ms: u64 = value.parse().map_err(|_| format!("--timeout-ms: {value:?} is not a number"))?;
                cli.timeout = Duration::from_millis(ms.max(1));
            }
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            _ => {
                // The agent command without `--`.
                cli.command.push(arg);
                cli.command.extend(args.by_ref());
                break;
            }
        }
    }
    match (&cli.url, cli.command.is_empty()) {
        (Some(_), false) => return Err("give either --url or an agent command, not both".into()),
        (None, true) => return Err("missing the agent command after `--` (or --url)".into()),
        _ => {}
    }
    Ok(Some(cli))
}

fn protocol(value: &str) -> Result<Protocol, String> {
    match value {
        "1" => Ok(Protocol::V1),
        "2" => Ok(Protocol::V2),
        "auto" => Ok(Protocol::Auto),
        other => Err(format!("--protocol: {other:?} is not 1, 2 or auto")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match parse(std::env::args().skip(1)) {
        Ok(Some(cli)) => cli,
        Ok(None) => {
            say!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("acp-check: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let live = wire::Live::default();
    let options = Options {
        launch: wire::Launch {
            command: cli.command.clone(),
            url: cli.url.clone(),
            verbose: cli.verbose,
            live: live.clone(),
        },
        timeout: cli.timeout,
        work_prompts: cli.work_prompts.clone(),
    };
    let run = match scratch::ScratchDir::create() {
        Ok(scratch) => {
            let cwd = scratch.path();
            let outcome = tokio::select! {
                run = checks::run(&options, &cwd, cli.protocol) => Ok(run),
                signal = interrupted() => Err(signal),
            };
            // Interrupted: the checks were dropped mid-way; their agents are still running.
            live.stop_all().await;
            drop(scratch);
            match outcome {
                Ok(run) => run,
                Err((name, code)) => {
                    eprintln!("acp-check: interrupted by {name}; the agent was stopped");
                    return ExitCode::from(code);
                }
            }
        }
        Err(message) => Err(message),
    };
    let run = match run {
        Ok(run) => run,
        Err(message) => {
            if cli.json {
                let mut report = json!({"command": cli.command, "error": message, "checks": []});
                if let Some(url) = &cli.url {
                    report["url"] = json!(url);
                }
                say!("{}", serde_json::to_string_pretty(&report).expect("serializable"));
            }
            eprintln!("acp-check: {message}");
            return ExitCode::from(2);
        }
    };
    let count = |status| run.checks.iter().filter(|c| c.status == status).count();
    let (passed, failed, warned, skipped) =
        (count(Status::Pass), count(Status::Fail), count(Status::Warn), count(Status::Skip));
    let conforms = failed == 0;
    // The MUSTs that were not verified: a run in which they did not fail must not read as one
    // in which every MUST was shown to hold.
    let musts = |f: fn(&checks::Check) -> bool| run.checks.iter().filter(|c| c.level == Level::Must && f(c)).count();
    let (must_inconclusive, must_skipped) = (musts(|c| c.inconclusive), musts(|c| c.status == Status::Skip));
    let inconclusive = run.checks.iter().filter(|c| c.inconclusive).count();
    let verdict = verdict(conforms, must_inconclusive, must_skipped, &run.unchecked);

    if cli.json {
        let mut report = json!({
            "command": cli.command,
            "versions": run.versions,
            "unchecked": run.unchecked,
            "agent": run.facts,
            "agent_v2": run.v2,
            "auth_required": run.auth_required,
            "checks": run.checks,
            "summary": {
                "passed": passed,
                "failed": failed,
                "warnings": warned,
                "inconclusive": inconclusive,
                "skipped": skipped,
                "conforms": conforms,
                "verdict": verdict,
            },
        });
        if let Some(url) = &cli.url {
            report["url"] = json!(url);
        }
        say!("{}", serde_json::to_string_pretty(&report).expect("serializable"));
    } else {
        let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        say!("{}", header(&cli));
        let info = run.facts.agent_info.as_ref().or(run.v2.as_ref().and_then(|v2| v2.info.as_ref()));
        if let Some(info) = info {
            say!("agent: {} {}", info["name"].as_str().unwrap_or("?"), info["version"].as_str().unwrap_or(""));
        }
        say!("protocol versions served: {}", run.versions.describe());
        if !run.auth_required.is_empty() {
            let stops: Vec<String> =
                run.auth_required.iter().map(|stop| format!("v{} {}", stop.protocol, stop.method)).collect();
            say!("stopped at authentication (what needs a login was skipped): {}", stops.join(", "));
        }
        let width = run.checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
        let both = run.checks.iter().any(|c| c.protocol != run.checks[0].protocol);
        let mut section = 0;
        for check in &run.checks {
            if check.protocol != section {
                section = check.protocol;
                say!();
                if both {
                    say!("protocol v{section}:");
                }
            }
            let (label, code) = match check.status {
                Status::Pass => ("PASS", "32"),
                Status::Fail => ("FAIL", "31"),
                Status::Warn => ("WARN", "33"),
                Status::Skip => ("SKIP", "90"),
            };
            let label = if color { format!("\x1b[{code}m{label}\x1b[0m") } else { label.to_owned() };
            let level = match check.level {
                Level::Must => "MUST  ",
                Level::Should => "SHOULD",
            };
            say!("{label}  {level}  {:width$}  {}", check.id, check.detail);
            if check.status != Status::Pass {
                say!("      {:6}  {:width$}  rule: {}", "", "", check.rule);
            }
        }
        say!();
        for unchecked in &run.unchecked {
            say!("protocol v{} not checked: {}", unchecked.protocol, unchecked.why);
        }
        say!("{passed} passed, {failed} failed, {warned} warning(s), {skipped} skipped: {verdict}");
    }
    match (conforms, run.unchecked.is_empty()) {
        (false, _) => ExitCode::from(1),
        (true, false) => ExitCode::from(3),
        (true, true) => ExitCode::SUCCESS,
    }
}

/// The text report's first line: what was checked, the agent's command or its URL.
fn header(cli: &Cli) -> String {
    format!("acp-check: {}", cli.url.clone().unwrap_or_else(|| cli.command.join(" ")))
}

/// The summary's last words. With MUST checks left inconclusive or skipped, the run only shows
/// that no MUST it could check fails; with a protocol version left unchecked (its probe timed
/// out), not even that it was checked at all, which the verdict says first.
fn verdict(conforms: bool, must_inconclusive: usize, must_skipped: usize, unchecked: &[Unchecked]) -> String {
    let unchecked = (!unchecked.is_empty()).then(|| {
        let versions: Vec<String> = unchecked.iter().map(|u| format!("v{}", u.protocol)).collect();
        format!("protocol {} was not checked (no answer in time to the version probe)", versions.join(", "))
    });
    if !conforms {
        return match unchecked {
            None => "a MUST does not hold".into(),
            Some(unchecked) => format!("a MUST does not hold, and {unchecked}"),
        };
    }
    let mut unverified = Vec::new();
    if must_inconclusive > 0 {
        unverified.push(format!("{must_inconclusive} inconclusive"));
    }
    if must_skipped > 0 {
        unverified.push(format!("{must_skipped} skipped"));
    }
    let held = if unverified.is_empty() {
        "every MUST holds".to_owned()
    } else {
        format!("every MUST that could be checked holds (MUST checks not verified: {})", unverified.join(", "))
    };
    match unchecked {
        None => held,
        Some(unchecked) => format!("inconclusive: {unchecked}; {held}"),
    }
}

/// Resolves on SIGINT or SIGTERM with the signal's name and the exit status to use (128 + its
/// number, as shells report a process the signal ended).
async fn interrupted() -> (&'static str, u8) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => tokio::select! {
                _ = int.recv() => ("SIGINT", 130),
                _ = term.recv() => ("SIGTERM", 143),
            },
            // Without signal handling the default action (ending the process) still applies.
            _ => std::future::pending().await,
        }
    }
    #[cfg(not(unix))]
    {
        match tokio::signal::ctrl_c().await {
            Ok(()) => ("Ctrl-C", 130),
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_says_what_was_not_verified() {
        assert_eq!(verdict(true, 0, 0, &[]), "every MUST holds");
        assert_eq!(
            verdict(true, 1, 2, &[]),
            "every MUST that could be checked holds (MUST checks not verified: 1 inconclusive, 2 skipped)"
        );
        assert_eq!(verdict(false, 1, 0, &[]), "a MUST does not hold");
        // A version left unchecked by a probe that timed out is said first, whatever else held.
        let v2 = [Unchecked { protocol: 2, why: "the probe timed out".into() }];
        assert_eq!(
            verdict(true, 18, 0, &v2),
            "inconclusive: protocol v2 was not checked (no answer in time to the version probe); every MUST that \
             could be checked holds (MUST checks not verified: 18 inconclusive)"
        );
        assert_eq!(
            verdict(false, 18, 0, &v2),
            "a MUST does not hold, and protocol v2 was not checked (no answer in time to the version probe)"
        );
    }

    #[test]
    fn the_text_report_is_headed_by_the_command_or_the_url() {
        let cli = |args: &[&str]| parse(args.iter().map(|a| a.to_string())).unwrap().unwrap();
        assert_eq!(header(&cli(&["--", "my-agent", "--stdio"])), "acp-check: my-agent --stdio");
        assert_eq!(header(&cli(&["--url", "http://127.0.0.1:8080/acp"])), "acp-check: http://127.0.0.1:8080/acp");
    }
}
