//! The allowlist's unconditional syscalls as a binary search instead of seccompiler's
//! chain of one comparison per syscall. The kernel runs a new program once for every
//! syscall number when it is installed (to cache the numbers it always allows): through
//! a chain of ~300 comparisons that took ~1.6 ms of each sandbox's start; through a
//! search, about a dozen instructions per number. The search is over the bounds of the
//! runs of consecutive numbers allowed (33 runs of 275 numbers on x86_64), not over
//! each number: the kernel converts and compiles every instruction at each install, and
//! the allowlist went from 836 instructions to 184 (its install from ~290 to ~125 µs
//! here, README forty-third session). Only loads of the number, comparisons with constants,
//! jumps and returns: the kernel's install-time run still finds every number it always
//! allows. The syscalls with argument rules stay seccompiler's chains, ahead of the search.

use crate::ConfineError;
use seccompiler::{sock_filter, BpfProgram};

// Classic BPF opcodes (linux/bpf_common.h): load word at absolute offset, jump when
// the accumulator is at or above a constant, unconditional jump, return a constant.
const BPF_LD: u16 = 0x00;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_W: u16 = 0x00;
const BPF_ABS: u16 = 0x20;
const BPF_JGE: u16 = 0x30;
const LD_W_ABS: u16 = BPF_LD + BPF_W + BPF_ABS;
const JGE_K: u16 = BPF_JMP + BPF_JGE;
const JA: u16 = BPF_JMP;
const RET_K: u16 = BPF_RET;
/// Offset of `nr` in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
/// The most instructions the kernel takes in one program (linux/bpf_common.h).
const BPF_MAXINSNS: usize = 4096;

/// `program` (seccompiler's, ending with the instruction that returns `deny` for a
/// syscall none of its chains names) with that last return replaced by a search over
/// `allowed`: those syscall numbers return `allow`, every other one `deny`.
pub(crate) fn with_search(
    mut program: BpfProgram,
    allowed: &[u32],
    allow: u32,
    deny: u32,
) -> Result<BpfProgram, ConfineError> {
    match program.pop() {
        Some(last) if last.code == RET_K && last.k == deny => {}
        _ => return Err(ConfineError::Shape("the program does not end by denying")),
    }
    let mut sorted = allowed.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    // The chains leave the syscall number loaded, but a search that loads it itself
    // does not depend on that.
    program.push(stmt(LD_W_ABS, NR_OFFSET));
    program.extend(search(&run_bounds(&sorted), 0, allow, deny));
    // The kernel refuses a longer program (BPF_MAXINSNS) at every install: refused
    // here once, by name.
    if program.len() > BPF_MAXINSNS {
        return Err(ConfineError::Shape("the searched program is too long"));
    }
    Ok(program)
}

/// The bounds of the runs of consecutive numbers in `nrs` (sorted, no repeats): each
/// run's first number and the number after its last (none after `u32::MAX`). A number
/// is in a run when an odd count of bounds is at or below it.
fn run_bounds(nrs: &[u32]) -> Vec<u32> {
    debug_assert!(
        nrs.windows(2).all(|w| w[0] < w[1]),
        "not sorted, or repeated"
    );
    let mut bounds: Vec<u32> = Vec::new();
    for (i, nr) in nrs.iter().enumerate() {
        if i == 0 || nrs[i - 1].checked_add(1) != Some(*nr) {
            bounds.push(*nr);
        }
        let run_ends = nrs
            .get(i + 1)
            .is_none_or(|next| nr.checked_add(1) != Some(*next));
        if let (true, Some(after)) = (run_ends, nr.checked_add(1)) {
            bounds.push(after);
        }
    }
    bounds
}

/// Returns `allow` for a number when the count of bounds at or below it is odd (those of
/// `bounds`, sorted, and `below` lower ones already passed), else `deny`; jumps forward
/// only, and never by more than a conditional jump's 255 (farther ones are `JA`s).
fn search(bounds: &[u32], below: usize, allow: u32, deny: u32) -> Vec<sock_filter> {
    if bounds.is_empty() {
        return vec![stmt(RET_K, if below % 2 == 1 { allow } else { deny })];
    }
    let mid = bounds.len() / 2;
    let left = search(&bounds[..mid], below, allow, deny);
    let right = search(&bounds[mid + 1..], below + mid + 1, allow, deny);
    // A ≥ bounds[mid]: over the left part, to the right one; else the left part.
    let mut out = match u8::try_from(left.len()) {
        Ok(over) => vec![jump(JGE_K, bounds[mid], over, 0)],
        Err(_) => vec![jump(JGE_K, bounds[mid], 0, 1), stmt(JA, left.len() as u32)],
    };
    out.extend(left);
    out.extend(right);
    out
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Runs a classic BPF seccomp program over `seccomp_data` {nr, arch, ip 0, args}:
    /// the subset seccompiler and [`search`] emit (loads of words, ALU AND, jumps with
    /// constants, returns).
    pub(crate) fn run(program: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = vec![nr, arch, 0, 0];
        for a in args {
            data.push(a as u32);
            data.push((a >> 32) as u32);
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            match i.code {
                0x20 => a = data[i.k as usize / 4],
                0x54 => a &= i.k,
                0x05 => pc += i.k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                0x06 => return i.k,
                other => panic!("unexpected opcode {other:#x} at {}", pc - 1),
            }
        }
    }

    #[test]
    fn the_search_allows_exactly_its_numbers() {
        for n in [0usize, 1, 2, 3, 4, 5, 7, 64, 300, 513] {
            // Every third number, so that neighbours of each allowed one are not.
            let allowed: Vec<u32> = (0..n as u32).map(|i| i * 3 + 1).collect();
            let program = with_search(vec![stmt(RET_K, 7)], &allowed, 1, 7).expect("search");
            assert!(program.len() < 4096, "{n}: {} instructions", program.len());
            for nr in (0..n as u32 * 3 + 5).chain([0x4000_0001, u32::MAX]) {
                let want = if allowed.contains(&nr) { 1 } else { 7 };
                assert_eq!(run(&program, nr, 0, [0; 6]), want, "{n} allowed, nr {nr}");
            }
        }
    }

    #[test]
    fn runs_of_numbers_are_searched_by_their_bounds() {
        let runs: Vec<u32> = (0..=100)
            .chain([102])
            .chain(104..=133)
            .chain(300..=300)
            .chain(u32::MAX - 2..=u32::MAX)
            .collect();
        assert_eq!(
            run_bounds(&runs),
            [0, 101, 102, 103, 104, 134, 300, 301, u32::MAX - 2]
        );
        let program = with_search(vec![stmt(RET_K, 7)], &runs, 1, 7).expect("search");
        // One comparison per bound and a return per gap between them, not one per number.
        assert!(program.len() < 2 * 9 + 10, "{} instructions", program.len());
        for nr in (0..400).chain(u32::MAX - 5..=u32::MAX) {
            let want = if runs.contains(&nr) { 1 } else { 7 };
            assert_eq!(run(&program, nr, 0, [0; 6]), want, "nr {nr}");
        }
        // Runs long and many: farther jumps than a conditional one's 255.
        let many: Vec<u32> = (0..2000u32).filter(|n| n % 7 != 3 && n % 11 != 5).collect();
        let program = with_search(vec![stmt(RET_K, 7)], &many, 1, 7).expect("search");
        assert!(
            program.iter().any(|i| i.code == JA),
            "no far jump was needed"
        );
        for nr in 0..2100 {
            let want = if many.contains(&nr) { 1 } else { 7 };
            assert_eq!(run(&program, nr, 0, [0; 6]), want, "nr {nr}");
        }
    }

    #[test]
    fn a_program_not_ending_by_denying_is_refused() {
        assert!(with_search(vec![stmt(RET_K, 1)], &[1], 1, 7).is_err());
        assert!(with_search(Vec::new(), &[1], 1, 7).is_err());
    }
}

/// x86_64's: the architecture value and syscall numbers below are that architecture's.
#[cfg(all(test, target_arch = "x86_64"))]
mod equivalence {
    use super::tests::run;

    /// The kernel's install-time run of a program for one syscall number (seccomp's
    /// `seccomp_is_const_allow`): only the number and the architecture may be loaded,
    /// and only the opcodes it knows run; None where it gives up (that number is then
    /// run through the whole program at every call).
    fn const_decision(program: &[seccompiler::sock_filter], nr: u32, arch: u32) -> Option<u32> {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = program.get(pc)?;
            pc += 1;
            match (i.code, i.k) {
                (0x20, 0) => a = nr,
                (0x20, 4) => a = arch,
                (0x54, k) => a &= k,
                (0x05, k) => pc += k as usize,
                (0x15 | 0x25 | 0x35 | 0x45, k) => {
                    let taken = match i.code {
                        0x15 => a == k,
                        0x25 => a > k,
                        0x35 => a >= k,
                        _ => a & k != 0,
                    };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                (0x06, k) => return Some(k),
                _ => return None,
            }
        }
    }

    /// Every syscall allowed whatever its arguments is one the kernel finds allowed at
    /// install (and then lets through without running the program), as it did before
    /// the search over runs.
    #[test]
    fn the_kernel_caches_every_unconditionally_allowed_number() {
        let searched = crate::seccomp::searched_allowlist();
        let allow = 0x7fff_0000;
        let native = 0xc000_003e;
        let ruled = [libc::SYS_clone, libc::SYS_unshare, libc::SYS_personality];
        let mut cached = 0;
        for nr in crate::seccomp::allowed_numbers() {
            if ruled.contains(&nr) {
                continue;
            }
            assert_eq!(
                const_decision(&searched, nr as u32, native),
                Some(allow),
                "syscall {nr} is not decided at install"
            );
            cached += 1;
        }
        assert!(cached > 250, "{cached}");
        // Not allowed: the install-time run finds the refusal (the kernel caches only
        // what is allowed, so such a call runs the program, and is refused).
        assert_eq!(
            const_decision(&searched, libc::SYS_kexec_load as u32, native),
            Some(u32::from(seccompiler::SeccompAction::Errno(
                libc::EPERM as u32
            )))
        );
    }

    /// The searched allowlist decides every syscall number, on every architecture value,
    /// with the argument values its rules look at, exactly as seccompiler's chain does.
    #[test]
    fn the_searched_allowlist_decides_as_the_chained_one() {
        let (chained, searched) = (
            crate::seccomp::chained_allowlist(),
            crate::seccomp::searched_allowlist(),
        );
        assert!(searched.len() < 4096, "{} instructions", searched.len());
        // What an allowed call returns: getpid on x86_64 (AUDIT_ARCH_X86_64).
        let native = run(&chained, libc::SYS_getpid as u32, 0xc000_003e, [0; 6]);
        assert_eq!(
            native, 0x7fff_0000,
            "getpid is not allowed (SECCOMP_RET_ALLOW)"
        );
        let arches = [0xc000_003e, 0x4000_0003, 0xc000_00b7, 0, u32::MAX];
        let newuser = libc::CLONE_NEWUSER as u64;
        let args = [
            [0; 6],
            [newuser, 0, 0, 0, 0, 0],
            [newuser | libc::CLONE_NEWNS as u64, 1, 2, 3, 4, 5],
            [libc::CLONE_NEWNS as u64, 0, 0, 0, 0, 0],
            [0x0008, 0, 0, 0, 0, 0],
            [0xffff_ffff, 0, 0, 0, 0, 0],
            [u64::MAX, u64::MAX, u64::MAX, 0, 0, 0],
            [1 << 32, 0, 0, 0, 0, 0],
        ];
        let mut allowed = 0;
        for nr in (0..1100u32).chain([0x4000_0000, 0x4000_0001, 0x4000_0027, u32::MAX]) {
            for arch in arches {
                for a in args {
                    let want = run(&chained, nr, arch, a);
                    assert_eq!(
                        run(&searched, nr, arch, a),
                        want,
                        "nr {nr} arch {arch:#x} args {a:?}"
                    );
                    allowed += usize::from(want == native);
                }
            }
        }
        assert!(
            allowed > 1000,
            "the test saw too few allowed calls: {allowed}"
        );
    }
}
