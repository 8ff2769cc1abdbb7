"""Tool function specs generated from pydantic argument models, so a schema cannot drift from
the validation that runs on the model's arguments.

Owns ``function_spec(name, description, model)``: the ``{"name", "description", "parameters"}``
dict a Chat Completions ``tools`` entry wraps. The JSON schema is pydantic's, made plain for
models: references inlined, ``X | None`` shown as ``X`` (omitting an argument is how the model
says "none"), no titles, no ``null`` defaults. Fields annotated ``SkipJsonSchema[...]`` are
accepted by validation but not advertised (operator-only knobs).
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema


class _PlainSchema(GenerateJsonSchema):
    def nullable_schema(self, schema: Any) -> dict[str, Any]:
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def function_spec(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """The function spec of a tool whose arguments ``model`` validates."""
    raw = model.model_json_schema(schema_generator=_PlainSchema)
    defs = raw.pop("$defs", {})
    return {"name": name, "description": description, "parameters": _plain(raw, defs)}


def _plain(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_plain(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        return _plain(defs[ref.rsplit("/", 1)[-1]], defs)
    out = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value is None):
            continue
        out[key] = value if key in ("enum", "const", "required", "pattern") else _plain(value, defs)
    return out
