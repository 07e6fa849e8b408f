"""``python -m pgwire_cdc``: the ``pgwire-cdc`` command line."""

import sys

from pgwire_cdc.cli import main

if __name__ == "__main__":
    sys.exit(main())
