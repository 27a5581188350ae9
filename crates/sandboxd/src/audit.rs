//! `sandboxd audit --workspace W [--since …]`: a workspace's audit trail (who created,
//! destroyed, paused, resumed or snapshotted which sandbox, when, and how it ended),
//! read straight from the data directory's store, beside a running server or not.
//! Also how the data-directory commands (`keys`, `quota`) append to that trail.

use crate::keys::WorkspaceTarget;
use anyhow::{bail, Context, Result};
use clap::Args;
use sandboxd_store::Store;
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// Most entries one listing prints.
const LIMIT: u32 = 10_000;

#[derive(Args)]
pub struct AuditArgs {
    #[command(flatten)]
    target: WorkspaceTarget,
    /// Entries from this time on: RFC 3339 (`2026-12-01T00:00:00Z`) or an age
    /// (`90s`, `30m`, `12h`, `7d`) [default: everything kept].
    #[arg(long)]
    since: Option<String>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn main(args: AuditArgs) -> Result<()> {
    let since = match &args.since {
        Some(raw) => parse_since(raw, OffsetDateTime::now_utc())?,
        None => OffsetDateTime::UNIX_EPOCH,
    };
    let (store, ws) = args.target.open()?;
    let entries = store.list_audit(&ws.id, since, LIMIT)?;
    if !args.json {
        println!(
            "{:<30} {:<18} {:<36} {:<36} {:<20} REQUEST",
            "TIME", "ACTION", "TARGET", "KEY", "OUTCOME"
        );
    }
    for e in entries {
        let at = e.at.format(&Rfc3339).unwrap_or_default();
        let key = e.key_id.as_deref().unwrap_or("-");
        if args.json {
            let line = serde_json::json!({
                "at": at, "workspace": e.workspace, "action": e.action, "target": e.target,
                "keyId": e.key_id, "outcome": e.outcome, "requestId": e.request_id,
            });
            println!("{line}");
        } else {
            // Targets and request ids come from clients: their control characters
            // (terminal escapes, newlines forging lines) are shown escaped.
            println!(
                "{:<30} {:<18} {:<36} {:<36} {:<20} {}",
                at,
                shown(&e.action),
                shown(e.target.as_deref().unwrap_or("-")),
                shown(key),
                shown(&e.outcome),
                shown(e.request_id.as_deref().unwrap_or("-"))
            );
        }
    }
    Ok(())
}

/// `text` for a terminal: control characters as Rust escapes (`\u{1b}`, `\n`).
fn shown(text: &str) -> String {
    text.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// An RFC 3339 time, or an age before `now` (`<n>s|m|h|d`).
fn parse_since(raw: &str, now: OffsetDateTime) -> Result<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(raw, &Rfc3339) {
        return Ok(t);
    }
    let split = raw.len().saturating_sub(1);
    let (n, unit) = raw.split_at(split);
    let n: i64 = n
        .parse()
        .with_context(|| format!("--since {raw:?} is neither RFC 3339 nor an age like 12h"))?;
    let age = match unit {
        "s" => Duration::seconds(n),
        "m" => Duration::minutes(n),
        "h" => Duration::hours(n),
        "d" => Duration::days(n),
        _ => bail!("--since {raw:?}: an age ends in s, m, h or d"),
    };
    Ok(now - age)
}

/// Who a change made with a command on the data directory is audited as.
pub const CLI_ACTOR: &str = "cli";

/// Appends to `ws`'s audit trail that the command line did `action` on `target`
/// (a key's id, a workspace's). A failure to append fails the command after its change:
/// the change stands, and the operator is told it is not in the trail.
pub fn record_cli(
    store: &dyn sandboxd_store::Store,
    ws: &str,
    action: &str,
    target: &str,
) -> Result<()> {
    let rec = sandboxd_store::AuditRecord {
        at: time::OffsetDateTime::now_utc(),
        workspace: ws.to_owned(),
        key_id: Some(CLI_ACTOR.to_owned()),
        request_id: None,
        action: action.to_owned(),
        target: Some(target.to_owned()),
        outcome: "ok".to_owned(),
    };
    store
        .insert_audit(&rec)
        .with_context(|| format!("{action} done, but not recorded in the audit trail"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (REVIEW13 #5): a target's terminal escapes reached the operator's
    /// terminal as they were (retitle, clear, a forged line).
    #[test]
    fn control_characters_are_shown_escaped() {
        let hostile = "x\u{1b}]0;PWNED\u{7}\u{1b}[2J\nfake-line";
        let out = shown(hostile);
        assert!(!out.chars().any(char::is_control), "{out:?}");
        assert!(
            out.contains("\\u{1b}]0;PWNED") && out.contains("\\nfake-line"),
            "{out}"
        );
        assert_eq!(shown("sandbox-ok é"), "sandbox-ok é");
    }

    #[test]
    fn since_takes_times_and_ages() {
        let now = OffsetDateTime::parse("2026-12-01T12:00:00Z", &Rfc3339).unwrap();
        let t = |s: &str| parse_since(s, now).unwrap().format(&Rfc3339).unwrap();
        assert_eq!(t("2026-11-30T00:00:00Z"), "2026-11-30T00:00:00Z");
        assert_eq!(t("2h"), "2026-12-01T10:00:00Z");
        assert_eq!(t("1d"), "2026-11-30T12:00:00Z");
        assert!(parse_since("yesterday", now).is_err());
        assert!(parse_since("5w", now).is_err());
        assert!(parse_since("", now).is_err());
    }
}
