"""`POST /v1/export/focus/jobs` over HTTP: 202 and the job at its `Location`, progress, the
download link, and the file byte for byte the `GET /v1/export/focus` answer; a read token of
another project neither starts nor sees nor downloads one."""

from __future__ import annotations

from tests.api.test_ingest import post, put_card
from tests.api.test_repricing import wait_for_job
from tests.conftest import Api, event


async def test_an_export_job_gives_the_streamed_file(api: Api) -> None:
    await put_card(api)
    await post(api, [event(f"x{i}", "2", experiment=f"e{i % 3}") for i in range(30)])
    async with api.client() as c:
        for params in ({}, {"granularity": "day"}):
            query = {"project": "llm", **params}
            streamed = await c.get("/v1/export/focus", params=query)
            assert streamed.status_code == 200, streamed.text
            r = await c.post("/v1/export/focus/jobs", params=query)
            assert r.status_code == 202, r.text
            queued = r.json()
            assert queued["kind"] == "export" and queued["progress"]["total"] == 30
            assert r.headers["location"] == queued["href"]
            assert queued["params"].get("granularity", "event") == params.get(
                "granularity", "event"
            )
            job = await wait_for_job(c, queued["href"])
            assert job["state"] == "succeeded", job
            assert job["progress"] == {"done": 30, "total": 30}
            download = job["download"]
            assert download["events"] == 30 and download["expires_at"]
            got = await c.get(download["href"])
            assert got.status_code == 200, got.text
            assert got.headers["content-type"].startswith("text/csv")
            assert got.content == streamed.content
            assert download["size_bytes"] == len(got.content)
            assert got.headers["content-disposition"] == streamed.headers["content-disposition"]


async def test_no_file_is_a_404_and_a_bad_window_a_400(api: Api) -> None:
    await put_card(api)
    await post(api, [event("x1", "2")])
    async with api.client() as c:
        r = await c.post("/v1/projects/llm/rebuild", params={"async": "true"})
        rebuild = await wait_for_job(c, r.json()["href"])
        r = await c.get(f"/v1/jobs/{rebuild['id']}/file", params={"project": "llm"})
        assert r.status_code == 404 and "has no file" in r.json()["detail"], r.text
        assert r.headers["content-type"].startswith("application/problem+json"), r.text
        r = await c.post(
            "/v1/export/focus/jobs",
            params={"project": "llm", "from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
        )
        assert r.status_code == 400, r.text


async def test_other_projects_tokens_are_refused(api: Api) -> None:
    await put_card(api)
    await post(api, [event("x1", "2")])
    async with api.client() as c:
        r = await c.post("/v1/export/focus/jobs", params={"project": "llm"})
        job = await wait_for_job(c, r.json()["href"])
    other = await api.token("read", ["pb"])
    async with api.client(other) as c:
        assert (await c.post("/v1/export/focus/jobs", params={"project": "llm"})).status_code == 403
        assert (await c.get(job["download"]["href"])).status_code == 403
        # Asked inside its own project, the other project's job does not exist.
        r = await c.get(f"/v1/jobs/{job['id']}/file", params={"project": "pb"})
        assert r.status_code == 404, r.text
