"""trainledger performance suite: `python -m bench.run` (see bench/README.md)."""
