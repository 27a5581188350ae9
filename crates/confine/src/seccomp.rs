//! Builds and installs the seccomp programs: an allowlist (default `EPERM`) with argument
//! filters for `clone`, `unshare` and `personality`, a second program answering
//! `clone3` with `ENOSYS` so that libc falls back to the filterable `clone`, and two
//! more refusing socket families (`EAFNOSUPPORT`) and netlink protocols
//! (`EPROTONOSUPPORT`) outside the documented lists.

use crate::syscalls::{ARCH_SPECIFIC, COMMON, NETLINK_PROTOCOLS, PERSONALITIES, SOCKET_FAMILIES};
use crate::ConfineError;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::io;

/// The compiled programs, installed in order.
#[derive(Debug, Clone)]
pub(crate) struct Filters {
    programs: Vec<BpfProgram>,
}

/// Compiles both programs for the running architecture.
pub(crate) fn build() -> Result<Filters, ConfineError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| ConfineError::UnsupportedArch(std::env::consts::ARCH.to_owned()))?;
    let allow = allowlist(arch)?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(ConfineError::Seccomp)?;
    let families = SeccompFilter::new(
        other_families()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EAFNOSUPPORT as u32),
        arch,
    )
    .map_err(ConfineError::Seccomp)?;
    let netlink = SeccompFilter::new(
        other_netlink_protocols()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPROTONOSUPPORT as u32),
        arch,
    )
    .map_err(ConfineError::Seccomp)?;
    let mut programs = vec![allow];
    for filter in [clone3, families, netlink] {
        programs.push(BpfProgram::try_from(filter).map_err(ConfineError::Seccomp)?);
    }
    Ok(Filters { programs })
}

/// The allowlist program: seccompiler's chains for the syscalls with argument rules,
/// then a search over those allowed whatever their arguments (`seccomp_tree`).
fn allowlist(arch: TargetArch) -> Result<BpfProgram, ConfineError> {
    let (unconditional, ruled): (BTreeMap<_, _>, BTreeMap<_, _>) = allow_rules()?
        .into_iter()
        .partition(|(_, rules)| rules.is_empty());
    let deny = SeccompAction::Errno(libc::EPERM as u32);
    let chains = SeccompFilter::new(ruled, deny.clone(), SeccompAction::Allow, arch)
        .and_then(BpfProgram::try_from)
        .map_err(ConfineError::Seccomp)?;
    let numbers: Vec<u32> = unconditional
        .into_keys()
        .map(|nr| u32::try_from(nr).map_err(|_| ConfineError::Shape("a negative syscall number")))
        .collect::<Result<_, _>>()?;
    crate::seccomp_tree::with_search(
        chains,
        &numbers,
        u32::from(SeccompAction::Allow),
        u32::from(deny),
    )
}

/// The allowlist as seccompiler alone compiles it (one comparison per syscall): what
/// [`allowlist`] must decide exactly alike.
#[cfg(test)]
pub(crate) fn chained_allowlist() -> BpfProgram {
    let arch = TargetArch::try_from(std::env::consts::ARCH).expect("arch");
    SeccompFilter::new(
        allow_rules().expect("rules"),
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .and_then(BpfProgram::try_from)
    .expect("the chained allowlist")
}

/// [`allowlist`] for the running architecture.
#[cfg(test)]
pub(crate) fn searched_allowlist() -> BpfProgram {
    allowlist(TargetArch::try_from(std::env::consts::ARCH).expect("arch")).expect("allowlist")
}

fn allow_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, ConfineError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = COMMON
        .iter()
        .chain(ARCH_SPECIFIC)
        .map(|nr| (*nr, Vec::new()))
        .collect();
    // clone3 passes this program; the second program turns it into ENOSYS.
    rules.insert(libc::SYS_clone3, Vec::new());
    let no_newuser = |len| {
        let flag = libc::CLONE_NEWUSER as u64;
        SeccompCondition::new(0, len, SeccompCmpOp::MaskedEq(flag), 0)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(ConfineError::Seccomp)
    };
    rules.insert(libc::SYS_clone, vec![no_newuser(SeccompCmpArgLen::Qword)?]);
    rules.insert(
        libc::SYS_unshare,
        vec![no_newuser(SeccompCmpArgLen::Dword)?],
    );
    let personality = PERSONALITIES
        .iter()
        .map(|p| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *p)
                .and_then(|c| SeccompRule::new(vec![c]))
                .map_err(ConfineError::Seccomp)
        })
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_personality, personality);
    Ok(rules)
}

/// Matches `socket` and `socketpair` whose family is none of [`SOCKET_FAMILIES`].
fn other_families() -> Result<BTreeMap<i64, Vec<SeccompRule>>, ConfineError> {
    let rule = || {
        let conds = SOCKET_FAMILIES
            .iter()
            .map(|f| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *f)
                    .map_err(ConfineError::Seccomp)
            })
            .collect::<Result<Vec<_>, _>>()?;
        SeccompRule::new(conds).map_err(ConfineError::Seccomp)
    };
    Ok(BTreeMap::from([
        (libc::SYS_socket, vec![rule()?]),
        (libc::SYS_socketpair, vec![rule()?]),
    ]))
}

/// Matches `socket(AF_NETLINK, _, protocol)` for a protocol not in [`NETLINK_PROTOCOLS`].
fn other_netlink_protocols() -> Result<BTreeMap<i64, Vec<SeccompRule>>, ConfineError> {
    let netlink = libc::AF_NETLINK as u64;
    let mut conds =
        vec![
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, netlink)
                .map_err(ConfineError::Seccomp)?,
        ];
    for proto in NETLINK_PROTOCOLS {
        conds.push(
            SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *proto)
                .map_err(ConfineError::Seccomp)?,
        );
    }
    let rule = SeccompRule::new(conds).map_err(ConfineError::Seccomp)?;
    Ok(BTreeMap::from([(libc::SYS_socket, vec![rule])]))
}

impl Filters {
    /// Installs the programs on the calling thread (no_new_privs must already be set).
    pub(crate) fn apply(&self) -> io::Result<()> {
        for program in &self.programs {
            seccompiler::apply_filter(program).map_err(|e| match e {
                seccompiler::Error::Seccomp(io) | seccompiler::Error::Prctl(io) => io,
                _ => io::Error::from_raw_os_error(libc::EINVAL),
            })?;
        }
        Ok(())
    }

    /// How many programs get installed (for tests).
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.programs.len()
    }
}

/// The syscall numbers the allowlist admits, with or without argument filters.
#[cfg(test)]
pub(crate) fn allowed_numbers() -> Vec<i64> {
    allow_rules()
        .map(|r| r.into_keys().collect())
        .unwrap_or_default()
}
