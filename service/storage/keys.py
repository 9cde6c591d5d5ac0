"""The key schema: every Redis key of trainledger is spelled here, and nowhere else.

Layout (``P`` is the project's hash tag ``{p:<project>}``, so every key of one
project lands in one cluster slot and one Lua script can change them together):

==============================  ======  =====================================================
key                             type    holds
==============================  ======  =====================================================
tl:P:meta                       hash    rate_card, currency, accepted/duplicate counters,
                                        ``fold_cursor`` (the last log entry whose totals are
                                        in tot/hr/daily/ru) and ``pend_events`` (accepted
                                        events not yet folded);
                                        ``bound_c``/``bound_q``: lifetime cost/quantity in
                                        10**9 nano/micro, rounded up per batch
tl:P:seen:<shard>               hash    event id -> expiry day (days since 1970-01-01)
tl:P:tot:<yyyymmdd>             hash    ``c|dims`` cost nano, ``q|dims`` quantity micro,
                                        ``n|dims`` events, dims = stage,experiment,category,
                                        sku,owner,fixed,tags joined by \\x1f (tags: the
                                        project's attribution tags, ``k=v`` joined by \\x1e)
tl:P:hr:<yyyymmdd>              hash    ``c|HH|stage,category,fixed`` -> cost nano of that hour,
                                        ``n|HH|...`` -> its events (cost 0 included)
tl:P:daily                      hash    yyyymmdd -> cost nano of that day (index of tot keys)
tl:P:tier:<yyyymm>              hash    sku -> cumulative quantity micro (graduated tiers)
tl:P:ru:<name>:<period>         hash    ``tot`` rolled up onto a few dimensions, per day
                                        (yyyymmdd) and per month (yyyymm): ``c|``/``q|``/``n|``
                                        + the projected dims (service/ledger/rollups.py)
tl:P:ru:eff:<period>            hash    the cost-effect sums per day or month: ``c|``/``n|`` +
                                        experiment,stage,owner,category; ``ru:effq:<period>``:
                                        ``q|`` + experiment,stage,owner,sku
                                        (service/ledger/effectsums.py)
tl:P:ru:events                  hash    roll-up version -> events the roll-ups hold (queries
                                        use them only when it equals meta ``accepted`` less
                                        ``pend_events``); ``eff1``: those the cost-effect
                                        sums hold
tl:P:logix:<yyyymmdd>           hash    ``HH|<log entry id>`` -> events of that entry in that
                                        hour (the log indexed by event time, written by the
                                        fold, rebuilt by a rebuild; meta ``logix`` = 1 once it
                                        covers every entry: service/ledger/ranges.py)
tl:P:tierix:<yyyymm>            hash    ``<log entry id>|<version>|<sku>`` -> quantity micro of
                                        that entry's events of that month priced with that
                                        rate-card version and SKU (the tier counters an export
                                        replays before an entry; same lifecycle as logix)
tl:P:wcell:<yyyymmdd>           hash    the waste report's cells of a day (ledger/wastecells.py):
                                        ``c|``/``q|``/``n|`` + cell -> cost nano, quantity micro,
                                        events; ``s|`` + cell -> msgpack [epoch µs, id, ...] of its
                                        first events; written by the fold, rebuilt by a rebuild;
                                        meta ``wastecells`` = 1 once they cover every entry
tl:P:wfacts                     hash    the waste rules' facts of the whole log: ``sku|``/``res|``
                                        + SKU / reservation tag -> events, ``xf|``/``tf|`` + key ->
                                        msgpack [epoch µs, id] of the first (same lifecycle)
tl:P:log                        stream  one entry per accepted batch: lz4(msgpack(coded
                                        columns)), service/ledger/eventlog.py; the totals
                                        are folded from it
tl:P:rej                        hash    rejected event id -> JSON record (dead letters)
tl:P:rejidx                     zset    rejected event id scored by rejection time (ms)
tl:P:budgets                    hash    budget id -> JSON
tl:P:bspend                     hash    ``<budget>|<period>`` -> spend nano in that period
tl:P:bday                       hash    ``<budget>|<yyyymmdd>`` -> spend nano that day (growth)
tl:P:bfired                     hash    alert id -> spend when it fired (once per limit and period)
tl:P:hi:<key>                   hash    the high limbs of the sums of tl:P:<key> (tot, hr, daily,
                                        ru, bspend, bday): a sum is ``hi * 10**9 + lo``
                                        (service/storage/limbs.py, docs/exact-money.md)
tl:P:alerts                     stream  alerts as decided by the ingest script (and the
                                        evaluation regression alerts, fire_regressions.lua)
                                        (consumer group ``deliverers``: the webhook outbox)
tl:P:plans                      hash    plan id -> JSON (the plan, its estimate, its budgets)
tl:P:progress                   hash    ``<plan>|<stage index>`` -> JSON progress report
tl:P:xprog                      hash    experiment -> JSON list of progress points (waste report)
tl:P:evals                      hash    evaluation result id -> JSON result (cost-effect report)
tl:P:evalidx                    zset    ``<time>|<id>`` of each result (all scores 0: by lex, the
                                        listing order; service/evaluations/capacity.py)
tl:P:evalxidx                   zset    ``<experiment>\\x00<time>|<id>`` (one experiment's
                                        results in listing order, by lex)
tl:P:evalset                    string  JSON evaluation settings (baseline, benchmark kinds)
tl:P:efired                     hash    regression alert id -> its JSON record (fired once, with
                                        the alerts entry, by fire_regressions.lua)
tl:P:stage:*                    any     staging copies written by a rebuild, then renamed
tl:P:dlv                        hash    ``<alert id>|<webhook id>`` -> JSON delivery record
tl:P:dlvq                       zset    pending delivery ids scored by next attempt (ms); a
                                        lease moves the score ahead while a sender holds one
tl:P:dlvdone                    zset    delivered delivery ids scored by delivery time (ms)
tl:P:dlvdead                    zset    failed delivery ids (dead letters) by failure time (ms)
tl:P:job:<id>                   hash    one job (service/jobs): kind, state, params, progress
                                        (done/total), result or error, cancel flag, owner
tl:P:jobs                       zset    job ids of the project scored by creation (ms)
tl:P:jobq                       list    queued job ids, oldest first; the head is the one
                                        that runs (it stays there while running)
tl:P:joblease                   string  the token of the worker running the project's job
                                        (PX: lease, renewed by its heartbeat)
tl:P:jobx                       string  the id of the project's last export job (one queued
                                        or running at a time: jobs.lua `add`)
tl:P:jobfile:<id>[:<attempt>]   list    an export job's file: zlib-compressed CSV chunks in
                                        order; an attempt writes its own key, renamed to
                                        the job's at its end (PX: 24 h)
tl:P:bhold                      hash    reprice job ids holding the project's budget alert
                                        decisions (service/jobs, the ingest script reads it;
                                        PX: renewed while the jobs are queued or running)
tl:jobprojects                  set     projects that may have a job queued or running
tl:ratecards                    set     rate-card names
tl:ratecard:<name>              hash    version number -> JSON of that version (its length,
                                        the number of versions, is the card's revision: a
                                        cached card is stale when it moved)
tl:projects                     set     project names that have data or settings
tl:spendrank                    zset    project -> its spend to date (nano, as a float: a
                                        ranking, not a figure) for the /metrics cap on
                                        projects shown; ZINCRBY after each fold, set by a
                                        rebuild (service/spend_metrics)
tl:spendrank:seeded             string  set once the ranking was seeded from every project's
                                        daily index (data folded before the ranking existed)
tl:webhooks                     hash    webhook id -> JSON (filters; url and secret sealed,
                                        service/storage/sealing.py)
tl:sealing                      hash    ``check`` -> a known text sealed with the secret key
tl:token:<sha256>               hash    bearer token record (the token itself is never stored)
tl:rl:<token>:<second>          string  requests of a token in that second (rate limit)
tl:tokens                       hash    token id -> sha256, for listing and revoking
{tl:tokens}:unscoped-admins      set     ids of admin tokens for every project (same slot as
                                        tl:tokens: the last one is never revoked)
tl:{bills}:imports              hash    content sha256 -> JSON of a committed bill import
                                        (service/bills: id, rows, days, newest ChargePeriodEnd);
                                        one HSETNX commits an import (one slot: ``{bills}``)
tl:{bills}:rows:<id>:<yyyymmdd>  hash    ``b|``/``e|``/``q|``/``n|``/``k|`` + bill key -> billed,
                                        effective (nano), quantity (nano), rows, corrections of
                                        that import's rows charged that day (read only once
                                        the import is in tl:{bills}:imports)
tl:{bills}:staging              zset    import ids being written, by start time (ms): an
                                        import that never committed is swept after an hour
tl:{bills}:stagedays:<id>       set     the days an import being written has rows for (to sweep)
tl:{bills}:mappings             hash    project -> JSON bill mapping (rows, SKUs)
==============================  ======  =====================================================

Redis Cluster (``redis+cluster://host:port``, see docs/scaling.md): every script declares
all the keys it touches in KEYS, and those are one project's keys (one slot), or one global
key alone (a rate card, a rate-limit window). Transactions and scripts never span two
slots; the few multi-key steps on global keys (a token and the token index) are plain
pipelines, split by node. A project's data is all on one shard, so one very busy project is
served by one master. An acknowledged ingest write has reached ``wait_replicas`` replicas
(WAIT on the write's own connection; ``Connection.replicated``), so a failover keeps it.
"""

from __future__ import annotations

import zlib

NAMESPACE = "tl"
SEEN_SHARDS = 64
FIELD_SEP = "\x1f"
TAG_SEP = "\x1e"  # between the attributed tags inside one dims element

# Key kinds (after the project's tag) whose sums are kept in two limbs.
_LIMBED = ("tot:", "hr:", "daily", "ru:", "bspend", "bday", "wcell:")


def project_tag(project: str) -> str:
    return "{p:" + project + "}"


class Keys:
    """Key builders. Nothing outside this module spells a key."""

    @staticmethod
    def meta(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:meta"

    @staticmethod
    def seen(project: str, shard: int) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:seen:{shard}"

    @staticmethod
    def totals(project: str, day: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:tot:{day}"

    @staticmethod
    def hourly(project: str, day: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:hr:{day}"

    @staticmethod
    def daily(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:daily"

    @staticmethod
    def tier(project: str, month: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:tier:{month}"

    @staticmethod
    def rollup(project: str, name: str, period: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:ru:{name}:{period}"

    @staticmethod
    def rollup_count(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:ru:events"

    @staticmethod
    def log_index(project: str, day: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:logix:{day}"

    @staticmethod
    def waste_cells(project: str, day: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:wcell:{day}"

    @staticmethod
    def waste_facts(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:wfacts"

    @staticmethod
    def tier_index(project: str, month: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:tierix:{month}"

    @staticmethod
    def log(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:log"

    @staticmethod
    def rejected(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:rej"

    @staticmethod
    def rejected_index(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:rejidx"

    @staticmethod
    def budgets(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:budgets"

    @staticmethod
    def budget_spend(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:bspend"

    @staticmethod
    def budget_daily(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:bday"

    @staticmethod
    def budget_fired(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:bfired"

    @staticmethod
    def alerts(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:alerts"

    @staticmethod
    def plans(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:plans"

    @staticmethod
    def progress(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:progress"

    @staticmethod
    def experiment_progress(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:xprog"

    @staticmethod
    def evaluations(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:evals"

    @staticmethod
    def evaluation_fired(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:efired"

    @staticmethod
    def evaluation_index(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:evalidx"

    @staticmethod
    def evaluation_experiment_index(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:evalxidx"

    @staticmethod
    def evaluation_audit(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:evalaudit"

    @staticmethod
    def evaluation_settings(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:evalset"

    @staticmethod
    def high(live_key: str) -> str:
        """The hash of the high limbs of a key's sums (service/storage/limbs.py)."""
        tag, suffix = live_key.split("}:", 1)
        return f"{tag}}}:hi:{suffix}"

    @staticmethod
    def has_high(live_key: str) -> bool:
        """Whether the key holds sums kept in two limbs: totals, hours, the daily index,
        roll-ups (not their event counter) and budget counters."""
        suffix = live_key.split("}:", 1)[1]
        return suffix.startswith(_LIMBED) and suffix != "ru:events"

    @staticmethod
    def staging(project: str, live_key: str) -> str:
        suffix = live_key.split("}:", 1)[1]
        return f"{NAMESPACE}:{project_tag(project)}:stage:{suffix}"

    @staticmethod
    def job(project: str, job_id: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:job:{job_id}"

    @staticmethod
    def jobs(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:jobs"

    @staticmethod
    def job_queue(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:jobq"

    @staticmethod
    def job_lease(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:joblease"

    @staticmethod
    def job_exclusive(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:jobx"

    @staticmethod
    def job_file(project: str, job_id: str, attempt: str = "") -> str:
        suffix = f":{attempt}" if attempt else ""
        return f"{NAMESPACE}:{project_tag(project)}:jobfile:{job_id}{suffix}"

    @staticmethod
    def budget_hold(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:bhold"

    @staticmethod
    def job_projects() -> str:
        return f"{NAMESPACE}:jobprojects"

    @staticmethod
    def rate_card_names() -> str:
        return f"{NAMESPACE}:ratecards"

    @staticmethod
    def rate_card(name: str) -> str:
        return f"{NAMESPACE}:ratecard:{name}"

    @staticmethod
    def projects() -> str:
        return f"{NAMESPACE}:projects"

    @staticmethod
    def spend_rank() -> str:
        return f"{NAMESPACE}:spendrank"

    @staticmethod
    def spend_rank_seeded() -> str:
        return f"{NAMESPACE}:spendrank:seeded"

    @staticmethod
    def token(digest: str) -> str:
        return f"{NAMESPACE}:token:{digest}"

    @staticmethod
    def rate_window(token_id: str, second: int) -> str:
        return f"{NAMESPACE}:rl:{token_id}:{second}"

    @staticmethod
    def token_index() -> str:
        return f"{NAMESPACE}:tokens"

    @staticmethod
    def unscoped_admins() -> str:
        """Ids of the admin tokens for every project; the hash tag puts it in the slot of
        `token_index`, so one script sees both."""
        return f"{{{NAMESPACE}:tokens}}:unscoped-admins"

    @staticmethod
    def webhooks() -> str:
        return f"{NAMESPACE}:webhooks"

    @staticmethod
    def sealing() -> str:
        return f"{NAMESPACE}:sealing"

    @staticmethod
    def deliveries(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:dlv"

    @staticmethod
    def delivery_queue(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:dlvq"

    @staticmethod
    def delivery_dead(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:dlvdead"

    @staticmethod
    def delivery_done(project: str) -> str:
        return f"{NAMESPACE}:{project_tag(project)}:dlvdone"

    # --- bills (service/bills): one hash tag, so an import commits in one command ---------

    @staticmethod
    def bill_imports() -> str:
        return f"{NAMESPACE}:{{bills}}:imports"

    @staticmethod
    def bill_rows(import_id: str, day: str) -> str:
        return f"{NAMESPACE}:{{bills}}:rows:{import_id}:{day}"

    @staticmethod
    def bill_staging() -> str:
        return f"{NAMESPACE}:{{bills}}:staging"

    @staticmethod
    def bill_staged_days(import_id: str) -> str:
        return f"{NAMESPACE}:{{bills}}:stagedays:{import_id}"

    @staticmethod
    def bill_mappings() -> str:
        return f"{NAMESPACE}:{{bills}}:mappings"


def seen_shard(event_id: str) -> int:
    # CRC-32 (in C): stable across processes and versions, unlike hash().
    return zlib.crc32(event_id.encode()) % SEEN_SHARDS
