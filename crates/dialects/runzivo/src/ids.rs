//! Runzivo sandbox IDs: `sbx_` + 24 lowercase hex characters. The engine's IDs are
//! UUIDs, so a Runzivo ID is the sandbox's alias in this dialect (given at create, found
//! through the engine's alias table), never derived by hashing.

/// The name this dialect's aliases (tenant ids, sandbox ids) are kept under.
pub const DIALECT: &str = "runzivo";

const PREFIX: &str = "sbx_";
const HEX_LEN: usize = 24;

/// A fresh random ID: 96 random bits, the first 48 (fully random) bits of two v4 UUIDs.
pub fn new_id() -> String {
    let half = || uuid::Uuid::new_v4().simple().to_string()[..HEX_LEN / 2].to_owned();
    format!("{PREFIX}{}{}", half(), half())
}

/// Whether `s` is a well-formed Runzivo sandbox ID.
pub fn is_valid(s: &str) -> bool {
    s.strip_prefix(PREFIX).is_some_and(|hex| {
        hex.len() == HEX_LEN
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_well_formed_and_distinct() {
        let (a, b) = (new_id(), new_id());
        assert!(is_valid(&a) && is_valid(&b) && a != b, "{a} {b}");
        assert_eq!(a.len(), 28);
    }

    #[test]
    fn rejects_malformed_ids() {
        for bad in [
            "",
            "sbx_",
            "sbx_0123456789abcdef0123456",
            "sbx_0123456789abcdef012345678",
            "sbx_0123456789ABCDEF01234567",
            "sbx-0123456789abcdef01234567",
            "sbx_0123456789abcdef0123456g",
        ] {
            assert!(!is_valid(bad), "{bad}");
        }
        assert!(is_valid("sbx_0123456789abcdef01234567"));
    }
}
