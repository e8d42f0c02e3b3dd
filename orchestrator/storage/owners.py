"""Who holds a lease, and whether that process is known to be gone.

A lease owner id is `<node>:<pid>:<nonce>` (an execution appends `/<id>`),
where the node is the host name plus the PID namespace the process runs in.
So the lease row itself stores host and pid, and a process that finds a live
lease can tell whether its owner may still be running: when the owner ran on
this node and its pid no longer exists, the process is known to be dead (it
crashed or was killed) and the lease is taken at once, with a new fencing
token, instead of after its TTL. In every other case (another host, a live
pid, an id in another format) the owner may be alive and the TTL is waited
out. A reused pid only makes a dead owner look alive, which is the safe side.
"""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["owner_gone", "process_owner"]


def _node() -> str:
    """This host, and the PID namespace (two containers may share a host name, never pids)."""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = "-"
    return f"{socket.gethostname()}~{namespace}"


def process_owner() -> str:
    """A lease owner id for this process (unique: the nonce differs per runtime)."""
    return f"{_node()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_gone(owner: str) -> bool:
    """True only when `owner` ran on this node in a process that no longer exists."""
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != _node() or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid() or pid <= 0:
        return False  # this very process: its executions are alive or gone by its own account
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists, under another user
        return False
    return False
