//! A file upload whose client breaks off is the client's doing, not the agent's: a body
//! cut short gets the dialect's 400 (when the client still reads), nothing is written,
//! the sandbox goes on serving, and neither `sandboxd_agent_connection_errors_total` nor
//! the server's warnings count it (an operator's alert on agent errors fired on clients
//! that went away: found by an outside soak audit).

mod exposition;
mod serve_bin;

use exposition::{scrape, value, MASTER};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// The head of a `PUT …/files` of `len` bytes at `path` into sandbox `id`, its request
/// id `request`.
fn upload_head(id: &str, path: &str, len: usize, request: &str) -> String {
    format!(
        "PUT /v2/sandboxes/{id}/files?path={path} HTTP/1.1\r\nHost: sandboxd\r\n\
         Authorization: Bearer {MASTER}\r\nX-Request-Id: {request}\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n"
    )
}

#[test]
fn an_upload_the_client_breaks_off_is_no_agent_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, metrics) = exposition::start(dir.path(), &[]);
    let reaper = exposition::Reaper::new(&server);
    let id = reaper.keep(server.create_sandbox(
        MASTER,
        &json!({"name": "uploads", "vcpu": 1, "memoryMb": 256}),
    ));
    let agent_errors = || {
        value(
            &scrape(metrics).1,
            "sandboxd_agent_connection_errors_total",
            &[],
        )
    };
    let before = agent_errors();

    // A body shorter than it said, the client's side then closed for writing: it still
    // reads, and gets a 400 in the dialect's shape.
    let mut short = TcpStream::connect(server.addr).expect("connect");
    short
        .write_all(upload_head(&id, "/tmp/short.bin", 400_000, "upload-short").as_bytes())
        .expect("head");
    short.write_all(&[7u8; 100_000]).expect("part of the body");
    short.shutdown(Shutdown::Write).expect("half close");
    short
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut answer = String::new();
    let _ = short.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("\"errors\":[{\"code\""),
        "not the dialect's shape: {answer}"
    );

    // Three clients that reset their connections mid-body.
    for n in 0..3 {
        let reset = TcpStream::connect(server.addr).expect("connect");
        (&reset)
            .write_all(
                upload_head(
                    &id,
                    &format!("/tmp/reset{n}.bin"),
                    400_000,
                    &format!("upload-reset{n}"),
                )
                .as_bytes(),
            )
            .expect("head");
        (&reset)
            .write_all(&[7u8; 200_000])
            .expect("part of the body");
        std::thread::sleep(Duration::from_millis(200));
        nix::sys::socket::setsockopt(
            &reset,
            nix::sys::socket::sockopt::Linger,
            &libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        )
        .expect("linger 0");
        drop(reset);
    }
    // Each upload's request line is logged once the server has handled it.
    for n in 0..3 {
        let request = format!("upload-reset{n}");
        server.wait_for_line(|l| l.contains("sandboxd::request") && l.contains(&request));
    }

    let (code, out) = server.exec(MASTER, &id, &["/bin/sh", "-c", "ls -a /tmp; echo alive"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("alive"), "{out}");
    for left in [
        "short.bin",
        "reset0.bin",
        "reset1.bin",
        "reset2.bin",
        ".sandboxd-upload-",
    ] {
        assert!(!out.contains(left), "a cut upload left {left}: {out}");
    }
    assert_eq!(
        agent_errors(),
        before,
        "client aborts counted as agent errors"
    );
    let warned: Vec<String> = server
        .log_lines()
        .into_iter()
        .filter(|l| l.contains("answered badly"))
        .collect();
    assert!(
        warned.is_empty(),
        "client aborts logged as agent faults: {warned:?}"
    );
}
