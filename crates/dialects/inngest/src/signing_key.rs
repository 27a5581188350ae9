//! The key the Inngest SDK really sends: not its signing key, but a hash of it.
//!
//! `inngest.sandboxes` authenticates with `Bearer <prefix><sha256(hex-decoded key)>`,
//! where `<prefix>` is a leading `signkey-<env>-` kept as is. Registering this form next
//! to a configured key lets users give the SDK the same string they give sandboxd.
//!
//! Only a key whose secret part is all hex, at least [`MIN_SECRET_BYTES`] bytes of it,
//! has this form: the SDK hashes whatever hex prefix it can decode, so a key that is not
//! hex would map to the hash of an empty or short buffer, a bearer anyone can compute.

use sha2::{Digest, Sha256};

/// The least secret a key's SDK form is derived from.
pub const MIN_SECRET_BYTES: usize = 16;

/// The string the SDK sends for `signing_key`: `Some` only when the key is
/// `[signkey-<env>-]<hex>` with at least [`MIN_SECRET_BYTES`] bytes of hex.
pub fn sdk_bearer_for(signing_key: &str) -> Option<String> {
    let (prefix, body) = split_prefix(signing_key);
    let secret = hex::decode(body).ok()?;
    if secret.len() < MIN_SECRET_BYTES {
        return None;
    }
    Some(format!("{prefix}{}", hex::encode(Sha256::digest(secret))))
}

/// The `signkey-<env>-` prefix of a key made for `env` (`\w` characters kept, others
/// dropped; `sandboxd` when none are left).
pub fn signing_key_prefix(env: &str) -> String {
    let word: String = env
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    match word.is_empty() {
        true => "signkey-sandboxd-".to_owned(),
        false => format!("signkey-{word}-"),
    }
}

/// Splits a leading `signkey-<word chars>-` off, as the SDK's `/^signkey-[\w]+-/` does.
fn split_prefix(key: &str) -> (&str, &str) {
    if let Some(rest) = key.strip_prefix("signkey-") {
        let word = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        if word > 0 && rest.as_bytes().get(word) == Some(&b'-') {
            let end = "signkey-".len() + word + 1;
            return (&key[..end], &key[end..]);
        }
    }
    ("", key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "signkey-prod-00112233445566778899aabbccddeeff";

    #[test]
    fn hashes_the_hex_body_and_keeps_the_prefix() {
        let secret = hex::decode("00112233445566778899aabbccddeeff").unwrap();
        let want = format!("signkey-prod-{}", hex::encode(Sha256::digest(secret)));
        assert_eq!(sdk_bearer_for(KEY), Some(want));
        assert!(sdk_bearer_for("00112233445566778899aabbccddeeff").is_some());
    }

    #[test]
    fn keys_that_are_not_long_hex_have_no_sdk_form() {
        // Not hex at all: the SDK would send sha256 of an empty buffer (e3b0c442…).
        assert_eq!(sdk_bearer_for("any-non-hex-master-key-123"), None);
        // Hex only in part, odd length, or too short a secret.
        assert_eq!(
            sdk_bearer_for("signkey-prod-0a0bzz0c0d0e0f101112131415161718"),
            None
        );
        assert_eq!(
            sdk_bearer_for("signkey-prod-00112233445566778899aabbccddeef"),
            None
        );
        assert_eq!(
            sdk_bearer_for("signkey-prod-00112233445566778899aabbccddee"),
            None
        );
        assert_eq!(sdk_bearer_for("signkey-prod-"), None);
    }

    #[test]
    fn splits_the_prefix_like_the_sdk() {
        assert_eq!(split_prefix("signkey-test-ff"), ("signkey-test-", "ff"));
        assert_eq!(split_prefix("signkey--ff"), ("", "signkey--ff"));
        assert_eq!(signing_key_prefix("acme-env"), "signkey-acmeenv-");
        assert_eq!(signing_key_prefix("--"), "signkey-sandboxd-");
    }
}
