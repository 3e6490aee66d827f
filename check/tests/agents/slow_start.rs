//! A wrapper for acp-check's tests: runs an agent command, its first starts after a pause, as an
//! agent behaves whose first run builds it (`cargo run`) or downloads it (`npx`).
//!
//! `acp-check-slow-start <count file> <slow starts> <pause ms> -- <agent command...>`: each start
//! adds one to the number in the count file (kept across starts); while that number is at most
//! `<slow starts>`, the pause comes before the agent runs.

use std::process::{Command, ExitCode};
use std::time::Duration;

const USAGE: &str = "usage: acp-check-slow-start <count file> <slow starts> <pause ms> -- <agent command...>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [count_file, slow_starts, pause_ms, separator, program, program_args @ ..] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let (Ok(slow_starts), Ok(pause_ms), "--") =
        (slow_starts.parse::<u32>(), pause_ms.parse::<u64>(), separator.as_str())
    else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    // acp-check starts its agents one after another, so the file needs no lock.
    let started = std::fs::read_to_string(count_file).ok().and_then(|n| n.trim().parse::<u32>().ok()).unwrap_or(0) + 1;
    if let Err(e) = std::fs::write(count_file, started.to_string()) {
        eprintln!("acp-check-slow-start: cannot write {count_file}: {e}");
        return ExitCode::from(2);
    }
    if started <= slow_starts {
        std::thread::sleep(Duration::from_millis(pause_ms));
    }
    let mut agent = Command::new(program);
    agent.args(program_args);
    // Replaced by the agent, which then is the process acp-check started, as with a shell's `exec`.
    #[cfg(unix)]
    let error = std::os::unix::process::CommandExt::exec(&mut agent);
    #[cfg(not(unix))]
    let error = match agent.status() {
        Ok(status) => return ExitCode::from(status.code().map_or(1, |code| code as u8)),
        Err(e) => e,
    };
    eprintln!("acp-check-slow-start: cannot run {program}: {error}");
    ExitCode::from(2)
}
