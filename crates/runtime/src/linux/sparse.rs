//! A file's data runs (SEEK_DATA/SEEK_HOLE): the ranges that hold bytes, so that a
//! sparse file costs what it stores, not its length, to read and hash.

use crate::Cancel;
use rustix::fs::SeekFrom;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;

/// `(offset, length)` of each data range of `file` (`len` bytes long), in order. A
/// filesystem without SEEK_DATA answers one run over the whole file.
pub fn data_runs(file: &File, len: u64, cancel: &Cancel) -> std::io::Result<Vec<(u64, u64)>> {
    let mut runs = Vec::new();
    let mut at = 0u64;
    while at < len {
        cancel.check()?;
        let start = match rustix::fs::seek(file, SeekFrom::Data(at)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => break, // only a hole from `at` on
            Err(rustix::io::Errno::INVAL) if at == 0 => return Ok(vec![(0, len)]),
            Err(e) => return Err(e.into()),
        };
        if start >= len {
            break;
        }
        let end = rustix::fs::seek(file, SeekFrom::Hole(start))?.min(len);
        runs.push((start, end - start));
        at = end;
    }
    Ok(runs)
}

/// Whether `runs` cover the whole `len` bytes (a file with no holes).
pub fn is_dense(runs: &[(u64, u64)], len: u64) -> bool {
    len == 0 || runs == [(0, len)]
}

/// Reads the bytes of `runs` one after the other, checking `cancel` for each chunk.
pub struct RunsReader<'a> {
    file: &'a File,
    runs: std::slice::Iter<'a, (u64, u64)>,
    current: Option<(u64, u64)>,
    cancel: &'a Cancel,
}

impl<'a> RunsReader<'a> {
    pub fn new(file: &'a File, runs: &'a [(u64, u64)], cancel: &'a Cancel) -> Self {
        Self {
            file,
            runs: runs.iter(),
            current: None,
            cancel,
        }
    }
}

impl Read for RunsReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.cancel.check()?;
        loop {
            match self.current {
                Some((_, 0)) | None => match self.runs.next() {
                    Some(&run) => self.current = Some(run),
                    None => return Ok(0),
                },
                Some((at, left)) => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.file.read_at(&mut buf[..want], at)?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.current = Some((at + n as u64, left - n as u64));
                    return Ok(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_skip_holes_and_read_back_only_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let f = File::create(&path).expect("create");
        f.set_len(64 << 20).expect("sparse length");
        f.write_all_at(b"abc", 32 << 20).expect("write");
        f.sync_all().expect("sync");
        let f = File::open(&path).expect("open");
        let cancel = Cancel::new();
        let runs = data_runs(&f, 64 << 20, &cancel).expect("runs");
        let data: u64 = runs.iter().map(|r| r.1).sum();
        assert!(!is_dense(&runs, 64 << 20), "{runs:?}");
        assert!(data < 1 << 20, "one block or so of data: {runs:?}");
        let mut read = Vec::new();
        RunsReader::new(&f, &runs, &cancel)
            .read_to_end(&mut read)
            .expect("read");
        assert_eq!(read.len() as u64, data);
        assert!(read.windows(3).any(|w| w == b"abc"));
        cancel.cancel();
        assert!(RunsReader::new(&f, &runs, &cancel)
            .read(&mut [0; 8])
            .is_err());
    }

    #[test]
    fn a_file_without_holes_is_one_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 10_000]).expect("write");
        let f = File::open(&path).expect("open");
        let runs = data_runs(&f, 10_000, &Cancel::new()).expect("runs");
        assert!(is_dense(&runs, 10_000), "{runs:?}");
    }
}
