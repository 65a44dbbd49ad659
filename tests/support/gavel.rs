//! `gavel serve` as a child process: the real binary over real TLS, driven
//! by the real `curl` client with the generated CA.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `gavel serve`. Dropping it kills it.
pub struct Gavel {
    pub child: Child,
    pub port: u16,
    pub ca: PathBuf,
    pub dir: PathBuf,
}

impl Gavel {
    pub fn start(policies: &Path, dir: &Path) -> Gavel {
        Gavel::start_with(policies, dir, &[])
    }

    pub fn start_with(policies: &Path, dir: &Path, extra: &[&str]) -> Gavel {
        Gavel::start_waiting(policies, dir, extra, Duration::from_secs(20))
    }

    /// Starts gavel and waits up to `timeout` for it to be ready. `{port}`
    /// in `extra` stands for the port it listens on.
    pub fn start_waiting(policies: &Path, dir: &Path, extra: &[&str], timeout: Duration) -> Gavel {
        let port = super::cluster::free_port();
        let ca = dir.join("ca.pem");
        let child = Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--policies")
            .arg(policies)
            .arg("--ca-out")
            .arg(&ca)
            .args(["--poll-seconds", "1", "--grace-seconds", "5"])
            // Tests that stop a server do not wait for endpoints to propagate,
            // unless they are about that.
            .args(
                (!extra.contains(&"--shutdown-delay-seconds"))
                    .then_some(["--shutdown-delay-seconds", "0"])
                    .into_iter()
                    .flatten(),
            )
            .args(extra.iter().map(|a| a.replace("{port}", &port.to_string())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting gavel serve");
        let server = Gavel {
            child,
            port,
            ca,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if server.curl(&["/health/readiness"]).0 == 200 {
                return server;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("gavel serve did not become ready");
    }

    /// (HTTP status, body) of a curl call; the first arg is the path.
    pub fn curl(&self, args: &[&str]) -> (u16, String) {
        let url = format!("https://localhost:{}{}", self.port, args[0]);
        let out = Command::new("curl")
            .args(["-s", "--cacert"])
            .arg(&self.ca)
            .args(["-w", "\n%{http_code}", &url])
            .args(&args[1..])
            .output()
            .expect("curl must be installed");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    pub fn post(&self, path: &str, file: &Path) -> (u16, String) {
        let data = format!("@{}", file.display());
        self.curl(&[path, "--http1.1", "--data-binary", &data])
    }

    pub fn post_text(&self, path: &str, body: &str) -> (u16, String) {
        let file = self.dir.join("body.json");
        std::fs::write(&file, body).unwrap();
        self.post(path, &file)
    }

    /// The value of the series of `name` whose labels include all of `labels`
    /// (each as `key="value"`).
    pub fn series(&self, name: &str, labels: &[&str]) -> f64 {
        let (_, body) = self.curl(&["/metrics"]);
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .filter(|l| labels.iter().all(|want| l.contains(want)))
            .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or(-1.0)
    }

    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.curl(&["/metrics"]);
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(-1.0)
    }
}

impl Gavel {
    /// (current, peak) resident set size in bytes, from /proc.
    pub fn rss(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Gavel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGTERM, as the kubelet stops a container. Whether the signal was sent.
pub fn sigterm(child: &Child) -> bool {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gavel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

pub fn response(body: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["response"].clone()
}

/// A kept-alive HTTP/1.1 connection over real TLS that trusts only `ca_pem`
/// and checks the certificate for `localhost`.
pub struct TlsConnection {
    pub stream: rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>,
    /// The last answer said `Connection: close`: the server closes next.
    pub closing: bool,
}

impl TlsConnection {
    pub fn open(port: u16, ca_pem: &str) -> Result<TlsConnection, String> {
        Ok(TlsConnection {
            stream: tls_stream(port, ca_pem, b"http/1.1")?,
            closing: false,
        })
    }

    /// The DER of the certificate the server presented.
    pub fn peer_certificate(&self) -> Vec<u8> {
        self.stream.conn.peer_certificates().unwrap()[0].to_vec()
    }

    /// (status, body) of a GET on this connection.
    pub fn get(&mut self, path: &str) -> Result<(u16, String), String> {
        self.send("GET", path, b"")
    }

    /// (status, body) of a request with `body` (its Content-Length
    /// declared) on this connection.
    pub fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<(u16, String), String> {
        use std::io::{Read, Write};
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n").into_bytes();
        if !body.is_empty() {
            request.extend_from_slice(
                format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n",
                    body.len()
                )
                .as_bytes(),
            );
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(body);
        self.stream.write_all(&request).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.stream.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed".into());
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                self.closing = head.lines().any(|l| {
                    l.split_once(':').is_some_and(|(k, v)| {
                        k.eq_ignore_ascii_case("connection")
                            && v.trim().eq_ignore_ascii_case("close")
                    })
                });
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return Ok((status, body[..length].to_string()));
            }
        }
    }
}

/// A blocking TLS stream to gavel on `port` that trusts only `ca_pem`,
/// checks the certificate for `localhost` and offers only `alpn`, with the
/// handshake done.
pub fn tls_stream(
    port: u16,
    ca_pem: &str,
    alpn: &[u8],
) -> Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>, String> {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| e.to_string())?;
    }
    Ok(stream)
}
