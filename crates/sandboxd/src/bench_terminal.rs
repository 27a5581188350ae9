//! `sandboxd bench --terminal-only`: terminal throughput. A `cat` of 32 MiB of base64
//! on a raw-mode PTY in a sandbox, read through Runzivo's terminal WebSocket (the web
//! console's terminal uses the same bridge) by a client reading as fast as it can,
//! paired with the same `cat` onto a PTY on the host read directly.

use crate::bench_base::{Paired, PairedSamples};
use crate::bench_http::{Api, Serve};
use anyhow::{bail, ensure, Context, Result};
use futures_util::{SinkExt, StreamExt};
use std::io::Read;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// Random bytes behind the base64 that is printed (32 MiB of text with its newlines).
const RAW: usize = 24 * 1024 * 1024;
const BEGIN: &[u8] = b"--BEGIN--";
const DONE: &[u8] = b"--DONE--";
/// Runzivo's sandboxes of the default workspace (the master key's).
const SANDBOXES: &str = "/v1/customer/tenants/default/sandboxes";
/// The file the sandbox prints (and the host baseline's copy, under the temp dir).
const FILE: &str = "/tmp/bench-terminal";

pub fn main(samples: usize) -> Result<()> {
    let (f, bytes) = measure(samples)?;
    let rate = |d: Duration| bytes as f64 / d.as_secs_f64().max(1e-9) / (1024.0 * 1024.0);
    println!(
        "{:<58} {:>8.1}MiB/s {:>18}",
        format!("terminal: cat of {} MiB over the WebSocket", bytes >> 20),
        rate(f.median),
        format!(
            "{:.2}x host PTY* {:.1}MiB/s",
            f.median.as_secs_f64() / f.baseline.as_secs_f64().max(1e-9),
            rate(f.baseline)
        )
    );
    Ok(())
}

/// Times `samples` terminal `cat`s, each after a host PTY baseline; returns the paired
/// medians and the bytes each carried.
pub fn measure(samples: usize) -> Result<(Paired, usize)> {
    let short = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let dir = std::env::temp_dir().join(format!("sandboxd-bench-{short}"));
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let mut server = Serve::start(&dir, &key, "none", &[])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let host_file = dir.join("host-copy");
    let figures = rt.block_on(async {
        let mut api = Api::connect(server.addr, &key).await?;
        let (status, v) = api.call("POST", SANDBOXES, None).await?;
        ensure!(status == 201, "create: {status} {v}");
        let id = v["id"].as_str().context("create: no id")?.to_owned();
        let figures = async {
            let mut all = PairedSamples::default();
            let mut bytes = 0;
            for _ in 0..samples.max(1) {
                let (t, n) = terminal_cat(server.addr, &key, &id).await?;
                if bytes == 0 {
                    write_host_copy(&host_file)?;
                }
                bytes = n;
                all.push(t, host_pty_cat(&host_file, n)?);
            }
            Ok::<_, anyhow::Error>((all.medians(), bytes))
        }
        .await;
        // The keep-alive connection idled through the samples (the server may have
        // closed it).
        api.reconnect(server.addr).await?;
        let path = format!("{SANDBOXES}/{id}");
        let (status, v) = api.call("DELETE", &path, None).await?;
        // Answered once the sandbox is destroyed.
        ensure!(
            status == 200 && v["status"] == "deleted",
            "delete: {status} {v}"
        );
        figures
    });
    server.stop();
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench: cannot remove {}: {e}", dir.display());
    }
    figures
}

/// One terminal (default workspace, master key) printing [`FILE`] anew: the time from
/// the read holding [`BEGIN`] to the one holding [`DONE`], and the bytes between.
async fn terminal_cat(
    addr: std::net::SocketAddr,
    key: &str,
    id: &str,
) -> Result<(Duration, usize)> {
    let base = format!("{SANDBOXES}/{id}/terminal");
    let mut api = Api::connect(addr, key).await?;
    let (status, v) = api.call("POST", &format!("{base}/tickets"), None).await?;
    ensure!(status == 201, "terminal ticket: {status} {v}");
    let ticket = v["ticket"].as_str().context("no ticket")?;
    let url = format!("ws://{addr}{base}?ticket={ticket}&cols=200&rows=50");
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
    let script = format!(
        "stty raw -echo; head -c {RAW} /dev/urandom | base64 > {FILE}; \
         printf -- '--%s--' BEGIN; cat {FILE}; printf -- '--%s--' DONE; exit\n"
    );
    ws.send(Message::Binary(script.into())).await?;
    let mut seen = Vec::new();
    let (mut start, mut scanned, mut t0) = (None, 0usize, Instant::now());
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), ws.next())
            .await
            .context("the terminal went quiet for 60 s")?;
        match msg {
            Some(Ok(Message::Binary(d))) => seen.extend_from_slice(&d),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => bail!("the terminal closed before {DONE:?}"),
        }
        let from = scanned.saturating_sub(BEGIN.len());
        scanned = seen.len();
        if start.is_none() {
            match find(&seen[from..], BEGIN) {
                Some(i) => {
                    start = Some(from + i + BEGIN.len());
                    t0 = Instant::now();
                }
                None => continue,
            }
        }
        let begin = start.unwrap_or_default();
        let from = from.max(begin);
        if let Some(i) = find(&seen[from..], DONE) {
            let _ = ws.close(None).await;
            return Ok((t0.elapsed(), from + i - begin));
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The host's file of the same make as the sandbox's [`FILE`].
fn write_host_copy(to: &std::path::Path) -> Result<()> {
    let made = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("head -c {RAW} /dev/urandom | base64 > \"$1\""))
        .arg("sh")
        .arg(to)
        .status()?;
    ensure!(made.success(), "making {}: {made}", to.display());
    Ok(())
}

/// `cat FILE` onto a raw-mode PTY on the host, its master read in 64 KiB reads until
/// `len` bytes came.
fn host_pty_cat(file: &std::path::Path, len: usize) -> Result<Duration> {
    use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
    let pty = nix::pty::openpty(None, None)?;
    let mut attrs = tcgetattr(pty.slave.as_fd())?;
    cfmakeraw(&mut attrs);
    tcsetattr(pty.slave.as_fd(), SetArg::TCSANOW, &attrs)?;
    let mut master = std::fs::File::from(pty.master);
    let t = Instant::now();
    let mut child = Command::new("cat")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::from(pty.slave))
        .spawn()?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < len {
        match master.read(&mut buf)? {
            0 => break,
            n => got += n,
        }
    }
    let elapsed = t.elapsed();
    child.wait()?;
    ensure!(got >= len, "the host PTY gave {got} of {len} bytes");
    Ok(elapsed)
}
