//! This process's stdin and stdout as a transport (the agent side of ACP's stdio transport).
//!
//! An editor starts an agent with pipes for its stdin and stdout. Blocking reads and writes
//! of those on helper threads hand every message that arrives or leaves between two threads;
//! on a 2-core machine that is about half of a request's round trip between two processes. On
//! Unix, when stdin or stdout is a pipe or a socket, [`Stdin`] and [`Stdout`] set it
//! non-blocking and let the runtime's I/O driver say when it is ready, as for a child's pipes:
//! no helper thread, no hand-off. Anything else (a terminal, a file, no tokio runtime with I/O
//! enabled, another platform) is read and written with blocking calls on a thread of its own
//! (see [`threaded`]).
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
/// is handed between threads; a terminal, a file or another platform is read or written with
/// blocking calls on a thread of its own, started at the first read or write. That thread
/// never holds the runtime up: an agent whose stdin is a terminal still exits when its
/// connection ends, without waiting for a line the user has not typed. The non-blocking flag belongs to the open pipe and
/// is shared by the rest of the process while the transport lives (a blocking read of
/// `std::io::stdin()` or a `println!` would fail with `WouldBlock`); it is put back when the
/// last handle is dropped.
///
/// Nothing else may write to stdout: send logs to stderr (ACP lets agents log there).
/// Call it inside a tokio runtime with I/O enabled (`#[tokio::main]`, or a runtime built with
/// `enable_all()`) to get the non-blocking path; elsewhere it still works, on the threads. To
/// use tokio's own handles whatever stdin is, pass `tokio::io::stdin()` and
/// `tokio::io::stdout()` (tokio's `io-std` feature) to the connection instead.
pub fn stdio() -> (Stdin, Stdout) {
    (Stdin::new(), Stdout::new())
}

/// This process's stdin as an [`AsyncRead`]; see [`stdio()`] for how it is read.
pub struct Stdin(Inner<threaded::Reader>);

/// This process's stdout as an [`AsyncWrite`]; see [`stdio()`] for how it is written.
pub struct Stdout(Inner<threaded::Writer>);

enum Inner<T> {
    #[cfg(unix)]
    Polled(polled::PolledFd),
    Threaded(T),
}

impl Stdin {
    /// Stdin, non-blocking when it can be (see [`stdio()`]).
    pub fn new() -> Self {
        #[cfg(unix)]
        if let Some(fd) = polled::PolledFd::open(std::os::fd::AsFd::as_fd(&io::stdin()), tokio::io::Interest::READABLE)
        {
            return Stdin(Inner::Polled(fd));
        }
        Stdin(Inner::Threaded(threaded::Reader::default()))
    }

    /// Whether stdin is read without blocking through the runtime's I/O driver (a pipe or a
    /// socket on Unix), rather than on a thread of its own.
    pub fn is_polled(&self) -> bool {
        !matches!(self.0, Inner::Threaded(_))
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
        Stdout(Inner::Threaded(threaded::Writer::default()))
    }

    /// Whether stdout is written without blocking through the runtime's I/O driver (a pipe or
    /// a socket on Unix), rather than on a thread of its own.
    pub fn is_polled(&self) -> bool {
        !matches!(self.0, Inner::Threaded(_))
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
            Inner::Threaded(stdin) => stdin.poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.0 {
            #[cfg(unix)]
            Inner::Polled(fd) => fd.poll_write(cx, data),
            Inner::Threaded(stdout) => stdout.poll_write(cx, data),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            // Written straight to the pipe: nothing is held back.
            #[cfg(unix)]
            Inner::Polled(_) => Poll::Ready(Ok(())),
            Inner::Threaded(stdout) => stdout.poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            // fd 1 stays open with the process, as with tokio's `Stdout`.
            #[cfg(unix)]
            Inner::Polled(_) => Poll::Ready(Ok(())),
            Inner::Threaded(stdout) => stdout.poll_flush(cx),
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
        /// one without I/O enabled): the caller then reads or writes it on a thread.
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
                    tracing::debug!("stdio stays on blocking threads: {e}");
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

pub(crate) mod threaded {
    //! Stdin and stdout read and written with blocking calls on a thread of their own, for
    //! what the I/O driver cannot wait on. Each thread is started at the first read or write
    //! and hands whole buffers over the same bounded tokio channel type as the connection's
    //! output queue (so it adds no channel code of its own). Unlike a blocking task on tokio's
    //! pool, the threads are not waited for when the runtime shuts down: a read that waits for
    //! a terminal's next line cannot keep the process from exiting.

    use std::io::{self, Read, Write};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::task::{Context, Poll, Waker, ready};

    use tokio::io::ReadBuf;
    use tokio::sync::mpsc;

    /// The most one read of stdin takes at a time.
    const READ_CHUNK: usize = 64 * 1024;
    /// Buffers queued between a thread and its handle: enough to keep the thread busy while
    /// the handle's task runs, few enough that memory stays bounded.
    const QUEUED: usize = 4;

    /// Stdin, read on the `acp-stdin` thread.
    #[derive(Default)]
    pub(crate) struct Reader {
        /// `None` before the thread starts, and after the end of input.
        chunks: Option<mpsc::Receiver<Vec<u8>>>,
        chunk: Vec<u8>,
        at: usize,
        started: bool,
        /// Why the thread stopped early, if a read failed.
        failed: Arc<Mutex<Option<io::Error>>>,
    }

    impl Reader {
        pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if !self.started {
                self.started = true;
                let (tx, rx) = mpsc::channel(QUEUED);
                let failed = self.failed.clone();
                spawn("acp-stdin", move || read_stdin(&tx, &failed))?;
                self.chunks = Some(rx);
            }
            while self.at == self.chunk.len() {
                let Some(chunks) = &mut self.chunks else {
                    return Poll::Ready(Ok(()));
                };
                match ready!(chunks.poll_recv(cx)) {
                    Some(chunk) => (self.chunk, self.at) = (chunk, 0),
                    None => {
                        self.chunks = None;
                        if let Some(e) = take(&self.failed) {
                            return Poll::Ready(Err(e));
                        }
                    }
                }
            }
            let n = buf.remaining().min(self.chunk.len() - self.at);
            buf.put_slice(&self.chunk[self.at..self.at + n]);
            self.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// The `acp-stdin` thread: reads until end of input, a failed read, or the handle is gone.
    /// std's lock on stdin is taken for each read only, as it would be without the transport.
    fn read_stdin(chunks: &mpsc::Sender<Vec<u8>>, failed: &Mutex<Option<io::Error>>) {
        let mut buf = vec![0; READ_CHUNK];
        loop {
            match io::stdin().read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if chunks.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    *failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    return;
                }
            }
        }
    }

    /// Stdout, written on the `acp-stdout` thread.
    #[derive(Default)]
    pub(crate) struct Writer {
        /// `None` before the thread starts.
        chunks: Option<mpsc::Sender<Vec<u8>>>,
        /// Bytes handed to the thread so far.
        sent: u64,
        thread: Arc<WriterState>,
    }

    /// What the `acp-stdout` thread tells its handle.
    #[derive(Default)]
    struct WriterState {
        /// Bytes written and flushed so far.
        written: AtomicU64,
        /// Why the thread stopped, if a write failed.
        failed: Mutex<Option<io::Error>>,
        /// The handle's task, woken when a buffer is taken or written.
        waker: Mutex<Option<Waker>>,
    }

    impl WriterState {
        fn wake(&self) {
            if let Some(waker) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
                waker.wake();
            }
        }

        fn register(&self, cx: &Context<'_>) {
            *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        }

        /// The thread's error once it stopped: the one it met, or that it is gone.
        fn failure(&self) -> io::Error {
            take(&self.failed).unwrap_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdout's thread ended"))
        }
    }

    impl Writer {
        pub(crate) fn poll_write(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            if data.is_empty() {
                return Poll::Ready(Ok(0));
            }
            let chunks = match &mut self.chunks {
                Some(chunks) => chunks,
                None => {
                    let (tx, rx) = mpsc::channel(QUEUED);
                    let thread = self.thread.clone();
                    spawn("acp-stdout", move || write_stdout(rx, &thread))?;
                    self.chunks.insert(tx)
                }
            };
            let mut chunk = data.to_vec();
            // Tried again once the waker is in place: the thread may have taken a buffer in
            // between, and it wakes only a task it finds registered.
            for attempt in 0..2 {
                match chunks.try_send(chunk) {
                    Ok(()) => {
                        self.sent += data.len() as u64;
                        return Poll::Ready(Ok(data.len()));
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return Poll::Ready(Err(self.thread.failure())),
                    Err(mpsc::error::TrySendError::Full(back)) => chunk = back,
                }
                if attempt == 0 {
                    self.thread.register(cx);
                }
            }
            Poll::Pending
        }

        /// Ready once the thread has written and flushed everything handed to it.
        pub(crate) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            for attempt in 0..2 {
                if self.thread.written.load(Ordering::Acquire) >= self.sent {
                    return Poll::Ready(Ok(()));
                }
                if self.chunks.as_ref().is_some_and(mpsc::Sender::is_closed) {
                    return Poll::Ready(Err(self.thread.failure()));
                }
                if attempt == 0 {
                    self.thread.register(cx);
                }
            }
            Poll::Pending
        }
    }

    /// The `acp-stdout` thread: writes each buffer and flushes it, until the handle is gone
    /// (what it handed over is still written) or a write fails. std's lock on stdout is held
    /// for one buffer at a time: a stray `println!` elsewhere interleaves rather than waits
    /// for the end of the connection.
    fn write_stdout(mut chunks: mpsc::Receiver<Vec<u8>>, state: &WriterState) {
        while let Some(chunk) = chunks.blocking_recv() {
            state.wake();
            let mut stdout = io::stdout().lock();
            if let Err(e) = stdout.write_all(&chunk).and_then(|()| stdout.flush()) {
                *state.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                // Closed before the handle is woken: it then sees the error, not a full queue.
                chunks.close();
                state.wake();
                return;
            }
            state.written.fetch_add(chunk.len() as u64, Ordering::Release);
            state.wake();
        }
    }

    fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> io::Result<()> {
        std::thread::Builder::new().name(name.to_owned()).spawn(body).map(drop)
    }

    fn take(slot: &Mutex<Option<io::Error>>) -> Option<io::Error> {
        slot.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}
