//! `sandboxd sandbox shell ID`: attaches this terminal to a sandbox's PTY through the
//! Runzivo terminal WebSocket (ticket bought with the key; raw mode; SIGWINCH resizes).

use anyhow::{bail, Context, Result};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use nix::sys::termios::{self, SetArg, Termios};
use std::os::fd::AsFd;
use std::process::ExitCode;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

#[derive(Args)]
pub struct ShellArgs {
    /// Sandbox ID (`sbx_…`).
    pub id: String,
    /// Server base URL (http only).
    #[arg(long, env = "SANDBOXD_URL", default_value = "http://127.0.0.1:7420")]
    pub url: String,
    /// API key with `sandboxes:write` in the tenant.
    #[arg(long, env = "SANDBOXD_KEY")]
    pub key: String,
    /// Runzivo tenant ID of the sandbox's workspace.
    #[arg(long, env = "SANDBOXD_TENANT", default_value = "default")]
    pub tenant: String,
}

/// Restores the terminal's mode when dropped.
struct RawMode(Termios);

impl RawMode {
    fn enter() -> Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).context("stdin is not a terminal")?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).context("raw mode")?;
        Ok(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.0);
    }
}

/// Columns and rows of this terminal (80×24 when unknown).
fn size() -> (u16, u16) {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize we pass.
    let ok = unsafe { libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) } == 0;
    match ok && ws.ws_col > 0 && ws.ws_row > 0 {
        true => (ws.ws_col, ws.ws_row),
        false => (80, 24),
    }
}

/// Runs the session; exits with the shell's exit code.
pub async fn run(args: ShellArgs) -> Result<ExitCode> {
    let code = attach(args).await?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

async fn ticket(args: &ShellArgs, base: &str) -> Result<String> {
    let host = base.split('/').next().unwrap_or(base);
    let tcp = tokio::net::TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to {host}"))?;
    let (mut tx, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    let path = format!(
        "/v1/customer/tenants/{}/sandboxes/{}/terminal/tickets",
        args.tenant, args.id
    );
    let req = hyper::Request::post(path)
        .header("host", host)
        .header("authorization", format!("Bearer {}", args.key))
        .body(http_body_util::Empty::<bytes::Bytes>::new())?;
    let resp = tx.send_request(req).await?;
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await?
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    match v["ticket"].as_str() {
        Some(t) if status.is_success() => Ok(t.to_owned()),
        _ => bail!(
            "cannot get a terminal ticket: HTTP {status} {}",
            v["error"]["code"]
        ),
    }
}

/// Stdin read on a plain thread (a blocked read there never holds up the runtime's
/// shutdown, unlike Tokio's blocking pool); the channel closes at end of input.
fn stdin_chunks() -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut std::io::stdin(), &mut buf) {
                Ok(n @ 1..) if tx.blocking_send(buf[..n].to_vec()).is_ok() => {}
                _ => return,
            }
        }
    });
    rx
}

async fn attach(args: ShellArgs) -> Result<i32> {
    let Some(base) = args.url.strip_prefix("http://") else {
        bail!("--url must be http://HOST:PORT");
    };
    let base = base.trim_end_matches('/').to_owned();
    let ticket = ticket(&args, &base).await?;
    let (cols, rows) = size();
    let url = format!(
        "ws://{base}/v1/customer/tenants/{}/sandboxes/{}/terminal?ticket={ticket}&cols={cols}&rows={rows}",
        args.tenant, args.id
    );
    let (ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .context("opening the terminal")?;
    let (mut ws_tx, mut ws_rx) = ws.split();
    let _raw = RawMode::enter()?;
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let mut stdin = stdin_chunks();
    let mut stdout = tokio::io::stdout();
    loop {
        tokio::select! {
            msg = ws_rx.next() => match msg {
                Some(Ok(Message::Binary(d))) => {
                    stdout.write_all(&d).await?;
                    stdout.flush().await?;
                }
                Some(Ok(Message::Text(t))) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                    if let Some(code) = v["exit_code"].as_i64() {
                        return Ok(code as i32);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(1),
            },
            chunk = stdin.recv() => match chunk {
                Some(bytes) => ws_tx.send(Message::Binary(bytes.into())).await?,
                None => return Ok(0),
            },
            _ = winch.recv() => {
                let (cols, rows) = size();
                let resize = serde_json::json!({"type": "resize", "cols": cols, "rows": rows});
                ws_tx.send(Message::Text(resize.to_string().into())).await?;
            }
        }
    }
}
