//! Mounting an overlay root of any number of lower layers, up to the kernel's stack
//! limit. `mount(2)` takes the overlay's options as one string, which the kernel cuts
//! at one page: past it the lowest layers, the upper dir and the work dir were dropped
//! without an error, and the sandbox got a read-only root missing part of its image. A
//! string that fits goes to `mount(2)` as before (the common case: no extra calls on a
//! start); a longer one goes through the new mount API, one `lowerdir+` per layer
//! (Linux 6.8), and a kernel without that refuses the start with a clear error.

use crate::RuntimeError;
use rustix::mount::{
    fsconfig_create, fsconfig_set_string, fsmount, fsopen, move_mount, FsMountFlags, FsOpenFlags,
    MountAttrFlags, MoveMountFlags,
};
use std::path::Path;

/// The most lower layers one overlay stacks (the kernel's `OVL_MAX_STACK`).
const MAX_STACK: usize = 500;

/// The most bytes of options `mount(2)` passes to a filesystem whole (a page, its
/// last byte the terminating zero).
fn option_bytes_max() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).saturating_sub(1)
}

/// What [`mount_overlay`] would hand `mount(2)` for these dirs.
fn options(lowers: &[String], upper: &str, work: &str) -> String {
    format!(
        "lowerdir={},upperdir={upper},workdir={work},index=off,xino=off",
        lowers.join(":")
    )
}

/// Mounts at `target` the overlay of `lowers` (top first) under `upper`, with `work`
/// (relative names are looked up from the current directory, as `mount(2)`'s are).
pub(super) fn mount_overlay(
    target: &Path,
    lowers: &[String],
    upper: &str,
    work: &str,
) -> Result<(), RuntimeError> {
    if lowers.len() > MAX_STACK {
        // A snapshot's layers over an image of the most: refused with its reason.
        return Err(RuntimeError::Unsupported(format!(
            "a root of {} layers (an overlay stacks at most {MAX_STACK})",
            lowers.len()
        )));
    }
    let options = options(lowers, upper, work);
    if options.len() <= option_bytes_max() {
        return nix::mount::mount(
            Some("overlay"),
            target,
            Some("overlay"),
            nix::mount::MsFlags::empty(),
            Some(options.as_str()),
        )
        .map_err(|source| RuntimeError::Sys {
            what: "mounting the overlay root",
            source,
        });
    }
    mount_layer_by_layer(target, lowers, upper, work)
}

/// The new mount API's way: each layer its own `lowerdir+`, so no string passes a page.
fn mount_layer_by_layer(
    target: &Path,
    lowers: &[String],
    upper: &str,
    work: &str,
) -> Result<(), RuntimeError> {
    let sys = |what: &'static str| {
        move |e: rustix::io::Errno| RuntimeError::Sys {
            what,
            source: nix::Error::from_raw(e.raw_os_error()),
        }
    };
    // An EINVAL from a kernel whose release is before 6.8 (which has no `lowerdir+`:
    // from 6.5 the first layer is refused; before, the legacy parser takes it as an
    // option string and the create fails) says so; a kernel that backported it mounts.
    let refused = |what: &'static str| {
        move |e: rustix::io::Errno| {
            let release = rustix::system::uname();
            match e == rustix::io::Errno::INVAL
                && !has_lowerdir_plus(&release.release().to_string_lossy())
            {
                true => RuntimeError::Unsupported(format!(
                    "an image of {} layers needs Linux 6.8 or later (its overlay options pass \
                     the one page older kernels take)",
                    lowers.len()
                )),
                false => sys(what)(e),
            }
        }
    };
    let fs = fsopen("overlay", FsOpenFlags::FSOPEN_CLOEXEC)
        .map_err(sys("opening an overlay filesystem context"))?;
    for lower in lowers {
        fsconfig_set_string(&fs, "lowerdir+", lower.as_str())
            .map_err(refused("adding an overlay layer"))?;
    }
    for (key, value) in [
        ("upperdir", upper),
        ("workdir", work),
        ("index", "off"),
        ("xino", "off"),
    ] {
        fsconfig_set_string(&fs, key, value).map_err(refused("configuring the overlay"))?;
    }
    fsconfig_create(&fs).map_err(refused("creating the overlay"))?;
    let mnt = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())
        .map_err(sys("mounting the overlay root"))?;
    move_mount(
        &mnt,
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(sys("attaching the overlay root"))
}

/// Whether the kernel of `release` (`uname -r`) is one that stacks overlay layers given
/// one by one (`lowerdir+`, Linux 6.8), by its number (a backport is not seen); one that
/// does not parse counts as one.
fn has_lowerdir_plus(release: &str) -> bool {
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= (6, 8),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowerdir_plus_is_asked_of_kernels_from_6_8() {
        for (release, has) in [
            ("6.18.44-fc-v1252", true),
            ("6.8.0-31-generic", true),
            ("7.0", true),
            ("6.7.12", false),
            ("6.1.0-28-amd64", false),
            ("5.10.0-33-cloud-amd64", false),
            ("weird", true),
        ] {
            assert_eq!(has_lowerdir_plus(release), has, "{release}");
        }
    }

    #[test]
    fn options_fit_a_page_until_their_names_pass_it() {
        let names = |n: usize| (0..n).map(|i| format!("lower/{i}")).collect::<Vec<_>>();
        assert!(options(&names(1), "upper", "work").len() <= option_bytes_max());
        // Names of at least 8 bytes with their separators: a page's worth and more.
        let many = option_bytes_max() / 8 + 1;
        assert!(options(&names(many), "upper", "work").len() > option_bytes_max());
    }
}
