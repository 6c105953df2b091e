"""``python -m ep_host`` runs the ``ep-host`` command."""

import sys

from ep_host.cli import main

if __name__ == "__main__":  # a spawned child process imports this module too
    sys.exit(main())
