"""Operating-system isolation for the Python guest, applied in a forked child.

Stdlib and ctypes only: this runs inside the fork server, started with
``python -I -S`` (no site-packages). Each layer raises `IsolationError`
naming what is missing, and the child then refuses to run (fail closed).

Layers, each covering what the others might not:
- namespaces (user, network, IPC, mount, UTS): the child has no capability
  outside, and its network has only a down loopback, so nothing on this
  machine's ports is reachable;
- Landlock: reads only below the stdlib (not its site-packages); no writes, no execute, no TCP,
  and (ABI 6+) no signals or abstract sockets outside its domain;
- seccomp: refuses process creation, exec, sockets, signals to others,
  ptrace and namespace/mount calls with EPERM;
- rlimits: address space, file size 0, open files, CPU seconds, no core.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import struct

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000

_LANDLOCK_CREATE, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT = 444, 445, 446
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_SET_PDEATHSIG = 38, 22, 2, 1
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# fork vfork clone clone3 execve execveat socket socketpair kill tkill tgkill
# ptrace process_vm_readv/writev unshare setns mount umount2 pivot_root chroot
# pidfd_open pidfd_send_signal bpf userfaultfd perf_event_open io_uring_setup
# keyctl add_key request_key
_DENIED_SYSCALLS = {
    "x86_64": (
        57,
        58,
        56,
        435,
        59,
        322,
        41,
        53,
        62,
        200,
        234,
        101,
        310,
        311,
        272,
        308,
        165,
        166,
        155,
        161,
        434,
        424,
        321,
        323,
        298,
        425,
        250,
        248,
        249,
    ),
    "aarch64": (
        220,
        435,
        221,
        281,
        198,
        199,
        129,
        130,
        131,
        117,
        270,
        271,
        97,
        268,
        40,
        39,
        41,
        51,
        434,
        424,
        280,
        282,
        241,
        425,
        219,
        217,
        218,
    ),
}
_X32_BIT = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class IsolationError(RuntimeError):
    """An isolation layer could not be applied; the message says which and why."""


def _fail(what: str) -> IsolationError:
    errno = ctypes.get_errno()
    return IsolationError(f"{what}: {os.strerror(errno)} (errno {errno})")


def enter_namespaces() -> None:
    flags = CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWNS | CLONE_NEWUTS
    if _libc.unshare(flags) != 0:
        raise _fail("unshare(user, net, ipc, mount, uts namespaces)")


def set_rlimits(address_space: int, cpu_seconds: int) -> None:
    limits = {
        resource.RLIMIT_AS: address_space,
        resource.RLIMIT_FSIZE: 0,
        resource.RLIMIT_NOFILE: 64,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: cpu_seconds,
        resource.RLIMIT_NPROC: 0,
    }
    for limit, value in limits.items():
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError) as exc:
            raise IsolationError(f"setrlimit({limit}, {value}): {exc}") from None


def landlock_abi() -> int:
    abi = _libc.syscall(_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        raise _fail("Landlock is not available in this kernel")
    return int(abi)


def build_ruleset(readable: list[str]) -> int:
    """A Landlock ruleset (an fd) allowing reads below `readable` and nothing else.

    Built once per fork server, so a child only pays for `restrict_self`. A
    regular file gets the file right only (the kernel refuses directory rights
    on a file), a directory both.
    """
    abi = landlock_abi()
    fs_rights = _FS_RIGHTS_BY_ABI[max(k for k in _FS_RIGHTS_BY_ABI if k <= abi)]
    attr = struct.pack(
        "=QQQ",
        fs_rights,
        _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _libc.syscall(_LANDLOCK_CREATE, buffer, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        for path in readable:
            _add_read_rule(int(ruleset), path)
    except BaseException:
        os.close(ruleset)
        raise
    return int(ruleset)


def _add_read_rule(ruleset: int, path: str) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rights = _FS_READ_FILE | (_FS_READ_DIR if os.path.isdir(path) else 0)
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        if _libc.syscall(_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
            raise _fail(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def restrict_filesystem(ruleset: int) -> None:
    """Enforce a ruleset from `build_ruleset` on this process, for good."""
    _no_new_privs()
    if _libc.syscall(_LANDLOCK_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        raise _fail("landlock_restrict_self")


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when the fork server dies, so no guest outlives its supervisor."""
    if _libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the server died before the line above
        os._exit(1)


def _no_new_privs() -> None:
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")


def install_seccomp() -> None:
    """A BPF filter: EPERM for the denied syscalls (and the x32 ABI), allow the rest."""
    machine = platform.machine()
    if machine not in _AUDIT_ARCH:
        raise IsolationError(f"seccomp filter: unsupported architecture {machine!r}")
    denied = _DENIED_SYSCALLS[machine]
    eperm = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    allow, kill = 0x7FFF0000, 0x80000000  # SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS

    def stmt(code: int, k: int) -> bytes:
        return struct.pack("=HBBI", code, 0, 0, k)

    def jump(k: int, jt: int, jf: int) -> bytes:
        return struct.pack("=HBBI", 0x15, jt, jf, k)  # BPF_JMP|BPF_JEQ|BPF_K

    program = [stmt(0x20, 4), jump(_AUDIT_ARCH[machine], 1, 0), stmt(0x06, kill), stmt(0x20, 0)]
    if machine == "x86_64":  # BPF_JMP|BPF_JGE|BPF_K: the x32 ABI bypasses syscall numbers
        program += [struct.pack("=HBBI", 0x35, 0, 1, _X32_BIT), stmt(0x06, eperm)]
    for index, number in enumerate(denied):
        program.append(jump(number, len(denied) - index, 0))
    program += [stmt(0x06, allow), stmt(0x06, eperm)]
    filters = b"".join(program)
    buffer = ctypes.create_string_buffer(filters, len(filters))

    class _SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    _no_new_privs()
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise _fail("prctl(PR_SET_SECCOMP)")
