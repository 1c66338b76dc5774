//! A TCP proxy between a worker and the S3 server. It records the HTTP
//! requests that pass (request line and `Range` header) and can cut the
//! responses to shard GETs short: for the first `cuts` responses to a
//! `GET .../*.tar`, it closes both connections after forwarding `cut_after`
//! bytes of the response, the way a broken network would. It can also
//! throttle responses, so that a reader waits on the network rather than
//! on its own buffers.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One request seen on its way to the server.
#[derive(Clone, Debug)]
pub struct Request {
    /// E.g. `GET /data/ds/shard-000000.tar?x-id=GetObject HTTP/1.1`.
    pub line: String,
    /// The `Range` header's value, when there was one.
    pub range: Option<String>,
}

impl Request {
    pub fn is_get_of(&self, key_part: &str) -> bool {
        self.line.starts_with("GET ") && self.line.contains(key_part)
    }
}

struct Shared {
    upstream: SocketAddr,
    cut_after: usize,
    /// Bytes per second per connection, server to client.
    rate: Option<u64>,
    cuts_left: AtomicUsize,
    cuts_done: AtomicUsize,
    requests: Mutex<Vec<Request>>,
    stop: AtomicBool,
}

/// The proxy; it stops accepting when dropped.
pub struct FaultProxy {
    pub port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// A proxy that forwards everything untouched.
    pub fn passthrough(upstream_endpoint: &str) -> Self {
        Self::start(upstream_endpoint, 0, 0)
    }

    /// A proxy that forwards responses at `bytes_per_sec` per connection.
    pub fn throttled(upstream_endpoint: &str, bytes_per_sec: u64) -> Self {
        Self::spawn(upstream_endpoint, 0, 0, Some(bytes_per_sec))
    }

    /// A proxy to `upstream_endpoint` (`http://127.0.0.1:PORT`) that cuts
    /// the first `cuts` shard responses after `cut_after` bytes.
    pub fn start(upstream_endpoint: &str, cut_after: usize, cuts: usize) -> Self {
        Self::spawn(upstream_endpoint, cut_after, cuts, None)
    }

    fn spawn(upstream_endpoint: &str, cut_after: usize, cuts: usize, rate: Option<u64>) -> Self {
        let upstream: SocketAddr = upstream_endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("upstream address");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            upstream,
            cut_after,
            rate,
            cuts_left: AtomicUsize::new(cuts),
            cuts_done: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let accept_shared = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accept_shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let shared = Arc::clone(&accept_shared);
                thread::spawn(move || serve_connection(client, shared));
            }
        });
        Self { port, shared }
    }

    /// The endpoint to give a worker as `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Responses cut so far.
    pub fn cuts(&self) -> usize {
        self.shared.cuts_done.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Per connection: whether the response in progress answers a shard GET, and
/// how many of its bytes went to the client.
#[derive(Default)]
struct Conn {
    shard_get: AtomicBool,
    forwarded: AtomicUsize,
}

fn serve_connection(client: TcpStream, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(shared.upstream) else {
        return;
    };
    let conn = Arc::new(Conn::default());
    let (Ok(client_r), Ok(server_w)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up_shared = Arc::clone(&shared);
    let up_conn = Arc::clone(&conn);
    thread::spawn(move || client_to_server(client_r, server_w, &up_shared, &up_conn));
    server_to_client(server, client, &shared, &conn);
}

/// Forwards requests, recording their request lines and `Range` headers.
fn client_to_server(mut client: TcpStream, mut server: TcpStream, shared: &Shared, conn: &Conn) {
    let mut buf = vec![0u8; 64 << 10];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some(pos) = pending.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&pending[..pos]).into_owned();
            pending.drain(..pos + 2);
            record_line(&line, shared, conn);
        }
        // Request bodies (none expected) need not be scanned.
        if pending.len() > 16 << 10 {
            pending.clear();
        }
        // The response cannot start before the request is forwarded, so the
        // connection's state is set for it by now.
        if server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
}

fn record_line(line: &str, shared: &Shared, conn: &Conn) {
    let is_request = ["GET ", "HEAD ", "PUT ", "POST ", "DELETE "]
        .iter()
        .any(|m| line.starts_with(m))
        && (line.ends_with(" HTTP/1.1") || line.ends_with(" HTTP/1.0"));
    if is_request {
        let shard_get = line.starts_with("GET ") && line.contains(".tar");
        conn.shard_get.store(shard_get, Ordering::SeqCst);
        conn.forwarded.store(0, Ordering::SeqCst);
        shared.requests.lock().unwrap().push(Request {
            line: line.to_owned(),
            range: None,
        });
    } else if let Some((name, value)) = line.split_once(':')
        && name.trim().eq_ignore_ascii_case("range")
        && let Some(last) = shared.requests.lock().unwrap().last_mut()
    {
        last.range = Some(value.trim().to_owned());
    }
}

/// Forwards responses; cuts a shard response when a cut is due.
fn server_to_client(mut server: TcpStream, mut client: TcpStream, shared: &Shared, conn: &Conn) {
    // Small reads when throttled, so that little is taken from the server
    // ahead of the client.
    let mut buf = vec![0u8; if shared.rate.is_some() { 8 << 10 } else { 64 << 10 }];
    loop {
        let n = match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut chunk = &buf[..n];
        let mut cut = false;
        if conn.shard_get.load(Ordering::SeqCst) && shared.cuts_left.load(Ordering::SeqCst) > 0 {
            let before = conn.forwarded.fetch_add(n, Ordering::SeqCst);
            if before + n >= shared.cut_after {
                let claimed = shared
                    .cuts_left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1))
                    .is_ok();
                if claimed {
                    chunk = &chunk[..shared.cut_after.saturating_sub(before).min(n)];
                    cut = true;
                }
            }
        }
        if client.write_all(chunk).is_err() {
            break;
        }
        if let Some(rate) = shared.rate {
            std::thread::sleep(Duration::from_secs_f64(chunk.len() as f64 / rate as f64));
        }
        if cut {
            shared.cuts_done.fetch_add(1, Ordering::SeqCst);
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}
