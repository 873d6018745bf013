"""``python -m muflow``."""

import sys

from muflow.cli import main

if __name__ == "__main__":
    sys.exit(main())
