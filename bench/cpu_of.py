"""Run a command and write the CPU seconds it and the children it waited for used, as JSON.

For ``bench.purge_pacing``: the purging client's own CPU per run (rgwkeeper's process and the
``radosgw-admin``/``docker`` processes it starts; the bare removals' python3; the stock tool's
``docker exec`` client, not the ``radosgw-admin`` inside the cluster's container, whose CPU is
the container's). On a host whose cores the OSDs and RGW share, the client's CPU is theirs too.

    python -m bench.cpu_of OUT.json -- ARGV...

Exits with the command's own status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bench.cpu_of OUT.json -- ARGV...", file=sys.stderr)
        return 2
    out, cmd = argv[0], argv[2:]
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(out, "w") as f:
        json.dump({"user_s": round(usage.ru_utime, 3), "system_s": round(usage.ru_stime, 3),
                   "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}, f)
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
