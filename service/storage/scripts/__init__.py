"""The Lua scripts of the store, one `.lua` file each, read from the package once at import.

Each file opens with its documentation (``--`` lines: KEYS, ARGV, the answer); the loader
leaves that header out, so the text sent to the server is the script alone and stays the
same, byte for byte, as long as the code below the header does. A script that sums in two
limbs starts with the shared fragment ``apply_increments.lua`` (its functions `lt`, `add`,
`apply_increments`), prepended here.
"""

from __future__ import annotations

from importlib.resources import files


def script_text(name: str) -> str:
    """The code of `name`.lua: its leading ``--`` documentation left out."""
    lines = files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    body = lines.splitlines(keepends=True)
    start = 0
    while start < len(body) and body[start].startswith("--"):
        start += 1
    return "\n" + "".join(body[start:])


APPLY_INCREMENTS = script_text("apply_increments")
INGEST = APPLY_INCREMENTS + script_text("ingest")
FOLD_LOG = APPLY_INCREMENTS + script_text("fold_log")
READ_UNFOLDED = script_text("read_unfolded")
TOTALS_STATE = script_text("totals_state")
INIT_BUDGET = script_text("init_budget")
APPEND_PROGRESS = script_text("append_progress")
RATE_WINDOW = script_text("rate_window")
REVOKE_TOKEN = script_text("revoke_token")
COUNT_DUPLICATES = script_text("count_duplicates")
PUT_RATE_CARD = script_text("put_rate_card")
SWAP_REBUILD = script_text("swap_rebuild")
DISPATCH_ALERT = script_text("dispatch_alert")
CLAIM_DELIVERIES = script_text("claim_deliveries")
SETTLE_DELIVERY = script_text("settle_delivery")
REDELIVER = script_text("redeliver")
REPLACE_FIELD = script_text("replace_field")
PUT_REJECTED = script_text("put_rejected")
FIRE_REGRESSIONS = script_text("fire_regressions")
ADD_EVALUATIONS = script_text("add_evaluations")
REPLACE_EVALUATION = script_text("replace_evaluation")
JOBS = script_text("jobs")
