//! `sandboxd bench --gvisor`: the gVisor tier's rows — create -> first exec against
//! `runsc do /bin/true` in the same run, and pause to disk (checkpoint) and resume
//! (restore) of a sandbox holding 64 MiB of touched memory, with the image's size and
//! the host memory its cgroup holds while on disk.

use anyhow::{Context, Result};
use sandboxd_agent_protocol::{AgentClient, ExecRequest, StartProcess};
use sandboxd_runtime::linux::gvisor::{checkpoint, GvisorRuntime};
use sandboxd_runtime::linux::DEFAULT_MAX_PTYS;
use sandboxd_runtime::{Runtime, SandboxHandle, SandboxSpec};
use std::path::Path;
use std::time::{Duration, Instant};

/// Touched memory of the checkpoint rows, in MiB (random bytes: runsc compresses its
/// images, and touched zeros or repeats would shrink to nothing).
const TOUCHED_MB: usize = 64;

pub fn main(data_dir: &Path, samples: usize) -> Result<()> {
    let runtime = crate::runtime::open_gvisor(data_dir, None, DEFAULT_MAX_PTYS)?;
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

    let (mut saves, mut restores, mut sizes, mut held) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let handle = runtime.start(&spec())?;
        let measured = measure_checkpoint(&runtime, &rt, &handle);
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
        "{:<58} {:>10.3}ms",
        format!("gVisor: pause to disk ({TOUCHED_MB} MiB touched)"),
        ms(median(saves))
    );
    println!(
        "{:<58} {:>10.3}ms",
        format!("gVisor: resume from disk ({TOUCHED_MB} MiB touched)"),
        ms(median(restores))
    );
    println!(
        "{:<58} {:>10.2}MiB",
        "  ... memory image size",
        sizes[sizes.len() / 2] as f64 / (1024.0 * 1024.0)
    );
    println!(
        "{:<58} {:>10.2}MiB",
        "  ... memory cgroup while on disk",
        held[held.len() / 2] as f64 / (1024.0 * 1024.0)
    );
    crate::bench_fork::rows(&runtime, &rt, n)
}

/// Checkpoint and restore of `handle` once it holds the touched memory: (save time,
/// restore time, image bytes, cgroup bytes on disk, the running handle after).
fn measure_checkpoint(
    runtime: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    handle: &SandboxHandle,
) -> Result<(Duration, Duration, u64, u64, SandboxHandle)> {
    let client = AgentClient::new(&handle.agent_socket);
    let script = format!(
        "import os, time\nb = os.urandom({TOUCHED_MB} << 20)\nprint('ready', flush=True)\ntime.sleep(3600)"
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
    let status = std::process::Command::new("runsc")
        .args(["--platform=ptrace", "--network=none", "do", "/bin/true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .context("running runsc do")?;
    anyhow::ensure!(status.success(), "runsc do /bin/true failed: {status}");
    Ok(t.elapsed())
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
