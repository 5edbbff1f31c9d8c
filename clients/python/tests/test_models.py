"""Every model against the OpenAPI document the server serves: same
fields, same required ones, compatible types. A property the server adds
or renames fails here, so the client cannot drift from the server."""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime, timezone
from typing import Any, Dict

import httpx
import pytest

from outpost import models
from outpost.errors import _BY_CODE

# Schemas the client unwraps instead of modelling: the list wrappers
# (Client.agents and conversations.list return the lists), the error
# envelope (raised as an exception) and the union of Event and Result.
UNWRAPPED = {"ErrorResponse", "ConversationList", "TurnList", "AgentList", "StreamItem", "RaceItem", "Limits"}

JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "object": dict, "array": list}


@pytest.fixture(scope="module")
def document(shared) -> Dict[str, Any]:
    with httpx.Client(transport=httpx.HTTPTransport(uds=shared.socket)) as c:
        r = c.get("http://outpost/v1/openapi.json")
    r.raise_for_status()
    return r.json()


def resolve(doc, schema):
    """resolve follows $ref, and merges the parts of an allOf (an object
    that extends another: RaceEvent is an Event with its contestant)."""
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = doc["components"]["schemas"][name]
    if "allOf" in schema:
        merged = {"type": "object", "properties": {}, "required": []}
        for part in schema["allOf"]:
            part = resolve(doc, part)
            merged["properties"].update(part.get("properties", {}))
            merged["required"] += part.get("required", [])
        return merged
    return schema


def nullable(schema) -> bool:
    t = schema.get("type")
    return (isinstance(t, list) and "null" in t) or any(s.get("type") == "null" for s in schema.get("oneOf", []))


def unwrap(tp):
    """unwrap is (the type without Optional, whether it was Optional)."""
    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return (args[0] if len(args) == 1 else tp), type(None) in typing.get_args(tp)
    return tp, False


def check_type(doc, where, tp, schema, problems):
    schema = resolve(doc, schema)
    if "oneOf" in schema:
        schema = next(resolve(doc, s) for s in schema["oneOf"] if s.get("type") != "null")
    if not schema or "description" in schema and len(schema) == 1:
        if tp is not Any:
            problems.append(f"{where}: any JSON value, typed {tp}")
        return
    if "const" in schema:
        return check_type(doc, where, tp, {"type": type(schema["const"]).__name__.replace("str", "string")}, problems)
    types = schema.get("type")
    types = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    if dataclasses.is_dataclass(tp):
        if types != ["object"]:
            problems.append(f"{where}: {types}, typed as the model {tp.__name__}")
        check_model(doc, tp, schema, problems, where)
    elif schema.get("format") == "date-time":
        if tp is not datetime:
            problems.append(f"{where}: date-time, typed {tp}")
    elif typing.get_origin(tp) is list:
        if types != ["array"]:
            problems.append(f"{where}: {types}, typed a list")
        (item,) = typing.get_args(tp)
        check_type(doc, where + "[]", item, schema.get("items", {}), problems)
    else:
        origin = typing.get_origin(tp) or tp
        if types != [next((k for k, v in JSON_TYPES.items() if v is origin), None)]:
            problems.append(f"{where}: {types}, typed {tp}")


def check_model(doc, cls, schema, problems, where=None):
    where = where or cls.__name__
    schema = resolve(doc, schema)
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    hints = typing.get_type_hints(cls, vars(models))
    fields = {models.wire_name(f): f for f in dataclasses.fields(cls) if not f.metadata.get("local")}
    for name in sorted(set(props) - set(fields)):
        problems.append(f"{where}.{name}: in the document, not in the model")
    for name in sorted(set(fields) - set(props)):
        problems.append(f"{where}.{name}: in the model, not in the document")
    for name in sorted(set(fields) & set(props)):
        f, prop = fields[name], resolve(doc, props[name])
        tp, optional = unwrap(hints[f.name])
        has_default = f.default is not dataclasses.MISSING
        if (name in required) == has_default:
            problems.append(f"{where}.{name}: required {name in required}, has a default {has_default}")
        if optional and name in required and not nullable(props[name]):
            problems.append(f"{where}.{name}: required and not nullable, typed Optional")
        check_type(doc, f"{where}.{name}", tp, prop, problems)


def test_every_model_matches_the_document(document):
    schemas = document["components"]["schemas"]
    assert set(models.MODELS) | UNWRAPPED == set(schemas), "a schema without a model, or a model without a schema"
    problems = []
    for name, cls in models.MODELS.items():
        check_model(document, cls, schemas[name], problems)
    assert problems == []


def test_the_error_codes_are_the_documents(document):
    codes = set(document["components"]["schemas"]["Error"]["properties"]["code"]["enum"])
    assert set(_BY_CODE) == codes


def test_decode_encode_round_trip():
    data = {
        "type": "result", "conversation": "c1", "agent": "echo",
        "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0, "complete": True},
        "started_at": "2026-12-02T01:17:56.123456789Z", "completed_at": "2026-12-02T01:17:57Z",
        "duration_ms": 877, "exit_code": 0, "error": None, "output": {"ok": True},
        "changed_files": {"files": [{"path": "a.txt", "operation": "created"}], "complete": True},
        "from_a_newer_server": 1,
    }
    res = models.stream_item(7, data)
    assert isinstance(res, models.Result) and res.seq == 7
    assert res.started_at == datetime(2026, 12, 2, 1, 17, 56, 123456, tzinfo=timezone.utc)
    assert res.changed_files.files[0].operation == "created"
    back = models.encode(res)
    assert back["output"] == {"ok": True} and "seq" not in back and "from_a_newer_server" not in back
    assert models.decode(models.Result, back) == models.decode(models.Result, data)
