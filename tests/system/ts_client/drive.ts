// Driven by tests/system/test_generated_ts_client.py: the types come from `openapi-typescript
// openapi/openapi.json -o schema.d.ts` (stock options), the calls go through openapi-fetch.
// It puts a rate card, posts events as JSON (a batch, and one the ledger rejects), as one
// CloudEvent, as a CloudEvents batch and as NDJSON (each format through its own operation),
// reads the costs, and prints what it got as one JSON line.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type EventIn = components["schemas"]["EventIn"];
type CloudEvent = components["schemas"]["CloudEvent"];
type IngestProblem = components["schemas"]["IngestProblem"];

const env = (name: string): string => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const client = createClient<paths>({
  baseUrl: env("TRAINLEDGER_URL"),
  headers: { Authorization: `Bearer ${env("TRAINLEDGER_TOKEN")}` },
});
const hourAgo = new Date(Date.now() - 3600_000).toISOString();
const usage = (id: string, quantity: string, sku = "gpu.h100.hour"): EventIn => ({
  id,
  time: hourAgo,
  project: "llm",
  sku,
  quantity,
  // `owner` and `tags` left out: optional (the server's defaults), as the types say.
  stage: "pretrain",
  experiment: "ts",
});

const card = await client.PUT("/v1/rate-cards/{name}", {
  params: { path: { name: "default" } },
  body: JSON.parse(env("TRAINLEDGER_CARD")) as components["schemas"]["RateCardIn"],
});
if (card.response.status !== 201) throw new Error(`PUT rate card: ${JSON.stringify(card.error)}`);

const batch = await client.POST("/v1/events", {
  body: [usage("ts-1", "2"), usage("ts-2", "2"), usage("ts-3", "2")],
});
if (batch.data === undefined) throw new Error(`POST events: ${JSON.stringify(batch.error)}`);

const refused = await client.POST("/v1/events", {
  body: [usage("ts-bad", "1", "no.such.sku")],
});

const cloudEvent: CloudEvent = {
  specversion: "1.0",
  id: "ts-ce-1",
  source: "//slurm/cluster-a",
  type: "dev.trainledger.usage",
  time: hourAgo,
  subject: "llm",
  data: { sku: "gpu.h100.hour", quantity: "1", experiment: "ts" },
};
// Each format has its own operation; openapi-fetch sends `application/json` unless told.
const cloud = await client.POST("/v1/events/cloudevent", {
  body: cloudEvent,
  headers: { "Content-Type": "application/cloudevents+json" },
});
if (cloud.data === undefined) throw new Error(`POST CloudEvent: ${JSON.stringify(cloud.error)}`);

const cloudBatch = await client.POST("/v1/events/cloudevents", {
  body: [
    { ...cloudEvent, id: "ts-ce-2" },
    { ...cloudEvent, id: "ts-ce-3" },
  ],
  headers: { "Content-Type": "application/cloudevents-batch+json" },
});
if (cloudBatch.data === undefined) {
  throw new Error(`POST CloudEvents: ${JSON.stringify(cloudBatch.error)}`);
}

// NDJSON is text the caller writes: sent as it is, under its own content type.
const ndjson = await client.POST("/v1/events/ndjson", {
  body: JSON.stringify(usage("ts-nd-1", "1")) + "\n",
  headers: { "Content-Type": "application/x-ndjson" },
  bodySerializer: (body) => body,
});
if (ndjson.data === undefined) throw new Error(`POST NDJSON: ${JSON.stringify(ndjson.error)}`);

const costs = await client.GET("/v1/costs", {
  params: { query: { project: "llm", group_by: "experiment" } },
});
if (costs.data === undefined) throw new Error(`GET costs: ${JSON.stringify(costs.error)}`);

process.stdout.write(
  JSON.stringify({
    card: card.response.status,
    batch: { status: batch.response.status, accepted: batch.data.accepted },
    refused: {
      status: refused.response.status,
      // A 422 is the IngestProblem; the other error answers are ProblemDetails.
      rejected:
        refused.response.status === 422
          ? (refused.error as IngestProblem).rejected.map((r) => r.id)
          : null,
    },
    cloud: { status: cloud.response.status, accepted: cloud.data.accepted },
    cloudBatch: { status: cloudBatch.response.status, accepted: cloudBatch.data.accepted },
    ndjson: { status: ndjson.response.status, accepted: ndjson.data.accepted },
    total_cost: costs.data.total_cost,
    total_events: costs.data.total_events,
    rows: costs.data.rows.map((row) => [row.key.experiment, row.cost]),
  }) + "\n",
);
