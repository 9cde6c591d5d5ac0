"""The admin token the command line falls back to: the local one `serve` writes on first start
in the data dir, or one the operator supplies as a file (a Docker or Kubernetes secret)."""

from __future__ import annotations

from pathlib import Path

from ..auth.model import supplied_token_problem

# The local admin token `serve` writes on first start; client commands fall back to it.
ADMIN_TOKEN_FILE = "admin-token"


# Or an admin token the operator supplies as a file (a Docker or Kubernetes secret): registered
# at start, never printed and never copied into the data dir.
ADMIN_TOKEN_FILE_ENV = "TRAINLEDGER_ADMIN_TOKEN_FILE"


def supplied_admin_token(path: Path | None) -> str | None:
    """The token in the file `path` (the setting `$TRAINLEDGER_ADMIN_TOKEN_FILE`); raises
    ValueError saying why it cannot be used (never showing it)."""
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"{ADMIN_TOKEN_FILE_ENV}: cannot read {path}: {exc.strerror}") from exc
    problem = supplied_token_problem(token)
    if problem is not None:
        raise ValueError(f"{ADMIN_TOKEN_FILE_ENV}: the token in {path} {problem}")
    return token
