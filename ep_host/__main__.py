"""``python -m ep_host`` runs the ``ep-host`` command."""

import sys

from ep_host.cli import main

sys.exit(main())
