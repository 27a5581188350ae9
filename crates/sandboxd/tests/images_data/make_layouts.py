#!/usr/bin/env python3
"""Writes OCI image layouts for the images tests into OUT/<name>/ (tag `v1`).

good: the host's bash with its libraries, /etc/greeting, whiteouts (of a file and of a
whole directory tree) and an opaque directory over a lower layer, Env and WorkingDir. hostile-*: one malicious layer each
(OUTSIDE is the host directory they aim at). With a third argument `big`, only
big: four layers of random data (16 MiB each, or the fourth argument's MiB; the fifth
argument's count of layers) (a pull that takes a moment). With `multi ARCH…`, only multi:
an image index of one small image per linux/ARCH, each with /etc/arch and the label
`arch` naming its ARCH. With `many N`, only many: the good image's base layer and N
one-file layers over it (/layers/0 … /layers/N-1); `many N dup` lists the first of them
again on top, `many N bigenv` has an Env of 300 KiB. With `whiteout-order`, only whiteout-order: whiteouts listed before and
after their own layer's entries."""
import hashlib, io, json, os, subprocess, sys, tarfile

out, outside = sys.argv[1], sys.argv[2]


def blob(layout, data):
    h = hashlib.sha256(data).hexdigest()
    os.makedirs(f"{layout}/blobs/sha256", exist_ok=True)
    with open(f"{layout}/blobs/sha256/{h}", "wb") as f:
        f.write(data)
    return {"digest": f"sha256:{h}", "size": len(data)}


def tar_of(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for info, data in entries:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def f(name, data=b"", mode=0o644):
    i = tarfile.TarInfo(name); i.size = len(data); i.mode = mode
    return (i, data)


def d(name, mode=0o755):
    i = tarfile.TarInfo(name); i.type = tarfile.DIRTYPE; i.mode = mode
    return (i, None)


def sym(name, target):
    i = tarfile.TarInfo(name); i.type = tarfile.SYMTYPE; i.linkname = target
    return (i, None)


def hard(name, target):
    i = tarfile.TarInfo(name); i.type = tarfile.LNKTYPE; i.linkname = target
    return (i, None)


def image(path, layers, config, arch="amd64"):
    """Writes an image's blobs into the layout at `path`; returns its manifest's descriptor."""
    descs = []
    for data in layers:
        desc = blob(path, data)
        desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
        descs.append(desc)
    cfg = {"architecture": arch, "os": "linux", "config": config,
           "rootfs": {"type": "layers",
                      "diff_ids": [f"sha256:{hashlib.sha256(l).hexdigest()}" for l in layers]}}
    c = blob(path, json.dumps(cfg).encode())
    c["mediaType"] = "application/vnd.oci.image.config.v1+json"
    m = blob(path, json.dumps({"schemaVersion": 2,
                               "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": c, "layers": descs}).encode())
    m["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    return m


def finish(path, top):
    """The layout's index.json naming descriptor `top` as tag v1, and its oci-layout."""
    top["annotations"] = {"org.opencontainers.image.ref.name": "v1"}
    with open(f"{path}/index.json", "w") as fh:
        json.dump({"schemaVersion": 2, "manifests": [top]}, fh)
    with open(f"{path}/oci-layout", "w") as fh:
        fh.write('{"imageLayoutVersion":"1.0.0"}')


def layout(name, layers, config):
    path = f"{out}/{name}"
    os.makedirs(path, exist_ok=True)
    finish(path, image(path, layers, config))


if sys.argv[3:4] == ["big"]:
    mib = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    layout("big", [tar_of([f(f"data/blob{i}", os.urandom(mib << 20))]) for i in range(count)], {})
    sys.exit(0)

if sys.argv[3:4] == ["multi"]:
    path = f"{out}/multi"
    os.makedirs(path, exist_ok=True)
    entries = []
    for arch in sys.argv[4:]:
        m = image(path, [tar_of([d("etc"), f("etc/arch", arch.encode() + b"\n")])],
                  {"Labels": {"arch": arch}}, arch)
        m["platform"] = {"os": "linux", "architecture": arch}
        entries.append(m)
    index = blob(path, json.dumps({"schemaVersion": 2,
                                   "mediaType": "application/vnd.oci.image.index.v1+json",
                                   "manifests": entries}).encode())
    index["mediaType"] = "application/vnd.oci.image.index.v1+json"
    finish(path, index)
    sys.exit(0)

# The good image: bash and its libraries at their real paths, merged-/usr links.
files = {"/usr/bin/bash", "/usr/bin/cat", "/usr/bin/ls"}
for prog in list(files):
    for line in subprocess.run(["ldd", prog], capture_output=True, text=True).stdout.splitlines():
        for word in line.split():
            if word.startswith("/") and not word.startswith("/lib64/"):
                # Under its own name (a soname is often a symlink), in its real directory.
                files.add(os.path.join(os.path.realpath(os.path.dirname(word)), os.path.basename(word)))
            if word.startswith("/lib64/"):
                files.add(os.path.realpath(word))
base = [d("usr"), d("usr/bin"), d("etc"), d("tmp", 0o1777), d("workspace"), d("opq"),
        sym("bin", "usr/bin"), sym("lib", "usr/lib"), sym("lib64", "usr/lib64"), d("usr/lib64"),
        sym("usr/lib64/ld-linux-x86-64.so.2", os.path.realpath("/lib64/ld-linux-x86-64.so.2")),
        f("etc/greeting", b"hello from the image\n"), f("etc/gone", b"x"),
        f("opq/old", b"old"), d("olddir"), d("olddir/sub"), f("olddir/sub/inner", b"x")]
dirs = set()
for path in sorted(files):
    rel = path.lstrip("/")
    parts = rel.split("/")[:-1]
    for n in range(1, len(parts) + 1):
        p = "/".join(parts[:n])
        if p not in dirs and p not in ("usr", "usr/bin", "usr/lib64"):
            dirs.add(p); base.append(d(p))
    with open(path, "rb") as fh:
        base.append(f(rel, fh.read(), 0o755))
if sys.argv[3:4] == ["whiteout-order"]:
    # /a and /b in a lower layer; the upper one whites each out and has its own entries
    # in it, the whiteout first for /a, last for /b, and /c's whiteout before the
    # entry's implicit parent: each directory then holds the upper layer's only.
    lower = [d("a"), f("a/old", b"old"), d("b"), f("b/old", b"old"), d("c"), f("c/old", b"old")]
    upper = [f(".wh.a"), d("a"), f("a/new", b"new"),
             d("b"), f("b/new", b"new"), f(".wh.b"),
             f(".wh.c"), f("c/new", b"new")]
    layout("whiteout-order", [tar_of(base), tar_of(lower), tar_of(upper)],
           {"Env": ["PATH=/usr/bin:/bin"]})
    sys.exit(0)

if sys.argv[3:4] == ["many"]:
    # The fifth argument's count of one-file layers (/layers/<i>) over the base.
    count = int(sys.argv[4])
    layers = [tar_of(base)] + [tar_of([d("layers"), f(f"layers/{i}", b"x")]) for i in range(count)]
    if sys.argv[5:6] == ["dup"]:
        # The first one-file layer again on top: one digest listed twice.
        layers.append(layers[1])
    env = ["PATH=/usr/bin:/bin"]
    if sys.argv[5:6] == ["bigenv"]:
        # An Env of 300 KiB: more than any command could carry to the agent.
        env.append("BIG=" + "x" * (300 << 10))
    layout("many", layers, {"Env": env})
    sys.exit(0)

top = [f("etc/.wh.gone"), f(".wh.olddir"), d("opq"), f("opq/.wh..wh..opq"), f("opq/new", b"new"),
       d("srv"), d("srv/app")]
layout("good", [tar_of(base), tar_of(top)],
       {"Env": ["IMAGE_VAR=from-image", "PATH=/usr/bin:/bin"], "WorkingDir": "/srv/app",
        "Labels": {"test": "yes"}})

layout("hostile-dotdot", [tar_of([f("../../../../../../" + outside.lstrip("/") + "/dotdot", b"x")])], {})
layout("hostile-absolute", [tar_of([f(outside + "/absolute", b"x")])], {})
layout("hostile-symlink", [tar_of([sym("link", outside), f("link/through-symlink", b"x")])], {})
layout("hostile-hardlink", [tar_of([hard("hl", "../../../../../../etc/hostname")])], {})
# A huge sparse file: 1 TiB apparent size, a few bytes in the archive (GNU sparse).
sparse_dir = f"{out}/sparse-src"
os.makedirs(sparse_dir, exist_ok=True)
with open(f"{sparse_dir}/huge", "wb") as fh:
    fh.truncate(1 << 40)
sparse_tar = subprocess.run(["tar", "--sparse", "--format=gnu", "-C", sparse_dir, "-cf", "-", "huge"],
                            capture_output=True, check=True).stdout
os.remove(f"{sparse_dir}/huge")
layout("hostile-sparse", [sparse_tar], {})

# A static probe (no libc needed at run time): prints its ids, groups and working
# directory, then NAME=value for each argument. The images of the User tests carry it.
probe_src = f"{out}/probe.c"
with open(probe_src, "w") as fh:
    fh.write(r'''#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char cwd[4096]; gid_t g[64]; int n = getgroups(64, g);
    printf("uid=%d gid=%d cwd=%s groups=", (int)getuid(), (int)getgid(),
           getcwd(cwd, sizeof cwd) ? cwd : "?");
    for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", (int)g[i]);
    printf("\n");
    for (int i = 1; i < argc; i++) {
        const char *v = getenv(argv[i]);
        printf("%s=%s\n", argv[i], v ? v : "(unset)");
    }
    return 0;
}
''')
subprocess.run(["gcc", "-static", "-O1", "-o", f"{out}/probe", probe_src], check=True)
with open(f"{out}/probe", "rb") as fh:
    probe = fh.read()
os.remove(f"{out}/probe"); os.remove(probe_src)

# user: the good image with a passwd and group file naming `app`, and User "app".
accounts = [f("probe", probe, 0o755), d("home"), d("home/app"), d("etc"),
            f("etc/passwd", b"root:x:0:0:root:/root:/bin/bash\napp:x:1234:2345::/home/app:/bin/bash\n"),
            f("etc/group", b"root:x:0:\napp:x:2345:\nextra:x:3456:app,other\n")]
env = {"Env": ["IMAGE_VAR=from-image", "PATH=/usr/bin:/bin"], "WorkingDir": "/srv/app"}
layout("user", [tar_of(base), tar_of(top), tar_of(accounts)], dict(env, User="app"))
layout("ghost", [tar_of(base), tar_of(top), tar_of(accounts)], dict(env, User="ghost"))
# noshell: only the static probe and a few directories; numeric: the same with a
# numeric User and no /etc at all.
alone = [f("probe", probe, 0o755), d("tmp", 0o1777), d("srv"), d("srv/app")]
layout("noshell", [tar_of(alone)], env)
layout("numeric", [tar_of(alone)], dict(env, User="4321:8765"))
