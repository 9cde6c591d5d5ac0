"""OpenAPI additions Litestar cannot infer: the raw bodies of the ingest routes (one format each),
the error answers (RFC 9457 problem details rather than Litestar's default shape, with
`Retry-After` on 429 and 503), the tags, and the request examples the routes give.

The conventions every operation follows (docs/development.md, "API conventions"; held by
tests/api/test_openapi_conventions.py): an `operation_id` in lowerCamelCase that starts with
the HTTP method, a tag from `API_TAGS`, a summary and a description, and for a body a
`request_example=` in the route decorator (it lands in the handler's `opt`)."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi.spec import (
    Components,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
    Tag,
)

from ..events.decoding import CLOUDEVENT, CLOUDEVENT_BATCH, JSON, MSGPACK, NDJSON
from ..events.model import EventIn


class _RawSchema(Schema):
    """A schema given as the JSON that msgspec generated for a Struct."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__()
        self._raw = raw

    def to_schema(self) -> dict[str, Any]:
        return self._raw


def security_components() -> Components:
    return Components(
        security_schemes={
            "bearer": SecurityScheme(type="http", scheme="bearer", description="trainledger token")
        }
    )


API_TAGS = [
    Tag(name="health", description="Liveness and readiness probes; no token needed."),
    Tag(name="rate cards", description="Versioned, effective-dated price lists of SKUs."),
    Tag(
        name="events",
        description="Usage events in (JSON, NDJSON, msgpack, CloudEvents) and the rejected "
        "ones (dead letters). See docs/reference/events.md.",
    ),
    Tag(name="costs", description="Cost queries: grouped costs and a project's summary."),
    Tag(
        name="bills",
        description="The provider's bills (FOCUS exports) imported, mapped to projects and "
        "reconciled with the ledger (docs/guides/reconciliation.md).",
    ),
    Tag(name="projects", description="Project settings, the project list, rebuilds."),
    Tag(name="tokens", description="Bearer tokens: a role and an optional list of projects."),
    Tag(name="budgets", description="Budgets and the rules that fire their alerts."),
    Tag(name="alerts", description="The history of the budget alerts that fired."),
    Tag(name="plans", description="Plan estimates and plan against actual (earned value)."),
    Tag(
        name="analysis",
        description="Decision calculators, on typed-in figures or on experiments' measured "
        "costs and scores (docs/guides/cost-effect.md); they store nothing.",
    ),
    Tag(
        name="reports",
        description="The waste report, its policy and experiment progress "
        "(docs/guides/waste.md); the cost-effect table (docs/guides/cost-effect.md).",
    ),
    Tag(
        name="export",
        description="The FOCUS cost-and-usage CSV export, streamed or as a job.",
    ),
    Tag(name="webhooks", description="Webhooks for budget alerts and their deliveries."),
    Tag(
        name="evaluations",
        description="Experiments' evaluation results and the project's evaluation settings.",
    ),
    Tag(
        name="jobs",
        description="Long work run in the background (a repricing after a past-dated rate-card "
        "version, a rebuild, a FOCUS export): state, progress, result, an export's file, "
        "cancel. One runs per project at a time.",
    ),
]

# The option a route decorator takes for its request body's example (`request_example=...`).
REQUEST_EXAMPLE = "request_example"

_EVENTS_EXAMPLE = {
    "id": "job-4242-step-1",
    "time": "2026-03-01T12:00:00Z",
    "project": "llm-7b",
    "sku": "gpu.h100.hour",
    "quantity": "8",
    "stage": "pretrain",
    "experiment": "baseline",
}
_CLOUDEVENT_EXAMPLE = {
    "specversion": "1.0",
    "id": "job-4242-step-1",
    "source": "//slurm/cluster-a",
    "type": "dev.trainledger.usage",
    "time": "2026-03-01T12:00:00Z",
    "subject": "llm-7b",
    "data": {"sku": "gpu.h100.hour", "quantity": "8", "stage": "pretrain"},
}


def _cloud_event_schemas(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The CloudEvents 1.0 envelope the server reads (service/events/decoding.py), with the
    usage fields in `data`: `EventIn` without `id` (the envelope's), every field optional
    because `subject` may stand for `project` and the envelope's `time` for `time`."""
    data_properties = {k: v for k, v in event["properties"].items() if k != "id"}
    text = {"type": "string"}
    return {
        "CloudEventData": {
            "type": "object",
            "title": "CloudEventData",
            "description": "The usage fields of a CloudEvent: those of `EventIn` but `id`. "
            "`project` defaults to the envelope's `subject`, `time` to its `time`; `sku` and "
            "`quantity` are needed, and no other field is accepted.",
            "properties": data_properties,
            "additionalProperties": False,
        },
        "CloudEvent": {
            "type": "object",
            "title": "CloudEvent",
            "description": "A CloudEvents 1.0 envelope in structured mode. `id` is the usage "
            "event's id, `time` its time, `subject` its project (unless `data.project` is "
            "set); `source` and `type` are kept as the tags `ce_source` and `ce_type`. "
            "Other attributes (extensions) are ignored. See docs/reference/events.md.",
            "required": ["specversion", "id", "source", "type"],
            "properties": {
                "specversion": {"type": "string", "enum": ["1.0"]},
                "id": {**text, "description": "the usage event's id"},
                "source": {**text, "description": "kept as the tag `ce_source`"},
                "type": {**text, "description": "kept as the tag `ce_type`"},
                "time": {**text, "description": "the event's time (RFC 3339)"},
                "subject": {**text, "description": "the project, unless `data.project` is set"},
                "datacontenttype": {**text, "description": "`application/json` (ignored)"},
                "data": {"$ref": "#/components/schemas/CloudEventData"},
            },
            "additionalProperties": True,
        },
    }


def _defaults_described(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each optional property's default said in its description rather than as
    `default`. The server fills a missing field in; a `default` on a request-only schema's
    field only makes openapi-typescript (its `defaultNonNullable`, on by default) type the
    field as required, so that a client had to send `stage`, `experiment`, `owner`, `tags`."""
    properties = {}
    for name, field in schema["properties"].items():
        if "default" in field and name not in schema.get("required", []):
            field = {k: v for k, v in field.items() if k != "default"}
            said = f"optional, default {json.dumps(schema['properties'][name]['default'])}"
            field["description"] = (
                f"{said}; {field['description']}" if "description" in field else said
            )
        properties[name] = field
    return {**schema, "properties": properties}


def add_wire_schemas(app: Litestar) -> None:
    """Put the event model and the CloudEvents envelope into the app's OpenAPI document
    (`#/components/schemas/EventIn`, `CloudEvent`, `CloudEventData`), and the body of
    `POST /v1/events` (read raw by its route) with a schema per content type."""
    _, components = msgspec.json.schema_components(
        [EventIn], ref_template="#/components/schemas/{name}"
    )
    components["EventIn"] = _defaults_described(components["EventIn"])
    components.update(_cloud_event_schemas(components["EventIn"]))
    schema = app.openapi_schema
    assert schema.components is not None
    registry = schema.components.schemas if schema.components.schemas is not None else {}
    for name, raw in components.items():
        registry[name] = _RawSchema(raw)
    schema.components.schemas = registry
    bodies = events_body_content()
    for item in (schema.paths or {}).values():
        post = item.post
        media = INGEST_FORMATS.get(post.operation_id or "") if post is not None else None
        if post is not None and media is not None:
            assert isinstance(post.request_body, RequestBody)
            post.request_body.content = {media: bodies[media]}


# The ingest operations, each with the one content type it documents (service/events/
# routes.py): one body per operation, so that a generated client has one function per format.
# `POST /v1/events` still reads the others too (sent under their content type), undocumented.
INGEST_FORMATS = {
    "postEvents": JSON,
    "postCloudEvents": CLOUDEVENT_BATCH,
    "postCloudEvent": CLOUDEVENT,
    "postEventsNdjson": NDJSON,
    "postEventsMsgpack": MSGPACK,
}


def events_body_content() -> dict[str, OpenAPIMediaType]:
    """The body of each content type the ingest reads, with its schema."""
    event = Reference(ref="#/components/schemas/EventIn")
    cloud = Reference(ref="#/components/schemas/CloudEvent")
    binary = {"type": "string", "format": "binary"}
    return {
        JSON: OpenAPIMediaType(
            schema=Schema(one_of=[event, Schema(type=OpenAPIType.ARRAY, items=event)]),
            example=[_EVENTS_EXAMPLE],
        ),
        NDJSON: OpenAPIMediaType(
            schema=_RawSchema(
                {
                    **binary,
                    "description": "NDJSON: one `EventIn` JSON object a line (blank lines "
                    "skipped); a batch. Also accepted as `application/jsonl`.",
                }
            ),
            example=msgspec.json.encode(_EVENTS_EXAMPLE).decode() + "\n",
        ),
        MSGPACK: OpenAPIMediaType(
            schema=_RawSchema(
                {
                    **binary,
                    "description": "msgpack: one `EventIn` map, or an array of them; the same "
                    "fields as JSON (`quantity` a string or a number). Also accepted as "
                    "`application/vnd.msgpack` and `application/x-msgpack`.",
                }
            )
        ),
        CLOUDEVENT: OpenAPIMediaType(schema=cloud, example=_CLOUDEVENT_EXAMPLE),
        CLOUDEVENT_BATCH: OpenAPIMediaType(
            schema=Schema(type=OpenAPIType.ARRAY, items=cloud), example=[_CLOUDEVENT_EXAMPLE]
        ),
    }


PROBLEM_MEDIA_TYPE = "application/problem+json"

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; `errors` names each offending field and why.",
    "required": ["status", "title"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "reason"],
                "properties": {"field": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}

# The 422 of an ingest where every event was rejected: the report and a problem in one.
INGEST_PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "IngestProblem",
    "description": "Every event of the body was rejected: the ingest report (`accepted` and "
    "`duplicates` are 0, `rejected` names each event's index, id and reason) merged with "
    "an RFC 9457 problem whose `errors` name each rejected field.",
    "required": ["accepted", "duplicates", "rejected", "type", "title", "status"],
    "properties": {
        "accepted": {"type": "integer"},
        "duplicates": {"type": "integer"},
        "rejected": {"type": "array", "items": {"$ref": "#/components/schemas/RejectedEvent"}},
        "cost_by_project": {"type": "object", "additionalProperties": {"type": "string"}},
        **PROBLEM_SCHEMA["properties"],
    },
    "additionalProperties": True,
}
INGEST_OPERATIONS = (*INGEST_FORMATS, "postRejectedEventsReplay")

RETRY_AFTER: dict[str, OpenAPIHeader | Reference] = {
    "Retry-After": OpenAPIHeader(
        schema=Schema(type=OpenAPIType.INTEGER, minimum=0),
        description="Seconds to wait before sending the same request again",
    )
}

# Answers any operation can give, besides its own: bad parameters or body, missing or
# unknown token, a role or project the token lacks, the per-token rate limit, Redis away.
COMMON_ERRORS = {
    "400": "The request is malformed (the problem names the field and the reason), names its "
    "project more than once or where the operation does not take it, or repeats a parameter",
    "401": "No bearer token, or an unknown or revoked one",
    "403": "The token's role or projects do not allow this",
    "429": "Over the per-token rate limit; retry after `Retry-After` seconds",
    "503": (
        "The ledger's Redis cannot be reached, or a shard is failing over (or, for `busy`, "
        "too much contention). The outcome is unknown: all, part or none of the request may "
        "have been applied. Retry the same request after `Retry-After` seconds, events under "
        "the same ids (a retry never counts an event twice)"
    ),
}
PUBLIC_ERRORS = {"503": COMMON_ERRORS["503"]}
# Answers that depend on the operation's shape.
BODY_ERRORS = {
    "413": "The body is over the size limit, or the batch holds too many events",
    "422": "The body is well-formed but a value is not acceptable (field and reason named)",
}
LOOKUP_ERRORS = {"404": "No such resource (or project) to read or change"}


def document_problems(app: Litestar) -> None:
    """Declare every error answer as `application/problem+json` with the problem schema."""
    schema = app.openapi_schema
    assert schema.components is not None
    registry = schema.components.schemas if schema.components.schemas is not None else {}
    registry["ProblemDetails"] = _RawSchema(PROBLEM_SCHEMA)
    registry["IngestProblem"] = _RawSchema(INGEST_PROBLEM_SCHEMA)
    schema.components.schemas = registry
    problem_content = {
        PROBLEM_MEDIA_TYPE: OpenAPIMediaType(
            schema=Reference(ref="#/components/schemas/ProblemDetails")
        )
    }
    ingest_problem = {
        PROBLEM_MEDIA_TYPE: OpenAPIMediaType(
            schema=Reference(ref="#/components/schemas/IngestProblem")
        )
    }
    public_paths = {
        route.path
        for route in app.routes
        for handler in getattr(route, "route_handlers", [])
        if handler.opt.get("exclude_from_auth")
    }
    for path, path_item in (schema.paths or {}).items():
        public = path in public_paths
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(path_item, method)
            if operation is None:
                continue
            if public:
                operation.security = []  # no token needed: say so instead of inheriting bearer
            responses = operation.responses if operation.responses is not None else {}
            errors = dict(PUBLIC_ERRORS if public else COMMON_ERRORS)
            if operation.request_body is not None:
                errors.update(BODY_ERRORS)
            if (not public and method != "post") or "{" in path:
                errors.update(LOOKUP_ERRORS)
            for code, description in errors.items():
                responses.setdefault(code, OpenAPIResponse(description=description))
            for code, response in responses.items():
                if code.isdigit() and int(code) >= 400 and isinstance(response, OpenAPIResponse):
                    response.content = problem_content
                    if code == "422" and operation.operation_id in INGEST_OPERATIONS:
                        response.content = ingest_problem
                        response.description = "Every event was rejected: the report and a problem"
                    if code in ("429", "503"):
                        response.headers = RETRY_AFTER
            operation.responses = responses


def document_csv_answers(app: Litestar) -> None:
    """A GET whose handler has `opt={"csv_alternative": True}` also answers 200 as text/csv
    (asked for by `format=csv` or `Accept: text/csv`): say so beside its JSON answer."""
    paths = app.openapi_schema.paths or {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            item = paths.get(route.path)
            if not handler.opt.get("csv_alternative") or item is None or item.get is None:
                continue
            ok = (item.get.responses or {}).get("200")
            if isinstance(ok, OpenAPIResponse) and ok.content is not None:
                ok.content["text/csv"] = OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING))


def _structs_by_name() -> dict[str, type[msgspec.Struct]]:
    """Every msgspec Struct of the service by class name (a name two of them share is left
    out: its schema's description cannot be told apart). The client side (`client`, `cli`)
    is not the service: its models mirror the service's under the same names."""
    package = __name__.split(".", 1)[0]
    client_side = (f"{package}.client.", f"{package}.cli.")
    found: dict[str, list[type[msgspec.Struct]]] = {}
    pending = list(msgspec.Struct.__subclasses__())
    while pending:
        struct = pending.pop()
        pending.extend(struct.__subclasses__())
        module = struct.__module__
        if module.split(".", 1)[0] == package and not (module + ".").startswith(client_side):
            found.setdefault(struct.__name__, []).append(struct)
    return {name: structs[0] for name, structs in found.items() if len(set(structs)) == 1}


def describe_schemas(app: Litestar) -> None:
    """Give each component schema without a description its Struct's docstring (its first
    paragraph): Litestar leaves them out."""
    schema = app.openapi_schema
    registry = schema.components.schemas if schema.components is not None else None
    structs = _structs_by_name()
    for name, component in (registry or {}).items():
        struct = structs.get(name)
        if isinstance(component, Schema) and not component.description and struct is not None:
            doc = inspect.cleandoc(struct.__dict__.get("__doc__") or "")
            component.description = " ".join(doc.split("\n\n", 1)[0].split()) or None


# An example for every required parameter, by name (a new parameter name adds one here).
PARAMETER_EXAMPLES = {
    "project": "llm-7b",
    "name": "default",
    "budget_id": "bud_78d6a17d887e",
    "plan_id": "pln_c80070d03b96",
    "token_id": "f4fc7947a918",
    "webhook_id": "wh_fae76b744643eb62",
    "result_id": "mix-a.gsm8k.step-20000",
    "job_id": "job_5f0c6a1e2b7d4c93",
}


def _nullable_enum(schema: Schema) -> Schema | None:
    """`{"type": ["null", "string"], "enum": [..., null]}` (Litestar's `Literal[...] | None`) as
    `{"oneOf": [{"type": "string", "enum": [...]}, {"type": "null"}]}`: the same values, which
    generated clients read as one enum or None instead of three types."""
    kinds = schema.type if isinstance(schema.type, list) else []
    if OpenAPIType.NULL not in kinds or len(kinds) != 2 or not schema.enum:
        return None
    (kind,) = [k for k in kinds if k != OpenAPIType.NULL]
    values = [v for v in schema.enum if v is not None]
    return Schema(one_of=[Schema(type=kind, enum=values), Schema(type=OpenAPIType.NULL)])


def _rewrite_nullable_enums(node: Any) -> None:
    """Every schema under `node` (an OpenAPI object, a list or a dict of them), rewritten in
    place by `_nullable_enum`."""
    children: list[Any]
    if isinstance(node, dict):
        children = list(node.values())
    elif isinstance(node, list):
        children = list(node)
    elif hasattr(node, "__dataclass_fields__"):
        children = [getattr(node, name) for name in node.__dataclass_fields__]
    else:
        return
    for child in children:
        if isinstance(child, Schema) and (plain := _nullable_enum(child)) is not None:
            child.type, child.enum, child.one_of = None, None, plain.one_of
        _rewrite_nullable_enums(child)


def simplify_nullable_enums(app: Litestar) -> None:
    """Rewrite each nullable enum of the document (`_nullable_enum`)."""
    _rewrite_nullable_enums(app.openapi_schema.paths)
    _rewrite_nullable_enums(app.openapi_schema.components)


def add_request_examples(app: Litestar) -> None:
    """Put each route's `request_example` into its operation's JSON request body, and an
    example into every required parameter (`PARAMETER_EXAMPLES`)."""
    schema = app.openapi_schema
    for item in (schema.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method)
            for parameter in (operation.parameters or []) if operation is not None else []:
                if isinstance(parameter, Parameter) and parameter.required:
                    parameter.example = PARAMETER_EXAMPLES.get(parameter.name)
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            example = handler.opt.get(REQUEST_EXAMPLE)
            path_item = (schema.paths or {}).get(re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path))
            if example is None or path_item is None:
                continue
            for method in handler.http_methods:
                operation = getattr(path_item, method.lower())
                body = operation.request_body if operation is not None else None
                if isinstance(body, RequestBody) and body.content:
                    for media in body.content.values():
                        media.example = example
