//! The key the Inngest SDK really sends: not its signing key, but a hash of it.
//!
//! `inngest.sandboxes` authenticates with `Bearer <prefix><sha256(hex-decoded key)>`,
//! where `<prefix>` is a leading `signkey-<env>-` kept as is. Registering this form next
//! to a configured key lets users give the SDK the same string they give sandboxd.

use sha2::{Digest, Sha256};

/// The string the SDK sends for `signing_key`, when that differs from the key itself.
pub fn sdk_bearer_for(signing_key: &str) -> Option<String> {
    let (prefix, body) = split_prefix(signing_key);
    let hashed = format!(
        "{prefix}{}",
        hex::encode(Sha256::digest(node_hex_decode(body)))
    );
    (hashed != signing_key).then_some(hashed)
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

/// Node's `Buffer.from(s, "hex")`: decodes pairs until the first pair that is not hex.
fn node_hex_decode(s: &str) -> Vec<u8> {
    s.as_bytes()
        .chunks_exact(2)
        .map_while(|pair| {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_the_hex_body_and_keeps_the_prefix() {
        // sha256 of the bytes 0x01 0x02.
        let got = sdk_bearer_for("signkey-prod-0102").expect("hashed");
        assert_eq!(
            got,
            "signkey-prod-a12871fee210fb8619291eaea194581cbd2531e4b23759d225f6806923f63222"
        );
    }

    #[test]
    fn stops_decoding_at_the_first_non_hex_pair_like_node() {
        assert_eq!(node_hex_decode("0a0bzz0c"), vec![0x0a, 0x0b]);
        assert_eq!(node_hex_decode("abc"), vec![0xab]);
        assert_eq!(split_prefix("signkey-test-ff"), ("signkey-test-", "ff"));
        assert_eq!(split_prefix("signkey--ff"), ("", "signkey--ff"));
    }
}
