"""`python -m service.cli ...` (what the tests and the benchmarks start)."""

import sys

from service.cli import main

sys.exit(main())
