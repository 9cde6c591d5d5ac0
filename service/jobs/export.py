"""The FOCUS export as a job (`POST /v1/export/focus/jobs`): the same CSV as
`GET /v1/export/focus`, written by a job worker into Redis and downloaded afterwards.

Where the file lives: workers share nothing but Redis (any worker may run the job, any may
answer the download, a restarted one has no local disk to find), so the file is a Redis list
of zlib-compressed chunks of about 64 KiB, under the project's hash tag. It is bounded: at
most FILE_MAX_BYTES compressed (a larger export fails, naming a window or `granularity=day`
instead), kept FILE_KEEP_MS after the job ended, then expired by Redis itself.

Surviving a worker's death: the job records the log's last entry when it is asked, and every
attempt exports the log up to that entry only, so every attempt writes the same file. An
attempt writes under its own key (its lease token) and renames it to the job's only once it
is complete, before the job is marked succeeded; an attempt whose worker died leaves a
partial key that expires (FILE_KEEP_MS after its last chunk) and is never shown.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..export.aggregate import Granularity
from ..export.stream import export_filename, prepare_export
from ..storage.connection import StoreError
from .model import FILE_KEEP_MS, FILE_MAX_BYTES, ExportFile, ExportTooLarge, FileGone, JobParams

if TYPE_CHECKING:
    from ..ratecards.catalog import RateCards
    from ..stores import Stores
    from .model import Job
    from .service import RunningJob

_HOUR = timedelta(hours=1)


async def window_events(
    store: Stores, project: str, start: datetime | None, end: datetime | None
) -> int:
    """The events an export of ``[start, end)`` covers, counted from the hourly totals (an
    hour the window cuts counts whole: a bound the export's progress ends at or below); the
    whole range is the project's accepted events."""
    if start is None and end is None:
        meta = await store.projects.project_meta(project)
        return int(meta.get("accepted", "0"))
    first = start.strftime("%Y%m%d") if start else "00000000"
    last = end.strftime("%Y%m%d") if end else "99999999"
    days = sorted(d for d in await store.ledger.daily_costs(project) if first <= d <= last)
    total = 0
    for day, fields in zip(days, await store.ledger.hour_totals(project, days), strict=True):
        midnight = datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC)
        for raw_field, raw_value in fields.items():
            kind, hour, _ = raw_field.decode().split("|", 2)
            begin = midnight + int(hour) * _HOUR
            if (
                kind == "n"
                and (start is None or begin + _HOUR > start)
                and (end is None or begin < end)
            ):
                total += int(raw_value)
    return total


async def export_params(
    store: Stores,
    rate_cards: RateCards,
    project: str,
    window: tuple[datetime | None, datetime | None],
    granularity: Granularity,
) -> tuple[JobParams, int]:
    """What an export job is asked, checked as `GET /v1/export/focus` checks it (its rate
    card must exist: ExportError), with the log's last entry now; and its progress total."""
    start, end = window
    export = await prepare_export(store, rate_cards, project)
    params = JobParams(
        from_time=start, to_time=end, granularity=granularity, until_entry=export.last_entry
    )
    return params, await window_events(store, project, start, end)


async def run_export(
    store: Stores, rate_cards: RateCards, job: RunningJob, params: JobParams
) -> ExportFile:
    """Write the export's file, reporting the events written as the job's progress and
    stopping at a cancel (JobCancelled: the partial file is dropped). Raises ExportError
    when the log cannot be priced, ExportTooLarge past FILE_MAX_BYTES."""
    project, job_id, attempt = job.project, job.job_id, job.token
    export = await prepare_export(store, rate_cards, project)
    export.last_entry = params.until_entry or ""  # the log as it stood when it was asked
    start, end = params.from_time, params.to_time
    stored = size = 0
    await job.on_batch(0)
    try:
        chunks = export.csv_chunks(start, end, granularity=params.granularity or "event")
        async for chunk in chunks:
            packed = zlib.compress(chunk, 6)
            stored += len(packed)
            size += len(chunk)
            if stored > FILE_MAX_BYTES:
                raise ExportTooLarge(
                    f"the file would take more than {FILE_MAX_BYTES >> 20} MiB compressed: "
                    "export a window (from, to) or granularity=day"
                )
            await store.jobs.append_chunk(project, job_id, attempt, packed, FILE_KEEP_MS)
            await job.on_batch(min(export.events_read, job.total))
        await store.jobs.publish_file(project, job_id, attempt, FILE_KEEP_MS)
    except BaseException:
        with contextlib.suppress(StoreError):
            await store.jobs.drop_file(project, job_id, attempt)
        raise
    job.done = job.total = export.events_read
    return ExportFile(
        href=f"/v1/jobs/{job_id}/file?project={project}",
        filename=export_filename(project, start, end),
        size_bytes=size,
        rows=export.rows_written,
        events=export.events_read,
        expires_at=datetime.now(UTC) + timedelta(milliseconds=FILE_KEEP_MS),
    )


async def export_file(store: Stores, job: Job) -> AsyncIterator[bytes]:
    """The CSV of a succeeded export job, a chunk at a time (one chunk in memory). Raises
    FileGone when the job has no file (not an export, not succeeded, or expired); a file
    that expires during the download cuts the stream (its chunked encoding unterminated)."""
    count = await store.jobs.file_chunks(job.project, job.id)
    if job.kind != "export" or job.download is None or count == 0:
        raise FileGone(job)

    async def chunks() -> AsyncIterator[bytes]:
        for index in range(count):
            packed = await store.jobs.file_chunk(job.project, job.id, index)
            if packed is None:
                raise FileGone(job)
            yield zlib.decompress(packed)

    return chunks()
