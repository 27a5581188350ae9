//! Egress-only networking for the Linux backend: a routed veth per sandbox from a
//! private pool, masqueraded and filtered by nftables (see `nft`), with domain rules
//! resolved at start through the configured resolvers.

mod batch;
mod conntrack;
mod dns;
mod host;
mod inner;
mod libnft;
mod link;
mod netlink;
pub(super) mod netns;
mod nfdump;
mod nfexpr;
mod nfset;
mod nft;
mod nftable;
mod nlsock;
pub(super) mod parked;
pub(super) mod policy;
mod resolv;
pub(super) mod spares;
pub(super) mod wired;

use super::{rootfs, LinuxRuntime};
use crate::{Cidr, NetworkMode, NetworkSpec, Runtime, RuntimeError, SandboxHandle, SandboxSpec};
use host::{HostLock, RulesLock};
use policy::Policy;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// How sandboxes reach the outside.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Private IPv4 pool the sandboxes' /30s come from (one per sandbox).
    pub pool: Cidr,
    /// Resolvers the sandboxes use (their `resolv.conf`) and domain rules are resolved
    /// with. They must be reachable through the host's routes and not on the host.
    pub resolvers: Vec<Ipv4Addr>,
    /// Host-wide state (leases, lock) shared by every sandboxd on the host.
    pub state_dir: PathBuf,
}

impl NetConfig {
    /// Pool `10.213.0.0/16`, the host's own IPv4 upstream resolvers from
    /// `/etc/resolv.conf` (loopback stubs cannot serve sandboxes and are skipped).
    pub fn from_host() -> Self {
        let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        NetConfig {
            pool: Cidr {
                addr: Ipv4Addr::new(10, 213, 0, 0),
                prefix: 16,
            },
            resolvers: parse_resolvers(&conf),
            state_dir: PathBuf::from("/run/sandboxd/net"),
        }
    }
}

fn parse_resolvers(conf: &str) -> Vec<Ipv4Addr> {
    conf.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<Ipv4Addr>().ok())
        .filter(|a| !a.is_loopback() && !a.is_unspecified())
        .collect()
}

/// Interface name and nft key of the sandbox holding `lease` (named after a spare's id
/// when it took a spare).
fn lease_names(id: Uuid, lease: &host::Lease) -> (String, String) {
    names(lease.named_after.unwrap_or(id))
}

/// Interface name and nft key of a sandbox (fits IFNAMSIZ).
fn names(id: Uuid) -> (String, String) {
    let key: String = id.simple().to_string().chars().take(12).collect();
    (format!("{}{key}", nft::IF_PREFIX), key)
}

impl LinuxRuntime {
    /// Enables egress networking for [`Runtime::start_with_network`].
    /// Takes back the host's networks nothing keeps any more first (see
    /// [`take_back_strays`]).
    pub fn with_network(mut self, config: NetConfig) -> Self {
        parked::resume_reaper(&config.state_dir, &self.config.init_exe);
        take_back_strays(&config);
        self.network = Some(config);
        self
    }

    /// Parks the host side of each egress network without a policy at destroy instead
    /// of removing it (see `parked`), for a one-shot process such as `sandboxd run`:
    /// the next one takes it over with no `nft` run, and the shared table stays until
    /// the parked networks have lingered untaken.
    pub fn with_parked_networks(mut self) -> Self {
        self.park_networks = true;
        self
    }

    /// The sandbox's own address when it has egress networking.
    pub fn sandbox_address(&self, id: Uuid) -> Option<Ipv4Addr> {
        let config = self.network.as_ref()?;
        HostLock::take(&config.state_dir)
            .ok()?
            .lease(id)
            .map(|l| l.sandbox())
    }
}

/// Starts the sandbox and gives it its network; removes everything if either fails.
///
/// The host side (lease, firewall entries keyed by the interface name) is made on a
/// second thread while the sandbox starts, so its cost overlaps the start; the rules
/// are in place before the link exists.
pub(super) fn start(
    rt: &LinuxRuntime,
    spec: &SandboxSpec,
    network: &NetworkSpec,
) -> Result<SandboxHandle, RuntimeError> {
    if network.mode == NetworkMode::None {
        return rt.start(spec);
    }
    let config = rt.network.as_ref().ok_or_else(|| {
        RuntimeError::Network("egress networking is not configured on this server".into())
    })?;
    // A tethered sandbox's owner mark before its network is claimed or made: a start
    // killed from here on is an orphan the next sweep removes, lease included.
    if let Some(tethers) = &rt.tethers {
        tethers.mark(spec.id, &rt.sandboxes_dir())?;
    }
    let t0 = std::time::Instant::now();
    let tm = |phase: &str| tracing::debug!(id = %spec.id, phase, ms = t0.elapsed().as_secs_f64() * 1e3, "network");
    // With no rules of its own, the sandbox's host side is a spare's, made earlier; with
    // rules, a warm entry made for the same policy, or one made with none rewritten.
    let no_rules = network
        .layers
        .iter()
        .all(|l| l.allow.is_empty() && l.deny.is_empty());
    if rt.warm.is_some() {
        let (layers, pin) = rt.layer_stack(spec)?;
        let policy = match no_rules {
            true => Policy::default(),
            false => policy::resolve(network, &config.resolvers),
        };
        if let Some(warm) = wired::take(rt, spec, &layers, &policy) {
            let started = super::start::start_with(rt, spec, layers, pin, Some(warm), None);
            if started.is_err() {
                let _ = teardown(config, spec.id);
                unmark_if_gone(rt, spec.id);
            }
            tm("started wired");
            return started;
        }
    }
    // The host side (a spare's or a parked one's, taken, else made) and the link into
    // the sandbox's network namespace are done on a second thread while the sandbox
    // starts: only `resolv.conf` follows the start (and the link too, into PID 1's
    // namespace, when the start could tell none).
    let (tell, told) = std::sync::mpsc::channel::<Option<OwnedFd>>();
    let (host, started) = std::thread::scope(|s| {
        let host = s.spawn(move || {
            let lease = match take_host_side(rt, config, spec.id, no_rules) {
                Some(lease) => {
                    tm("host side taken");
                    lease
                }
                None => {
                    tm("no host side to take");
                    let policy = policy::resolve(network, &config.resolvers);
                    match prepare(config, spec.id, &policy, Some(&keeper(rt, spec.id))) {
                        Ok(lease) => {
                            tm("host side prepared");
                            lease
                        }
                        Err(e) => return HostSide::Failed(e),
                    }
                }
            };
            let linked = link_told(&told, &lease_names(spec.id, &lease).0, &lease);
            HostSide::Ready(lease, linked)
        });
        let started = {
            // Dropped once the start returns, so the host thread never waits longer.
            let tell = move |ns: Option<OwnedFd>| {
                let _ = tell.send(ns);
            };
            super::start::start_notifying(rt, spec, Some(&tell))
        };
        tm("sandbox started");
        let host = host.join().unwrap_or_else(|_| {
            HostSide::Failed(RuntimeError::Network("network setup panicked".into()))
        });
        (host, started)
    });
    if let Some(spares) = &rt.spare_nets {
        spares.refill();
    }
    let handle = match started {
        Ok(handle) => handle,
        Err(e) => {
            match detach(rt, spec.id, false) {
                Ok(()) => unmark_if_gone(rt, spec.id),
                Err(cleanup) => {
                    tracing::error!(id = %spec.id, error = %cleanup, "removing a failed start's network")
                }
            }
            return Err(e);
        }
    };
    let connected = match host {
        // The link was made while the sandbox started: only its resolv.conf is left.
        HostSide::Ready(_, Some(linked)) => linked.and_then(|()| resolv_conf(config, &handle)),
        // The start told no namespace (it could not be opened): linked to PID 1's.
        HostSide::Ready(lease, None) => connect(config, &handle, &lease),
        HostSide::Failed(e) => Err(e),
    };
    match connected {
        Ok(()) => {
            tm("connected");
            Ok(handle)
        }
        Err(e) => {
            if let Err(cleanup) = rt.destroy(&handle) {
                tracing::error!(id = %spec.id, error = %cleanup, "cleaning up after a failed network setup");
            }
            Err(e)
        }
    }
}

/// Whether two descriptors name one namespace.
fn same_namespace(a: &OwnedFd, b: &OwnedFd) -> bool {
    match (rustix::fs::fstat(a), rustix::fs::fstat(b)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// A host side another process made (a parked network, a server's spare) for sandbox
/// `id`, its DNS entries made this process's resolvers, the ones its `resolv.conf`
/// names; `None` (the lease released) when that fails.
fn adopt(config: &NetConfig, id: Uuid, lease: host::Lease) -> Option<host::Lease> {
    let (ifname, _) = lease_names(id, &lease);
    // Read without the rules lock (a run's usual case: the same resolvers).
    let set = match nft::has_resolvers(&ifname, &config.resolvers) {
        Ok(true) => Ok(()),
        _ => RulesLock::take(&config.state_dir)
            .and_then(|_rules| nft::set_resolvers(&ifname, &config.resolvers)),
    };
    match set {
        Ok(()) => Some(lease),
        Err(e) => {
            tracing::warn!(%id, error = %e, "cannot give a taken network this process's resolvers");
            let _ = teardown(config, id);
            None
        }
    }
}

/// The state dir whose existence keeps sandbox `id`'s lease once the process that made
/// or took it is gone (see [`host::HostLock::strays`]).
fn keeper(rt: &LinuxRuntime, id: Uuid) -> PathBuf {
    let dir = rt.sandboxes_dir().join(id.to_string());
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Whether the shared table exists in this network namespace (any error reading it
/// counts as none).
pub(super) fn table_exists() -> bool {
    nfset::list("nets").is_ok()
}

/// Host side, before the sandbox's namespace exists: the lease and the sandbox's set
/// elements (in-process, one transaction shared with starts arriving together).
/// `keeper`: the sandbox's state dir (none for a spare's).
fn prepare(
    config: &NetConfig,
    id: Uuid,
    policy: &Policy,
    keeper: Option<&Path>,
) -> Result<host::Lease, RuntimeError> {
    let (ifname, _) = names(id);
    let elements = |lease: &host::Lease| {
        nft::sandbox_elements(&nft::SandboxRules {
            ifname: &ifname,
            net: lease.net,
            addr: lease.sandbox(),
            resolvers: &config.resolvers,
            policy,
        })
    };
    // The host lock only for the table and the lease (the table stays while a lease
    // exists): a start handing a lease over does not wait for the elements of another.
    // The first sandbox makes the table (one script) and then adds its elements.
    let t0 = std::time::Instant::now();
    let tm =
        |step: &str| tracing::trace!(%id, step, ms = t0.elapsed().as_secs_f64() * 1e3, "prepare");
    let (lease, made) = {
        let lock = HostLock::take(&config.state_dir)?;
        tm("host lock");
        let missing = lock.table_missing();
        let plain = policy.is_open();
        let lease = lock.allocate(id, config.pool, policy.allow.len(), plain, keeper)?;
        tm("lease");
        if missing {
            lock.make_table()?;
            tm("table made");
            nft::add_sandbox(&elements(&lease))?;
            tm("entries added");
        }
        (lease, missing)
    };
    if !made {
        batch::add(&config.state_dir, elements(&lease))?;
    }
    crate::faults::check("network.prepare")?;
    Ok(lease)
}

/// Gives sandbox `id`, holding `lease` of a host side made under another policy (a
/// warm entry's), `policy` instead: its lease records the policy first, then one
/// transaction swaps its policy's set elements.
fn retarget(
    config: &NetConfig,
    id: Uuid,
    lease: &host::Lease,
    policy: &Policy,
) -> Result<(), RuntimeError> {
    let (ifname, _) = lease_names(id, lease);
    HostLock::take(&config.state_dir)?.set_allow_layers(id, policy.allow.len())?;
    let _rules = RulesLock::take(&config.state_dir)?;
    nft::retarget(&ifname, policy, &config.resolvers)
}

/// Once the sandbox runs, when its start told no namespace to link while it went on:
/// its link into PID 1's, and its `resolv.conf`.
fn connect(
    config: &NetConfig,
    handle: &SandboxHandle,
    lease: &host::Lease,
) -> Result<(), RuntimeError> {
    let (ifname, _) = lease_names(handle.id, lease);
    link::create(&ifname, handle.agent_pid, lease)?;
    crate::faults::check("network.connect")?;
    resolv_conf(config, handle)
}

/// The sandbox's `/etc/resolv.conf`, naming the host end's DNS forwarder.
fn resolv_conf(config: &NetConfig, handle: &SandboxHandle) -> Result<(), RuntimeError> {
    resolv::write_resolv_conf(
        &rootfs::rootfs(&handle.state_dir),
        &config.resolvers,
        handle.host_id_base,
    )
}

/// What the host thread of [`start`] got: a host side, taken or made, with the link
/// made into the namespace the start told (`None` when it told none); or why none
/// could be made.
enum HostSide {
    Ready(host::Lease, Option<Result<(), RuntimeError>>),
    Failed(RuntimeError),
}

/// Links `lease`'s pair (host end `ifname`) into each namespace the start tells, until
/// it returns: into a second one only when the init told first (an early init's,
/// before its make ended) failed and the start went on cold in a namespace of its own.
/// Told none (that namespace could not be opened), the link made is not the sandbox's:
/// it goes, and `None` says PID 1's namespace is to be connected once started.
fn link_told(
    told: &std::sync::mpsc::Receiver<Option<OwnedFd>>,
    ifname: &str,
    lease: &host::Lease,
) -> Option<Result<(), RuntimeError>> {
    let mut linked: Option<(OwnedFd, Result<(), RuntimeError>)> = None;
    for ns in told.iter() {
        let Some(ns) = ns else {
            if linked.take().is_some() {
                link::delete(ifname);
            }
            continue;
        };
        if let Some((before, _)) = &linked {
            if same_namespace(before, &ns) {
                continue;
            }
            link::delete(ifname);
        }
        let made = link::create_in(ifname, &ns, lease)
            .and_then(|()| crate::faults::check("network.connect"));
        linked = Some((ns, made));
    }
    linked.map(|(_, made)| made)
}

/// A host side made earlier, for a sandbox with no rules of its own: a spare of this
/// server's, else a network a one-shot run parked (this process's or another's), else
/// (for a one-shot run) a spare of a server running beside it; `None` when there is
/// none (or the sandbox has rules).
fn take_host_side(
    rt: &LinuxRuntime,
    config: &NetConfig,
    id: Uuid,
    no_rules: bool,
) -> Option<host::Lease> {
    if !no_rules {
        return None;
    }
    if let Some(lease) = rt
        .spare_nets
        .as_ref()
        .and_then(|s| s.take(id, &keeper(rt, id)))
    {
        return Some(lease);
    }
    parked::take(config, id, &keeper(rt, id))
        .or_else(|| match rt.park_networks {
            true => spares::claim(config, id, &keeper(rt, id)),
            false => None,
        })
        .and_then(|lease| adopt(config, id, lease))
}

/// Removes a sandbox's link, rules and lease (idempotent), and the shared table once
/// no sandbox needs it.
pub(super) fn detach(rt: &LinuxRuntime, id: Uuid, quiet: bool) -> Result<(), RuntimeError> {
    match rt.network.as_ref() {
        Some(config) => {
            if !(rt.park_networks && parked::park(config, id, &rt.config.init_exe, quiet)) {
                let _ = teardown_quiet(config, id, quiet);
            }
            Ok(())
        }
        None => Ok(()),
    }
}

/// The network namespace of the sandbox `handle` names, open (it stays while open),
/// if the runtime has networking and its agent is the live process that started it.
pub(super) fn hold_netns(rt: &LinuxRuntime, handle: &SandboxHandle) -> Option<OwnedFd> {
    rt.network.as_ref()?;
    let (pid, ticks) = (handle.agent_pid, handle.agent_start_ticks);
    if !super::sys::is_same_live_process(pid, ticks) {
        return None;
    }
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).ok()?;
    // Still that process after the open: the namespace is its, not a reused pid's.
    super::sys::is_same_live_process(pid, ticks).then(|| ns.into())
}

/// Whether the link of sandbox `id` (a lease's, with a link still there) has received
/// no packet: asked once no process of the sandbox is left, with its network namespace
/// (and so the link) held open, it means no flow of its address ever reached the host,
/// and its teardown need not look for any (see `conntrack`).
pub(super) fn received_nothing(rt: &LinuxRuntime, id: Uuid) -> bool {
    let Some(config) = rt.network.as_ref() else {
        return false;
    };
    let lease = HostLock::take(&config.state_dir)
        .ok()
        .and_then(|lock| lock.lease(id));
    lease.is_some_and(|lease| conntrack::link_received_nothing(&lease_names(id, &lease).0))
}

/// Removes the networks whose leases nothing keeps any more: made or taken by a
/// process now dead, for a sandbox whose state dir is gone (its start failed, or its
/// data dir was removed after its server died). No one else would: a reconcile only
/// sees its own data dir, and such a lease kept the shared table for good.
fn take_back_strays(config: &NetConfig) {
    let claimed: Vec<(Uuid, Uuid)> = match HostLock::take(&config.state_dir) {
        Ok(lock) => lock
            .strays()
            .into_iter()
            .filter_map(|id| Some((id, lock.claim_stray(id)?)))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot look for networks nothing keeps");
            return;
        }
    };
    for (id, claim) in claimed {
        tracing::info!(%id, "removing the network of a sandbox and owner both gone");
        let _ = teardown(config, claim);
    }
}

/// The network of sandbox `id`, whose start was killed before its state dir existed
/// (an orphan's): removed, not parked (its link and entries may be half made).
pub(super) fn remove_unstarted(rt: &LinuxRuntime, id: Uuid) {
    if let Some(config) = rt.network.as_ref() {
        let _ = teardown(config, id);
    }
}

/// A failed start's mark, once its network is removed: ended with the start when its
/// state dir is gone too (a clean-up that failed keeps it for the next sweep).
fn unmark_if_gone(rt: &LinuxRuntime, id: Uuid) {
    if let Some(tethers) = &rt.tethers {
        if !rt.sandboxes_dir().join(id.to_string()).exists() {
            tethers.release(id);
        }
    }
}

/// [`detach`] given the network configuration (also for spares, by their own id).
///
/// The link and rules are removed without the host lock (its lease keeps its addresses
/// and the table until it is released, under that lock), except for the host's last
/// lease, whose rules go with the table. False when the lease may still be there (the
/// host lock could not be taken): a marker that names it must then stay.
fn teardown(config: &NetConfig, id: Uuid) -> bool {
    teardown_quiet(config, id, false)
}

/// [`teardown`], which leaves the host's connection tracking alone when `quiet`: the
/// sandbox is known to have sent nothing (see [`received_nothing`]).
fn teardown_quiet(config: &NetConfig, id: Uuid, quiet: bool) -> bool {
    let lock = |what| match HostLock::take(&config.state_dir) {
        Ok(lock) => Some(lock),
        Err(e) => {
            tracing::error!(%id, error = %e, "cannot lock the network state to {what}");
            None
        }
    };
    let Some(held) = lock("read a lease") else {
        return false;
    };
    let Some(lease) = held.lease(id) else {
        // None, or a file a writer killed mid-write left (of an older version, which
        // wrote leases in place): it names nothing to tear down, and must not stay.
        held.release(id);
        return true;
    };
    let (ifname, _) = lease_names(id, &lease);
    // The last lease on the host: deleting the table removes the elements too (one
    // transaction, not two), under the lock no new lease is made without.
    if held.only_lease(id) {
        link::delete(&ifname);
        if !quiet {
            conntrack::forget_logged(lease.sandbox());
        }
        held.release(id);
        held.tidy_if_unused();
        return true;
    }
    drop(held);
    link::delete(&ifname);
    // Before the address can go to another sandbox: its flows' replies must not.
    if !quiet {
        conntrack::forget_logged(lease.sandbox());
    }
    match RulesLock::take(&config.state_dir) {
        Ok(_rules) => {
            if let Err(e) = nft::remove_sandbox(&ifname, Some((lease.net, lease.sandbox()))) {
                tracing::error!(%id, error = %e, "removing a network's nftables entries");
            }
        }
        Err(e) => tracing::error!(%id, error = %e, "cannot lock the rules to remove a network's"),
    }
    match lock("release a lease") {
        Some(lock) => {
            lock.release(id);
            lock.tidy_if_unused();
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EgressPolicy;

    #[test]
    fn resolvers_skip_loopback_stubs() {
        let conf =
            "# x\nnameserver 127.0.0.53\nnameserver 192.0.2.53\nnameserver ::1\noptions edns0\n";
        assert_eq!(parse_resolvers(conf), [Ipv4Addr::new(192, 0, 2, 53)]);
    }

    #[test]
    fn layers_become_a_deny_union_and_allow_per_layer() {
        let ws = EgressPolicy {
            allow: vec!["10.0.0.0/8".parse().expect("a")],
            deny: vec!["10.1.0.0/16".parse().expect("d")],
        };
        let sb = EgressPolicy {
            allow: vec![],
            deny: vec!["10.2.0.0/16".parse().expect("d")],
        };
        let Policy { deny, allow } = policy::resolve(&NetworkSpec::egress(vec![ws, sb]), &[]);
        assert_eq!(
            deny.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            ["10.1.0.0/16", "10.2.0.0/16"]
        );
        assert_eq!(allow.len(), 1, "only layers with an allow list narrow");
        let (ifname, key) = names(Uuid::nil());
        assert_eq!((ifname.len(), key.len()), (15, 12));
    }
}
