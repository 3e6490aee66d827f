//! Setting up interop peers (a Cargo build, an `npm ci`) once per test process: a peer that
//! cannot be set up skips its tests with the reason, unless `ACP_INTEROP_REQUIRED=1` (as in
//! CI), which makes it a failure.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What set-up `what` made (`set_up` runs the first time only); `None` when it failed and the
/// peer is not required, after saying why.
pub fn once<T: Clone>(
    what: &str,
    state: &Mutex<Option<Result<T, String>>>,
    set_up: fn() -> Result<T, String>,
) -> Option<T> {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    match state.get_or_insert_with(set_up) {
        Ok(done) => Some(done.clone()),
        Err(why) if required() => panic!("the {what} interop cannot run: {why}"),
        Err(why) => {
            eprintln!("SKIPPED: the {what} interop cannot run: {why} (set ACP_INTEROP_REQUIRED=1 to fail instead)");
            None
        }
    }
}

/// Whether a peer that cannot be set up fails its tests (`ACP_INTEROP_REQUIRED=1`, as in CI).
pub fn required() -> bool {
    std::env::var_os("ACP_INTEROP_REQUIRED").is_some_and(|v| v != "0")
}

/// Runs `command` with its output in `log`, for at most `limit`; on failure, why, with the
/// log's last lines.
pub fn run_logged(mut command: Command, log: &Path, limit: Duration) -> Result<(), String> {
    let file = std::fs::File::create(log).map_err(|e| format!("cannot write {}: {e}", log.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = command.stdout(file).stderr(err).spawn().map_err(|e| format!("cannot start: {e}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {limit:?} (log: {})", log.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    Err(format!("{status}:\n{}", lines[lines.len().saturating_sub(15)..].join("\n")))
}

/// Builds the binaries of the Cargo project `project` (a folder under `tests/interop/`, a
/// workspace of its own with a locked `Cargo.lock`) into `target/tmp/interop-<project>`, for
/// at most `limit`; the folder of its binaries.
pub fn cargo_build(project: &str, limit: Duration) -> Result<std::path::PathBuf, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/interop/{project}/Cargo.toml"));
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("interop-{project}"));
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .args(["build", "--locked", "--bins", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_MANIFEST_DIR");
    run_logged(cargo, &target.with_extension("log"), limit)
        .map_err(|e| format!("building {}: {e}", manifest.display()))?;
    Ok(target.join("debug"))
}
