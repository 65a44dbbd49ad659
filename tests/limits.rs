//! The limits that users and the API server rely on, each over HTTP/2 and
//! HTTP/1.1 (the API server speaks the first to a loopback or IP address,
//! the second to a Service, and a hostile client picks either): header
//! size, slow clients, idle connections and the connection cap, the
//! per-request deadline, JSON nesting. Body size is in tests/serve.rs.
//!
//! HTTP/2 is spoken here frame by frame, since no client library lets a
//! test stall in the middle of a frame.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};
use support::gavel::{Gavel, TlsConnection, examples, temp_dir, tls_stream};

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer with an `prefix`-bit prefix after `high` bits.
fn hpack_int(out: &mut Vec<u8>, high: u8, prefix: u8, mut n: usize) {
    let max = (1usize << prefix) - 1;
    if n < max {
        out.push(high | n as u8);
        return;
    }
    out.push(high | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// A literal header field without indexing whose name is the static
/// table's entry `name_index`; the value without Huffman coding.
fn hpack_literal(out: &mut Vec<u8>, name_index: usize, value: &[u8]) {
    hpack_int(out, 0x00, 4, name_index);
    hpack_int(out, 0x00, 7, value.len());
    out.extend_from_slice(value);
}

/// The header block of `GET path` (static table: 2 is `:method GET`, 7
/// `:scheme https`, 4 the name `:path`, 1 the name `:authority`).
fn get_block(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x87];
    hpack_literal(&mut block, 4, path.as_bytes());
    hpack_literal(&mut block, 1, b"localhost");
    block
}

/// An HTTP/2 connection with the client preface and empty SETTINGS sent.
fn h2_open(server: &Gavel, ca: &str) -> Tls {
    let mut tls = tls_stream(server.port, ca, b"h2").expect("TLS to gavel");
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    tls.write_all(&hello).unwrap();
    tls
}

/// An HTTP/2 frame as read: (type, flags, stream, payload).
type Frame = (u8, u8, u32, Vec<u8>);

/// The next frame; None at the end of the connection.
fn read_frame(tls: &mut Tls) -> std::io::Result<Option<Frame>> {
    let mut head = [0u8; 9];
    match tls.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    tls.read_exact(&mut payload)?;
    Ok(Some((head[3], head[4], stream, payload)))
}

/// Sends `GET path` on `stream` and waits for its response headers; acks
/// the server's SETTINGS on the way.
fn h2_get(tls: &mut Tls, stream: u32, path: &str) -> Result<(), String> {
    tls.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        stream,
        &get_block(path),
    ))
    .map_err(|e| e.to_string())?;
    loop {
        match read_frame(tls).map_err(|e| e.to_string())? {
            None => return Err("connection closed".into()),
            Some((GOAWAY, ..)) => return Err("GOAWAY".into()),
            Some((SETTINGS, flags, 0, _)) if flags & 0x1 == 0 => {
                tls.write_all(&frame(SETTINGS, 0x1, 0, &[]))
                    .map_err(|e| e.to_string())?;
            }
            Some((HEADERS, _, s, _)) if s == stream => return Ok(()),
            Some(_) => {}
        }
    }
}

/// Opens stream 1 with a POST to `/validate` whose body is to follow in
/// DATA frames.
fn h2_post_head(tls: &mut Tls) {
    let mut block = vec![0x83, 0x87];
    hpack_literal(&mut block, 4, b"/validate");
    hpack_literal(&mut block, 1, b"localhost");
    tls.write_all(&frame(HEADERS, END_HEADERS, 1, &block))
        .unwrap();
}

/// The body of stream 1's answer, read to its end; `on_headers` is
/// called when its HEADERS arrive. The server's SETTINGS are acknowledged
/// on the way.
fn h2_answer(tls: &mut Tls, mut on_headers: impl FnMut()) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let (kind, flags, stream, payload) =
            read_frame(tls).unwrap().expect("closed without an answer");
        match (kind, stream) {
            (SETTINGS, 0) if flags & 0x1 == 0 => {
                tls.write_all(&frame(SETTINGS, 0x1, 0, &[])).unwrap();
            }
            (HEADERS, 1) => on_headers(),
            (DATA, 1) => {
                body.extend_from_slice(&payload);
                if flags & END_STREAM != 0 {
                    return body;
                }
            }
            _ => {}
        }
    }
}

/// An HTTP/1.1 connection that has had one answer.
fn h1_open(server: &Gavel, ca: &str) -> TlsConnection {
    let mut conn = TlsConnection {
        stream: tls_stream(server.port, ca, b"http/1.1").expect("TLS to gavel"),
        closing: false,
    };
    assert_eq!(conn.get("/health/liveness").unwrap().0, 200);
    conn
}

/// Whether the server has closed `sock`'s connection: everything it sent
/// is read (a GOAWAY, a TLS close_notify) and then the end, or a reset.
fn server_closed<S: Read>(sock: &mut S, set_timeout: impl FnOnce(Option<Duration>)) -> bool {
    set_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 16 * 1024];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

fn tls_closed(tls: &mut Tls) -> bool {
    let sock = tls.sock.try_clone().unwrap();
    server_closed(tls, |t| sock.set_read_timeout(t).unwrap())
}

fn review(name: &str) -> std::path::PathBuf {
    examples().join("reviews").join(name)
}

/// (status, HTTP version) of a curl POST of `file` over `protocol`, with
/// extra curl arguments.
fn curl_post(server: &Gavel, protocol: &str, file: &str, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", protocol, "--cacert"])
        .arg(&server.ca)
        .args(["--data-binary", file])
        .args(extra)
        .args(["-w", "%{http_code} %{http_version}"])
        .arg(format!("https://localhost:{}/validate", server.port))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (code, version) = text.split_once(' ').unwrap_or(("0", ""));
    (code.parse().unwrap_or(0), version.to_string())
}

fn closed_for(server: &Gavel, reason: &str) -> f64 {
    server.series(
        "gavel_connections_closed_total",
        &[&format!("reason=\"{reason}\"")],
    )
}

/// Sends `GET /health/liveness` with `bytes` of extra header fields (in
/// fields of 10 kB, the block cut into HEADERS and CONTINUATION frames) on
/// a new HTTP/2 connection: the answer's body, or None if the connection
/// ended without one. curl cannot do this: its HTTP/2 library refuses to
/// send a header block over 64 kB.
fn h2_get_with_headers(server: &Gavel, ca: &str, bytes: usize) -> Option<String> {
    let mut tls = h2_open(server, ca);
    let mut block = get_block("/health/liveness");
    for i in 0..bytes / 10_000 {
        hpack_int(&mut block, 0x00, 4, 0);
        let name = format!("x-padding-{i}");
        hpack_int(&mut block, 0x00, 7, name.len());
        block.extend_from_slice(name.as_bytes());
        hpack_int(&mut block, 0x00, 7, 10_000);
        block.extend(std::iter::repeat_n(b'a', 10_000));
    }
    let chunks: Vec<&[u8]> = block.chunks(16_384).collect();
    let mut frames = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let last = if i + 1 == chunks.len() {
            END_HEADERS
        } else {
            0
        };
        frames.extend(if i == 0 {
            frame(HEADERS, END_STREAM | last, 1, chunk)
        } else {
            frame(CONTINUATION, last, 1, chunk)
        });
    }
    // The server may stop reading half way; what it answers is what counts.
    let _ = tls.write_all(&frames);
    let mut body = Vec::new();
    loop {
        match read_frame(&mut tls) {
            Ok(Some((SETTINGS, flags, 0, _))) if flags & 0x1 == 0 => {
                let _ = tls.write_all(&frame(SETTINGS, 0x1, 0, &[]));
            }
            Ok(Some((DATA, flags, 1, payload))) => {
                body.extend_from_slice(&payload);
                if flags & END_STREAM != 0 {
                    return Some(String::from_utf8_lossy(&body).into_owned());
                }
            }
            Ok(Some((GOAWAY, ..))) | Ok(None) | Err(_) => return None,
            Ok(Some(_)) => {}
        }
    }
}

#[test]
fn header_size_is_one_limit_on_both_protocols() {
    let dir = temp_dir("limits-headers");
    let server = Gavel::start(&examples().join("policies"), &dir);
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let too_large = "request header fields over 65536 bytes";

    // HTTP/2, frame by frame.
    assert_eq!(
        h2_get_with_headers(&server, &ca, 60_000).as_deref(),
        Some("ok")
    );
    for bytes in [70_000, 200_000] {
        assert_eq!(
            h2_get_with_headers(&server, &ca, bytes).as_deref(),
            Some(too_large),
            "{bytes} bytes"
        );
    }
    // Far over hyper's ceiling: the connection ends, as Go's server ends
    // it, rather than decode without bound.
    assert_eq!(h2_get_with_headers(&server, &ca, 2_000_000), None);

    // HTTP/1.1, with curl.
    let compliant = format!("@{}", review("pod-compliant.json").display());
    let header = |bytes: usize| {
        let file = dir.join(format!("header-{bytes}.txt"));
        let fields: String = (0..bytes / 10_000)
            .map(|i| format!("X-Padding-{i}: {}\n", "a".repeat(10_000)))
            .collect();
        std::fs::write(&file, fields).unwrap();
        format!("@{}", file.display())
    };
    let sent = |bytes: usize| curl_post(&server, "--http1.1", &compliant, &["-H", &header(bytes)]);
    assert_eq!(sent(60_000), (200, "1.1".into()));
    for bytes in [70_000, 200_000] {
        assert_eq!(sent(bytes), (431, "1.1".into()), "{bytes} bytes");
    }
    // Far over the limit the server answers 431 and closes while curl is
    // still sending: the kernel may then reset the connection before curl
    // reads the answer (seen once in a local run: no status). Either way the
    // request is refused, and the server goes on (below).
    let far = sent(1_000_000);
    assert!(
        far == (431, "1.1".into()) || far == (0, "0".into()),
        "1000000 bytes: {far:?}"
    );
    // And the server goes on, on both.
    for (protocol, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        assert_eq!(
            curl_post(&server, protocol, &compliant, &[]),
            (200, version.into())
        );
    }
    assert!(closed_for(&server, "error") >= 1.0);
}

#[test]
fn json_nesting_is_bounded_on_both_protocols() {
    let dir = temp_dir("limits-nesting");
    let server = Gavel::start(&examples().join("policies"), &dir);
    let deep = dir.join("deep.json");
    std::fs::write(
        &deep,
        format!(
            "{{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": {{\"uid\": \"u\", \"kind\": {{\"version\": \"v1\", \"kind\": \"Pod\"}}, \"operation\": \"CREATE\", \"object\": {}{}}}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    )
    .unwrap();
    let skipped = dir.join("skipped.json");
    std::fs::write(
        &skipped,
        format!(
            "{{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"unknown\": {}{}, \"request\": {{\"uid\": \"u\", \"kind\": {{\"version\": \"v1\", \"kind\": \"ConfigMap\"}}, \"operation\": \"CREATE\", \"namespace\": \"default\", \"object\": {{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {{\"name\": \"x\"}}}}}}}}",
            "[".repeat(1_000_000),
            "]".repeat(1_000_000)
        ),
    )
    .unwrap();
    for (protocol, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let deep = format!("@{}", deep.display());
        assert_eq!(
            curl_post(&server, protocol, &deep, &[]),
            (400, version.into())
        );
        let skipped = format!("@{}", skipped.display());
        assert_eq!(
            curl_post(&server, protocol, &skipped, &[]),
            (200, version.into())
        );
    }
}

#[test]
fn slow_clients_are_cut_off_and_do_not_starve_others() {
    let dir = temp_dir("limits-slow");
    let server = Gavel::start_with(
        &examples().join("policies"),
        &dir,
        &["--header-timeout-seconds", "3"],
    );
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let opened = Instant::now();
    // 1,000 connections that never finish their TLS handshake: the first
    // bytes of a record header, then nothing.
    let mut handshakes: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut tcp = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            tcp.write_all(&[0x16, 0x03]).unwrap();
            tcp
        })
        .collect();
    // 200 HTTP/1.1 connections trickling a request head, and 200 HTTP/2
    // connections trickling their first header block, a byte at a time.
    let h1_head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: {}\r\n\r\n",
        "a".repeat(100)
    )
    .into_bytes();
    let mut h2_block = get_block("/validate");
    hpack_int(&mut h2_block, 0x00, 4, 0);
    hpack_int(&mut h2_block, 0x00, 7, 6);
    h2_block.extend_from_slice(b"x-slow");
    hpack_int(&mut h2_block, 0x00, 7, 100);
    h2_block.extend_from_slice(&[b'a'; 100]);
    let h2_head = frame(HEADERS, END_HEADERS, 1, &h2_block);
    let mut trickling: Vec<(Tls, &[u8], usize)> = Vec::new();
    for _ in 0..200 {
        trickling.push((
            tls_stream(server.port, &ca, b"http/1.1").unwrap(),
            &h1_head,
            0,
        ));
        trickling.push((h2_open(&server, &ca), &h2_head, 0));
    }
    // Every slow connection is due to be cut off 3 s after it opened.
    let all_due = Instant::now() + Duration::from_millis(4500);
    eprintln!("1,400 slow connections opened in {:?}", opened.elapsed());

    // Meanwhile, honest requests over both protocols are answered at once.
    let normal = std::thread::scope(|scope| {
        let normal = scope.spawn(|| {
            let compliant = format!("@{}", review("pod-compliant.json").display());
            let mut slowest = Duration::ZERO;
            for _ in 0..10 {
                for protocol in ["--http2", "--http1.1"] {
                    let started = Instant::now();
                    let (code, _) = curl_post(&server, protocol, &compliant, &[]);
                    assert_eq!(code, 200, "{protocol}");
                    slowest = slowest.max(started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            slowest
        });
        while Instant::now() < all_due {
            for (tls, head, sent) in trickling.iter_mut() {
                if *sent < head.len() - 1 && tls.write_all(&head[*sent..*sent + 1]).is_ok() {
                    *sent += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        normal.join().unwrap()
    });
    eprintln!("slowest honest request among 1,400 slow connections: {normal:?}");
    // Well under the header timeout: nobody waited for a slow one to go.
    assert!(normal < Duration::from_secs(2), "{normal:?}");

    // By now every slow connection is closed.
    let still_open = handshakes
        .iter_mut()
        .map(|tcp| {
            let clone = tcp.try_clone().unwrap();
            server_closed(tcp, |t| clone.set_read_timeout(t).unwrap())
        })
        .filter(|closed| !closed)
        .count();
    assert_eq!(still_open, 0, "TLS handshakes left open");
    let still_open = trickling
        .iter_mut()
        .map(|(tls, ..)| tls_closed(tls))
        .filter(|closed| !closed)
        .count();
    assert_eq!(still_open, 0, "trickling connections left open");
    assert!(trickling.iter().all(|(_, head, sent)| *sent < head.len()));
    assert_eq!(closed_for(&server, "slow"), 1400.0);
}

#[test]
fn idle_connections_are_measured_closed_and_evicted_at_the_cap() {
    let dir = temp_dir("limits-idle");
    let policies = examples().join("policies");

    // 2,000 idle connections, half per protocol, under the default cap:
    // all stay open and usable, and cost what RSS says.
    let server = Gavel::start(&policies, &dir);
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let (before, _) = server.rss();
    let mut h1: Vec<TlsConnection> = (0..1000).map(|_| h1_open(&server, &ca)).collect();
    let mut h2: Vec<Tls> = (0..1000)
        .map(|_| {
            let mut tls = h2_open(&server, &ca);
            h2_get(&mut tls, 1, "/health/liveness").unwrap();
            tls
        })
        .collect();
    let (after, _) = server.rss();
    let per_connection = after.saturating_sub(before) / 2000;
    eprintln!(
        "2,000 idle connections: RSS {} -> {} MiB, {per_connection} bytes each",
        before >> 20,
        after >> 20
    );
    // The metric counts its own scrape's connection too.
    assert_eq!(server.metric("gavel_connections_open"), 2001.0);
    assert!(
        after < 256 << 20,
        "RSS {after} bytes with 2,000 idle connections"
    );
    assert_eq!(h1[0].get("/health/liveness").unwrap().0, 200);
    h2_get(&mut h2[999], 3, "/health/liveness").unwrap();
    drop((h1, h2, server));

    // The idle timeout closes idle connections of both protocols (GOAWAY
    // first on HTTP/2), and only idle ones: an HTTP/1.1 connection is kept
    // past the header timeout between requests.
    let server = Gavel::start_with(
        &policies,
        &dir,
        &[
            "--header-timeout-seconds",
            "1",
            "--idle-timeout-seconds",
            "3",
        ],
    );
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let mut h1 = h1_open(&server, &ca);
    let mut h2 = h2_open(&server, &ca);
    h2_get(&mut h2, 1, "/health/liveness").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(h1.get("/health/liveness").unwrap().0, 200);
    h2_get(&mut h2, 3, "/health/liveness").unwrap();
    std::thread::sleep(Duration::from_millis(4500));
    // GOAWAY, then a PING whose answer tells the server that the client
    // has seen it; then the connection ends.
    let mut goaway = false;
    h2.sock
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    while let Ok(Some((kind, flags, _, payload))) = read_frame(&mut h2) {
        goaway |= kind == GOAWAY;
        if kind == PING && flags & 0x1 == 0 {
            h2.write_all(&frame(PING, 0x1, 0, &payload)).unwrap();
        }
    }
    assert!(goaway, "an idle HTTP/2 connection gets GOAWAY");
    assert!(tls_closed(&mut h2));
    assert!(tls_closed(&mut h1.stream));
    assert_eq!(closed_for(&server, "idle"), 2.0);
    drop(server);

    // At the cap, the longest idle connections make room for a new one.
    let server = Gavel::start_with(&policies, &dir, &["--max-connections", "50"]);
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let mut idle: Vec<TlsConnection> = (0..50).map(|_| h1_open(&server, &ca)).collect();
    let compliant = format!("@{}", review("pod-compliant.json").display());
    for protocol in ["--http2", "--http1.1"] {
        assert_eq!(curl_post(&server, protocol, &compliant, &[]).0, 200);
    }
    let evicted = idle
        .iter_mut()
        .map(|c| tls_closed(&mut c.stream))
        .filter(|closed| *closed)
        .count();
    assert!((1..=32).contains(&evicted), "{evicted} evicted");
    assert_eq!(closed_for(&server, "evicted"), evicted as f64);
    drop((idle, server));

    // With every connection busy, there is nothing to evict: a new
    // connection is refused at once rather than left waiting.
    let server = Gavel::start_with(
        &policies,
        &dir,
        &["--max-connections", "4", "--deadline-seconds", "4"],
    );
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let mut busy: Vec<Tls> = (0..4)
        .map(|_| {
            let mut tls = tls_stream(server.port, &ca, b"http/1.1").unwrap();
            tls.write_all(
                b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{",
            )
            .unwrap();
            tls
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (code, _) = curl_post(&server, "--http1.1", &compliant, &[]);
    assert_eq!(code, 0, "refused");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The busy ones get their 408 at the deadline; then there is room.
    for tls in &mut busy {
        let mut answer = String::new();
        tls.sock
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = tls.read(&mut buf).unwrap();
        answer.push_str(&String::from_utf8_lossy(&buf[..n]));
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
    drop(busy);
    std::thread::sleep(Duration::from_millis(300));
    assert!(server.metric("gavel_connections_refused_total") >= 1.0);
}

#[test]
fn a_body_that_stops_coming_gets_408_at_the_deadline_on_both_protocols() {
    let dir = temp_dir("limits-deadline");
    let server = Gavel::start_with(
        &examples().join("policies"),
        &dir,
        &["--deadline-seconds", "2"],
    );
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let in_time =
        |waited: Duration| waited >= Duration::from_millis(1500) && waited < Duration::from_secs(5);

    // HTTP/1.1: the head declares 100 bytes of body; 1 comes.
    let mut h1 = tls_stream(server.port, &ca, b"http/1.1").unwrap();
    h1.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    h1.write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let mut waited = None;
    while !String::from_utf8_lossy(&answer).contains("deadline") {
        let n = h1.read(&mut buf).unwrap();
        assert!(n > 0, "closed without an answer");
        waited.get_or_insert_with(|| started.elapsed());
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(in_time(waited.unwrap()), "HTTP/1.1: {waited:?}");

    // HTTP/2: HEADERS without END_STREAM, one DATA frame, then nothing.
    let mut h2 = h2_open(&server, &ca);
    h2.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    h2_post_head(&mut h2);
    h2.write_all(&frame(DATA, 0, 1, b"{")).unwrap();
    let mut waited = None;
    let body = h2_answer(&mut h2, || waited = Some(started.elapsed()));
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("before the request deadline"), "{body}");
    assert!(in_time(waited.unwrap()), "HTTP/2: {waited:?}");
}

/// A review whose body arrives in several pieces (HTTP/1.1 writes apart in
/// time, HTTP/2 DATA frames) is answered as the same review sent at once:
/// the server keeps a one-frame body as it came and gathers any other.
#[test]
fn a_review_in_several_pieces_is_answered_as_in_one_on_both_protocols() {
    let dir = temp_dir("limits-pieces");
    let server = Gavel::start_with(&examples().join("policies"), &dir, &[]);
    let ca = std::fs::read_to_string(&server.ca).unwrap();
    let body = std::fs::read(review("pod-violating.json")).unwrap();
    let pieces: Vec<&[u8]> = body.chunks(body.len() / 3 + 1).collect();
    assert_eq!(pieces.len(), 3);

    let mut whole = h1_open(&server, &ca);
    let (status, at_once) = whole.send("POST", "/validate", &body).unwrap();
    assert_eq!(status, 200);
    assert!(at_once.contains(r#""allowed":false"#), "{at_once}");

    // HTTP/1.1: the head and each piece written apart.
    let mut h1 = h1_open(&server, &ca);
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    h1.stream.write_all(head.as_bytes()).unwrap();
    for piece in &pieces {
        h1.stream.write_all(piece).unwrap();
        h1.stream.flush().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let in_pieces = loop {
        let n = h1.stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed without an answer");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).to_string();
        if let Some((_, body)) = text.split_once("\r\n\r\n")
            && body.len() >= at_once.len()
        {
            break body.to_string();
        }
    };
    assert_eq!(in_pieces, at_once, "HTTP/1.1");

    // HTTP/2: HEADERS, then a DATA frame per piece, the last ending the
    // stream.
    let mut h2 = h2_open(&server, &ca);
    h2.sock
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    h2_post_head(&mut h2);
    for (i, piece) in pieces.iter().enumerate() {
        let end = if i + 1 == pieces.len() { END_STREAM } else { 0 };
        h2.write_all(&frame(DATA, end, 1, piece)).unwrap();
        h2.flush().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = h2_answer(&mut h2, || {});
    assert_eq!(String::from_utf8_lossy(&answer), at_once, "HTTP/2");
}
