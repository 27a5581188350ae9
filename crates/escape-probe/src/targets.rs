//! What the driving test planted on the host for the probe to go after.

use std::path::PathBuf;

/// Host-side facts the probe must not be able to use.
#[derive(Debug, Default)]
pub struct Targets {
    /// A PID of a host process (the test itself).
    pub host_pid: Option<i32>,
    /// A host file outside the image.
    pub marker: Option<PathBuf>,
    /// A TCP port listening on the host's 127.0.0.1.
    pub port: Option<u16>,
    /// Host paths of another sandbox (its state dir, its root).
    pub other_paths: Vec<PathBuf>,
    /// The host path of another sandbox's agent control socket.
    pub other_socket: Option<PathBuf>,
    /// A path that exists inside another sandbox only.
    pub other_file: Option<PathBuf>,
    /// Host strings (the data dir, sandbox ids) the sandbox's views of its own mounts
    /// and sockets must not contain.
    pub host_strings: Vec<String>,
}

impl Targets {
    /// Parses `--flag value` pairs.
    pub fn from_args(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut t = Targets::default();
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--host-pid" => t.host_pid = Some(parse(&flag, &value)?),
                "--marker" => t.marker = Some(value.into()),
                "--port" => t.port = Some(parse(&flag, &value)?),
                "--other-path" => t.other_paths.push(value.into()),
                "--other-socket" => t.other_socket = Some(value.into()),
                "--other-file" => t.other_file = Some(value.into()),
                "--host-string" => t.host_strings.push(value),
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(t)
    }
}

fn parse<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: bad value {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> impl Iterator<Item = String> {
        v.iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn parses_every_flag() {
        let t = Targets::from_args(args(&[
            "--host-pid",
            "42",
            "--port",
            "80",
            "--other-path",
            "/a",
            "--other-path",
            "/b",
        ]))
        .expect("parse");
        assert_eq!(t.host_pid, Some(42));
        assert_eq!(t.port, Some(80));
        assert_eq!(
            t.other_paths,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
    }

    #[test]
    fn rejects_unknown_and_incomplete_flags() {
        assert!(Targets::from_args(args(&["--nope", "1"])).is_err());
        assert!(Targets::from_args(args(&["--port"])).is_err());
        assert!(Targets::from_args(args(&["--port", "x"])).is_err());
    }
}
