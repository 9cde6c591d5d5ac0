"""Importers: scheduler accounting records turned into usage events.

Pure functions, no I/O: each importer takes the text (or parsed JSON) a scheduler printed and
returns the events to post plus everything it did not turn into an event, with the reason.
The command line (`trainledger import ...`) reads the files and posts the events.
"""

from .common import ImportEvent, ImportResult, Skipped, Unmapped

__all__ = ["ImportEvent", "ImportResult", "Skipped", "Unmapped"]
