//! `sandboxd quota set|show`: a workspace's quota override (active sandboxes, vCPUs,
//! memory) straight on the data directory's store; a running `serve` applies it to
//! its next create. Limits left unset keep the server's `[workspace_quota]`.

use crate::keys::WorkspaceTarget;
use anyhow::Result;
use clap::Subcommand;
use sandboxd_store::{QuotaOverrideRecord, Store};

#[derive(Subcommand)]
pub enum QuotaCommand {
    /// Set limits of a workspace's override (the ones not given stay as they were).
    Set {
        /// Active sandboxes at once.
        #[arg(long)]
        sandboxes: Option<u32>,
        /// vCPUs of its active sandboxes, summed.
        #[arg(long)]
        vcpu: Option<u32>,
        /// Memory of its active sandboxes, summed, in MiB.
        #[arg(long = "memory-mb")]
        memory_mb: Option<u64>,
        /// Drop the limits not given, back to the server's defaults.
        #[arg(long)]
        reset: bool,
        #[command(flatten)]
        target: WorkspaceTarget,
    },
    /// Print a workspace's override, `default` for limits it leaves to the server.
    Show {
        #[command(flatten)]
        target: WorkspaceTarget,
    },
}

pub fn main(command: QuotaCommand) -> Result<()> {
    let (QuotaCommand::Set { target, .. } | QuotaCommand::Show { target }) = &command;
    let (store, ws) = target.open()?;
    let current = store.get_quota_override(&ws.id)?;
    let rec = match command {
        QuotaCommand::Show { .. } => current,
        QuotaCommand::Set {
            sandboxes,
            vcpu,
            memory_mb,
            reset,
            ..
        } => {
            let kept = current.filter(|_| !reset);
            let rec = QuotaOverrideRecord {
                workspace: ws.id.clone(),
                max_sandboxes: sandboxes.or(kept.as_ref().and_then(|k| k.max_sandboxes)),
                max_vcpu: vcpu.or(kept.as_ref().and_then(|k| k.max_vcpu)),
                max_memory_mb: memory_mb.or(kept.as_ref().and_then(|k| k.max_memory_mb)),
                updated_at: time::OffsetDateTime::now_utc(),
            };
            store.set_quota_override(&rec)?;
            crate::audit::record_cli(&store, &ws.id, "quota.set", &ws.id)?;
            eprintln!("quota of workspace {} set", ws.id);
            Some(rec)
        }
    };
    print!("{}", describe(rec.as_ref()));
    Ok(())
}

/// One `limit: value` line per limit, `default` where the override sets none.
fn describe(rec: Option<&QuotaOverrideRecord>) -> String {
    let show = |v: Option<u64>| v.map_or_else(|| "default".to_owned(), |n| n.to_string());
    let get = |f: fn(&QuotaOverrideRecord) -> Option<u64>| show(rec.and_then(f));
    format!(
        "sandboxes: {}\nvcpu: {}\nmemory_mb: {}\n",
        get(|r| r.max_sandboxes.map(u64::from)),
        get(|r| r.max_vcpu.map(u64::from)),
        get(|r| r.max_memory_mb),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_set_and_default_limits() {
        assert_eq!(
            describe(None),
            "sandboxes: default\nvcpu: default\nmemory_mb: default\n"
        );
        let rec = QuotaOverrideRecord {
            workspace: "w".into(),
            max_sandboxes: Some(2),
            max_vcpu: None,
            max_memory_mb: Some(4096),
            updated_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        assert_eq!(
            describe(Some(&rec)),
            "sandboxes: 2\nvcpu: default\nmemory_mb: 4096\n"
        );
    }
}
