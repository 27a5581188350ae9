#!/usr/bin/env bash
# What a test run left behind on the machine: `snapshot FILE` records the state, and
# `compare FILE` prints each item that is there now and was not in FILE ("leftovers:
# ITEM", one a line) and exits 1 if there is any. Only what appeared in between counts.
# Items: cgroups named sandboxd* (any depth) in each hierarchy, mounts under sandboxd
# data/run dirs and overlay mounts, loop devices, network namespaces, nft tables named
# sandboxd*, /tmp/.tmp* dirs, and processes whose program names sandboxd or runsc.
set -euo pipefail

state() {
    local root=/sys/fs/cgroup
    # Cgroups: the parents and everything under them.
    find "$root" -mindepth 1 -maxdepth 4 -type d -path '*/sandboxd*' 2>/dev/null \
        | sed 's|^|cgroup |'
    findmnt -rn -o FSTYPE,TARGET 2>/dev/null \
        | awk '$1 == "overlay" || $2 ~ /sandboxd/ || $2 ~ /^\/tmp\/\.tmp/ { print "mount " $2 }'
    losetup -a 2>/dev/null | sed -E 's/^([^:]+):.*\((.*)\)$/loop \1 \2/'
    ip netns list 2>/dev/null | awk '{ print "netns " $1 }'
    nft list tables 2>/dev/null | awk '$3 ~ /^sandboxd/ { print "nft " $2 " " $3 }'
    find /tmp -mindepth 1 -maxdepth 1 -name '.tmp*' 2>/dev/null | sed 's|^|tmpdir |'
    # Processes whose program (argv[0]) names sandboxd or runsc, with pid and the start
    # of their command line (a new pid with the same line is a new process); a compiler
    # whose arguments name the source tree is none.
    local p cmd prog
    for p in /proc/[0-9]*; do
        cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
        prog=${cmd%% *}
        case "${prog##*/}" in
        *sandboxd* | *runsc*) echo "process ${p#/proc/} ${cmd:0:160}" ;;
        esac
    done
}

usage() {
    echo "usage: $0 snapshot FILE | compare FILE" >&2
    exit 2
}

[ $# -eq 2 ] || usage
case "$1" in
snapshot)
    state | sort -u >"$2"
    ;;
compare)
    [ -r "$2" ] || { echo "leftovers: no snapshot $2" >&2; exit 2; }
    new=$(comm -13 "$2" <(state | sort -u))
    if [ -n "$new" ]; then
        printf '%s\n' "$new" | sed 's/^/leftovers: /'
        exit 1
    fi
    ;;
*) usage ;;
esac
