//! Client errors ([`ClientError`], a variant per failure). Each one names
//! what failed: the worker's address, the shard, the dataset. Also which
//! gRPC status codes are permanent (not retried on another worker).

use std::fmt::Write as _;

/// Why a loader could not start or an epoch could not finish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("no worker reachable: {0}")]
    Unreachable(String),
    /// The worker refused the request for a reason another worker would
    /// share (bad argument, missing data, denied access).
    #[error("worker {addr}: {message}")]
    Worker { addr: String, message: String },
    #[error("worker {addr} sent an invalid response: {message}")]
    Protocol { addr: String, message: String },
    #[error("shard {shard} failed {attempts} times, last on worker {addr}: {message}")]
    ItemFailed {
        shard: String,
        attempts: u32,
        addr: String,
        message: String,
    },
    #[error("all workers unavailable for {seconds}s: {detail}")]
    AllWorkersGone { seconds: u64, detail: String },
    /// The consumer dropped the epoch's stream: the lanes stop.
    #[error("epoch {epoch} was dropped by its consumer")]
    EpochDropped { epoch: u64 },
    /// Every lane ended, yet some of the epoch's work items never
    /// completed.
    #[error("epoch {epoch}: {items} work items never completed")]
    ItemsIncomplete { epoch: u64, items: usize },
    /// A `stoker doctor` stage could not run on a worker.
    #[error("the {stage} stage failed on worker {addr}: {message}")]
    Stage {
        stage: &'static str,
        addr: String,
        message: String,
    },
    #[error("gpu upload failed: {0}")]
    Device(String),
    #[error("cannot complete the epoch's batches: {0}")]
    Batches(String),
    #[error("cannot resume epoch {epoch}: the saved state was made with other settings ({detail})")]
    Resume { epoch: u64, detail: String },
    #[error("no sample delivered: all {skipped} read were skipped: {reasons}")]
    NothingDelivered {
        skipped: u64,
        /// Counts and first examples per kind of reason.
        reasons: String,
    },
    #[error("error budget exceeded: {skipped} samples skipped, more than {budget} allows: {reasons}")]
    ErrorBudget {
        skipped: u64,
        budget: String,
        /// Counts and first examples per kind of reason.
        reasons: String,
    },
}

/// A status's message with its transport causes, e.g. "transport error:
/// tcp connect error: Connection refused (os error 111)".
pub(crate) fn describe_status(status: &tonic::Status) -> String {
    let mut out = String::new();
    let code = status.code();
    if code != tonic::Code::Unknown && code != tonic::Code::Ok {
        let _ = write!(out, "{}: ", code_name(code));
    }
    out.push_str(status.message());
    stoker_core::error::push_sources(&mut out, std::error::Error::source(status));
    out
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::InvalidArgument => "invalid argument",
        C::NotFound => "not found",
        C::PermissionDenied => "permission denied",
        C::Unauthenticated => "unauthenticated",
        C::FailedPrecondition => "failed precondition",
        C::Unavailable => "unavailable",
        C::DeadlineExceeded => "deadline exceeded",
        C::Cancelled => "cancelled",
        C::ResourceExhausted => "resource exhausted",
        C::Internal => "internal",
        C::Unimplemented => "unimplemented",
        C::DataLoss => "data loss",
        C::Aborted => "aborted",
        _ => "error",
    }
}

/// What a peer at `addr` (`HOST:PORT` or `http://HOST:PORT`) answers to
/// HTTP/2's connection preface, when that shows it is not an HTTP/2
/// server: an HTTP/1 server answers with a status line, any HTTP/2 server
/// with a SETTINGS frame. `None` when it looks like HTTP/2, says nothing
/// in time, or cannot be reached (the call's own error then says more).
pub(crate) async fn not_http2(addr: &str, limit: std::time::Duration) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let hostport = match addr.split_once("://") {
        Some(("http", rest)) => rest.trim_end_matches('/'),
        Some(_) => return None,
        None => addr,
    };
    let probe = async {
        let mut conn = tokio::net::TcpStream::connect(hostport).await.ok()?;
        conn.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.ok()?;
        // An empty SETTINGS frame, as a client's preface ends.
        conn.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.ok()?;
        let mut head = [0u8; 64];
        let mut got = 0;
        while got < 9 {
            match conn.read(&mut head[got..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        let head = &head[..got];
        if head.len() >= 9 && head[3] == 4 {
            return None; // a SETTINGS frame: HTTP/2
        }
        if head.is_empty() {
            return Some("it closed the connection at HTTP/2's preface".to_owned());
        }
        let text = String::from_utf8_lossy(head);
        let line = text.lines().next().unwrap_or("").trim();
        Some(format!("it answered HTTP/2's preface with {line:?}"))
    };
    tokio::time::timeout(limit, probe).await.ok().flatten()
}

/// Statuses that another worker would answer the same way: retrying them
/// elsewhere would only repeat the failure.
pub(crate) fn is_permanent(status: &tonic::Status) -> bool {
    use tonic::Code as C;
    matches!(
        status.code(),
        C::InvalidArgument | C::NotFound | C::PermissionDenied | C::Unauthenticated | C::FailedPrecondition
    )
}
