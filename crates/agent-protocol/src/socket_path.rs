//! Connecting to a Unix socket at a path of any length. `connect(2)` takes the path in
//! `sun_path`, at most [`MAX_SUN_PATH`] bytes, and a sandbox's agent socket lies several
//! directories under the data dir (`<data>/sandboxes/<id>/agent.sock`, a gVisor one
//! deeper still): a data dir of ~50 characters made every start fail. A longer path is
//! reached through a descriptor of its directory, `/proc/self/fd/<N>/<name>`, which the
//! kernel resolves like the full path (the directory's permissions and all), except that
//! the directory is the one the path named when it was opened, just before the connect.
//! The directory's own path must fit `PATH_MAX`, and the socket's name ~90 bytes.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Longest path `sun_path` holds (108 bytes with its terminating NUL).
pub const MAX_SUN_PATH: usize = 107;

/// A path `connect(2)` (or `bind(2)`) takes for the socket at some longer path; keeps the
/// directory's descriptor open while it is used. Crate-private: a copy of the path kept
/// past its drop would name whatever directory next gets the descriptor's number.
#[derive(Debug)]
pub(crate) struct SocketPath {
    path: PathBuf,
    _dir: Option<OwnedFd>,
}

impl SocketPath {
    /// `path` itself when it fits in `sun_path`, else a name through its directory's
    /// descriptor (`InvalidInput` when even the socket's own name does not fit).
    pub(crate) fn new(path: &Path) -> io::Result<Self> {
        if path.as_os_str().len() <= MAX_SUN_PATH {
            return Ok(Self {
                path: path.to_owned(),
                _dir: None,
            });
        }
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(too_long(path));
        };
        let dir: OwnedFd = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(dir)?
            .into();
        let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
        if short.as_os_str().len() > MAX_SUN_PATH {
            return Err(too_long(path));
        }
        Ok(Self {
            path: short,
            _dir: Some(dir),
        })
    }

    /// The path to hand to `connect(2)`, valid while `self` lives.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

fn too_long(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("socket name too long for sun_path: {}", path.display()),
    )
}

/// A blocking connection to the socket at `path`, whatever its length.
pub fn connect(path: &Path) -> io::Result<std::os::unix::net::UnixStream> {
    let short = SocketPath::new(path)?;
    std::os::unix::net::UnixStream::connect(short.path())
}

/// A tokio connection to the socket at `path`, whatever its length.
pub async fn connect_async(path: &Path) -> io::Result<tokio::net::UnixStream> {
    let short = SocketPath::new(path)?;
    tokio::net::UnixStream::connect(short.path()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener at a path longer than `sun_path` (bound through its directory too).
    fn long_listener(root: &Path) -> (PathBuf, std::os::unix::net::UnixListener) {
        let dir = root.join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&dir).expect("dirs");
        let socket = dir.join("agent.sock");
        assert!(socket.as_os_str().len() > MAX_SUN_PATH);
        let short = SocketPath::new(&socket).expect("short path");
        let listener = std::os::unix::net::UnixListener::bind(short.path()).expect("bind");
        (socket, listener)
    }

    #[test]
    fn a_socket_past_sun_path_is_connected_through_its_directory() {
        let root = tempfile::tempdir().expect("temp dir");
        let (socket, listener) = long_listener(root.path());
        assert!(socket.exists(), "bound at its full path");
        let err = std::os::unix::net::UnixStream::connect(&socket).expect_err("too long");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let _conn = connect(&socket).expect("connect through the directory");
        listener.accept().expect("accepted");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio");
        rt.block_on(connect_async(&socket)).expect("tokio connect");
        listener.accept().expect("accepted");
    }

    #[test]
    fn short_paths_are_used_as_they_are_and_missing_dirs_fail() {
        let short = SocketPath::new(Path::new("/run/x.sock")).expect("short");
        assert_eq!(short.path(), Path::new("/run/x.sock"));
        let missing = PathBuf::from("/nonexistent")
            .join("n".repeat(120))
            .join("a.sock");
        let err = connect(&missing).expect_err("no such dir");
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }
}
