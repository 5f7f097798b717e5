"""This host's identity, for the leader lock's description and the journal's holder.

``instance_id`` alone cannot tell two hosts apart when an operator gives both the same one
(a copied config). The host identity is the hostname plus the start of systemd's machine id
(``/etc/machine-id``: stable across reboots, and VMs cloned without regenerating it still
differ by hostname). Without a readable machine id it is the hostname alone.
"""

from __future__ import annotations

import socket
from pathlib import Path

MACHINE_ID = Path("/etc/machine-id")


def host_identity(machine_id_path: Path = MACHINE_ID, hostname: str | None = None) -> str:
    name = hostname if hostname is not None else socket.gethostname()
    try:
        machine = machine_id_path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        machine = ""
    return f"{name}/{machine[:12]}" if machine else name
