//! `sandboxd bench`, through HTTP: starts a real `sandboxd serve` child on a free
//! loopback port (temporary data dir, random master key) and times the Inngest API
//! over one keep-alive connection.

use crate::bench_base::{self, median, Paired, PairedSamples};
use anyhow::{bail, ensure, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Pause before each spaced create: a warm init refills in about 20-30 ms here.
pub const CREATE_SPACING: Duration = Duration::from_millis(150);

/// Medians measured through `sandboxd serve`.
pub struct HttpFigures {
    /// POST /v2/sandboxes (answered RUNNING) then POST …/exec `/bin/true` answered,
    /// creates [`CREATE_SPACING`] apart, each destroyed (untimed) before an `unshare`
    /// baseline sample and the next.
    pub create_first_exec: Paired,
    /// The same, creates back to back (faster than warm inits refill).
    pub create_first_exec_burst: Duration,
    /// Another such burst once the pool grew for the first and reported full.
    pub create_first_exec_burst_again: Duration,
    /// POST …/exec `/bin/true` on a running sandbox, in turn with fork+exec samples.
    pub exec_round_trip: Paired,
    /// From the server's spawn until it reported its warm pool full (after one create).
    pub pool_filled: Duration,
    /// DELETE of each spaced create's sandbox (its first exec run) until TERMINATED.
    pub destroy: Duration,
    /// The CPU time of the server's threads over each such destroy.
    pub destroy_cpu: Duration,
}

/// Starts a server on a fresh temporary data directory, measures, destroys what it made,
/// stops the server and removes the directory.
pub fn measure(samples: usize, network: &str) -> Result<HttpFigures> {
    let short = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let dir = std::env::temp_dir().join(format!("sandboxd-bench-{short}"));
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let mut server = Serve::start(&dir, &key, network, &[])?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let figures = rt.block_on(async {
        let mut api = Api::connect(server.addr, &key).await?;
        let figures = api.measure(samples, &server).await;
        let cleanup = api.destroy_all().await;
        let figures = figures?;
        cleanup.map(|()| figures)
    });
    server.stop();
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench: cannot remove {}: {e}", dir.display());
    }
    figures
}

/// `sandboxd bench --http-only`: the HTTP rows of a loopback and an egress server.
pub fn main(samples: usize) -> Result<()> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    for network in ["none", "egress"] {
        let f = measure(samples, network)?;
        let row = |name: &str, value: Duration, ratio: String| {
            println!(
                "HTTP ({network}): {name:<44} {:>10.3}ms {ratio:>22}",
                ms(value)
            );
        };
        row(
            "pool full after the server's spawn",
            f.pool_filled,
            String::new(),
        );
        let c = f.create_first_exec;
        row(
            "create -> first exec (spaced)",
            c.median,
            format!(
                "{:.2}x unshare* {:.3}ms",
                ratio(c.median, c.baseline),
                ms(c.baseline)
            ),
        );
        row(
            "create -> first exec (burst)",
            f.create_first_exec_burst,
            String::new(),
        );
        row(
            "create -> first exec (2nd burst)",
            f.create_first_exec_burst_again,
            String::new(),
        );
        row("destroy (spaced)", f.destroy, String::new());
        row("  ... the server's CPU time", f.destroy_cpu, String::new());
        let e = f.exec_round_trip;
        row(
            "exec round trip",
            e.median,
            format!(
                "{:.2}x fork+exec* {:.3}ms",
                ratio(e.median, e.baseline),
                ms(e.baseline)
            ),
        );
    }
    Ok(())
}

/// What `n` concurrent create → exec → destroy sequences through HTTP met.
pub struct LoadFigures {
    pub sequences: usize,
    /// Sequences that failed anywhere (an error status or a broken connection).
    pub failures: usize,
    /// Each create answered RUNNING, sorted.
    pub creates: Vec<Duration>,
}

impl LoadFigures {
    /// The `q` quantile (0..=1) of the create times.
    pub fn create_quantile(&self, q: f64) -> Duration {
        let last = self.creates.len().saturating_sub(1);
        self.creates
            .get((last as f64 * q).round() as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// Runs `n` create → exec `/bin/true` → destroy sequences at once, each on its own
/// connection, against a server whose capacity and workspace quota admit them all (with
/// no network, like the spaced rows' loopback case).
pub fn load(n: usize) -> Result<LoadFigures> {
    let short = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let dir = std::env::temp_dir().join(format!("sandboxd-load-{short}"));
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let room = (n * 2).to_string();
    let env = [
        ("SANDBOXD_MAX_SANDBOXES", room.as_str()),
        ("SANDBOXD_MAX_VCPU_TOTAL", room.as_str()),
        ("SANDBOXD_MAX_MEMORY_MIB_TOTAL", "10000000"),
        ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", room.as_str()),
        ("SANDBOXD_WORKSPACE_QUOTA_VCPU", room.as_str()),
        ("SANDBOXD_WORKSPACE_QUOTA_MEMORY_MB", "10000000"),
        ("SANDBOXD_CREATE_RATE_BURST", room.as_str()),
    ];
    let mut server = Serve::start(&dir, &key, "none", &env)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let figures = rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (addr, key) = (server.addr, key.clone());
                tokio::spawn(async move {
                    let mut api = Api::connect(addr, &key).await?;
                    let t = Instant::now();
                    let id = api.create().await?;
                    let create = t.elapsed();
                    api.exec_true(&id).await?;
                    api.destroy(&id).await?;
                    Ok::<_, anyhow::Error>(create)
                })
            })
            .collect();
        let mut figures = LoadFigures {
            sequences: n,
            failures: 0,
            creates: Vec::with_capacity(n),
        };
        for task in tasks {
            match task.await {
                Ok(Ok(create)) => figures.creates.push(create),
                Ok(Err(e)) => {
                    figures.failures += 1;
                    eprintln!("bench: a load sequence failed: {e:#}");
                }
                Err(e) => {
                    figures.failures += 1;
                    eprintln!("bench: a load sequence panicked: {e}");
                }
            }
        }
        figures.creates.sort();
        // Whatever a failed sequence left behind.
        if let Ok(mut api) = Api::connect(server.addr, &key).await {
            let _ = api.destroy_listed().await;
        }
        figures
    });
    server.stop();
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("bench: cannot remove {}: {e}", dir.display());
    }
    Ok(figures)
}

/// The `sandboxd serve` child.
pub(crate) struct Serve {
    child: Child,
    pub(crate) addr: SocketAddr,
    /// Its metrics listener (loopback, port 0).
    pub(crate) metrics: SocketAddr,
    /// When it was spawned.
    pub(crate) started: Instant,
}

impl Serve {
    /// The CPU time of the server's process so far, every thread's (those that ended
    /// too), not its children's: its CPU-time clock (`clock_getcpuclockid`), in
    /// nanoseconds. Zero when it cannot be read.
    pub(crate) fn cpu_time(&self) -> Duration {
        let Ok(pid) = libc::pid_t::try_from(self.child.id()) else {
            return Duration::ZERO;
        };
        let mut clock: libc::clockid_t = 0;
        // SAFETY: clock_getcpuclockid(3) writes one clockid_t we own.
        if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
            return Duration::ZERO;
        }
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime(2) writes one timespec we own.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            return Duration::ZERO;
        }
        Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    }
}

/// How long [`Serve::pool_full`] waits at most.
const POOL_FULL_WAIT: Duration = Duration::from_secs(300);

impl Serve {
    pub(crate) fn start(
        dir: &Path,
        key: &str,
        network: &str,
        env: &[(&str, &str)],
    ) -> Result<Serve> {
        let exe = std::env::current_exe().context("locating the sandboxd binary")?;
        let started = Instant::now();
        let mut child = Command::new(exe)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .env("SANDBOXD_MASTER_KEY", key)
            .env("SANDBOXD_NETWORK", network)
            // Hundreds of idle sandboxes with the default 10 GiB disk: promise far more
            // disk than the host has (they write next to nothing).
            .env("SANDBOXD_DISK_OVERCOMMIT", "1000")
            .env("SANDBOXD_METRICS_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", serve_log_filter())
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting sandboxd serve")?;
        let stderr = child.stderr.take().context("serve stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let (mut addr, mut metrics) = (None, None);
        let (addr, metrics) = loop {
            if let (Some(a), Some(m)) = (addr, metrics) {
                break (a, m);
            }
            let Some(line) = lines.next().transpose()? else {
                let status = child.wait()?;
                bail!("sandboxd serve exited before listening: {status}");
            };
            let found = line.split("listening on ").nth(1);
            if let Some(a) = found.and_then(|r| r.split_whitespace().next()) {
                addr = Some(a.parse().context("parsing the listening address")?);
            }
            let found = line.split("metrics at http://").nth(1);
            if let Some(m) = found.and_then(|r| r.split('/').next()) {
                metrics = Some(m.parse().context("parsing the metrics address")?);
            }
        };
        // Keep draining its log so the server never blocks on a full pipe.
        // With `SANDBOXD_BENCH_SERVE_LOG` set, its log goes to our stderr.
        let echo = std::env::var_os("SANDBOXD_BENCH_SERVE_LOG").is_some();
        std::thread::spawn(move || {
            lines.map_while(Result::ok).for_each(|l| {
                if echo {
                    eprintln!("{l}");
                }
            })
        });
        Ok(Serve {
            child,
            addr,
            metrics,
            started,
        })
    }

    /// Waits until the server reports its container warm pool full through its
    /// metrics (`sandboxd_warm_pool_ready` at `sandboxd_warm_pool_target`), as an
    /// operator would see it; returns the time since the server was spawned and the
    /// pool's target.
    pub(crate) async fn pool_full(&self) -> Result<(Duration, u64)> {
        loop {
            let (ready, target) = warm_pool(self.metrics).await?;
            if target > 0 && ready >= target {
                return Ok((self.started.elapsed(), target));
            }
            ensure!(
                self.started.elapsed() < POOL_FULL_WAIT,
                "the warm pool is not full after {POOL_FULL_WAIT:?}: {ready} of {target}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM and wait: a graceful stop.
    pub(crate) fn stop(&mut self) {
        // SAFETY: kill(2) on the PID of our own, not yet reaped, child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The container warm pool's `(ready, target)` from the metrics at `addr`.
/// The server's log filter: `SANDBOXD_BENCH_SERVE_LOG` (else warnings), with
/// `sandboxd_server=info` unless it names that target itself: those lines give the
/// addresses the bench waits for (a filter without them left the bench waiting for ever).
fn serve_log_filter() -> String {
    let asked = std::env::var("SANDBOXD_BENCH_SERVE_LOG").unwrap_or_else(|_| "warn".into());
    match asked.contains("sandboxd_server") {
        true => asked,
        false => format!("{asked},sandboxd_server=info"),
    }
}

async fn warm_pool(addr: SocketAddr) -> Result<(u64, u64)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    let figure = |name: &str| {
        let prefix = format!("{name}{{tier=\"container\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .with_context(|| format!("no {name} in the server's metrics"))
    };
    Ok((
        figure("sandboxd_warm_pool_ready")?,
        figure("sandboxd_warm_pool_target")?,
    ))
}

/// One keep-alive HTTP/1.1 connection to the server, with the key.
pub(crate) struct Api {
    sender: SendRequest<Full<Bytes>>,
    auth: String,
    made: Vec<String>,
}

impl Api {
    pub(crate) async fn connect(addr: SocketAddr, key: &str) -> Result<Api> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Api {
            sender,
            auth: format!("Bearer {key}"),
            made: Vec::new(),
        })
    }

    /// A fresh connection to `addr` (a keep-alive connection idle for longer than the
    /// server's idle timeout, 310 s by default, is closed by the server).
    pub(crate) async fn reconnect(&mut self, addr: SocketAddr) -> Result<()> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        self.sender = sender;
        Ok(())
    }

    pub(crate) async fn call(
        &mut self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value)> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "bench")
            .header("authorization", &self.auth);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        self.sender.ready().await?;
        let response = self
            .sender
            .send_request(req.body(Full::new(Bytes::from(body)))?)
            .await?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    pub(crate) async fn create(&mut self) -> Result<String> {
        self.create_from(None).await
    }

    /// Creates a sandbox of stored image `image` (the `image` extension), or of
    /// `default`; answered RUNNING.
    pub(crate) async fn create_from(&mut self, image: Option<&str>) -> Result<String> {
        let name = format!("bench-{}", uuid::Uuid::new_v4().simple());
        let mut body = json!({"name": name, "vcpu": 1, "memoryMb": 256});
        if let Some(image) = image {
            body["image"] = json!(image);
        }
        let (status, v) = self.call("POST", "/v2/sandboxes", Some(body)).await?;
        ensure!(
            status == 201 && v["data"]["status"] == "RUNNING",
            "create: {status} {v}"
        );
        let id = v["data"]["id"]
            .as_str()
            .context("create: no id")?
            .to_owned();
        self.made.push(id.clone());
        Ok(id)
    }

    pub(crate) async fn exec_true(&mut self, id: &str) -> Result<()> {
        let body = json!({"command": ["/bin/true"]});
        let path = format!("/v2/sandboxes/{id}/exec");
        let (status, v) = self.call("POST", &path, Some(body)).await?;
        ensure!(
            status == 200 && v["data"]["exitCode"] == 0,
            "exec: {status} {v}"
        );
        Ok(())
    }

    async fn measure(&mut self, n: usize, server: &Serve) -> Result<HttpFigures> {
        let warm = self.create().await?; // imports the image once
        self.exec_true(&warm).await?;
        // The warm path is measured on a server at rest: once its pool (grown to
        // `warm_inits_start` at its start) reports full, not while it fills beside it.
        let (filled, _) = server.pool_full().await?;
        self.reconnect(server.addr).await?;
        // Creates spaced out (untimed) so that each finds the server's warm inits
        // refilled, then the same back to back, where most start cold.
        // Each is destroyed before the next baseline sample, so that the host's mount
        // table (which `unshare` copies) holds no more than the server's warm inits.
        let mut creates = PairedSamples::default();
        let (mut destroys, mut destroys_cpu) = (Vec::new(), Vec::new());
        for _ in 0..n {
            tokio::time::sleep(CREATE_SPACING).await;
            let base = bench_base::unshare()?;
            let t = Instant::now();
            let id = self.create().await?;
            self.exec_true(&id).await?;
            creates.push(t.elapsed(), base);
            let (t, cpu) = (Instant::now(), server.cpu_time());
            self.destroy(&id).await?;
            destroys.push(t.elapsed());
            destroys_cpu.push(server.cpu_time().saturating_sub(cpu));
        }
        let burst = self.burst(n).await?;
        // The first burst outran the pool, which grew by one for each create it missed
        // (up to the server's warm_inits_max); once it reports full it meets the next.
        server.pool_full().await?;
        self.reconnect(server.addr).await?;
        let burst_again = self.burst(n).await?;
        // Exec round trips on a server at rest again (the pool refilled after the
        // bursts), like the spaced creates.
        server.pool_full().await?;
        self.reconnect(server.addr).await?;
        let mut execs = PairedSamples::default();
        for _ in 0..n * 4 {
            let base = bench_base::fork_exec()?;
            let t = Instant::now();
            self.exec_true(&warm).await?;
            execs.push(t.elapsed(), base);
        }
        Ok(HttpFigures {
            create_first_exec: creates.medians(),
            create_first_exec_burst: median(burst),
            create_first_exec_burst_again: median(burst_again),
            exec_round_trip: execs.medians(),
            pool_filled: filled,
            destroy: median(destroys),
            destroy_cpu: median(destroys_cpu),
        })
    }

    /// Times `n` creates (each with its first exec) back to back, then destroys them
    /// (untimed).
    async fn burst(&mut self, n: usize) -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let id = self.create().await?;
            self.exec_true(&id).await?;
            times.push(t.elapsed());
            ids.push(id);
        }
        for id in ids {
            self.destroy(&id).await?;
        }
        Ok(times)
    }

    /// Destroys every active sandbox the server lists (made here or not).
    async fn destroy_listed(&mut self) -> Result<()> {
        let (_, v) = self.call("GET", "/v2/sandboxes?limit=250", None).await?;
        let ids: Vec<String> = v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["status"] != "TERMINATED")
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect();
        for id in ids {
            self.destroy(&id).await?;
        }
        Ok(())
    }

    /// Destroys every sandbox made, waiting until each is TERMINATED.
    pub(crate) async fn destroy_all(&mut self) -> Result<()> {
        for id in std::mem::take(&mut self.made) {
            self.destroy(&id).await?;
        }
        Ok(())
    }

    /// Destroys sandbox `id` (made here), waiting until it is TERMINATED.
    pub(crate) async fn destroy(&mut self, id: &str) -> Result<()> {
        let path = format!("/v2/sandboxes/{id}");
        let (status, v) = self.call("DELETE", &path, None).await?;
        ensure!(matches!(status, 202 | 204), "destroy: {status} {v}");
        while self.call("GET", &path, None).await?.1["data"]["status"] != "TERMINATED" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.made.retain(|m| m != id);
        Ok(())
    }
}

#[cfg(test)]
mod cpu_tests {
    /// A process's CPU-time clock counts what its threads that ended used.
    #[test]
    fn the_clock_counts_ended_threads() {
        let read = |clock: libc::clockid_t| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: as in `Serve::cpu_time`.
            assert_eq!(unsafe { libc::clock_gettime(clock, &mut ts) }, 0);
            std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        };
        let own = || {
            let mut clock: libc::clockid_t = 0;
            // SAFETY: as in `Serve::cpu_time`, on this process.
            assert_eq!(unsafe { libc::clock_getcpuclockid(0, &mut clock) }, 0);
            read(clock)
        };
        let before = own();
        // Spins until it has used 30 ms of CPU by its own clock (not of wall time, which
        // a loaded machine may give it little of), then ends.
        let spent = std::thread::spawn(move || {
            let spent = || read(libc::CLOCK_THREAD_CPUTIME_ID);
            while spent() < std::time::Duration::from_millis(30) {
                std::hint::spin_loop();
            }
            spent()
        })
        .join()
        .expect("spinner");
        assert!(
            own() - before >= spent,
            "the ended thread's {spent:?} are counted"
        );
    }
}
