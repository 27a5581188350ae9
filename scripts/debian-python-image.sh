#!/usr/bin/env bash
# Builds the realistic test image: a Debian minbase root with python3, made by
# mmdebstrap, as an OCI image layout (tag v1, one gzip layer) at $1 (default
# /var/cache/sandboxd-test/debian-python.oci). Does nothing if that exists already, so
# CI builds it once per machine. Needs root, mmdebstrap and a reachable Debian mirror.
set -euo pipefail
out="${1:-/var/cache/sandboxd-test/debian-python.oci}"
[ -f "$out/index.json" ] && exit 0
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mmdebstrap --quiet --variant=minbase --include=python3 --format=tar \
    --skip=output/dev \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$suite" "$work/root.tar"
mkdir -p "$(dirname "$out")"
python3 - "$work/root.tar" "$work/layout" <<'EOF'
import gzip, hashlib, json, os, shutil, sys
tar, out = sys.argv[1], sys.argv[2]
os.makedirs(f"{out}/blobs/sha256")
def blob(data):
    h = hashlib.sha256(data).hexdigest()
    with open(f"{out}/blobs/sha256/{h}", "wb") as f:
        f.write(data)
    return {"digest": f"sha256:{h}", "size": len(data)}
raw = open(tar, "rb").read()
layer = blob(gzip.compress(raw, 6))
layer["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
config = blob(json.dumps({
    "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine),
    "os": "linux",
    "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
               "Cmd": ["/bin/bash"]},
    "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
}).encode())
config["mediaType"] = "application/vnd.oci.image.config.v1+json"
manifest = blob(json.dumps({"schemaVersion": 2,
                            "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "config": config, "layers": [layer]}).encode())
manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
manifest["annotations"] = {"org.opencontainers.image.ref.name": "v1"}
with open(f"{out}/index.json", "w") as f:
    json.dump({"schemaVersion": 2, "manifests": [manifest]}, f)
with open(f"{out}/oci-layout", "w") as f:
    f.write('{"imageLayoutVersion":"1.0.0"}')
EOF
rm -rf "$out.tmp"
mv "$work/layout" "$out.tmp"
mv "$out.tmp" "$out"
