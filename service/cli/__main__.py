"""`python -m trainledger.cli ...` (what the tests and the benchmarks start)."""

import sys

from . import main

sys.exit(main())
