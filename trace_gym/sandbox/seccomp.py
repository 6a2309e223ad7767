"""The seccomp filter bubblewrap loads (``bwrap --seccomp FD``): syscalls a test never needs.

Bubblewrap takes a compiled classic-BPF program and installs it, with ``no_new_privs``,
right before it runs the sandboxed command (the way Codex's Linux sandbox pairs bubblewrap
with seccomp). No library that compiles one installs cleanly from PyPI (``pyseccomp`` is a
2021 ctypes shim over a system ``libseccomp``), and the program is small: so this module
assembles it, with the syscall numbers of each supported architecture written out and
checked against the kernel headers by ``tests/gym/test_sandbox.py`` where they are installed.

What the filter does, in order:

1. a syscall of another architecture (32-bit ``int 0x80`` on x86_64, whose numbers differ)
   fails with ``EPERM``; so does the x32 ABI on x86_64 (bit 30 of the number);
2. every syscall of :data:`DENIED` fails with ``EPERM``: mounts and new mount APIs,
   namespaces (``unshare``, ``setns``), ``open_by_handle_at``/``name_to_handle_at`` (the
   file-handle escape out of a bind mount), ``ptrace`` and ``process_vm_*``, kernel keyrings,
   ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (its requests bypass seccomp),
   modules, ``kexec``, reboot, swap, clocks, accounting, quotas, ``syslog``, ``iopl``...;
3. ``clone3`` fails with ``ENOSYS`` (its flags sit behind a pointer a filter cannot read; C
   libraries then fall back to ``clone``), and ``clone`` with any ``CLONE_NEW*`` flag fails;
4. ``ioctl(TIOCSTI)`` / ``ioctl(TIOCLINUX)`` (typing into a terminal) fail;
5. everything else is allowed (the sandbox's namespaces and mounts do the rest).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# -- classic BPF, the subset a seccomp filter uses ----------------------------------------------
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k]
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
# offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6];} (little-endian:
# an argument's low 32 bits come first)
_NR, _ARCH = 0, 4


def _arg(i: int) -> int:
    return 16 + 8 * i


AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
CLONE_NEW_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

DENIED = (
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "unshare", "setns",
    "open_by_handle_at", "name_to_handle_at",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "lookup_dcookie", "syslog", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "nfsservctl",
    "iopl", "ioperm", "uselib",
)  # fmt: skip
"""Denied with ``EPERM`` (a name an architecture lacks is skipped there)."""

# From <asm/unistd_64.h> (x86_64) and <asm-generic/unistd.h> (aarch64); the test suite
# compares both tables with the installed headers.
SYSCALLS = {
    "x86_64": {
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "unshare": 272, "setns": 308, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "ptrace": 101, "process_vm_readv": 310,
        "process_vm_writev": 311, "kcmp": 312, "keyctl": 250, "add_key": 248,
        "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163,
        "quotactl": 179, "lookup_dcookie": 212, "syslog": 103, "vhangup": 153,
        "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "nfsservctl": 180, "iopl": 172, "ioperm": 173, "uselib": 134,
        "clone": 56, "clone3": 435, "ioctl": 16,
    },
    "aarch64": {
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "unshare": 97, "setns": 268, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "kcmp": 272, "keyctl": 219, "add_key": 217,
        "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
        "quotactl": 60, "lookup_dcookie": 18, "syslog": 116, "vhangup": 58,
        "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "nfsservctl": 42,
        "clone": 220, "clone3": 435, "ioctl": 29,
    },
}  # fmt: skip


class UnsupportedArchitecture(RuntimeError):
    """No syscall table for this machine (the filter would be unsound)."""


def machine() -> str:
    """The running architecture's name as :data:`SYSCALLS` keys it."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def assemble(arch: str | None = None) -> bytes:
    """The filter for ``arch`` (default: this machine) as ``struct sock_filter`` records."""
    arch = arch or machine()
    if arch not in SYSCALLS:
        raise UnsupportedArchitecture(
            f"no seccomp syscall table for {arch!r} (supported: {sorted(SYSCALLS)})"
        )
    table = SYSCALLS[arch]
    # Instructions as (code, jump-if-true label, jump-if-false label, k); labels resolve to
    # the relative forward offsets BPF wants ("next" = fall through).
    prog: list[tuple[int, str, str, int]] = [
        (_LD_W_ABS, "", "", _ARCH),
        (_JEQ, "next", "deny", AUDIT_ARCH[arch]),
        (_LD_W_ABS, "", "", _NR),
    ]
    if arch == "x86_64":
        prog.append((_JGE, "deny", "next", X32_SYSCALL_BIT))
    prog += [(_JEQ, "deny", "next", table[name]) for name in DENIED if name in table]
    prog += [
        (_JEQ, "enosys", "next", table["clone3"]),
        (_JEQ, "clone", "next", table["clone"]),
        (_JEQ, "ioctl", "next", table["ioctl"]),
        (_RET, "", "", RET_ALLOW),
        ("clone", "", "", 0),  # label
        (_LD_W_ABS, "", "", _arg(0)),
        (_JSET, "deny", "next", CLONE_NEW_FLAGS),
        (_RET, "", "", RET_ALLOW),
        ("ioctl", "", "", 0),
        (_LD_W_ABS, "", "", _arg(1)),
        (_JEQ, "deny", "next", TIOCSTI),
        (_JEQ, "deny", "next", TIOCLINUX),
        (_RET, "", "", RET_ALLOW),
        ("deny", "", "", 0),
        (_RET, "", "", RET_ERRNO | errno.EPERM),
        ("enosys", "", "", 0),
        (_RET, "", "", RET_ERRNO | errno.ENOSYS),
    ]  # type: ignore[list-item]
    labels: dict[str, int] = {}
    code: list[tuple[int, str, str, int]] = []
    for ins in prog:
        if isinstance(ins[0], str):
            labels[ins[0]] = len(code)
        else:
            code.append(ins)
    out = bytearray()
    for at, (op, jt, jf, k) in enumerate(code):

        def offset(label: str, at: int = at) -> int:
            if label in ("", "next"):
                return 0
            jump = labels[label] - at - 1
            assert 0 <= jump <= 255, "BPF jumps are forward and at most 255"
            return jump

        out += struct.pack("<HBBI", op, offset(jt), offset(jf), k)
    return bytes(out)


def filter_fd(program: bytes) -> int:
    """A file descriptor at offset 0 holding ``program`` (bwrap reads it to EOF)."""
    fd = os.memfd_create("trace-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
