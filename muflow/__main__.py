"""``python -m muflow``."""

import sys

from muflow import signals
from muflow.cli import main

if __name__ == "__main__":
    code = main()
    if signals.received is not None:  # stopped by SIGINT or SIGTERM: cleaned up, line printed
        signals.exit_now(code)
    sys.exit(code)
