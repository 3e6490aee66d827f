//! `acp-check-compat`: runs `acp-check` against real agents from the npm, PyPI and crates.io
//! registries and keeps the book's compatibility table (`table.rs`, in
//! `docs/book/src/compatibility.md`) up to date.
//!
//! ```text
//! acp-check-compat run [--scratch DIR] [--reinstall] [ID...]   install, check, save, render
//! acp-check-compat render                                      the book's table from the saved results
//! ```
//!
//! The agents and their exact versions are pinned in `check/compat/agents.json`. `run` installs
//! each into a directory of its own under the scratch directory (`npm install --prefix`, a
//! Python venv, or a crate's own examples built `--locked` into a target of their own), then runs
//! `acp-check --json` on it under `timeout`, with an environment holding nothing but `PATH`, a
//! locale and a throwaway `HOME` (no API key, no login of the machine's user), and saves what
//! happened to `check/compat/results/<id>.json`: the report, or why the agent could not be
//! installed or checked. The network and the agents make this no test: `cargo test` runs the
//! table's unit tests only.

mod table;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

const USAGE: &str = "\
usage: acp-check-compat run [--scratch DIR] [--reinstall] [ID...]
       acp-check-compat render

run      installs the agents of check/compat/agents.json (all, or those named) into the scratch
         directory (default: $TMPDIR/acp-check-compat; kept, so that a second run reuses the
         installs), checks each with acp-check without credentials, saves the results to
         check/compat/results/ and rewrites the table in docs/book/src/compatibility.md
render   rewrites that table from the saved results";

/// How long one agent's whole check may take before `timeout` ends it.
const RUN_LIMIT_SECS: u64 = 30 * 60;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("render") if args.len() == 1 => render(),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        _ => Err(format!("expected `run` or `render`\n\n{USAGE}")),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("acp-check-compat: {message}");
            std::process::ExitCode::from(2)
        }
    }
}

/// `check/` (this package's directory).
fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn manifest_path() -> PathBuf {
    package_dir().join("compat/agents.json")
}

fn results_dir() -> PathBuf {
    package_dir().join("compat/results")
}

/// The book's page that holds the table, between the markers of [`table::BEGIN`] and [`table::END`].
fn readme_path() -> PathBuf {
    package_dir().join("../docs/book/src/compatibility.md")
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not valid JSON: {e}", path.display()))
}

fn agents(manifest: &Value) -> Result<&[Value], String> {
    let agents = manifest["agents"].as_array().ok_or("agents.json has no `agents` array")?;
    for agent in agents {
        let id = agent["id"].as_str().ok_or_else(|| format!("an agent without a string `id`: {agent}"))?;
        let valid = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !valid {
            return Err(format!("agent id {id:?}: letters, digits and `-` only"));
        }
        if agent["command"].as_array().is_none_or(|c| c.is_empty() || c.iter().any(|a| !a.is_string())) {
            return Err(format!("agent {id}: `command` must be a non-empty array of strings"));
        }
        if table::source_of(agent) == "?" || agent["install"]["version"].as_str().is_none() {
            return Err(format!("agent {id}: `install` needs `npm`, `pypi` or `crate`, and a `version`"));
        }
    }
    Ok(agents)
}

/// The book's table from the saved results.
fn render() -> Result<(), String> {
    let manifest = read_json(&manifest_path())?;
    let agents = agents(&manifest)?;
    let results: Vec<Option<Value>> = agents
        .iter()
        .map(|agent| {
            let path = results_dir().join(format!("{}.json", agent["id"].as_str().unwrap_or_default()));
            path.exists().then(|| read_json(&path)).transpose()
        })
        .collect::<Result<_, _>>()?;
    let readme =
        std::fs::read_to_string(readme_path()).map_err(|e| format!("cannot read {}: {e}", readme_path().display()))?;
    let updated = table::splice(&readme, &table::render(&manifest, &results))?;
    if updated != readme {
        std::fs::write(readme_path(), updated).map_err(|e| format!("cannot write {}: {e}", readme_path().display()))?;
    }
    println!("docs/book/src/compatibility.md: table of {} agent(s) written", agents.len());
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    let mut scratch = std::env::temp_dir().join("acp-check-compat");
    let mut reinstall = false;
    let mut only = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--scratch" => scratch = PathBuf::from(args.next().ok_or("--scratch needs a directory")?),
            "--reinstall" => reinstall = true,
            other if other.starts_with('-') => return Err(format!("unknown option {other}\n\n{USAGE}")),
            id => only.push(id.to_owned()),
        }
    }
    let manifest = read_json(&manifest_path())?;
    let agents = agents(&manifest)?;
    if let Some(unknown) = only.iter().find(|id| !agents.iter().any(|a| a["id"] == id.as_str())) {
        return Err(format!("no agent {unknown:?} in agents.json"));
    }
    let acp_check = std::env::current_exe()
        .map_err(|e| format!("cannot find this executable: {e}"))?
        .with_file_name(format!("acp-check{}", std::env::consts::EXE_SUFFIX));
    if !acp_check.exists() {
        return Err(format!("{} not found: build it first (cargo build -p acp-check --bins)", acp_check.display()));
    }
    std::fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
    let scratch = scratch.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", scratch.display()))?;
    std::fs::create_dir_all(results_dir()).map_err(|e| format!("cannot create the results directory: {e}"))?;
    let timeout_ms = manifest["timeout_ms"].as_u64().unwrap_or(90_000);

    for agent in agents.iter().filter(|a| only.is_empty() || only.iter().any(|id| a["id"] == id.as_str())) {
        let id = agent["id"].as_str().expect("validated");
        eprintln!("== {id}: {} {}", table::source_of(agent), table::version_of(agent));
        let dir = scratch.join(install_key(&agent["install"]));
        let mut result = json!({
            "id": id,
            "package": package_of(agent),
            "version": table::version_of(agent),
            "source": table::source_of(agent),
            "date": today(),
        });
        match install(&agent["install"], &dir, reinstall) {
            Err(why) => {
                eprintln!("   not installable: {why}");
                result["install_error"] = json!(why);
            }
            Ok(()) => {
                result["runtime"] = json!(runtime(agent));
                let command = command_of(agent, &dir);
                result["command"] = json!(agent["command"]);
                let log = scratch.join(format!("{id}.stderr.log"));
                match check(&acp_check, &command, &scratch.join(format!("home-{id}")), &log, timeout_ms) {
                    Ok((code, mut report)) => {
                        eprintln!("   acp-check exited {code}: {}", report["summary"]["verdict"]);
                        // The command as the manifest has it: the scratch paths are this machine's.
                        report["command"] = agent["command"].clone();
                        result["exit_code"] = json!(code);
                        result["report"] = report;
                    }
                    Err(why) => {
                        eprintln!("   not checked: {why}");
                        result["run_error"] = json!(why);
                    }
                }
            }
        }
        let path = results_dir().join(format!("{id}.json"));
        let text = serde_json::to_string_pretty(&result).expect("serializable") + "\n";
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    render()
}

fn package_of(agent: &Value) -> &str {
    let install = &agent["install"];
    install["npm"].as_str().or(install["pypi"].as_str()).or(install["crate"].as_str()).unwrap_or("?")
}

/// The directory name of an install: the package and version, and a hash of the whole spec
/// (two agents with the same spec share it; a changed spec gets a new one).
fn install_key(install: &Value) -> String {
    let name = install["npm"].as_str().or(install["pypi"].as_str()).or(install["crate"].as_str()).unwrap_or("agent");
    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect();
    // FNV-1a: stable across runs and platforms, unlike the standard library's hasher.
    let hash = install
        .to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{name}-{}-{:08x}", install["version"].as_str().unwrap_or("?"), hash as u32)
}

/// The agent's command with `{dir}` replaced by its install directory.
fn command_of(agent: &Value, dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy();
    agent["command"]
        .as_array()
        .expect("validated")
        .iter()
        .map(|a| a.as_str().expect("validated").replace("{dir}", &dir))
        .collect()
}

/// Runs `program args` in the caller's environment (the registries' configuration included);
/// its stdout, or the end of what it said when it fails.
fn step(program: &str, args: &[&str], cwd: &Path, env: &[(&str, &Path)]) -> Result<String, String> {
    let mut command = Command::new(program);
    command.args(args).current_dir(cwd).stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    // The first two lines that name an error say most (npm: the code, then what it means);
    // else the last line said.
    let lines: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .filter(|l| l.to_ascii_lowercase().contains("error") && !l.contains("warn"))
        .take(2)
        .copied()
        .collect();
    let what =
        if errors.is_empty() { lines.last().copied().unwrap_or("no output").to_owned() } else { errors.join(" / ") };
    Err(format!("`{program} {}` failed ({}): {what}", args.join(" "), output.status))
}

/// Installs what `install` names into `dir`, unless it is there already.
fn install(install: &Value, dir: &Path, reinstall: bool) -> Result<(), String> {
    let done = dir.join(".installed");
    if done.exists() && !reinstall {
        return Ok(());
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let version = install["version"].as_str().expect("validated");
    if let Some(package) = install["npm"].as_str() {
        // A package.json of its own, so that npm does not look for one further up.
        std::fs::write(dir.join("package.json"), "{\"private\": true}\n").map_err(|e| e.to_string())?;
        let spec = format!("{package}@{version}");
        step("npm", &["install", "--no-audit", "--no-fund", "--save-exact", "--loglevel=error", &spec], dir, &[])?;
    } else if let Some(package) = install["pypi"].as_str() {
        let spec = format!("{package}=={version}");
        step("python3", &["-m", "venv", "venv"], dir, &[])?;
        step("venv/bin/pip", &["install", "--quiet", "--disable-pip-version-check", &spec], dir, &[])?;
        if install["sdist"] == true {
            // The examples ship in the source distribution only.
            let args = ["download", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-binary", ":all:"];
            step("venv/bin/pip", &[&args[..], &[&spec, "-d", "download"]].concat(), dir, &[])?;
            let tarball = only_file(&dir.join("download"))?;
            std::fs::create_dir_all(dir.join("sdist")).map_err(|e| e.to_string())?;
            let tarball = tarball.to_string_lossy();
            step("tar", &["xzf", &tarball, "--strip-components=1", "-C", "sdist"], dir, &[])?;
        }
    } else if let Some(name) = install["crate"].as_str() {
        install_crate(install, name, version, dir)?;
    }
    std::fs::write(&done, "").map_err(|e| format!("cannot write {}: {e}", done.display()))
}

/// The one file in `dir`.
fn only_file(dir: &Path) -> Result<PathBuf, String> {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    match entries.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(format!("expected one file in {}, found {}", dir.display(), entries.len())),
    }
}

/// A crate's examples, built from its published source with the lock file it ships: the
/// source comes through Cargo (a scratch project depending on the exact version), is copied
/// out of Cargo's cache, and is built into a target directory of its own.
fn install_crate(install: &Value, name: &str, version: &str, dir: &Path) -> Result<(), String> {
    let fetch = dir.join("fetch");
    std::fs::create_dir_all(fetch.join("src")).map_err(|e| e.to_string())?;
    let manifest = format!(
        "[package]\nname = \"compat-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\n{name} = \"={version}\"\n"
    );
    std::fs::write(fetch.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::write(fetch.join("src/lib.rs"), "").map_err(|e| e.to_string())?;
    let metadata = step("cargo", &["metadata", "--format-version", "1"], &fetch, &[])?;
    let metadata: Value = serde_json::from_str(&metadata).map_err(|e| format!("cargo metadata: {e}"))?;
    let source = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name && p["version"] == version)
        .and_then(|p| Path::new(p["manifest_path"].as_str()?).parent().map(Path::to_path_buf))
        .ok_or_else(|| format!("cargo metadata lists no {name} {version}"))?;
    let copy = dir.join("source");
    step("cp", &["-R", &source.to_string_lossy(), &copy.to_string_lossy()], dir, &[])?;
    if !copy.join("Cargo.lock").exists() {
        return Err(format!("{name} {version} ships no Cargo.lock: its examples cannot be built as published"));
    }
    let features: Vec<&str> = install["features"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let features = features.join(",");
    let mut args = vec!["build", "--locked", "--manifest-path", "source/Cargo.toml"];
    if !features.is_empty() {
        args.extend(["--features", &features]);
    }
    for example in install["examples"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        args.extend(["--example", example]);
    }
    step("cargo", &args, dir, &[("CARGO_TARGET_DIR", &dir.join("target"))])?;
    Ok(())
}

/// What the agent runs on (the first word of its command, asked for its version).
fn runtime(agent: &Value) -> String {
    let version = |program: &str, label: &str| {
        let output = Command::new(program).arg("--version").stdin(Stdio::null()).output().ok()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        let version =
            text.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit() || c == 'v'))?;
        Some(format!("{label} {version}"))
    };
    let found = match table::source_of(agent) {
        "npm" => version("node", "node"),
        "PyPI" => version("python3", "Python"),
        _ => version("rustc", "rustc"),
    };
    found.unwrap_or_else(|| "unknown runtime".to_owned())
}

/// Runs `acp-check --json -v` on `command` without credentials: the environment is cleared but
/// for `PATH` and a locale, `HOME` is `home` (made anew), and `timeout` ends a run that
/// outlasts [`RUN_LIMIT_SECS`] (with SIGTERM, on which acp-check stops the agent). The agents'
/// stderr goes to `log`. Its exit code and report.
fn check(
    acp_check: &Path,
    command: &[String],
    home: &Path,
    log: &Path,
    timeout_ms: u64,
) -> Result<(i32, Value), String> {
    let log = std::fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    if home.exists() {
        std::fs::remove_dir_all(home).map_err(|e| format!("cannot clear {}: {e}", home.display()))?;
    }
    std::fs::create_dir_all(home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    let mut child = Command::new("timeout");
    child
        .args(["--kill-after=30", &RUN_LIMIT_SECS.to_string()])
        .arg(acp_check)
        .args(["--json", "-v", "--timeout-ms", &timeout_ms.to_string(), "--"])
        .args(command)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LANG", "C.UTF-8")
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .current_dir(home)
        .stdin(Stdio::null())
        .stderr(log);
    let output = child.output().map_err(|e| format!("cannot run timeout/acp-check: {e}"))?;
    let code = output.status.code();
    if code == Some(124) || code == Some(137) {
        return Err(format!("acp-check did not finish within {RUN_LIMIT_SECS} s"));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .map_err(|e| format!("acp-check printed no JSON report ({e}; exit status {})", output.status))?;
    Ok((code.unwrap_or(-1), report))
}

/// Today's date (UTC), `YYYY-MM-DD`.
fn today() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_from_day_counts() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_416), (2025, 11, 24));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn the_committed_manifest_is_valid_and_has_a_result_or_a_row_for_each_agent() {
        let manifest = read_json(&manifest_path()).unwrap();
        let agents = agents(&manifest).unwrap();
        assert!(agents.len() >= 5, "{}", agents.len());
        let mut keys: Vec<&str> = agents.iter().map(|a| a["id"].as_str().unwrap()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), agents.len(), "agent ids are unique");
        // The book holds the table rendered from the committed results, as `render` writes it.
        let results: Vec<Option<Value>> = agents
            .iter()
            .map(|a| {
                let path = results_dir().join(format!("{}.json", a["id"].as_str().unwrap()));
                path.exists().then(|| read_json(&path).unwrap())
            })
            .collect();
        let readme = std::fs::read_to_string(readme_path()).unwrap();
        let expected = table::splice(&readme, &table::render(&manifest, &results)).unwrap();
        assert!(readme == expected, "the book's compatibility table is stale: run `acp-check-compat render`");
    }

    #[test]
    fn installs_of_the_same_spec_share_a_directory() {
        let a = json!({"crate": "agent-client-protocol", "version": "5.0.0", "examples": ["a", "b"]});
        let b = json!({"crate": "agent-client-protocol", "version": "5.0.0", "examples": ["a"]});
        assert_eq!(install_key(&a), install_key(&a.clone()));
        assert_ne!(install_key(&a), install_key(&b));
        assert!(install_key(&a).starts_with("agent-client-protocol-5.0.0-"), "{}", install_key(&a));
        let npm = json!({"npm": "@scope/name", "version": "1.0.0"});
        assert!(install_key(&npm).starts_with("-scope-name-1.0.0-"), "{}", install_key(&npm));
    }
}
