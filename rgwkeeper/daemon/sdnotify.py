"""sd_notify(3) without a dependency: a datagram to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send e.g. "READY=1" or "WATCHDOG=1"; False when not run by systemd with Type=notify."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):  # abstract namespace
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.connect(addr)
            s.sendall(state.encode())
        except OSError:
            return False
    return True


def watchdog_interval_s() -> float | None:
    """Half of WatchdogSec (systemd's advice), if the watchdog is on for this process."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6 / 2
    except ValueError:
        return None
