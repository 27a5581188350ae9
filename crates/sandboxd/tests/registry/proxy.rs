//! A TCP proxy on loopback in front of a registry, which can hold a download after a
//! given number of bytes (so a test acts mid-transfer without timing anything) and cut
//! every connection it carries, as a registry that goes away does.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Default)]
struct State {
    /// Bytes passed from the registry to clients.
    forwarded: AtomicU64,
    /// Hold answers once this many bytes passed (`u64::MAX`: never).
    hold_after: AtomicU64,
    /// Whether an answer is being held, and the condition that says it changed.
    held: Mutex<bool>,
    changed: Condvar,
    /// Set by [`Proxy::cut`]: held answers end, their connections shut.
    cut: AtomicBool,
    /// Every socket carried, both sides, to shut down on a cut.
    sockets: Mutex<Vec<TcpStream>>,
    closed: AtomicBool,
}

/// The proxy: listens on `port`, forwards to the upstream port it was made with.
pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State::default());
        state.hold_after.store(u64::MAX, Ordering::SeqCst);
        let s = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.closed.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue; // the registry is gone: the client sees its connection end
                };
                if let Ok(mut all) = s.sockets.lock() {
                    all.extend(
                        [client.try_clone(), server.try_clone()]
                            .into_iter()
                            .flatten(),
                    );
                }
                let (c2, s2) = (client.try_clone(), server.try_clone());
                let (Ok(c2), Ok(s2)) = (c2, s2) else { continue };
                std::thread::spawn(move || copy_up(client, server));
                let s = s.clone();
                std::thread::spawn(move || copy_down(&s, s2, c2));
            }
        });
        Proxy { port, state }
    }

    /// Holds registry answers once `bytes` more have passed.
    pub fn hold_after(&self, bytes: u64) {
        let now = self.state.forwarded.load(Ordering::SeqCst);
        self.state.hold_after.store(now + bytes, Ordering::SeqCst);
    }

    /// Bytes passed from the registry so far.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// Waits until an answer is held; `false` if `still_going` says to stop waiting.
    pub fn wait_held(&self, mut still_going: impl FnMut() -> bool) -> bool {
        let mut held = self.state.held.lock().expect("lock");
        while !*held {
            if !still_going() {
                return false;
            }
            held = self
                .state
                .changed
                .wait_timeout(held, Duration::from_millis(50))
                .expect("lock")
                .0;
        }
        true
    }

    /// Shuts every carried connection down (held answers end there) and passes
    /// everything from now on.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        self.state.hold_after.store(u64::MAX, Ordering::SeqCst);
        for s in self.state.sockets.lock().expect("lock").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        *self.state.held.lock().expect("lock") = false;
        self.state.changed.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::SeqCst);
        self.cut();
        // Wakes the accept loop so that it sees `closed` and ends.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn copy_up(mut client: TcpStream, mut server: TcpStream) {
    let _ = std::io::copy(&mut client, &mut server);
    let _ = server.shutdown(Shutdown::Write);
}

fn copy_down(state: &State, mut server: TcpStream, mut client: TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let passed = state.forwarded.load(Ordering::SeqCst);
        if passed + n as u64 > state.hold_after.load(Ordering::SeqCst) {
            let mut held = state.held.lock().expect("lock");
            *held = true;
            state.changed.notify_all();
            while !state.cut.load(Ordering::SeqCst) {
                held = state
                    .changed
                    .wait_timeout(held, Duration::from_millis(50))
                    .expect("lock")
                    .0;
            }
            drop(held);
            break;
        }
        if client.write_all(&buf[..n]).is_err() {
            break;
        }
        state.forwarded.fetch_add(n as u64, Ordering::SeqCst);
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}
