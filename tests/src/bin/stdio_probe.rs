//! A process for tests/stdio_transport.rs: takes `acp_rpc::transport::stdio()`, echoes (and flushes) each
//! line of its stdin to its stdout, and reports on stderr (one JSON object per line) which
//! handles are polled and whether fd 0 and fd 1 are non-blocking: at the start, after the
//! line `DROP_STDOUT` (stdout is dropped; later lines are not echoed) and after end of input
//! (stdin dropped too). After the line `EXIT` it goes on reading for 200 ms, then returns from
//! `main` with a read of stdin still waiting.

#[cfg(not(unix))]
fn main() {}

#[cfg(unix)]
use serde_json::json;
#[cfg(unix)]
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[cfg(unix)]
fn non_blocking(fd: i32) -> bool {
    // SAFETY: F_GETFL on fd 0 or 1 reads flags and passes no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

#[cfg(unix)]
fn report(stage: &str, stdin_polled: Option<bool>, stdout_polled: Option<bool>) {
    let line = json!({
        "stage": stage,
        "stdin_polled": stdin_polled,
        "stdout_polled": stdout_polled,
        "fd0_non_blocking": non_blocking(0),
        "fd1_non_blocking": non_blocking(1),
    });
    eprintln!("{line}");
}

#[cfg(unix)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let (stdin, stdout) = acp_rpc::transport::stdio();
    let stdin_polled = stdin.is_polled();
    report("start", Some(stdin_polled), Some(stdout.is_polled()));
    let mut lines = BufReader::new(stdin);
    let mut stdout = Some(stdout);
    let mut line = Vec::new();
    let exit = tokio::time::sleep(std::time::Duration::MAX);
    tokio::pin!(exit);
    loop {
        line.clear();
        tokio::select! {
            read = lines.read_until(b'\n', &mut line) => if read? == 0 {
                break;
            },
            () = &mut exit => return Ok(()),
        }
        if line == b"EXIT\n" {
            report("exit", Some(stdin_polled), None);
            exit.as_mut().reset(tokio::time::Instant::now() + std::time::Duration::from_millis(200));
            continue;
        }
        if line == b"DROP_STDOUT\n" {
            drop(stdout.take());
            report("stdout dropped", Some(stdin_polled), None);
        } else if let Some(out) = stdout.as_mut() {
            out.write_all(&line).await?;
            out.flush().await?;
        }
    }
    drop(stdout);
    drop(lines);
    report("end", None, None);
    Ok(())
}
