//! `sandboxd network-policy set|show|clear`: a workspace's egress policy (the first
//! policy layer of its sandboxes), straight on the data directory's store. It applies
//! to sandboxes created afterwards.

use crate::keys::WorkspaceTarget;
use anyhow::Result;
use clap::Subcommand;
use sandboxd_engine::egress;
use sandboxd_engine::{EgressPolicy, EgressRule};

#[derive(Subcommand)]
pub enum NetworkPolicyCommand {
    /// Set (replace) the policy. A RULE is an IPv4 CIDR or a domain name; with no
    /// --allow every destination the other rules leave is allowed; --deny always wins.
    Set {
        /// A destination to allow (repeatable); when any is given, only these.
        #[arg(long = "allow", value_name = "RULE")]
        allow: Vec<EgressRule>,
        /// A destination to deny (repeatable).
        #[arg(long = "deny", value_name = "RULE")]
        deny: Vec<EgressRule>,
        #[command(flatten)]
        target: WorkspaceTarget,
    },
    /// Print the policy: `allow RULE` and `deny RULE` lines (nothing when unset).
    Show {
        #[command(flatten)]
        target: WorkspaceTarget,
    },
    /// Remove the policy (sandboxes then reach every allowed-by-default destination).
    Clear {
        #[command(flatten)]
        target: WorkspaceTarget,
    },
}

pub fn main(command: NetworkPolicyCommand) -> Result<()> {
    let target = match &command {
        NetworkPolicyCommand::Set { target, .. }
        | NetworkPolicyCommand::Show { target }
        | NetworkPolicyCommand::Clear { target } => target,
    };
    let (store, ws) = target.open()?;
    match command {
        NetworkPolicyCommand::Set { allow, deny, .. } => {
            egress::set_workspace_policy(&store, &ws.id, &EgressPolicy { allow, deny })?;
            eprintln!("egress policy set for workspace {}", ws.id);
        }
        NetworkPolicyCommand::Show { .. } => {
            if let Some(policy) = egress::workspace_policy(&store, &ws.id)? {
                print!("{}", render(&policy));
            }
        }
        NetworkPolicyCommand::Clear { .. } => {
            let had = egress::clear_workspace_policy(&store, &ws.id)?;
            match had {
                true => eprintln!("egress policy of workspace {} cleared", ws.id),
                false => eprintln!("workspace {} had no egress policy", ws.id),
            }
        }
    }
    Ok(())
}

/// One line per rule, allows first.
fn render(policy: &EgressPolicy) -> String {
    let allow = policy.allow.iter().map(|r| format!("allow {r}\n"));
    let deny = policy.deny.iter().map(|r| format!("deny {r}\n"));
    allow.chain(deny).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line_per_rule() {
        let policy = EgressPolicy {
            allow: vec!["10.1.2.3/8".parse().expect("cidr")],
            deny: vec!["Bad.Test".parse().expect("domain")],
        };
        assert_eq!(render(&policy), "allow 10.0.0.0/8\ndeny bad.test\n");
        assert_eq!(render(&EgressPolicy::default()), "");
    }
}
