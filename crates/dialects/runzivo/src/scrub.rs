//! Engine messages speak of sandboxes by their internal UUIDs, which mean nothing to a
//! Runzivo client (its sandboxes are `sbx_…`): they are taken out of the messages.

/// `message` with every `sandbox <uuid>` said as `the sandbox`, and any other UUID left
/// out.
pub fn without_engine_ids(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = find_uuid(rest) {
        let before = &rest[..at];
        match before.strip_suffix("sandbox ") {
            Some(head) if head.is_empty() || head.ends_with(' ') => {
                out.push_str(head);
                out.push_str("the sandbox");
            }
            _ => {
                out.push_str(before);
                out.push_str("(id)");
            }
        }
        rest = &rest[at + 36..];
    }
    out.push_str(rest);
    out
}

/// Where the first hyphenated UUID in `s` starts.
fn find_uuid(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    (0..b.len().saturating_sub(35)).find(|&i| is_uuid(&b[i..i + 36]))
}

fn is_uuid(b: &[u8]) -> bool {
    b.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == b'-',
        _ => c.is_ascii_hexdigit(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_ids_are_left_out() {
        let id = "da2bc639-0a1b-4c2d-8e3f-123456789abc";
        assert_eq!(
            without_engine_ids(&format!("sandbox {id} failed to start: no loop device")),
            "the sandbox failed to start: no loop device"
        );
        assert_eq!(
            without_engine_ids(&format!("process of sandbox {id} in {id}")),
            "process of the sandbox in (id)"
        );
        assert_eq!(without_engine_ids("no ids here"), "no ids here");
    }
}
