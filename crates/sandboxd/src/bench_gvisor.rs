//! `sandboxd bench --gvisor`: the gVisor tier's rows — create -> first exec (through the
//! runtime cold, and through HTTP with the warm pool) against `runsc do /bin/true` in
//! the same run, the exec round trip against the container tier's, and pause to disk
//! (checkpoint) and resume (restore) of a sandbox holding 64 and 512 MiB of touched
//! memory, with the image's size and the host memory its cgroup holds while on disk.

use anyhow::{Context, Result};
use sandboxd_agent_protocol::{AgentClient, ExecRequest, StartProcess};
use sandboxd_runtime::linux::gvisor::{checkpoint, GvisorRuntime};
use sandboxd_runtime::linux::DEFAULT_MAX_PTYS;
use sandboxd_runtime::{Runtime, SandboxHandle, SandboxSpec};
use std::path::Path;
use std::time::{Duration, Instant};

/// Touched memory of the checkpoint rows, in MiB (random bytes: runsc compresses its
/// images, and touched zeros or repeats would shrink to nothing).
const TOUCHED_MB: [usize; 2] = [64, 512];

pub fn main(data_dir: &Path, samples: usize) -> Result<()> {
    let runtime =
        crate::runtime::open_gvisor(data_dir, None, DEFAULT_MAX_PTYS)?.with_warm_pool(1)?;
    runtime.fill_warm_pool(spec().disk_mb);
    // A worker thread of its own: pooled agent connections notice at once that the
    // agent closed them at a pause to disk (on a current-thread runtime they would only
    // between block_on calls, and the next call would meet a dead connection).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let n = samples.max(3);

    let mut creates = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..n {
        runs.push(runsc_do_true()?);
        let t = Instant::now();
        let handle = runtime.start(&spec())?;
        let exec = rt
            .block_on(exec(&handle, &["/bin/true"]))
            .context("first exec");
        creates.push(t.elapsed());
        runtime.destroy(&handle)?;
        exec?;
    }
    let (create, run) = (median(creates), median(runs));

    let (warm_create, warm_run) = warm_create_first_exec(&runtime, &rt, n)?;
    let (http_create, http_run, http_warm) = http_create_first_exec(n, false)?;
    let (mixed_create, mixed_run, mixed_warm) = http_create_first_exec(n, true)?;
    let (gvisor_exec, container_exec) = exec_round_trips(&runtime, &rt, data_dir, n)?;
    println!("{:<58} {:>12} {:>10}", "gVisor measure", "median", "ratio");
    println!(
        "{:<58} {:>10.3}ms {:>10}",
        "gVisor: create -> first exec (runtime)",
        ms(create),
        format!("{:.2}x runsc", create.as_secs_f64() / run.as_secs_f64())
    );
    println!(
        "{:<58} {:>10.3}ms",
        "  baseline: runsc do /bin/true",
        ms(run)
    );
    println!(
        "{:<58} {:>10.3}ms {:>10}",
        "gVisor: create -> first exec (runtime, warm pool)",
        ms(warm_create),
        format!(
            "{:.2}x runsc",
            warm_create.as_secs_f64() / warm_run.as_secs_f64()
        )
    );
    println!(
        "{:<58} {:>10.3}ms",
        "  baseline: runsc do /bin/true (same run)",
        ms(warm_run)
    );
    println!(
        "{:<58} {:>10.3}ms {:>10}",
        format!("gVisor: create -> first exec (HTTP, Inngest, named; {http_warm}/{n} warm)"),
        ms(http_create),
        format!(
            "{:.2}x runsc",
            http_create.as_secs_f64() / http_run.as_secs_f64()
        )
    );
    println!(
        "{:<58} {:>10.3}ms",
        "  baseline: runsc do /bin/true (same run)",
        ms(http_run)
    );
    println!(
        "{:<58} {:>10.3}ms {:>10}",
        format!("gVisor: same, container-default server ({mixed_warm}/{n} warm)"),
        ms(mixed_create),
        format!(
            "{:.2}x runsc",
            mixed_create.as_secs_f64() / mixed_run.as_secs_f64()
        )
    );
    println!(
        "{:<58} {:>10.3}ms",
        "  baseline: runsc do /bin/true (same run)",
        ms(mixed_run)
    );
    println!(
        "{:<58} {:>10.3}ms {:>10}",
        "gVisor: exec round trip (agent, /bin/true)",
        ms(gvisor_exec),
        format!(
            "{:.2}x cont.",
            gvisor_exec.as_secs_f64() / container_exec.as_secs_f64()
        )
    );
    println!(
        "{:<58} {:>10.3}ms",
        "  baseline: container tier exec round trip",
        ms(container_exec)
    );
    for touched in TOUCHED_MB {
        checkpoint_rows(&runtime, &rt, n, touched)?;
    }
    egress_checkpoint_rows(&runtime, &rt, n)
}

/// Pause to disk and resume of a sandbox with egress (its own netns, link and rules,
/// which stay while it is on disk; the restore puts its address back) holding the
/// smallest touched size, `n` samples; prints the rows.
fn egress_checkpoint_rows(
    runtime: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    n: usize,
) -> Result<()> {
    let touched = TOUCHED_MB[0];
    let (mut saves, mut restores) = (vec![], vec![]);
    for _ in 0..n {
        let network = sandboxd_runtime::NetworkSpec::egress(vec![]);
        let handle = runtime.start_with_network(&spec_holding(touched), &network)?;
        let measured = measure_checkpoint(runtime, rt, &handle, touched);
        let end = match &measured {
            Ok((_, _, _, _, live)) => live.clone(),
            Err(_) => handle.clone(),
        };
        runtime.destroy(&end)?;
        let (save, restore, _, _, _) = measured?;
        saves.push(save);
        restores.push(restore);
    }
    println!(
        "{:<58} {:>10.3}ms",
        format!("gVisor with egress: pause to disk ({touched} MiB touched)"),
        ms(median(saves))
    );
    println!(
        "{:<58} {:>10.3}ms",
        format!("gVisor with egress: resume from disk ({touched} MiB touched)"),
        ms(median(restores))
    );
    Ok(())
}

/// Pause to disk and resume of sandboxes holding `touched` MiB, `n` samples; prints the
/// rows.
fn checkpoint_rows(
    runtime: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    n: usize,
    touched: usize,
) -> Result<()> {
    let (mut saves, mut restores, mut sizes, mut held) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let handle = runtime.start(&spec_holding(touched))?;
        let measured = measure_checkpoint(runtime, rt, &handle, touched);
        let end = match &measured {
            Ok((_, _, _, _, live)) => live.clone(),
            Err(_) => handle.clone(),
        };
        runtime.destroy(&end)?;
        let (save, restore, size, on_disk, _) = measured?;
        saves.push(save);
        restores.push(restore);
        sizes.push(size);
        held.push(on_disk);
    }
    sizes.sort_unstable();
    held.sort_unstable();

    println!(
        "{:<58} {:>10.3}ms",
        format!("gVisor: pause to disk ({touched} MiB touched)"),
        ms(median(saves))
    );
    println!(
        "{:<58} {:>10.3}ms",
        format!("gVisor: resume from disk ({touched} MiB touched)"),
        ms(median(restores))
    );
    println!(
        "{:<58} {:>10.2}MiB",
        "  ... memory image size",
        sizes[sizes.len() / 2] as f64 / (1024.0 * 1024.0)
    );
    println!(
        "{:<58} {:>10.2}MiB",
        "  ... memory cgroup while on disk (host memory freed)",
        held[held.len() / 2] as f64 / (1024.0 * 1024.0)
    );
    crate::bench_fork::rows(runtime, rt, n)
}

/// Create -> first exec through a `sandboxd serve --isolation gvisor` child (no
/// network: what its warm pool serves), `n` samples spaced for the pool to refill, each
/// paired with a `runsc do /bin/true`; (create median, runsc median, creates served by
/// the pool).
///
/// With `container_default`, the server's default tier is `container` and the creates
/// run on gVisor by their workspace's tier (`workspace set-isolation default gvisor`):
/// such a server keeps warm gVisor sandboxes from its first gVisor create on.
fn http_create_first_exec(
    n: usize,
    container_default: bool,
) -> Result<(Duration, Duration, usize)> {
    use crate::bench_http::{Api, Serve};
    let short = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let dir = std::env::temp_dir().join(format!("sandboxd-gvbench-{short}"));
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let tier = match container_default {
        true => "container",
        false => "gvisor",
    };
    let mut server = Serve::start(&dir, &key, "none", &[("SANDBOXD_ISOLATION", tier)])?;
    if container_default {
        let set = std::process::Command::new(std::env::current_exe()?)
            .args([
                "workspace",
                "set-isolation",
                "default",
                "gvisor",
                "--data-dir",
            ])
            .arg(&dir)
            .output()
            .context("sandboxd workspace set-isolation")?;
        if !set.status.success() {
            server.stop();
            let _ = std::fs::remove_dir_all(&dir);
            anyhow::bail!(
                "workspace set-isolation: {}",
                String::from_utf8_lossy(&set.stderr)
            );
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let measured = rt.block_on(async {
        let mut api = Api::connect(server.addr, &key).await?;
        let (mut creates, mut runs, mut warm) = (Vec::new(), Vec::new(), 0);
        for _ in 0..n {
            // A warm entry takes about as long as a cold start to make.
            tokio::time::sleep(Duration::from_secs(3)).await;
            runs.push(runsc_do_true()?);
            let t = Instant::now();
            // Inngest creates carry a name, which becomes the hostname: set on the
            // taken warm entry.
            let name = format!("bench-{}", uuid::Uuid::new_v4().simple());
            let body = serde_json::json!({"name": name, "vcpu": 1, "memoryMb": 256});
            let (status, v) = api.call("POST", "/v2/sandboxes", Some(body)).await?;
            anyhow::ensure!(status == 201, "create: {status} {v}");
            let id = v["data"]["id"].as_str().context("no id")?.to_owned();
            let exec = api.exec_true(&id).await;
            creates.push(t.elapsed());
            // A sandbox made from a warm entry records the entry's runsc container.
            warm += usize::from(dir.join("sandboxes").join(&id).join("runsc-id").exists());
            api.destroy(&id).await?;
            exec?;
        }
        Ok::<_, anyhow::Error>((median(creates), median(runs), warm))
    });
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    measured
}

/// Create -> first exec of sandboxes the warm pool serves (default hostname, image and
/// disk, no network), `n` samples spaced for it to refill, each paired with a
/// `runsc do /bin/true`; (create median, runsc median). Fails if a start missed.
fn warm_create_first_exec(
    runtime: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    n: usize,
) -> Result<(Duration, Duration)> {
    let (mut creates, mut runs) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let deadline = Instant::now() + Duration::from_secs(60);
        while runtime.warm_pool_ready() == 0 {
            anyhow::ensure!(Instant::now() < deadline, "the warm pool did not fill");
            std::thread::sleep(Duration::from_millis(20));
        }
        runs.push(runsc_do_true()?);
        let mut spec = spec();
        spec.hostname = sandboxd_runtime::linux::gvisor::WARM_HOSTNAME.into();
        let t = Instant::now();
        let handle = runtime.start(&spec)?;
        let exec = rt.block_on(exec(&handle, &["/bin/true"]));
        creates.push(t.elapsed());
        let warm = handle.warm;
        runtime.destroy(&handle)?;
        exec?;
        anyhow::ensure!(warm, "the warm pool did not serve the start");
    }
    Ok((median(creates), median(runs)))
}

/// Exec round trips of `/bin/true` on a gVisor sandbox and on a container sandbox,
/// taken in turn; (gVisor median, container median).
fn exec_round_trips(
    gvisor: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    data_dir: &Path,
    n: usize,
) -> Result<(Duration, Duration)> {
    let container_dir = data_dir.join("containers");
    let linux = crate::runtime::open_linux(&container_dir, None, DEFAULT_MAX_PTYS)?;
    let g = gvisor.start(&spec())?;
    let c = match linux.start(&spec()) {
        Ok(c) => c,
        Err(e) => {
            let _ = gvisor.destroy(&g);
            return Err(e.into());
        }
    };
    let timed = |h: &SandboxHandle| -> Result<Duration> {
        let t = Instant::now();
        rt.block_on(exec(h, &["/bin/true"]))?;
        Ok(t.elapsed())
    };
    let measured = (|| {
        let (mut gs, mut cs) = (Vec::new(), Vec::new());
        for _ in 0..n.max(10) {
            gs.push(timed(&g)?);
            cs.push(timed(&c)?);
        }
        Ok((median(gs), median(cs)))
    })();
    gvisor.destroy(&g)?;
    linux.destroy(&c)?;
    measured
}

/// Checkpoint and restore of `handle` once it holds the touched memory: (save time,
/// restore time, image bytes, cgroup bytes on disk, the running handle after).
fn measure_checkpoint(
    runtime: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    handle: &SandboxHandle,
    touched: usize,
) -> Result<(Duration, Duration, u64, u64, SandboxHandle)> {
    let client = AgentClient::new(&handle.agent_socket);
    let script = format!(
        "import os, time\nb = os.urandom({touched} << 20)\nprint('ready', flush=True)\ntime.sleep(3600)"
    );
    let id = uuid::Uuid::new_v4();
    let start = StartProcess {
        id,
        argv: vec!["/usr/bin/python3".into(), "-c".into(), script],
        env: None,
        cwd: None,
        hold_output: false,
        user: None,
    };
    rt.block_on(client.start_process(&start))
        .context("starting the memory holder")?;
    // Ready once its output says so (the memory is touched by then).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rt
        .block_on(said_ready(&client, id))
        .context("reading its output")?
    {
        anyhow::ensure!(Instant::now() < deadline, "the memory holder did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Instant::now();
    let on_disk = runtime.checkpoint(handle).context("pausing to disk")?;
    let save = t.elapsed();
    let image = checkpoint::image_dir(&on_disk.state_dir).join("checkpoint.img");
    let size = std::fs::metadata(&image)
        .with_context(|| format!("reading {}", image.display()))?
        .len();
    let held = runtime.usage(&on_disk)?.memory_bytes;
    let t = Instant::now();
    let live = runtime.restore(&on_disk).context("restoring")?;
    rt.block_on(exec(&live, &["/bin/true"]))
        .context("exec after the restore")?;
    Ok((save, t.elapsed(), size, held, live))
}

/// Whether process `id` printed `ready`.
pub(crate) async fn said_ready(client: &AgentClient, id: uuid::Uuid) -> Result<bool> {
    use base64::Engine;
    use futures_util::TryStreamExt;
    let frames: Vec<sandboxd_agent_protocol::Frame> =
        client.output(id, 0, false).await?.try_collect().await?;
    let mut out = Vec::new();
    for frame in frames {
        if let sandboxd_agent_protocol::Frame::Log { data, .. } = frame {
            out.extend(base64::engine::general_purpose::STANDARD.decode(data)?);
        }
    }
    Ok(String::from_utf8_lossy(&out).contains("ready"))
}

fn runsc_do_true() -> Result<Duration> {
    let t = Instant::now();
    // The runsc the tier uses (`SANDBOXD_RUNSC`, else on `PATH`), so that the pair compares
    // like with like.
    let exe = sandboxd_runtime::linux::gvisor::runsc::find().context("runsc not found")?;
    // Without cgroups: a killed `runsc do` leaves its `runsc-<random id>` cgroups behind
    // (see `bench_speed::runsc_do`).
    let status = std::process::Command::new(exe)
        .args([
            "--ignore-cgroups",
            "--platform=ptrace",
            "--network=none",
            "do",
            "/bin/true",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("running runsc do")?;
    anyhow::ensure!(status.success(), "runsc do /bin/true failed: {status}");
    Ok(t.elapsed())
}

/// A sandbox with room for `touched` MiB of its own.
fn spec_holding(touched: usize) -> SandboxSpec {
    let mut spec = spec();
    spec.memory_mb = spec.memory_mb.max(touched as u32 + 256);
    spec
}

pub(crate) fn spec() -> SandboxSpec {
    SandboxSpec {
        id: uuid::Uuid::new_v4(),
        image: "default".into(),
        extra_layers: vec![],
        hostname: "bench".into(),
        vcpu: 1,
        memory_mb: 256,
        pids_max: 256,
        disk_mb: 1024,
        isolation: sandboxd_runtime::Isolation::Gvisor,
    }
}

pub(crate) async fn exec(handle: &SandboxHandle, argv: &[&str]) -> Result<()> {
    let out = AgentClient::new(&handle.agent_socket)
        .exec(&ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: None,
            cwd: None,
            timeout_ms: 10_000,
            max_output_bytes: 1 << 20,
            user: None,
        })
        .await?;
    anyhow::ensure!(out.exit_code == Some(0), "{argv:?} failed: {out:?}");
    Ok(())
}

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
