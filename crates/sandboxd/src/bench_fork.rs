//! `sandboxd bench --gvisor`'s fork row: from a snapshot of a running gVisor sandbox
//! (memory and filesystem) to a second sandbox running the same processes, as the
//! engine does it (`snapshot_memory`, then `start_from_memory` over the snapshot's
//! layer), until the clone's agent answers for the source's process.

use crate::bench_gvisor::{exec, median, ms, said_ready, spec};
use anyhow::{Context, Result};
use sandboxd_agent_protocol::{AgentClient, StartProcess};
use sandboxd_runtime::linux::gvisor::GvisorRuntime;
use sandboxd_runtime::{Runtime, SandboxHandle};
use std::time::{Duration, Instant};

/// Touched memory of the forked process, in MiB (random bytes, as the checkpoint rows).
const TOUCHED_MB: usize = 64;

/// Measures `n` forks and prints the row.
pub fn rows(runtime: &GvisorRuntime, rt: &tokio::runtime::Runtime, n: usize) -> Result<()> {
    let (mut snaps, mut forks) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let source = runtime.start(&spec())?;
        let mut made = Vec::new();
        let measured = fork_once(runtime, rt, &source, &mut made);
        for handle in made.iter().rev() {
            runtime.destroy(handle)?;
        }
        let (snap, fork, image, layer) = measured?;
        runtime.delete_memory_snapshot(&image)?;
        runtime.delete_layer(&layer)?;
        snaps.push(snap);
        forks.push(fork);
    }
    println!(
        "{:<58} {:>10.3}ms",
        format!("gVisor: fork, snapshot -> 2nd sandbox running ({TOUCHED_MB} MiB)"),
        ms(median(forks))
    );
    println!(
        "{:<58} {:>10.3}ms",
        "  ... of which the snapshot (source frozen, then back)",
        ms(median(snaps))
    );
    Ok(())
}

/// One fork of `source` once it holds the touched memory: (snapshot time, snapshot to
/// the clone answering, image dir, snapshot layer). Every sandbox made goes in `made`.
fn fork_once(
    runtime: &GvisorRuntime,
    rt: &tokio::runtime::Runtime,
    source: &SandboxHandle,
    made: &mut Vec<SandboxHandle>,
) -> Result<(Duration, Duration, std::path::PathBuf, String)> {
    made.push(source.clone());
    let client = AgentClient::new(&source.agent_socket);
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
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rt.block_on(said_ready(&client, id))? {
        anyhow::ensure!(Instant::now() < deadline, "the memory holder did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = Instant::now();
    let (taken, live) = runtime.snapshot_memory(source, uuid::Uuid::new_v4());
    made[0] = live;
    let snapshot = taken.context("snapshot with memory")?;
    let snap = t.elapsed();
    let mut clone_spec = spec();
    clone_spec.extra_layers = vec![snapshot.layer.digest.clone()];
    let clone = runtime
        .start_from_memory(
            &clone_spec,
            &sandboxd_runtime::NetworkSpec::none(),
            &snapshot.image,
        )
        .context("starting the fork")?;
    made.push(clone.clone());
    // The clone's agent knows the source's process (its output says ready).
    let forked = AgentClient::new(&clone.agent_socket);
    anyhow::ensure!(
        rt.block_on(said_ready(&forked, id))?,
        "the fork does not run the source's process"
    );
    rt.block_on(exec(&clone, &["/bin/true"]))?;
    Ok((snap, t.elapsed(), snapshot.image, snapshot.layer.digest))
}
