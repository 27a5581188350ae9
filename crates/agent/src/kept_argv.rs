//! The part of a managed process's command line the registry keeps for listing: a
//! bounded prefix (the process itself runs with all of it).

use sandboxd_agent_protocol::limits::{KEPT_ARGS, KEPT_ARGV_BYTES};

/// At most [`KEPT_ARGS`] arguments and [`KEPT_ARGV_BYTES`] bytes of `argv` (the last
/// kept argument cut at a character boundary), and whether anything was left out.
pub(crate) fn kept_argv(argv: &[String]) -> (Vec<String>, bool) {
    let mut kept = Vec::with_capacity(argv.len().min(KEPT_ARGS));
    let mut room = KEPT_ARGV_BYTES;
    for arg in argv.iter().take(KEPT_ARGS) {
        if arg.len() <= room {
            room -= arg.len();
            kept.push(arg.clone());
            continue;
        }
        let mut end = room;
        while !arg.is_char_boundary(end) {
            end -= 1;
        }
        if end > 0 {
            kept.push(arg[..end].to_owned());
        }
        return (kept, true);
    }
    let truncated = argv.len() > kept.len();
    (kept, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_command_line_is_kept_whole() {
        let argv: Vec<String> = ["/bin/echo", "hi", ""].map(String::from).to_vec();
        assert_eq!(kept_argv(&argv), (argv, false));
    }

    #[test]
    fn a_long_argument_is_cut_at_a_character_boundary() {
        let argv = vec!["/bin/true".to_owned(), "é".repeat(KEPT_ARGV_BYTES)];
        let (kept, truncated) = kept_argv(&argv);
        assert!(truncated);
        assert_eq!(kept[0], "/bin/true");
        let bytes: usize = kept.iter().map(String::len).sum();
        assert!(
            bytes <= KEPT_ARGV_BYTES && bytes > KEPT_ARGV_BYTES - 2,
            "{bytes}"
        );
        assert!(kept[1].chars().all(|c| c == 'é'));
    }

    #[test]
    fn many_arguments_are_capped_by_count() {
        let argv = vec![String::new(); KEPT_ARGS * 10];
        let (kept, truncated) = kept_argv(&argv);
        assert_eq!((kept.len(), truncated), (KEPT_ARGS, true));
    }
}
