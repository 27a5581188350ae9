//! The benchmark's baselines (a plain fork+exec, a bare `unshare`, bubblewrap) and medians of
//! samples taken in alternation with them: on a shared machine whose load drifts during
//! a run, a ratio to samples taken side by side says more than one to the run's start.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One fork+exec of `/bin/true`.
pub fn fork_exec() -> Result<Duration> {
    let t = Instant::now();
    Command::new("/bin/true")
        .status()
        .context("running /bin/true")?;
    Ok(t.elapsed())
}

/// One `unshare --fork --pid --mount-proc /bin/true`.
pub fn unshare() -> Result<Duration> {
    let t = Instant::now();
    let ok = Command::new("unshare")
        .args(["--fork", "--pid", "--mount-proc", "/bin/true"])
        .status()
        .context("running unshare")?;
    anyhow::ensure!(ok.success(), "unshare failed: {ok}");
    Ok(t.elapsed())
}

/// One `bwrap --unshare-all --dev /dev --ro-bind / / /bin/true` (its own namespaces,
/// network included: the one-shot tool `sandboxd run` compares with).
pub fn bwrap() -> Result<Duration> {
    let t = Instant::now();
    let ok = Command::new("bwrap")
        .args([
            "--unshare-all",
            "--dev",
            "/dev",
            "--ro-bind",
            "/",
            "/",
            "/bin/true",
        ])
        .status()
        .context("running bwrap (install bubblewrap)")?;
    anyhow::ensure!(ok.success(), "bwrap failed: {ok}");
    Ok(t.elapsed())
}

/// One `sandboxd run [--network none] -- /bin/true` on `data_dir`, the whole process.
pub fn sandboxd_run(data_dir: &Path, network: &str) -> Result<Duration> {
    sandboxd_run_with(data_dir, network, &[])
}

/// [`sandboxd_run`] with `env` set for it.
pub fn sandboxd_run_with(data_dir: &Path, network: &str, env: &[(&str, &str)]) -> Result<Duration> {
    let exe = std::env::current_exe().context("locating the sandboxd binary")?;
    let t = Instant::now();
    let ok = Command::new(exe)
        .envs(env.iter().copied())
        .arg("run")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--network", network, "--", "/bin/true"])
        .status()
        .context("running sandboxd run")?;
    let took = t.elapsed();
    anyhow::ensure!(ok.success(), "sandboxd run failed: {ok}");
    // Its teardown goes on after the return: not timed, but over before the next
    // sample (a baseline sample must not share the CPUs with it).
    sandboxd_runtime::linux::wait_for_runs(data_dir);
    Ok(took)
}

/// `n` samples of `sample`, each taken in turn with one of `baseline`.
pub fn paired(
    n: usize,
    mut sample: impl FnMut() -> Result<Duration>,
    mut baseline: impl FnMut() -> Result<Duration>,
) -> Result<Paired> {
    let mut all = PairedSamples::default();
    for _ in 0..n {
        let base = baseline()?;
        all.push(sample()?, base);
    }
    Ok(all.medians())
}

/// Medians of samples and of the baseline samples taken between them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Paired {
    pub median: Duration,
    pub baseline: Duration,
}

/// Collects samples and baseline samples taken in turn.
#[derive(Default)]
pub struct PairedSamples {
    samples: Vec<Duration>,
    baselines: Vec<Duration>,
}

impl PairedSamples {
    pub fn push(&mut self, sample: Duration, baseline: Duration) {
        self.samples.push(sample);
        self.baselines.push(baseline);
    }

    pub fn medians(self) -> Paired {
        Paired {
            median: median(self.samples),
            baseline: median(self.baselines),
        }
    }
}

/// The median of `all` (zero for none).
pub fn median(mut all: Vec<Duration>) -> Duration {
    all.sort();
    all.get(all.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_medians_are_taken_per_side() {
        let mut p = PairedSamples::default();
        for (s, b) in [(5, 1), (7, 3), (6, 2)] {
            p.push(Duration::from_millis(s), Duration::from_millis(b));
        }
        let m = p.medians();
        assert_eq!(
            (m.median, m.baseline),
            (Duration::from_millis(6), Duration::from_millis(2))
        );
    }
}
