"""`python -m trainledger.cli.demo`: the demo on its own, as `trainledger demo`."""

import argparse
import sys

from . import add_arguments, run

_parser = argparse.ArgumentParser(prog="trainledger demo")
add_arguments(_parser)
sys.exit(run(_parser.parse_args()))
