//! Secret encryption at rest: XChaCha20-Poly1305 with a key file (0600) and a random
//! nonce per value; the workspace and name are bound in as associated data.

use crate::error::StoreError;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;

/// Encrypts and decrypts secret values with the data directory's key.
pub(crate) struct SecretBox {
    cipher: XChaCha20Poly1305,
}

impl SecretBox {
    /// Loads the key file, creating it (mode 0600, random key) when absent.
    pub(crate) fn load_or_create(path: &Path) -> Result<Self, StoreError> {
        let io = |what, source| StoreError::Io {
            what,
            path: path.to_owned(),
            source,
        };
        // A new key is written in full under a temporary name and then linked into
        // place, so a process opening the store at the same moment never reads a key
        // file still being written: it finds none (and races to link its own, losing
        // cleanly) or a whole one.
        if !path.exists() {
            let key = XChaCha20Poly1305::generate_key(&mut OsRng);
            let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| io("create the secret key", e))?;
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .map_err(|e| io("write the secret key", e))?;
            let linked = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io("store the secret key", e)),
            }
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| io("read the secret key", e))?;
        if bytes.len() != KEY_LEN {
            return Err(StoreError::Corrupt(format!(
                "secret key file {} holds {} bytes, expected {KEY_LEN}",
                path.display(),
                bytes.len()
            )));
        }
        let key = *Key::from_slice(&bytes);
        Ok(Self {
            cipher: XChaCha20Poly1305::new(&key),
        })
    }

    /// nonce ‖ ciphertext+tag.
    pub(crate) fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, StoreError> {
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, Payload { msg: plain, aad })
            .map_err(|_| StoreError::Crypto)?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    pub(crate) fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        if sealed.len() < NONCE_LEN {
            return Err(StoreError::Corrupt("secret value too short".into()));
        }
        let (nonce, msg) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg, aad })
            .map_err(|_| StoreError::Corrupt("secret value fails authentication".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn seals_with_fresh_nonces_and_reloads_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        let sbox = SecretBox::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let a = sbox.seal(b"ws/name", b"hunter2").unwrap();
        let b = sbox.seal(b"ws/name", b"hunter2").unwrap();
        assert_ne!(a, b, "every value gets its own nonce");
        let again = SecretBox::load_or_create(&path).unwrap();
        assert_eq!(again.open(b"ws/name", &a).unwrap(), b"hunter2");
        assert!(
            again.open(b"ws/other", &a).is_err(),
            "bound to its workspace and name"
        );
    }
}
