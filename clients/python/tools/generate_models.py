"""Generates `src/harness_sandbox/models.py` from `proto-docs/openapi.json`: a `TypedDict` for
every object schema, a `Literal` for every string enum, and an exception class for every error
`type` the server sends. Standard library only.

    python tools/generate_models.py           rewrite the file
    python tools/generate_models.py --check   exit 1 (and say so) when the committed file is stale
"""

from __future__ import annotations

import builtins
import json
import keyword
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCUMENT = HERE.parents[2] / "proto-docs" / "openapi.json"
TARGET = HERE.parent / "src" / "harness_sandbox" / "models.py"


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def annotation(schema: dict) -> str:
    """The Python type of a property's schema."""
    if "$ref" in schema:
        return f'"{ref_name(schema["$ref"])}"'
    for key in ("oneOf", "anyOf"):
        if key in schema:
            parts = [annotation(part) for part in schema[key]]
            return " | ".join(dict.fromkeys(parts))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return annotation(schema["allOf"][0])
    kind = schema.get("type")
    nullable = False
    if isinstance(kind, list):
        nullable = "null" in kind
        rest = [k for k in kind if k != "null"]
        kind = rest[0] if len(rest) == 1 else None
    base = {
        "string": "str",
        "integer": "int",
        "number": "float",
        "boolean": "bool",
    }.get(kind)
    if kind == "string" and "enum" in schema:
        base = "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"]) + "]"
    if kind == "array":
        base = f"list[{annotation(schema.get('items', {}))}]"
    if kind == "object" or base is None:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not schema.get("properties"):
            base = f"dict[str, {annotation(extra)}]"
        else:
            base = "dict[str, Any]"
    return f"{base} | None" if nullable else base


def docstring(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = text.splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}'] + [f"{indent}{line}".rstrip() for line in lines[1:]] + [f'{indent}"""']


def fields(schema: dict) -> list[tuple[str, str, bool, str | None]]:
    required = set(schema.get("required", []))
    return [
        (name, annotation(prop), name in required, prop.get("description"))
        for name, prop in schema.get("properties", {}).items()
    ]


def typed_dict(name: str, bases: list[str], own: list[tuple[str, str, bool, str | None]], doc: str | None) -> list[str]:
    if any(not field.isidentifier() or keyword.iskeyword(field) for field, *_ in own):
        # Names Python cannot spell as attributes: the functional form.
        items = ", ".join(
            f'{json.dumps(field)}: {ann if req else f"NotRequired[{ann}]"}' for field, ann, req, _ in own
        )
        return [f"{name} = TypedDict({json.dumps(name)}, {{{items}}})", ""]
    out = [f"class {name}({', '.join(bases) or 'TypedDict'}):"]
    out += docstring(doc, "    ")
    for field, ann, req, text in own:
        out.append(f"    {field}: {ann if req else f'NotRequired[{ann}]'}")
        out += docstring(text, "    ")
    if len(out) == 1:
        out.append("    pass")
    return out + ["", ""]


def schema_block(name: str, schema: dict) -> tuple[list[str], list[str]]:
    """The lines for one schema, and the schemas it must follow (its bases)."""
    if schema.get("type") == "string" and "enum" in schema:
        values = ", ".join(json.dumps(v) for v in schema["enum"])
        return [f"{name} = Literal[{values}]"] + docstring(schema.get("description"), "") + ["", ""], []
    if "allOf" in schema:
        bases, own = [], []
        for part in schema["allOf"]:
            if "$ref" in part:
                bases.append(ref_name(part["$ref"]))
            else:
                own += fields(part)
        return typed_dict(name, bases, own, schema.get("description")), bases
    if "oneOf" in schema or "anyOf" in schema:
        return [f"{name} = dict[str, Any]"] + docstring(schema.get("description"), "") + ["", ""], []
    if schema.get("properties"):
        return typed_dict(name, [], fields(schema), schema.get("description")), []
    return [f"{name} = {annotation(schema)}"] + docstring(schema.get("description"), "") + ["", ""], []


def exception_name(kind: str) -> str:
    """`missing_scope` → `MissingScopeError`; `SandboxFileNotFoundError` where Python has the name."""
    name = "".join(part.capitalize() for part in kind.split("_")) + "Error"
    return f"Sandbox{name}" if hasattr(builtins, name) else name


def exception_classes(error_types: list[str]) -> list[str]:
    out = []
    for kind in error_types:
        cls = exception_name(kind)
        out += [f"class {cls}(SandboxApiError):", f'    """The server answered `{kind}`."""', "", f"    type = {json.dumps(kind)}", "", ""]
    mapping = ", ".join(f"{json.dumps(kind)}: {exception_name(kind)}" for kind in error_types)
    out += [f"ERRORS: dict[str, type[SandboxApiError]] = {{{mapping}}}", '"""The exception class of each error `type`."""', ""]
    return out


def generate(document: dict) -> str:
    schemas = document["components"]["schemas"]
    blocks = {name: schema_block(name, schema) for name, schema in schemas.items()}
    done: list[str] = []

    def place(name: str) -> None:
        if name in done:
            return
        for base in blocks[name][1]:
            place(base)
        done.append(name)

    for name in sorted(blocks):
        place(name)
    lines = [
        '"""The API\'s types, generated from proto-docs/openapi.json by tools/generate_models.py.',
        "",
        "Do not edit: run `python tools/generate_models.py`. A test fails when this file is stale.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal, NotRequired, TypedDict",
        "",
        "from .errors import SandboxApiError",
        "",
        f"API_VERSION = {json.dumps(document['info'].get('version', ''))}",
        '"""The `info.version` of the document these types come from."""',
        "",
        "",
    ]
    for name in done:
        lines += blocks[name][0]
    lines += exception_classes(schemas["ErrorType"]["enum"])
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    text = generate(json.loads(DOCUMENT.read_text()))
    if "--check" in sys.argv[1:]:
        if TARGET.read_text() != text:
            print(f"{TARGET} is stale: run `python {Path(__file__).name}` in {HERE} and commit it", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
