//! Where a worker listens: a TCP address (`HOST:PORT`), or a Unix domain
//! socket (`unix:PATH`, mode 0600, removed with its listener) that only
//! the file system's permissions let processes reach. Local workers started by a loader
//! (`Loader(workers="local")`) listen on a socket in a directory only
//! their user can enter, so another user on a shared node cannot use them
//! to read what this user's credentials reach.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};

/// The scheme of a Unix domain socket address, for workers and clients.
pub use stoker_proto::transport::UNIX_SCHEME;

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    /// The socket file is removed when the listener is dropped.
    Unix(UnixListener, SocketFile),
}

/// A socket file this process created, removed when dropped.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Listener {
    /// Binds `addr`: `unix:PATH` (the socket is made readable and writable
    /// by its owner only) or a TCP `HOST:PORT`.
    pub async fn bind(addr: &str) -> std::io::Result<Self> {
        match addr.strip_prefix(UNIX_SCHEME) {
            Some(path) => {
                let path = Path::new(path);
                let listener = UnixListener::bind(path)?;
                let file = SocketFile(path.to_owned());
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
                Ok(Self::Unix(listener, file))
            }
            None => Ok(Self::Tcp(TcpListener::bind(addr).await?)),
        }
    }

    /// The address clients use: `HOST:PORT` with the port bound (useful
    /// with port 0), or `unix:PATH`.
    pub fn address(&self) -> std::io::Result<ListenAddr> {
        match self {
            Self::Tcp(l) => Ok(ListenAddr::Tcp(l.local_addr()?)),
            Self::Unix(_, file) => Ok(ListenAddr::Unix(file.0.clone())),
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Self::Tcp(l)
    }
}

/// A bound listener's address, as clients write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "{UNIX_SCHEME}{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_unix_socket_is_its_owners_only_and_goes_with_its_listener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sock");
        let addr = format!("unix:{}", path.display());
        let listener = Listener::bind(&addr).await.unwrap();
        assert_eq!(listener.address().unwrap().to_string(), addr);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "socket mode {mode:o}");
        drop(listener);
        assert!(!path.exists(), "the socket file outlived its listener");

        let tcp = Listener::bind("127.0.0.1:0").await.unwrap();
        let shown = tcp.address().unwrap().to_string();
        assert!(shown.starts_with("127.0.0.1:") && !shown.ends_with(":0"), "{shown}");
    }
}
