#!/usr/bin/env python3
"""hostile_layout.py OUTDIR KIND: an OCI layout (tag v1) whose one gzip layer unpacks to far
more than its blob (after REVIEW12's probes/mk_oci_layout.py).
KIND: fill=N   one file of N MiB of the byte 'a' (a decompression bomb that is no hole)
      tar=PATH the given tar as the layer (e.g. a GNU sparse one from `tar -S`)
      symlinks=N N symlinks whose targets are 4000 bytes long (each takes a data block)
"""
import gzip, hashlib, io, json, os, sys, tarfile

out, kind = sys.argv[1], sys.argv[2]
os.makedirs(out + "/blobs/sha256", exist_ok=True)

def blob(data):
    h = hashlib.sha256(data).hexdigest()
    with open(f"{out}/blobs/sha256/{h}", "wb") as f:
        f.write(data)
    return "sha256:" + h, len(data)

class HashGz(io.RawIOBase):
    """Writes gzip to memory while hashing the uncompressed tar."""
    def __init__(s):
        s.buf = io.BytesIO(); s.gz = gzip.GzipFile(fileobj=s.buf, mode="wb", compresslevel=6)
        s.h = hashlib.sha256()
    def writable(s): return True
    def write(s, b):
        s.h.update(b); s.gz.write(b); return len(b)

raw = HashGz()
if kind.startswith("fill="):
    n = int(kind.split("=")[1]) << 20
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.GNU_FORMAT) as t:
        ti = tarfile.TarInfo("big"); ti.size = n; ti.mode = 0o644
        class A(io.RawIOBase):
            def __init__(s): s.left = n
            def readable(s): return True
            def readinto(s, b):
                k = min(len(b), s.left); b[:k] = b"a" * k; s.left -= k; return k
        t.addfile(ti, io.BufferedReader(A(), 1 << 20))
elif kind.startswith("symlinks="):
    n = int(kind.split("=")[1])
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            ti = tarfile.TarInfo(f"l{i:06}"); ti.type = tarfile.SYMTYPE; ti.mode = 0o777
            ti.linkname = ("t%06d/" % i) + "x" * 3992
            t.addfile(ti)
else:
    raw.write(open(kind[4:], "rb").read())
raw.gz.close()
ldig, lsize = blob(raw.buf.getvalue())
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin:/bin"]},
                  "rootfs": {"type": "layers", "diff_ids": ["sha256:" + raw.h.hexdigest()]}}).encode()
cdig, csize = blob(cfg)
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": csize},
                  "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ldig, "size": lsize}]}).encode()
mdig, msize = blob(man)
with open(out + "/oci-layout", "w") as f:
    f.write('{"imageLayoutVersion":"1.0.0"}')
with open(out + "/index.json", "w") as f:
    json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
               "digest": mdig, "size": msize, "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}, f)
print(ldig)
