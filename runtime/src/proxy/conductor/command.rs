//! Components as child processes: the command-line form the official conductor takes (one
//! string per component, split like a shell would, leading `NAME=value` words as environment
//! variables, or a JSON object), spawning them in their own process groups, labelling their
//! stderr, and reaping them when the chain ends.

use std::collections::BTreeMap;
use std::io;
use std::process::ExitStatus;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use super::{ChainEnd, Component, Conductor};
use crate::core::transport::{ChildProcess, SpawnOptions, StderrMode};

/// A component to spawn: program, arguments and extra environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentCommand {
    /// Its name in logs (by default the program's file name).
    pub name: String,
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment.
    pub env: BTreeMap<String, String>,
}

/// Why a component's command line could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// Nothing but whitespace and environment assignments.
    #[error("no program in `{0}`")]
    NoProgram(String),
    /// A quote that is never closed.
    #[error("unterminated quote in `{0}`")]
    UnterminatedQuote(String),
    /// A `{...}` form that is not `{"command": .., "args": [..], "env": {..}}`.
    #[error("invalid JSON component `{text}`: {reason}")]
    Json {
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonComponent {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

impl ComponentCommand {
    /// Reads one component as given on the conductor's command line: `NAME=value ... program
    /// arg ...`, split like a POSIX shell splits words (single quotes, double quotes with `\`
    /// escapes, `\` outside quotes; no expansion of any kind), or a JSON object
    /// `{"command": "...", "args": [...], "env": {...}}`.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') {
            let json: JsonComponent = serde_json::from_str(trimmed)
                .map_err(|e| ParseError::Json { text: text.to_owned(), reason: e.to_string() })?;
            return Ok(Self::from_parts(json.command, json.args, json.env));
        }
        let words = split_words(text).ok_or_else(|| ParseError::UnterminatedQuote(text.to_owned()))?;
        let mut env = BTreeMap::new();
        let mut words = words.into_iter().peekable();
        while let Some((name, value)) = words.peek().and_then(|w| env_assignment(w)) {
            env.insert(name, value);
            words.next();
        }
        let program = words.next().ok_or_else(|| ParseError::NoProgram(text.to_owned()))?;
        Ok(Self::from_parts(program, words.collect(), env))
    }

    fn from_parts(program: String, args: Vec<String>, env: BTreeMap<String, String>) -> Self {
        let name = std::path::Path::new(&program)
            .file_name()
            .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned());
        ComponentCommand { name, program, args, env }
    }

    fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.args).envs(&self.env);
        command
    }
}

/// `NAME=value` with a shell variable name.
fn env_assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    let valid = (first.is_ascii_alphabetic() || first == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then(|| (name.to_owned(), value.to_owned()))
}

/// Splits `text` into words as a POSIX shell does, without expansions; `None` for an
/// unterminated quote.
fn split_words(text: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => word.push(c),
                            '\n' => {}
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(c) => word.push(c),
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// How a chain of processes ended: why, and each component's exit status (in chain order;
/// `None` when it could not be reaped).
#[derive(Debug)]
#[non_exhaustive]
pub struct ChainExit {
    /// Why the chain ended.
    pub end: ChainEnd,
    /// Each component's exit status.
    pub statuses: Vec<Option<ExitStatus>>,
}

impl ChainExit {
    /// Whether the chain ended because its client closed it or it was shut down, as it should.
    pub fn is_clean(&self) -> bool {
        matches!(self.end, ChainEnd::ClientClosed | ChainEnd::ShutDown)
    }
}

/// Spawns `commands` (proxies, then the agent), each in its own process group with its stderr
/// copied to ours line by line as `[name] line`, runs the chain for the client on `reader` /
/// `writer`, then closes every component's input and terminates and reaps them all (SIGTERM,
/// SIGKILL after `kill_grace`).
///
/// # Errors
///
/// A component that cannot be spawned (those already spawned are terminated), or an empty
/// chain.
pub async fn run_commands<R, W>(
    conductor: Conductor,
    reader: R,
    writer: W,
    commands: &[ComponentCommand],
    kill_grace: std::time::Duration,
) -> io::Result<ChainExit>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let options = SpawnOptions { stderr: StderrMode::Piped, kill_grace };
    let mut children = Vec::new();
    let mut components = Vec::new();
    let mut labels = Vec::new();
    for command in commands {
        let mut child = match ChildProcess::spawn(command.command(), options.clone()) {
            Ok(child) => child,
            Err(e) => {
                for (child, _) in children {
                    let _ = ChildProcess::terminate(child).await;
                }
                let what = if command.name == command.program {
                    format!("`{}`", command.name)
                } else {
                    format!("`{}` (`{}`)", command.name, command.program)
                };
                return Err(io::Error::new(e.kind(), format!("cannot start component {what}: {e}")));
            }
        };
        let (stdout, stdin) = child.take_transport().expect("a fresh child has its pipes");
        if let Some(stderr) = child.take_stderr() {
            let (index, debug) = (components.len(), conductor.debug.clone());
            labels.push(tokio::spawn(label_stderr(command.name.clone(), stderr, index, debug)));
        }
        let exited = tokio_util::sync::CancellationToken::new();
        components
            .push(Component::new(command.name.clone(), stdout, stdin).ends_with(exited.clone().cancelled_owned()));
        children.push((child, exited));
    }
    // Each process is watched while the chain runs: one that exits ends the chain at once,
    // even while something it started still holds its stdout (waiting kills what is left of
    // its group and reaps it, so it never lingers as a zombie).
    let chain_over = tokio_util::sync::CancellationToken::new();
    let mut reaping = tokio::task::JoinSet::new();
    for (index, (child, exited)) in children.into_iter().enumerate() {
        reaping.spawn(watch(index, child, exited, chain_over.clone(), kill_grace));
    }
    let end = conductor.run(reader, writer, components).await;
    // The components' inputs are closed by now: a well-behaved one exits by itself. All are
    // waited for at once, so stuck ones cost one grace period (and one for SIGTERM), not one each.
    chain_over.cancel();
    let mut statuses = vec![None; reaping.len()];
    while let Some(reaped) = reaping.join_next().await {
        if let Ok((index, status)) = reaped {
            statuses[index] = status;
        }
    }
    let end = end?;
    // The components are gone, but a process one left behind in a session of its own (out of
    // reach of the group kill) may still hold its stderr: what is left of their lines is
    // copied for one more grace period, not for as long as such a process lives.
    let copied = async {
        for label in &mut labels {
            let _ = label.await;
        }
    };
    if tokio::time::timeout(kill_grace, copied).await.is_err() {
        tracing::debug!("acp conductor: a component's stderr is still open after it was reaped; no longer copied");
        for label in &labels {
            label.abort();
        }
    }
    Ok(ChainExit { end, statuses })
}

/// Watches component `index`'s process: when it exits while the chain runs, `exited` fires;
/// once `chain_over` fires, it has `kill_grace` to exit before its group is terminated. Returns
/// the exit status (`None` when it could not be reaped).
async fn watch(
    index: usize,
    mut child: ChildProcess,
    exited: tokio_util::sync::CancellationToken,
    chain_over: tokio_util::sync::CancellationToken,
    kill_grace: std::time::Duration,
) -> (usize, Option<ExitStatus>) {
    tokio::select! {
        status = child.wait() => {
            exited.cancel();
            return (index, status.ok());
        }
        () = chain_over.cancelled() => {}
    }
    let status = match tokio::time::timeout(kill_grace, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => child.terminate().await.ok(),
    };
    (index, status)
}

/// Copies a component's stderr to ours, each line prefixed with its name (and to the debug
/// log, when there is one).
async fn label_stderr(
    name: String,
    stderr: impl AsyncRead + Unpin,
    index: usize,
    debug: Option<super::debug_log::DebugLog>,
) {
    let mut lines = BufReader::new(stderr).lines();
    let mut out = tokio::io::stderr();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                if let Some(debug) = &debug {
                    debug.stderr(index, &line);
                }
                let labelled = format!("[{name}] {line}\n");
                if out.write_all(labelled.as_bytes()).await.is_err() {
                    return;
                }
            }
            Ok(None) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        split_words(text).unwrap()
    }

    #[test]
    fn words_are_split_like_a_shell_splits_them() {
        assert_eq!(
            words(r#"  npx  -y "@scope/pkg@1.0"  'a b' c\ d "x\"y" ''"#),
            ["npx", "-y", "@scope/pkg@1.0", "a b", "c d", "x\"y", ""]
        );
        assert_eq!(words(r#""keep \n as is""#), [r"keep \n as is"]);
        assert!(split_words("'open").is_none());
        assert!(split_words("\"open").is_none());
    }

    #[test]
    fn leading_assignments_are_environment() {
        let c = ComponentCommand::parse("RUST_LOG=debug A_1='x y' ./target/agent --flag X=1").unwrap();
        assert_eq!(c.program, "./target/agent");
        assert_eq!(c.name, "agent");
        assert_eq!(c.args, ["--flag", "X=1"]);
        assert_eq!(c.env.get("RUST_LOG").map(String::as_str), Some("debug"));
        assert_eq!(c.env.get("A_1").map(String::as_str), Some("x y"));
        assert_eq!(ComponentCommand::parse("A=1 "), Err(ParseError::NoProgram("A=1 ".into())));
        assert_eq!(ComponentCommand::parse("1A=x prog").unwrap().program, "1A=x");
    }

    #[test]
    fn a_json_component_is_read_strictly() {
        let c = ComponentCommand::parse(r#"{"command":"node","args":["a.js"],"env":{"K":"v"}}"#).unwrap();
        assert_eq!((c.program.as_str(), c.args.as_slice()), ("node", ["a.js".to_owned()].as_slice()));
        assert!(matches!(ComponentCommand::parse(r#"{"command":"x","cwd":"/"}"#), Err(ParseError::Json { .. })));
    }
}
