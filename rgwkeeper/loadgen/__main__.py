"""``python -m rgwkeeper.loadgen run|compare``: the load generator without the rest of the CLI.

The same commands as ``rgwkeeper loadgen``, with fewer imports at start-up (a load host
need not load the daemon's, purge's and status's modules), so less client CPU is spent
that is not load.
"""

import sys

from rgwkeeper import logs
from rgwkeeper.cli.common import run_cli
from rgwkeeper.cli.loadgen import loadgen

if __name__ == "__main__":
    logs.setup("warning")
    sys.exit(run_cli(loadgen, sys.argv[1:]))
