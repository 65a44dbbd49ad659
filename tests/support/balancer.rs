//! A TCP load balancer on loopback, standing in for the Service in front of
//! gavel's replicas (or for the network between gavel and the API server,
//! which a test can cut): each connection goes to the next backend that accepts
//! it (round robin), TLS passes through untouched. A backend that refuses
//! (stopped, restarting) is skipped, as kube-proxy skips endpoints that are
//! not ready.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Balancer {
    pub port: u16,
    backends: Arc<Mutex<Vec<u16>>>,
    /// Both ends of every relayed connection, to cut them all at once.
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Balancer {
    pub fn start(backends: Vec<u16>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let backends = Arc::new(Mutex::new(backends));
        let shared = backends.clone();
        let live: Arc<Mutex<Vec<TcpStream>>> = Default::default();
        let tracked = live.clone();
        let next = AtomicUsize::new(0);
        // The accept loop lives as long as the test binary.
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let ports = shared.lock().unwrap().clone();
                let first = next.fetch_add(1, Ordering::Relaxed);
                let upstream = (0..ports.len()).find_map(|i| {
                    let port = ports[(first + i) % ports.len()];
                    TcpStream::connect_timeout(
                        &([127, 0, 0, 1], port).into(),
                        Duration::from_secs(1),
                    )
                    .ok()
                });
                if let Some(upstream) = upstream {
                    let mut tracked = tracked.lock().unwrap();
                    // Forget connections that have ended.
                    tracked.retain(|s| s.peer_addr().is_ok());
                    tracked.extend(
                        [client.try_clone(), upstream.try_clone()]
                            .into_iter()
                            .flatten(),
                    );
                    relay(client, upstream);
                }
            }
        });
        Balancer {
            port,
            backends,
            live,
        }
    }

    /// A network partition: no backend for new connections, and every
    /// relayed connection cut (both sides see it end).
    pub fn sever(&self) {
        self.set_backends(vec![]);
        for stream in self.live.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Replaces the backends (a replica restarted on a new port).
    pub fn set_backends(&self, ports: Vec<u16>) {
        *self.backends.lock().unwrap() = ports;
    }
}

fn relay(client: TcpStream, upstream: TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    std::thread::spawn(move || copy(client, upstream));
    std::thread::spawn(move || copy(u2, c2));
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
