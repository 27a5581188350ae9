#!/usr/bin/env python3
"""Writes OCI image layouts whose /etc or /etc/resolv.conf is a symlink aimed out of the
sandbox's root, into OUT/<name>/ (tag `v1`). OUTSIDE is the host directory they aim at
(the test's own, never the host's /etc); it holds a file `resolv.conf`.

etc-abs: etc -> OUTSIDE. etc-climb: etc -> ../../.. (far past the host's /) then
OUTSIDE. resolv-abs: a real etc whose resolv.conf -> OUTSIDE/resolv.conf. etc-inner:
etc -> /private/etc, a directory of the image (the resolver config belongs there).
usr-abs: usr -> OUTSIDE/mnt (where the test mounts a tmpfs of its own)."""
import hashlib, io, json, os, sys, tarfile

out, outside = sys.argv[1], sys.argv[2]


def blob(layout, data):
    h = hashlib.sha256(data).hexdigest()
    os.makedirs(f"{layout}/blobs/sha256", exist_ok=True)
    with open(f"{layout}/blobs/sha256/{h}", "wb") as fh:
        fh.write(data)
    return {"digest": f"sha256:{h}", "size": len(data)}


def d(name, mode=0o755):
    i = tarfile.TarInfo(name); i.type = tarfile.DIRTYPE; i.mode = mode
    return i


def sym(name, target):
    i = tarfile.TarInfo(name); i.type = tarfile.SYMTYPE; i.linkname = target
    return i


def layout(name, entries):
    path = f"{out}/{name}"
    os.makedirs(path, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for info in [d("tmp", 0o1777)] + entries:
            t.addfile(info)
    layer = buf.getvalue()
    ldesc = dict(blob(path, layer), mediaType="application/vnd.oci.image.layer.v1.tar")
    cfg = {"architecture": "amd64", "os": "linux", "config": {},
           "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]}}
    c = dict(blob(path, json.dumps(cfg).encode()), mediaType="application/vnd.oci.image.config.v1+json")
    m = blob(path, json.dumps({"schemaVersion": 2,
                               "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": c, "layers": [ldesc]}).encode())
    m["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    m["annotations"] = {"org.opencontainers.image.ref.name": "v1"}
    with open(f"{path}/index.json", "w") as fh:
        json.dump({"schemaVersion": 2, "manifests": [m]}, fh)
    with open(f"{path}/oci-layout", "w") as fh:
        fh.write('{"imageLayoutVersion":"1.0.0"}')


layout("etc-abs", [sym("etc", outside)])
layout("etc-climb", [sym("etc", "../" * 64 + outside.lstrip("/"))])
layout("resolv-abs", [d("etc"), sym("etc/resolv.conf", outside + "/resolv.conf")])
layout("etc-inner", [d("private"), d("private/etc"), sym("etc", "/private/etc")])
layout("usr-abs", [sym("usr", outside + "/mnt")])
