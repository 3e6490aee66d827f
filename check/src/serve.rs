//! The client services acp-check offers on a connection where it advertises them: `fs/*`
//! confined to the sessions' directory, and `terminal/*` terminals that run nothing. Every
//! call the agent makes is answered here and recorded with what was wrong with it, if
//! anything; the checks judge the records.
//!
//! Terminals are simulated: acp-check checks the protocol, and running commands an agent
//! chose is not its business. A terminal's output says that the command was not run, and it
//! has exited with status 0.

use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use acp_rpc::ErrorObject;
use acp_rpc::acp_types::{
    CreateTerminalRequest, KillTerminalRequest, Nullable, ReadTextFileRequest, ReleaseTerminalRequest,
    TerminalOutputRequest, WaitForTerminalExitRequest, WriteTextFileRequest,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::shape;
use crate::wire::truncate;

/// The largest file served or written: the checker's fixtures are tiny, and a write must not
/// fill the disk.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// What the checker's client advertises in `initialize`, and so serves.
#[derive(Clone, Debug, Default)]
pub struct Offer {
    pub read_text_file: bool,
    pub write_text_file: bool,
    pub terminal: bool,
    /// The directory `fs/*` calls and terminals are confined to (the sessions' cwd, resolved).
    pub root: Option<PathBuf>,
}

impl Offer {
    /// The `clientCapabilities` of `initialize`.
    pub fn capabilities(&self) -> Value {
        json!({
            "fs": {"readTextFile": self.read_text_file, "writeTextFile": self.write_text_file},
            "terminal": self.terminal,
        })
    }

    /// Whether `method` is offered; `None` for a method that is neither `fs/*` nor `terminal/*`.
    pub fn covers(&self, method: &str) -> Option<bool> {
        match method {
            "fs/read_text_file" => Some(self.read_text_file),
            "fs/write_text_file" => Some(self.write_text_file),
            m if m.starts_with("fs/") => Some(false),
            m if m.starts_with("terminal/") => Some(self.terminal),
            _ => None,
        }
    }

    /// What was advertised, for a report.
    pub fn describe(&self) -> String {
        let offered: Vec<&str> = [
            (self.read_text_file, "fs.readTextFile"),
            (self.write_text_file, "fs.writeTextFile"),
            (self.terminal, "terminal"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if offered.is_empty() { "nothing".to_owned() } else { offered.join(", ") }
    }
}

/// One `fs/*` or `terminal/*` call of the agent's.
#[derive(Clone, Debug)]
pub struct ClientCall {
    pub method: String,
    /// Its `sessionId`, when it had a string one.
    pub session: Option<String>,
    /// Whether the capability it needs was advertised.
    pub offered: bool,
    /// Why it is malformed: params that do not decode as sent, a relative path, a terminal id
    /// that is unknown or released, ...
    pub malformed: Option<String>,
    /// The path or directory outside the root that was refused.
    pub outside: Option<String>,
    /// Why it failed otherwise (a file that does not exist, ...), for the report.
    pub failed: Option<String>,
}

/// A terminal the agent created.
#[derive(Clone, Debug)]
pub struct Terminal {
    pub id: String,
    pub session: String,
    pub created: Instant,
    pub released: Option<Instant>,
    pub output: String,
    pub truncated: bool,
}

/// The services of one connection.
#[derive(Debug, Default)]
pub struct Services {
    offer: Offer,
    terminals: Mutex<Vec<Terminal>>,
}

impl Services {
    pub fn new(offer: Offer) -> Self {
        Services { offer, terminals: Mutex::default() }
    }

    pub fn offer(&self) -> &Offer {
        &self.offer
    }

    pub fn terminals(&self) -> Vec<Terminal> {
        self.terminals.lock().expect("terminals").clone()
    }

    /// Answers an `fs/*` or `terminal/*` call, read at `at`, and says what it was.
    pub fn handle(&self, method: &str, params: &Value, at: Instant) -> (Result<Value, ErrorObject>, ClientCall) {
        let offered = self.offer.covers(method).unwrap_or(false);
        let mut call = ClientCall {
            method: method.to_owned(),
            session: params.get("sessionId").and_then(Value::as_str).map(str::to_owned),
            offered,
            malformed: None,
            outside: None,
            failed: None,
        };
        if !offered {
            // As if the method did not exist: the client never said it does.
            return (Err(ErrorObject::method_not_found(method)), call);
        }
        let answer = match self.serve(method, params, at) {
            Ok(result) => Ok(result),
            Err(Problem::Malformed(why)) => {
                call.malformed = Some(why.clone());
                Err(ErrorObject::invalid_params(why))
            }
            Err(Problem::Outside(path)) => {
                let why = format!("{path} is outside the session's directory");
                call.outside = Some(why.clone());
                Err(ErrorObject::new(acp_rpc::codes::INVALID_PARAMS, format!("access denied: {why}")))
            }
            Err(Problem::Failed(error)) => {
                call.failed = Some(error.message.clone());
                Err(error)
            }
        };
        (answer, call)
    }

    fn serve(&self, method: &str, params: &Value, at: Instant) -> Result<Value, Problem> {
        match method {
            "fs/read_text_file" => {
                let request: ReadTextFileRequest = decode(params)?;
                if request.line.value() == Some(&0) {
                    return Err(Problem::Malformed("line 0: lines are numbered from 1".into()));
                }
                let path = self.confine(&request.path)?;
                let text = read_text(&path)?;
                let first = request.line.value().map_or(0, |&line| line as usize - 1);
                let limit = request.limit.value().map_or(usize::MAX, |&limit| limit as usize);
                let content: String = text.split_inclusive('\n').skip(first).take(limit).collect();
                Ok(json!({"content": content}))
            }
            "fs/write_text_file" => {
                let request: WriteTextFileRequest = decode(params)?;
                let path = self.confine(&request.path)?;
                if request.content.len() > MAX_FILE_BYTES {
                    return Err(Problem::Failed(ErrorObject::invalid_params(format!(
                        "acp-check writes at most {MAX_FILE_BYTES} bytes"
                    ))));
                }
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io_problem(&path, e))?;
                }
                regular_file(&path, true)?;
                std::fs::write(&path, request.content).map_err(|e| io_problem(&path, e))?;
                Ok(Value::Null)
            }
            "terminal/create" => {
                let request: CreateTerminalRequest = decode(params)?;
                if let Some(cwd) = request.cwd.value() {
                    let dir = self.confine(cwd)?;
                    if !dir.is_dir() {
                        return Err(Problem::Failed(ErrorObject::invalid_params(format!("{cwd} is not a directory"))));
                    }
                }
                let command = std::iter::once(request.command.as_str())
                    .chain(request.args.iter().flatten().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                let text = format!("acp-check runs no commands: `{}` was not run\n", truncate(&command, 200));
                let (output, truncated) = keep_last(&text, request.output_byte_limit.value().copied());
                let mut terminals = self.terminals.lock().expect("terminals");
                let id = format!("acp_check_term_{}", terminals.len() + 1);
                terminals.push(Terminal {
                    id: id.clone(),
                    session: request.session_id.0,
                    created: at,
                    released: None,
                    output,
                    truncated,
                });
                Ok(json!({"terminalId": id}))
            }
            "terminal/output" => {
                let terminal = self.terminal(decode_terminal::<TerminalOutputRequest>(params, |r| {
                    (r.session_id.0, r.terminal_id.0)
                })?)?;
                Ok(json!({
                    "output": terminal.output,
                    "truncated": terminal.truncated,
                    "exitStatus": {"exitCode": 0, "signal": null},
                }))
            }
            "terminal/wait_for_exit" => {
                self.terminal(decode_terminal::<WaitForTerminalExitRequest>(params, |r| {
                    (r.session_id.0, r.terminal_id.0)
                })?)?;
                Ok(json!({"exitCode": 0, "signal": null}))
            }
            "terminal/kill" => {
                self.terminal(decode_terminal::<KillTerminalRequest>(params, |r| (r.session_id.0, r.terminal_id.0))?)?;
                Ok(json!({}))
            }
            "terminal/release" => {
                let (session, id) =
                    decode_terminal::<ReleaseTerminalRequest>(params, |r| (r.session_id.0, r.terminal_id.0))?;
                self.terminal((session, id.clone()))?;
                let mut terminals = self.terminals.lock().expect("terminals");
                if let Some(terminal) = terminals.iter_mut().find(|t| t.id == id) {
                    terminal.released = Some(at);
                }
                Ok(json!({}))
            }
            other => Err(Problem::Failed(ErrorObject::method_not_found(other))),
        }
    }

    /// The live terminal `id` of `session`.
    fn terminal(&self, (session, id): (String, String)) -> Result<Terminal, Problem> {
        let terminals = self.terminals.lock().expect("terminals");
        let Some(terminal) = terminals.iter().find(|t| t.id == id) else {
            return Err(Problem::Malformed(format!("terminal {id:?} was never created")));
        };
        if terminal.released.is_some() {
            // terminals.mdx: "After release the terminal ID becomes invalid for all other
            // `terminal/*` methods."
            return Err(Problem::Malformed(format!("terminal {id:?} was already released")));
        }
        if terminal.session != session {
            return Err(Problem::Malformed(format!(
                "terminal {id:?} belongs to session {:?}, not {session:?}",
                terminal.session
            )));
        }
        Ok(terminal.clone())
    }

    /// The path `requested` names, if it is absolute and within the root once `.`, `..` and
    /// the symbolic links of its longest existing prefix are resolved: what is checked is what
    /// is opened.
    fn confine(&self, requested: &str) -> Result<PathBuf, Problem> {
        let path = Path::new(requested);
        // overview.mdx: "All file paths in the protocol **MUST** be absolute."
        if !path.is_absolute() {
            return Err(Problem::Malformed(format!("{requested:?} is not an absolute path")));
        }
        let Some(root) = &self.offer.root else { return Err(Problem::Outside(requested.to_owned())) };
        let mut normal = PathBuf::new();
        for component in path.components() {
            match component {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                other => normal.push(other),
            }
        }
        let mut existing = normal.as_path();
        let mut rest = Vec::new();
        let mut resolved = loop {
            match existing.canonicalize() {
                Ok(resolved) => break resolved,
                Err(_) => match (existing.file_name(), existing.parent()) {
                    (Some(name), Some(parent)) => {
                        rest.push(name);
                        existing = parent;
                    }
                    _ => return Err(Problem::Outside(requested.to_owned())),
                },
            }
        };
        resolved.extend(rest.iter().rev());
        if resolved.starts_with(root) { Ok(resolved) } else { Err(Problem::Outside(requested.to_owned())) }
    }
}

enum Problem {
    Malformed(String),
    Outside(String),
    Failed(ErrorObject),
}

/// The params as `T`, refused when they do not decode or lose something in decoding.
fn decode<T: DeserializeOwned + Serialize + JsonSchema>(params: &Value) -> Result<T, Problem> {
    // Decoded from the text, so that a failure names the member it is in (`params.line: ...`).
    let decoded: T = acp_rpc::acp_types::decode::from_str(&params.to_string()).map_err(|e| match e.path() {
        Some(path) => Problem::Malformed(format!("params.{path}: {}", e.message())),
        None => Problem::Malformed(format!("params: {}", e.message())),
    })?;
    match shape::first_difference_as(params, &decoded) {
        Some(difference) => Err(Problem::Malformed(difference)),
        None => Ok(decoded),
    }
}

/// The (session, terminal) a `terminal/*` call other than `create` names.
fn decode_terminal<T: DeserializeOwned + Serialize + JsonSchema>(
    params: &Value,
    ids: impl FnOnce(T) -> (String, String),
) -> Result<(String, String), Problem> {
    decode(params).map(ids)
}

fn read_text(path: &Path) -> Result<String, Problem> {
    regular_file(path, false)?;
    let file = std::fs::File::open(path).map_err(|e| io_problem(path, e))?;
    let mut bytes = Vec::new();
    // One byte over the limit tells a file that is too large, should it have grown meanwhile.
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_FILE_BYTES as u64 + 1), &mut bytes)
        .map_err(|e| io_problem(path, e))?;
    if bytes.len() > MAX_FILE_BYTES {
        let why = format!("{} is larger than the {MAX_FILE_BYTES} bytes acp-check serves", path.display());
        return Err(Problem::Failed(ErrorObject::internal_error(why)));
    }
    String::from_utf8(bytes)
        .map_err(|_| Problem::Failed(ErrorObject::internal_error(format!("{} is not UTF-8 text", path.display()))))
}

/// Refuses anything at `path` but a regular file (or, when `may_be_missing`, nothing at all),
/// before it is opened: opening a FIFO the agent made in its directory would block the checker.
/// (An agent that swaps the file for one between this look and the open can still do that;
/// acp-check defends against mistakes, not against an agent out to hang it.)
fn regular_file(path: &Path, may_be_missing: bool) -> Result<(), Problem> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(Problem::Failed(ErrorObject::invalid_params(format!("{} is not a regular file", path.display())))),
        Err(e) if may_be_missing && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_problem(path, e)),
    }
}

fn io_problem(path: &Path, e: std::io::Error) -> Problem {
    let why = format!("{}: {e}", path.display());
    Problem::Failed(if e.kind() == std::io::ErrorKind::NotFound {
        ErrorObject::new(acp_rpc::codes::RESOURCE_NOT_FOUND, format!("Resource not found: {why}"))
            .with_data(json!({"uri": path.to_string_lossy()}))
    } else {
        ErrorObject::internal_error(why)
    })
}

/// The end of `text` within `limit` bytes, cut at a character boundary (terminals.mdx: the
/// client "**MUST** ensure truncation happens at a character boundary"); whether it was cut.
fn keep_last(text: &str, limit: Option<u64>) -> (String, bool) {
    let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    if text.len() <= limit {
        return (text.to_owned(), false);
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    (text[start..].to_owned(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh root with a file in it, and a file beside it.
    fn setup(name: &str) -> (PathBuf, Services) {
        let base = std::env::temp_dir().join(format!("acp-check-serve-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root")).unwrap();
        let base = base.canonicalize().unwrap();
        std::fs::write(base.join("root/a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(base.join("secret.txt"), "secret").unwrap();
        let offer =
            Offer { read_text_file: true, write_text_file: true, terminal: true, root: Some(base.join("root")) };
        (base, Services::new(offer))
    }

    fn handle(services: &Services, method: &str, params: Value) -> (Result<Value, ErrorObject>, ClientCall) {
        services.handle(method, &params, Instant::now())
    }

    fn read(services: &Services, path: &str, extra: Value) -> (Result<Value, ErrorObject>, ClientCall) {
        let mut params = json!({"sessionId": "s", "path": path});
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        handle(services, "fs/read_text_file", params)
    }

    #[test]
    fn reads_within_the_root_are_served_by_lines() {
        let (base, services) = setup("read");
        let path = base.join("root/a.txt").to_string_lossy().into_owned();
        let (answer, call) = read(&services, &path, json!({}));
        assert_eq!(answer.unwrap(), json!({"content": "one\ntwo\nthree\n"}));
        assert!(call.malformed.is_none() && call.outside.is_none() && call.offered);
        let (answer, _) = read(&services, &path, json!({"line": 2, "limit": 1}));
        assert_eq!(answer.unwrap(), json!({"content": "two\n"}));
        let (answer, call) = read(&services, &format!("{}/root/missing.txt", base.display()), json!({}));
        assert_eq!(answer.unwrap_err().code, acp_rpc::codes::RESOURCE_NOT_FOUND);
        assert!(call.failed.is_some() && call.malformed.is_none());
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn reads_outside_the_root_are_refused_however_they_get_there() {
        let (base, services) = setup("outside");
        #[cfg(unix)]
        std::os::unix::fs::symlink(base.join("secret.txt"), base.join("root/link.txt")).unwrap();
        for path in [
            base.join("secret.txt").to_string_lossy().into_owned(),
            format!("{}/root/../secret.txt", base.display()),
            #[cfg(unix)]
            format!("{}/root/link.txt", base.display()),
        ] {
            let (answer, call) = read(&services, &path, json!({}));
            let error = answer.expect_err(&path);
            assert!(error.message.starts_with("access denied"), "{path}: {error:?}");
            assert!(call.outside.is_some() && call.malformed.is_none(), "{path}");
        }
        // A write there is refused too, and writes nothing.
        let params = json!({"sessionId": "s", "path": format!("{}/root/../new.txt", base.display()), "content": "x"});
        let (answer, call) = handle(&services, "fs/write_text_file", params);
        assert!(answer.is_err() && call.outside.is_some());
        assert!(!base.join("new.txt").exists());
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn malformed_calls_are_refused_and_named() {
        let (base, services) = setup("malformed");
        let (answer, call) = read(&services, "root/a.txt", json!({}));
        assert_eq!(answer.unwrap_err().code, acp_rpc::codes::INVALID_PARAMS);
        assert_eq!(call.malformed.as_deref(), Some("\"root/a.txt\" is not an absolute path"));
        let path = base.join("root/a.txt").to_string_lossy().into_owned();
        let (_, call) = read(&services, &path, json!({"line": "three"}));
        let malformed = call.malformed.unwrap();
        assert!(malformed.starts_with("params.line:"), "{malformed}");
        let (_, call) = read(&services, &path, json!({"line": 0}));
        assert_eq!(call.malformed.as_deref(), Some("line 0: lines are numbered from 1"));
        let (_, call) = handle(&services, "fs/read_text_file", json!({"path": path}));
        assert!(call.malformed.unwrap().contains("sessionId"));
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn only_regular_files_are_read_or_written() {
        let (base, services) = setup("special");
        std::fs::create_dir(base.join("root/dir")).unwrap();
        let dir = format!("{}/root/dir", base.display());
        let (answer, call) = read(&services, &dir, json!({}));
        assert!(answer.unwrap_err().message.ends_with("is not a regular file") && call.malformed.is_none());
        let (answer, _) =
            handle(&services, "fs/write_text_file", json!({"sessionId": "s", "path": dir, "content": ""}));
        assert!(answer.unwrap_err().message.ends_with("is not a regular file"));
        // A FIFO would block the open until someone writes to it.
        #[cfg(unix)]
        if std::process::Command::new("mkfifo").arg(base.join("root/fifo")).status().is_ok_and(|s| s.success()) {
            let (answer, _) = read(&services, &format!("{}/root/fifo", base.display()), json!({}));
            assert!(answer.unwrap_err().message.ends_with("is not a regular file"));
        }
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn writes_create_the_file_and_its_directories() {
        let (base, services) = setup("write");
        let path = format!("{}/root/new/dir/out.txt", base.display());
        let (answer, call) =
            handle(&services, "fs/write_text_file", json!({"sessionId": "s", "path": path, "content": "hi"}));
        assert_eq!(answer.unwrap(), Value::Null);
        assert!(call.malformed.is_none() && call.outside.is_none());
        assert_eq!(std::fs::read_to_string(base.join("root/new/dir/out.txt")).unwrap(), "hi");
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn terminals_live_until_released_and_belong_to_their_session() {
        let (base, services) = setup("terminal");
        let cwd = base.join("root").to_string_lossy().into_owned();
        let create = json!({"sessionId": "s", "command": "echo", "args": ["hé"], "cwd": cwd, "outputByteLimit": 20});
        let (answer, _) = handle(&services, "terminal/create", create);
        let id = answer.unwrap()["terminalId"].as_str().unwrap().to_owned();
        let (answer, call) = handle(&services, "terminal/output", json!({"sessionId": "s", "terminalId": id}));
        let output = answer.unwrap();
        assert_eq!(output["truncated"], true);
        assert!(output["output"].as_str().unwrap().len() <= 20 && call.malformed.is_none(), "{output}");
        let (_, call) = handle(&services, "terminal/wait_for_exit", json!({"sessionId": "other", "terminalId": id}));
        assert!(call.malformed.unwrap().contains("belongs to session \"s\""));
        let (answer, _) = handle(&services, "terminal/release", json!({"sessionId": "s", "terminalId": id}));
        assert!(answer.is_ok() && services.terminals()[0].released.is_some());
        let (_, call) = handle(&services, "terminal/kill", json!({"sessionId": "s", "terminalId": id}));
        assert!(call.malformed.unwrap().contains("already released"));
        let (_, call) = handle(&services, "terminal/output", json!({"sessionId": "s", "terminalId": "nope"}));
        assert!(call.malformed.unwrap().contains("never created"));
        let outside = json!({"sessionId": "s", "command": "ls", "cwd": base.to_string_lossy()});
        let (_, call) = handle(&services, "terminal/create", outside);
        assert!(call.outside.is_some());
        std::fs::remove_dir_all(base).unwrap();
    }

    #[test]
    fn unoffered_methods_are_not_found() {
        let services = Services::new(Offer { read_text_file: true, ..Offer::default() });
        let (answer, call) =
            handle(&services, "fs/write_text_file", json!({"sessionId": "s", "path": "/x", "content": ""}));
        assert_eq!(answer.unwrap_err().code, acp_rpc::codes::METHOD_NOT_FOUND);
        assert!(!call.offered);
        assert_eq!(services.offer().covers("terminal/create"), Some(false));
        assert_eq!(services.offer().covers("session/request_permission"), None);
    }

    #[test]
    fn output_is_cut_at_a_character_boundary() {
        assert_eq!(keep_last("aé", Some(1)), ("".to_owned(), true));
        assert_eq!(keep_last("aé", Some(2)), ("é".to_owned(), true));
        assert_eq!(keep_last("aé", None), ("aé".to_owned(), false));
    }
}
