"""The two rich consoles every command prints through: results to stdout, the rest to stderr.

They are made again at the start of each `main()` call (``configure``) so that a caller that
swaps ``sys.stdout`` or sets ``COLUMNS`` (a test, an embedding script) gets what it asked for.
"""

from __future__ import annotations

from rich.console import Console


class Ui:
    def __init__(self) -> None:
        self.out = Console()
        self.err = Console(stderr=True, soft_wrap=True)

    def configure(self) -> None:
        self.out = Console()
        # Messages are not folded at the terminal width: a log keeps each one on one line.
        self.err = Console(stderr=True, soft_wrap=True)


ui = Ui()
