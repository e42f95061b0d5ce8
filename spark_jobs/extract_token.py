"""spark-submit entry point of a checkout: the code is the package's `spanner_cdc.cli.extract_token` (see its docstring)."""

import sys

from spanner_cdc.cli.extract_token import main

if __name__ == "__main__":
    sys.exit(main())
