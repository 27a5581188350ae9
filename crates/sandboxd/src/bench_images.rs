//! `sandboxd bench`, images: a pull and unpack of a five-layer, ~100 MiB image from
//! Debian's `docker-registry` on loopback against `skopeo copy` + `umoci unpack` of
//! the same image (in turn), the pulling process's peak RSS against a 1 MiB image's;
//! create → first exec over HTTP from a stored OCI image against `default` (in turn);
//! and the layer store's disk use before and with 50 sandboxes of that image.

use crate::bench_base::PairedSamples;
use crate::bench_http::{Api, Serve, CREATE_SPACING};
use anyhow::{bail, ensure, Context, Result};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The realistic image (`scripts/debian-python-image.sh` builds it).
const DEBIAN_IMAGE: &str = "/var/cache/sandboxd-test/debian-python.oci";
/// Sandboxes held at once for the layer-sharing measure.
const SHARED: usize = 50;

/// Runs the image measures and prints their rows.
pub fn main(samples: usize) -> Result<()> {
    let work = tempfile_dir("sbi")?;
    let result = measure(&work, samples);
    if let Err(e) = std::fs::remove_dir_all(&work) {
        eprintln!("bench: cannot remove {}: {e}", work.display());
    }
    result
}

fn measure(work: &Path, samples: usize) -> Result<()> {
    let mut registry = Registry::start(work)?;
    let result = (|| {
        let big = registry.push(work, "bench/big:v1", &BIG)?;
        let small = registry.push(work, "bench/small:v1", &SMALL)?;
        let pulls = pull_vs_skopeo(work, &big, samples.clamp(3, 5))?;
        let (_, small_rss) = sandboxd_pull(work, &small)?;
        print_pulls(&pulls, small_rss);
        Ok::<_, anyhow::Error>(())
    })();
    registry.stop();
    result?;
    if !Path::new(DEBIAN_IMAGE).join("index.json").exists() {
        println!(
            "{:<58} skipped: no {DEBIAN_IMAGE} (scripts/debian-python-image.sh builds it)",
            "HTTP: create -> first exec, OCI image vs default"
        );
        return Ok(());
    }
    image_starts(work, samples)
}

/// The shape of a generated image: `layers` layers of `files` small files of 4 KiB
/// (text-like, compressible) and one random file of `random_mib` MiB each.
struct Shape {
    layers: usize,
    files: usize,
    random_mib: usize,
}

/// Five layers of 2000 × 4 KiB files and 12 MiB of random data: ~100 MiB.
const BIG: Shape = Shape {
    layers: 5,
    files: 2000,
    random_mib: 12,
};
const SMALL: Shape = Shape {
    layers: 1,
    files: 10,
    random_mib: 1,
};

struct PullFigures {
    ours: Duration,
    baseline: Duration,
    ours_rss: u64,
    bytes: u64,
}

/// Pull + unpack with `sandboxd images pull` (a fresh data dir each time) in turn with
/// `skopeo copy docker://… oci:…` + `umoci unpack`.
fn pull_vs_skopeo(work: &Path, reference: &str, n: usize) -> Result<PullFigures> {
    let mut pairs = PairedSamples::default();
    let mut rss = Vec::new();
    for _ in 0..n {
        let (t, peak) = sandboxd_pull(work, reference)?;
        rss.push(peak);
        let base = skopeo_umoci(work, reference)?;
        pairs.push(t, base);
    }
    rss.sort_unstable();
    let p = pairs.medians();
    Ok(PullFigures {
        ours: p.median,
        baseline: p.baseline,
        ours_rss: rss[rss.len() / 2],
        bytes: (BIG.layers * (BIG.files * 4096 + (BIG.random_mib << 20))) as u64,
    })
}

fn print_pulls(p: &PullFigures, small_rss: u64) {
    println!(
        "{:<58} {:>10.3}ms {:>10} {:>8}",
        format!(
            "pull+unpack {} layers, {} MiB, loopback registry",
            BIG.layers,
            p.bytes >> 20
        ),
        ms(p.ours),
        format!(
            "{:.2}x skopeo+umoci*",
            p.ours.as_secs_f64() / p.baseline.as_secs_f64()
        ),
        "<= 1.0x"
    );
    println!(
        "{:<58} {:>10.1}MiB {:>10} {:>8}",
        "  ... peak RSS of the pulling process",
        p.ours_rss as f64 / (1024.0 * 1024.0),
        format!(
            "{:.2}x 1 MiB pull",
            p.ours_rss as f64 / small_rss.max(1) as f64
        ),
        "flat"
    );
    println!(
        "    skopeo copy + umoci unpack (in turn): {:.3}ms; 1 MiB image pull peak RSS {:.1}MiB",
        ms(p.baseline),
        small_rss as f64 / (1024.0 * 1024.0)
    );
}

/// One `sandboxd images pull REF` into a fresh data dir: its time and peak RSS.
fn sandboxd_pull(work: &Path, reference: &str) -> Result<(Duration, u64)> {
    let data = work.join(format!("pull-{}", uuid::Uuid::new_v4().simple()));
    let exe = std::env::current_exe().context("locating the sandboxd binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["images", "pull", reference, "--data-dir"])
        .arg(&data)
        .stdout(Stdio::null());
    let measured = timed_with_peak_rss(&mut cmd);
    remove_data_dir(&data);
    measured
}

/// `skopeo copy docker://REF oci:DIR:v1` then `umoci unpack`: the time of both.
fn skopeo_umoci(work: &Path, reference: &str) -> Result<Duration> {
    let dir = work.join(format!("skopeo-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&dir)?;
    let layout = dir.join("layout");
    let t = Instant::now();
    let ran = run(Command::new("skopeo").args([
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        &format!("docker://{reference}"),
        &format!("oci:{}:v1", layout.display()),
    ]))
    .and_then(|()| {
        run(Command::new("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:v1", layout.display()))
            .arg(dir.join("bundle")))
    });
    let elapsed = t.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    ran.map(|()| elapsed)
}

/// Runs `cmd` to its end; its wall time and peak resident set (bytes).
fn timed_with_peak_rss(cmd: &mut Command) -> Result<(Duration, u64)> {
    let t = Instant::now();
    let child: Child = cmd.spawn().context("starting a child")?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; all zeroes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, not reaped yet (nothing else waits for it), with
    // pointers to live locals.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = t.elapsed();
    ensure!(reaped == pid, "wait4: {}", std::io::Error::last_os_error());
    ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed (status {status})"
    );
    Ok((elapsed, usage.ru_maxrss as u64 * 1024))
}

/// Create → first exec over HTTP from the Debian image (imported into the server's
/// data dir) in turn with the same from `default`; then 50 sandboxes of the image at
/// once and the layer store's disk use before and with them.
fn image_starts(work: &Path, samples: usize) -> Result<()> {
    let dir = work.join("serve");
    let image = "bench/debian-python:v1";
    let exe = std::env::current_exe().context("locating the sandboxd binary")?;
    run(Command::new(exe)
        .args([
            "images",
            "import",
            DEBIAN_IMAGE,
            "--name",
            image,
            "--data-dir",
        ])
        .arg(&dir)
        .stdout(Stdio::null()))?;
    let key = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let room = (SHARED * 2).to_string();
    // Every create of the run: two untimed, two per sample, then the shared ones.
    let creates = (2 + 2 * samples + SHARED).to_string();
    let env = [
        ("SANDBOXD_MAX_SANDBOXES", room.as_str()),
        ("SANDBOXD_MAX_VCPU_TOTAL", room.as_str()),
        ("SANDBOXD_MAX_MEMORY_MIB_TOTAL", "10000000"),
        ("SANDBOXD_WORKSPACE_QUOTA_SANDBOXES", room.as_str()),
        ("SANDBOXD_WORKSPACE_QUOTA_VCPU", room.as_str()),
        ("SANDBOXD_WORKSPACE_QUOTA_MEMORY_MB", "10000000"),
        ("SANDBOXD_CREATE_RATE_BURST", creates.as_str()),
    ];
    let mut server = Serve::start(&dir, &key, "none", &env)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let layers = dir.join("layers");
    let result = rt.block_on(async {
        let mut api = Api::connect(server.addr, &key).await?;
        let run = async {
            // One of each first (untimed): the default image's first use, caches.
            for from in [None, Some(image)] {
                let id = api.create_from(from).await?;
                api.exec_true(&id).await?;
                api.destroy(&id).await?;
            }
            let mut pairs = PairedSamples::default();
            for _ in 0..samples {
                tokio::time::sleep(CREATE_SPACING).await;
                let base = create_exec(&mut api, None).await?;
                tokio::time::sleep(CREATE_SPACING).await;
                let ours = create_exec(&mut api, Some(image)).await?;
                pairs.push(ours, base);
            }
            let before = disk_use(&layers);
            let mut ids = Vec::with_capacity(SHARED);
            for _ in 0..SHARED {
                let id = api.create_from(Some(image)).await?;
                api.exec_true(&id).await?;
                ids.push(id);
            }
            let with = disk_use(&layers);
            for id in ids {
                api.destroy(&id).await?;
            }
            Ok::<_, anyhow::Error>((pairs.medians(), before, with))
        }
        .await;
        let cleanup = api.destroy_all().await;
        let figures = run?;
        cleanup.map(|()| figures)
    });
    server.stop();
    remove_data_dir(&dir);
    let (pair, before, with) = result?;
    println!(
        "{:<58} {:>10.3}ms {:>10} {:>8}",
        "HTTP: create -> first exec, Debian OCI image (spaced)",
        ms(pair.median),
        format!(
            "{:.2}x default*",
            pair.median.as_secs_f64() / pair.baseline.as_secs_f64()
        ),
        "<= 1.2x"
    );
    println!(
        "    HTTP: create -> first exec, default (in turn): {:.3}ms",
        ms(pair.baseline)
    );
    println!(
        "{:<58} {:>10.1}MiB {:>10} {:>8}",
        "layer store disk use, image stored",
        before.bytes as f64 / (1024.0 * 1024.0),
        format!("{} layers", before.layers),
        ""
    );
    println!(
        "{:<58} {:>10.1}MiB {:>10} {:>8}",
        format!("  ... with {SHARED} sandboxes of it running"),
        with.bytes as f64 / (1024.0 * 1024.0),
        format!("{} layers", with.layers),
        "same"
    );
    Ok(())
}

async fn create_exec(api: &mut Api, image: Option<&str>) -> Result<Duration> {
    let t = Instant::now();
    let id = api.create_from(image).await?;
    api.exec_true(&id).await?;
    let elapsed = t.elapsed();
    api.destroy(&id).await?;
    Ok(elapsed)
}

/// Disk use of a layer store: allocated bytes (hard links counted once) and stored
/// layers (its entries not starting with `.`).
struct DiskUse {
    bytes: u64,
    layers: usize,
}

fn disk_use(dir: &Path) -> DiskUse {
    let layers = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0);
    let mut seen = HashSet::new();
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if seen.insert((meta.dev(), meta.ino())) {
                bytes += meta.blocks() * 512;
            }
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    DiskUse { bytes, layers }
}

/// Debian's `docker-registry` on a free loopback port, storage under `work`.
struct Registry {
    child: Child,
    port: u16,
}

impl Registry {
    fn start(work: &Path) -> Result<Registry> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = work.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                work.join("registry").display()
            ),
        )?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting docker-registry (apt-get install docker-registry)")?;
        let mut registry = Registry { child, port };
        for _ in 0..600 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(registry);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        registry.stop();
        bail!("docker-registry did not start listening");
    }

    /// Writes an image of `shape` as an OCI layout under `work` and pushes it as `name`;
    /// its reference.
    fn push(&self, work: &Path, name: &str, shape: &Shape) -> Result<String> {
        let layout = work.join(format!("layout-{}", uuid::Uuid::new_v4().simple()));
        write_layout(&layout, shape)?;
        let reference = format!("127.0.0.1:{}/{name}", self.port);
        let pushed = run(Command::new("skopeo").args([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &format!("oci:{}:v1", layout.display()),
            &format!("docker://{reference}"),
        ]));
        let _ = std::fs::remove_dir_all(&layout);
        pushed.map(|()| reference)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An OCI layout (tag `v1`) of plain tar layers of `shape`, written by python3.
fn write_layout(out: &Path, shape: &Shape) -> Result<()> {
    const SCRIPT: &str = r#"
import hashlib, io, json, os, sys, tarfile
out, layers, files, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(f"{out}/blobs/sha256")
def blob(data):
    h = hashlib.sha256(data).hexdigest()
    open(f"{out}/blobs/sha256/{h}", "wb").write(data)
    return {"digest": f"sha256:{h}", "size": len(data)}
def add(t, name, data):
    i = tarfile.TarInfo(name); i.size = len(data); i.mode = 0o644
    t.addfile(i, io.BytesIO(data))
descs, diffs = [], []
for n in range(layers):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        d = tarfile.TarInfo(f"layer{n}"); d.type = tarfile.DIRTYPE; d.mode = 0o755
        t.addfile(d)
        for i in range(files):
            text = (f"layer {n} file {i} " + os.urandom(8).hex() + "\n").encode() * 64
            add(t, f"layer{n}/f{i:05}.txt", text[:4096])
        add(t, f"layer{n}/random.bin", os.urandom(mib << 20))
    data = buf.getvalue()
    desc = blob(data); desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
    descs.append(desc); diffs.append(desc["digest"])
cfg = blob(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                       "rootfs": {"type": "layers", "diff_ids": diffs}}).encode())
cfg["mediaType"] = "application/vnd.oci.image.config.v1+json"
m = blob(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                     "config": cfg, "layers": descs}).encode())
m["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
m["annotations"] = {"org.opencontainers.image.ref.name": "v1"}
json.dump({"schemaVersion": 2, "manifests": [m]}, open(f"{out}/index.json", "w"))
open(f"{out}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
"#;
    run(Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(out)
        .arg(shape.layers.to_string())
        .arg(shape.files.to_string())
        .arg(shape.random_mib.to_string()))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdout(Stdio::null())
        .output()
        .with_context(|| format!("starting {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A fresh directory under the temporary directory.
fn tempfile_dir(prefix: &str) -> Result<PathBuf> {
    let short = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let dir = std::env::temp_dir().join(format!("{prefix}-{short}"));
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Removes a data dir sandboxd used (no sandbox runs in it any more: nothing mounted).
fn remove_data_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        eprintln!("bench: cannot remove {}: {e}", dir.display());
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
