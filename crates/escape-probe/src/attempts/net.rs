//! The host's loopback services, another sandbox's network and its agent socket.

use crate::report::{errno_name, Attempt};
use crate::targets::Targets;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub fn attempts(t: &Targets) -> Vec<Attempt> {
    let mut out = Vec::new();
    if let Some(port) = t.port {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        out.push(Attempt::from_io(
            format!("connect to the host's listener on 127.0.0.1:{port}"),
            TcpStream::connect_timeout(&addr, Duration::from_secs(3)),
        ));
    }
    out.push(other_sandbox_network());
    if let Some(socket) = &t.other_socket {
        out.push(Attempt::from_io(
            format!("stat another sandbox's agent socket {}", socket.display()),
            std::fs::metadata(socket),
        ));
        out.push(Attempt::from_io(
            format!(
                "connect to another sandbox's agent socket {}",
                socket.display()
            ),
            std::os::unix::net::UnixStream::connect(socket),
        ));
    }
    out
}

/// With only a loopback interface there is no route to another sandbox at all.
fn other_sandbox_network() -> Attempt {
    let what = "reach another sandbox over the network";
    let links: Vec<String> = match std::fs::read_dir("/sys/class/net") {
        Ok(d) => d
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect(),
        Err(e) => {
            return Attempt::refused(what, format!("skipped: /sys/class/net {}", errno_name(e)))
        }
    };
    if links.iter().all(|l| l == "lo") {
        return Attempt::refused(what, "skipped: the sandbox has only loopback");
    }
    // With real interfaces the network tests own this check (they know the peers).
    Attempt::refused(
        what,
        format!("skipped: interfaces {links:?} are checked by the network tests"),
    )
}
