//! `acp_rpc::transport::stdio()` in a real process (src/bin/stdio_probe.rs): pipes and sockets
//! are read and written without blocking through the I/O driver, files and terminals on threads
//! of their own that never hold the process up at exit, a full pipe loses nothing, and the
//! non-blocking flag is put back when the last handle on the open file is dropped (stdin and
//! stdout may be one socket).
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::Value;

const PROBE: &str = env!("CARGO_BIN_EXE_stdio_probe");
const LIMIT: Duration = Duration::from_secs(20);

/// The probe's reports, one per line of its stderr, read on a thread so that a probe that
/// stops reporting fails the test instead of hanging it.
struct Reports(mpsc::Receiver<Value>);

impl Reports {
    fn of(stderr: ChildStderr) -> Self {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let report = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a report: {line}"));
                if tx.send(report).is_err() {
                    break;
                }
            }
        });
        Reports(rx)
    }

    fn next(&self, stage: &str) -> Value {
        let report = self.0.recv_timeout(LIMIT).unwrap_or_else(|_| panic!("no `{stage}` report in time"));
        assert_eq!(report["stage"], stage, "{report}");
        report
    }
}

/// The probe with `stdin` and `stdout` as given, and its reports.
fn probe(stdin: impl Into<Stdio>, stdout: impl Into<Stdio>) -> (Child, Reports) {
    let mut child = Command::new(PROBE).stdin(stdin).stdout(stdout).stderr(Stdio::piped()).spawn().unwrap();
    let reports = Reports::of(child.stderr.take().unwrap());
    (child, reports)
}

fn wait(mut child: Child) {
    for _ in 0..(LIMIT.as_millis() / 10) {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "probe exited with {status}");
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    child.kill().ok();
    panic!("probe did not exit");
}

/// Lines of assorted lengths, 4 MiB in all: far more than a pipe holds.
fn payload() -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0usize;
    while out.len() < 4 << 20 {
        let len = (i * 7919) % 20_000;
        out.extend_from_slice(format!("{i}:").as_bytes());
        out.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, len));
        out.push(b'\n');
        i += 1;
    }
    out
}

#[test]
fn pipes_are_polled_and_a_full_pipe_loses_nothing() {
    let (mut child, reports) = probe(Stdio::piped(), Stdio::piped());
    let start = reports.next("start");
    assert_eq!(start["stdin_polled"], true, "{start}");
    assert_eq!(start["stdout_polled"], true, "{start}");
    assert_eq!(start["fd0_non_blocking"], true, "{start}");
    assert_eq!(start["fd1_non_blocking"], true, "{start}");

    let sent = payload();
    let mut stdin = child.stdin.take().unwrap();
    let writer = {
        let sent = sent.clone();
        thread::spawn(move || stdin.write_all(&sent))
    };
    // Read nothing for a while: the probe's stdout fills and its writes must wait for room.
    thread::sleep(Duration::from_millis(300));
    let mut echoed = Vec::new();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let result = stdout.read_to_end(&mut echoed).map(|_| echoed);
        tx.send(result).ok();
    });
    writer.join().unwrap().unwrap();
    let end = reports.next("end");
    assert_eq!(end["fd0_non_blocking"], false, "the flag is put back: {end}");
    assert_eq!(end["fd1_non_blocking"], false, "the flag is put back: {end}");
    let echoed = rx.recv_timeout(LIMIT).expect("echo in time").unwrap();
    assert!(echoed == sent, "echo differs: {} bytes sent, {} back", sent.len(), echoed.len());
    wait(child);
}

#[test]
fn a_file_keeps_blocking_reads_and_a_pipe_next_to_it_is_polled() {
    let path = std::env::temp_dir().join(format!("acp-stdio-probe-{}.jsonl", std::process::id()));
    let sent = payload();
    std::fs::write(&path, &sent).unwrap();
    let (mut child, reports) = probe(std::fs::File::open(&path).unwrap(), Stdio::piped());
    let start = reports.next("start");
    assert_eq!(start["stdin_polled"], false, "a regular file cannot be polled: {start}");
    assert_eq!(start["fd0_non_blocking"], false, "{start}");
    assert_eq!(start["stdout_polled"], true, "{start}");
    let mut echoed = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut echoed).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(echoed == sent, "echo differs: {} bytes sent, {} back", sent.len(), echoed.len());
    reports.next("end");
    wait(child);
}

#[test]
fn a_file_as_stdout_gets_every_byte_written_on_a_thread() {
    let path = std::env::temp_dir().join(format!("acp-stdio-probe-out-{}.jsonl", std::process::id()));
    let sent = payload();
    let (mut child, reports) = probe(Stdio::piped(), std::fs::File::create(&path).unwrap());
    let start = reports.next("start");
    assert_eq!(start["stdout_polled"], false, "a regular file cannot be polled: {start}");
    assert_eq!(start["stdin_polled"], true, "{start}");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&sent).unwrap();
    drop(stdin);
    reports.next("end");
    wait(child);
    let written = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert!(written == sent, "file differs: {} bytes sent, {} written", sent.len(), written.len());
}

#[test]
fn a_failing_stdout_thread_fails_the_writes() {
    // Every write to /dev/full fails (ENOSPC); it is a device, so it is written on a thread.
    let (mut child, reports) =
        probe(Stdio::piped(), std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap());
    assert_eq!(reports.next("start")["stdout_polled"], false);
    // Kept open: the probe must stop on the failed write, not on end of input.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a line\n").unwrap();
    for _ in 0..(LIMIT.as_millis() / 10) {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "the write error ends the probe with an error");
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    child.kill().ok();
    panic!("probe did not stop on the failed write");
}

/// A pseudo-terminal: the master side, and the path of the terminal a process gets as stdin.
fn open_pty() -> (std::fs::File, std::path::PathBuf) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on the descriptor opened here; `ptsname_r` writes at most
    // `name.len()` bytes into `name`.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(master >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr()).to_str().unwrap().into();
        (std::fs::File::from_raw_fd(master), path)
    }
}

#[test]
fn a_terminal_as_stdin_does_not_hold_the_process_at_exit() {
    let (mut master, terminal) = open_pty();
    let (child, reports) =
        probe(std::fs::OpenOptions::new().read(true).write(true).open(&terminal).unwrap(), Stdio::piped());
    let start = reports.next("start");
    assert_eq!(start["stdin_polled"], false, "a terminal is not set non-blocking: {start}");
    // The probe returns from `main` while a read of the terminal waits for a next line that
    // never comes: the process must exit all the same.
    master.write_all(b"EXIT\n").unwrap();
    reports.next("exit");
    wait(child);
}

#[test]
fn one_socket_for_stdin_and_stdout_stays_non_blocking_until_both_are_dropped() {
    let (mut ours, theirs) = UnixStream::pair().unwrap();
    let (child, reports) = probe(OwnedFd::from(theirs.try_clone().unwrap()), OwnedFd::from(theirs));
    let start = reports.next("start");
    assert_eq!(start["stdin_polled"], true, "{start}");
    assert_eq!(start["stdout_polled"], true, "{start}");

    ours.write_all(b"ping\n").unwrap();
    let mut back = [0u8; 5];
    ours.set_read_timeout(Some(LIMIT)).unwrap();
    ours.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping\n");

    ours.write_all(b"DROP_STDOUT\n").unwrap();
    let dropped = reports.next("stdout dropped");
    assert_eq!(dropped["fd0_non_blocking"], true, "stdin still reads the socket: {dropped}");
    // Still served without blocking: this line is read, and end of input is seen.
    ours.write_all(b"after\n").unwrap();
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    let end = reports.next("end");
    assert_eq!(end["fd0_non_blocking"], false, "{end}");
    wait(child);
}
