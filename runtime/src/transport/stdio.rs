//! This process's stdin and stdout as a transport (the agent side of ACP's stdio transport).
//!
//! An editor starts an agent with pipes for its stdin and stdout. tokio's own `Stdin` and
//! `Stdout` read and write those with blocking calls on helper threads, so every message that
//! arrives or leaves is handed between two threads; on a 2-core machine that is about half of
//! a request's round trip between two processes. On Unix, when stdin or stdout is a pipe or a
//! socket, [`Stdin`] and [`Stdout`] set it non-blocking and let the runtime's I/O driver say
//! when it is ready, as for a child's pipes: no helper thread, no hand-off. Anything else (a
//! terminal, a file, no tokio runtime with I/O enabled, another platform) keeps tokio's helpers.
//!
//! Non-blocking is a flag of the open pipe, which the process's other users of fd 0 and 1 share
//! while the transport lives: a blocking read of `std::io::stdin()` or a `println!` elsewhere in
//! the program would then fail with `WouldBlock`. Nothing else may use stdin and stdout in an
//! ACP agent anyway (logs go to stderr); the flag is put back when the transport is dropped.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// This process's stdin and stdout (the agent side of the stdio transport).
///
/// On Unix, when stdin or stdout is a pipe or a socket (as when an editor starts the agent),
/// it is set non-blocking and read or written through the runtime's I/O driver, so no message
/// is handed between threads; a terminal, a file or another platform keeps tokio's own
/// handles, which block on helper threads. The non-blocking flag belongs to the open pipe and
/// is shared by the rest of the process while the transport lives (a blocking read of
/// `std::io::stdin()` or a `println!` would fail with `WouldBlock`); it is put back when the
/// last handle is dropped.
///
/// Nothing else may write to stdout: send logs to stderr (ACP lets agents log there).
/// Call it inside a tokio runtime with I/O enabled (`#[tokio::main]`, or a runtime built with
/// `enable_all()`) to get the non-blocking path; elsewhere it still works, through tokio's
/// blocking helper threads. To keep tokio's own handles whatever stdin is, pass
/// `tokio::io::stdin()` and `tokio::io::stdout()` to the connection instead.
pub fn stdio() -> (Stdin, Stdout) {
    (Stdin::new(), Stdout::new())
}

/// This process's stdin as an [`AsyncRead`]; see [`stdio()`] for how it is read.
pub struct Stdin(Inner<tokio::io::Stdin>);

/// This process's stdout as an [`AsyncWrite`]; see [`stdio()`] for how it is written.
pub struct Stdout(Inner<tokio::io::Stdout>);

enum Inner<T> {
    #[cfg(unix)]
    Polled(polled::PolledFd),
    Blocking(T),
}

impl Stdin {
    /// Stdin, non-blocking when it can be (see [`stdio()`]).
    pub fn new() -> Self {
        #[cfg(unix)]
        if let Some(fd) = polled::PolledFd::open(std::os::fd::AsFd::as_fd(&io::stdin()), tokio::io::Interest::READABLE)
        {
            return Stdin(Inner::Polled(fd));
        }
        Stdin(Inner::Blocking(tokio::io::stdin()))
    }

    /// Whether stdin is read without blocking through the runtime's I/O driver (a pipe or a
    /// socket on Unix), rather than on a helper thread.
    pub fn is_polled(&self) -> bool {
        !matches!(self.0, Inner::Blocking(_))
    }
}

impl Stdout {
    /// Stdout, non-blocking when it can be (see [`stdio()`]).
    pub fn new() -> Self {
        #[cfg(unix)]
        if let Some(fd) = polled::PolledFd::open(std::os::fd::AsFd::as_fd(&io::stdout()), tokio::io::Interest::WRITABLE)
        {
            return Stdout(Inner::Polled(fd));
        }
        Stdout(Inner::Blocking(tokio::io::stdout()))
    }

    /// Whether stdout is written without blocking through the runtime's I/O driver (a pipe or
    /// a socket on Unix), rather than on a helper thread.
    pub fn is_polled(&self) -> bool {
        !matches!(self.0, Inner::Blocking(_))
    }
}

impl Default for Stdin {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Stdin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdin").field("polled", &self.is_polled()).finish()
    }
}

impl std::fmt::Debug for Stdout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdout").field("polled", &self.is_polled()).finish()
    }
}

impl AsyncRead for Stdin {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            #[cfg(unix)]
            Inner::Polled(fd) => fd.poll_read(cx, buf),
            Inner::Blocking(stdin) => Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.0 {
            #[cfg(unix)]
            Inner::Polled(fd) => fd.poll_write(cx, data),
            Inner::Blocking(stdout) => Pin::new(stdout).poll_write(cx, data),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            // Written straight to the pipe: nothing is held back.
            #[cfg(unix)]
            Inner::Polled(_) => Poll::Ready(Ok(())),
            Inner::Blocking(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            // fd 1 stays open with the process, as with tokio's `Stdout`.
            #[cfg(unix)]
            Inner::Polled(_) => Poll::Ready(Ok(())),
            Inner::Blocking(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

#[cfg(unix)]
mod polled {
    use std::fs::File;
    use std::io::{self, Read, Write};
    use std::os::fd::{AsRawFd, BorrowedFd};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    use std::sync::Mutex;
    use std::task::{Context, Poll, ready};

    use tokio::io::unix::AsyncFd;
    use tokio::io::{Interest, ReadBuf};

    /// A duplicate of fd 0 or 1, set non-blocking and registered with the runtime's I/O
    /// driver. The flag is put back when the last handle on the same open file goes.
    pub(super) struct PolledFd {
        fd: AsyncFd<File>,
        key: FileKey,
    }

    /// Which open file a descriptor is: stdin and stdout may be one socket, whose flags they
    /// share, while a pipe's two ends are two files with one inode.
    type FileKey = (u64, u64, libc::c_int);

    /// The open files set non-blocking here: how many handles use each, and its flags before.
    static NON_BLOCKING: Mutex<Vec<(FileKey, usize, libc::c_int)>> = Mutex::new(Vec::new());

    impl PolledFd {
        /// `None` when `fd` is not a pipe or a socket, or cannot be registered (no runtime, or
        /// one without I/O enabled): the caller then uses tokio's blocking handle.
        pub(super) fn open(fd: BorrowedFd<'_>, interest: Interest) -> Option<PolledFd> {
            // `AsyncFd::new` panics outside a runtime; registering fails in one without I/O.
            tokio::runtime::Handle::try_current().ok()?;
            let file = File::from(fd.try_clone_to_owned().ok()?);
            let meta = file.metadata().ok()?;
            // A terminal's flag would reach the shell that shares it, and the I/O driver
            // cannot wait on regular files.
            if !(meta.file_type().is_fifo() || meta.file_type().is_socket()) {
                return None;
            }
            let raw = file.as_raw_fd();
            // SAFETY (every fcntl here): on a descriptor this module owns; no memory passed.
            let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
            if flags < 0 {
                return None;
            }
            let key = (meta.dev(), meta.ino(), flags & libc::O_ACCMODE);
            {
                let mut files = lock(&NON_BLOCKING);
                match files.iter_mut().find(|(k, ..)| *k == key) {
                    Some((_, users, _)) => *users += 1,
                    None => {
                        if unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
                            return None;
                        }
                        files.push((key, 1, flags));
                    }
                }
            }
            // `AsyncFd::register` asks for a tokio newer than the oldest this crate supports;
            // the safety it adds holds here anyway, since the `File` owns the descriptor.
            #[allow(deprecated)]
            let registered = AsyncFd::with_interest(file, interest);
            match registered {
                Ok(fd) => Some(PolledFd { fd, key }),
                Err(e) => {
                    release(raw, key);
                    tracing::debug!("stdio stays on blocking helper threads: {e}");
                    None
                }
            }
        }

        pub(super) fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            loop {
                let mut ready = ready!(self.fd.poll_read_ready(cx))?;
                let unfilled = buf.initialize_unfilled();
                match ready.try_io(|file| retry_interrupted(|| file.get_ref().read(unfilled))) {
                    Ok(Ok(n)) => {
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Err(e)) => return Poll::Ready(Err(e)),
                    // The readiness was used up: wait for the next event.
                    Err(_would_block) => continue,
                }
            }
        }

        pub(super) fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            loop {
                let mut ready = ready!(self.fd.poll_write_ready(cx))?;
                match ready.try_io(|file| retry_interrupted(|| file.get_ref().write(data))) {
                    Ok(result) => return Poll::Ready(result),
                    Err(_would_block) => continue,
                }
            }
        }
    }

    impl Drop for PolledFd {
        fn drop(&mut self) {
            release(self.fd.as_raw_fd(), self.key);
        }
    }

    /// One handle on `key` is gone; the last one puts the flags back.
    fn release(raw: libc::c_int, key: FileKey) {
        let mut files = lock(&NON_BLOCKING);
        if let Some(at) = files.iter().position(|(k, ..)| *k == key) {
            files[at].1 -= 1;
            if files[at].1 == 0 {
                let (_, _, flags) = files.swap_remove(at);
                // A failure leaves the flag set, which nothing here could act on.
                unsafe { libc::fcntl(raw, libc::F_SETFL, flags) };
            }
        }
    }

    fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn retry_interrupted<T>(mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
        loop {
            match op() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
}
