//! File transfer: atomic writes with exact modes, refusal of everything but regular files.

mod common;

use bytes::Bytes;
use common::*;
use futures_util::{StreamExt, TryStreamExt};
use sandboxd_agent_protocol::{AgentClient, AgentErrorCode, ByteStream};
use std::os::unix::fs::PermissionsExt;

fn body(parts: &[&'static [u8]]) -> ByteStream {
    let parts: Vec<std::io::Result<Bytes>> =
        parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
    futures_util::stream::iter(parts).boxed()
}

async fn read_all(c: &AgentClient, path: &str) -> (u32, Vec<u8>) {
    let (meta, stream) = c.read_file(path).await.unwrap();
    let data: Vec<Bytes> = stream.try_collect().await.unwrap();
    let data = data.concat();
    assert_eq!(meta.size, data.len() as u64);
    (meta.mode, data)
}

#[tokio::test]
async fn writes_atomically_with_the_requested_mode() {
    let agent = start().await;
    let c = &agent.client;
    let dir = agent.dir.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("f.bin");
    let p = path.to_str().unwrap();
    let w = c
        .write_file(p, 0o640, body(&[b"hello ", b"\x00\xff world"]))
        .await
        .unwrap();
    assert_eq!((w.path.as_str(), w.bytes_written), (p, 14));
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    assert_eq!(
        read_all(c, p).await,
        (0o640, b"hello \x00\xff world".to_vec())
    );

    // Replacing keeps no temp file behind and applies the new mode exactly (no umask).
    c.write_file(p, 0o777, body(&[b"new"])).await.unwrap();
    assert_eq!(read_all(c, p).await, (0o777, b"new".to_vec()));
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("f.bin")]);

    // Names that need escaping travel intact.
    let odd = dir.join("a b&c=%d?.txt");
    c.write_file(odd.to_str().unwrap(), 0o600, body(&[b"odd"]))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&odd).unwrap(), b"odd");
    let (meta, _) = c.read_file(odd.to_str().unwrap()).await.unwrap();
    let mtime = std::fs::metadata(&odd).unwrap();
    assert_eq!(meta.mtime, std::os::unix::fs::MetadataExt::mtime(&mtime));
}

#[tokio::test]
async fn refuses_everything_but_regular_files() {
    let agent = start().await;
    let c = &agent.client;
    let root = agent.dir.path();
    let target = root.join("target.txt");
    std::fs::write(&target, b"keep").unwrap();
    let link = root.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = root.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let subdir = root.join("sub");
    std::fs::create_dir(&subdir).unwrap();
    let socket = root.join("agent.sock");

    for path in [&link, &fifo, &subdir, &socket] {
        let p = path.to_str().unwrap();
        assert_eq!(
            code(c.read_file(p).await),
            AgentErrorCode::NotARegularFile,
            "read {p}"
        );
        assert_eq!(
            code(c.write_file(p, 0o644, body(&[b"x"])).await),
            AgentErrorCode::NotARegularFile,
            "write {p}"
        );
    }
    for p in ["/", "/dev/null"] {
        assert_eq!(
            code(c.read_file(p).await),
            AgentErrorCode::NotARegularFile,
            "read {p}"
        );
    }
    assert_eq!(
        code(c.write_file("/", 0o644, body(&[b"x"])).await),
        AgentErrorCode::NotARegularFile
    );
    // The symlink's target was not touched.
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());

    let missing = root.join("missing");
    let m = missing.to_str().unwrap();
    assert_eq!(code(c.read_file(m).await), AgentErrorCode::FileNotFound);
    let in_missing = missing.join("f");
    let im = in_missing.to_str().unwrap();
    assert_eq!(
        code(c.write_file(im, 0o644, body(&[b"x"])).await),
        AgentErrorCode::FileNotFound
    );
    assert_eq!(
        code(c.read_file("relative/path").await),
        AgentErrorCode::InvalidArgument
    );
    assert_eq!(
        code(c.read_file("/tmp/a\0b").await),
        AgentErrorCode::InvalidArgument
    );
    let t = target.to_str().unwrap();
    assert_eq!(
        code(c.write_file(t, 0o17777, body(&[b"x"])).await),
        AgentErrorCode::InvalidArgument
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
}

/// The longest names and paths the kernel allows upload like any other: the temp file
/// of the atomic replace never makes a name or path too long (a 212-255 byte name or a
/// 4052-4095 byte path once answered ENAMETOOLONG).
#[tokio::test]
async fn the_longest_names_and_paths_upload() {
    let agent = start().await;
    let c = &agent.client;
    let dir = agent.dir.path().join("long");
    std::fs::create_dir(&dir).unwrap();
    for len in [212, 255] {
        let path = dir.join("n".repeat(len));
        let p = path.to_str().unwrap();
        let w = c.write_file(p, 0o644, body(&[b"named"])).await.unwrap();
        assert_eq!(w.bytes_written, 5, "{len}-byte name");
        assert_eq!(read_all(c, p).await.1, b"named");
    }
    // Directories of 200-byte names down to a 4095-byte path (PATH_MAX with its NUL).
    let mut deep = dir.clone();
    while deep.as_os_str().len() + 201 + 12 < 4095 {
        deep.push("d".repeat(200));
    }
    std::fs::create_dir_all(&deep).unwrap();
    let room = 4095 - deep.as_os_str().len() - 1;
    for name_len in [room, room - 30] {
        let path = deep.join("f".repeat(name_len));
        let p = path.to_str().unwrap();
        let w = c.write_file(p, 0o644, body(&[b"deep"])).await.unwrap();
        assert_eq!(w.bytes_written, 4, "a {}-byte path", p.len());
        assert_eq!(read_all(c, p).await.1, b"deep");
    }
    let left: Vec<_> = std::fs::read_dir(&deep)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
}
