"""Run a command and write the CPU seconds it and the children it waited for used, as JSON.

For ``bench.purge_pacing``: the purging client's own CPU per run (rgwkeeper's process and the
``radosgw-admin``/``docker`` processes it starts; the bare removals' python3; the stock tool's
``docker exec`` client, not the ``radosgw-admin`` inside the cluster's container, whose CPU is
the container's). On a host whose cores the OSDs and RGW share, the client's CPU is theirs too.

    python -m bench.cpu_of OUT.json -- ARGV...

Exits with the command's own status. The command gets SIGKILL if this process dies (``verify``
kills its maintenance command on ``--maintenance-timeout``: that is this wrapper), and SIGTERM,
SIGINT and SIGHUP sent here are passed on to it, so no purge goes on alone into the next run.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys

from rgwkeeper.lifeline import die_with_parent


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bench.cpu_of OUT.json -- ARGV...", file=sys.stderr)
        return 2
    out, cmd = argv[0], argv[2:]
    proc = subprocess.Popen(cmd, preexec_fn=functools.partial(die_with_parent, signal.SIGKILL, os.getpid()))
    passed = {sig: signal.signal(sig, lambda n, _f: proc.send_signal(n))
              for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # retried after a handled signal (PEP 475)
    finally:
        for sig, old in passed.items():
            signal.signal(sig, old)
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(out, "w") as f:
        json.dump({"user_s": round(usage.ru_utime, 3), "system_s": round(usage.ru_stime, 3),
                   "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}, f)
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
