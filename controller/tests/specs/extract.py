#!/usr/bin/env python3
"""Extracts from the pinned vendor specs (../shared/specs/) the schemas the adapter tests validate
against, with every schema they reference, as JSON Schema documents.

Run from the repository root: python3 controller/tests/specs/extract.py ../shared/specs
Each output is {"$defs"-free} {"components": {"schemas": {...}}} so that the specs' own
"#/components/schemas/X" references resolve unchanged. OpenAPI 3.0's `nullable: true` becomes
a JSON Schema type union with "null"; 3.0's boolean exclusiveMinimum/Maximum become numbers.
A `oneOf` with a discriminator mapping pins each alternative to its discriminator value, which
is what the discriminator means (the Anthropic adapter names its tools `"type": "custom"`); a plain JSON Schema validator would otherwise find a block
matching two alternatives (tool_use also fits ServerToolUseBlock) and reject it.
"""
import json
import pathlib
import sys

import yaml

OUT = pathlib.Path(__file__).parent
SETS = {
    "openai": ("openai-openapi.yaml", ["CreateResponse", "Response", "CreateChatCompletionRequest", "CreateChatCompletionResponse"]),
    "anthropic": ("anthropic-openapi-curated.yaml", ["CreateMessageRequest", "Message"]),
}


def refs(node, found):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)


def to_json_schema(node):
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: to_json_schema(v) for k, v in node.items()}
    discriminator = node.get("discriminator")
    if isinstance(discriminator, dict) and discriminator.get("mapping") and "oneOf" in node:
        prop = discriminator["propertyName"]
        by_ref = {ref: value for value, ref in discriminator["mapping"].items()}
        pinned = []
        for alternative in node["oneOf"]:
            value = by_ref.get(alternative.get("$ref")) if isinstance(alternative, dict) else None
            if value is None:
                pinned.append(alternative)
            else:
                pinned.append({"allOf": [alternative, {"properties": {prop: {"const": value}}, "required": [prop]}]})
        node["oneOf"] = pinned
    if node.pop("nullable", False):
        kind = node.get("type")
        if isinstance(kind, str):
            node["type"] = [kind, "null"]
        elif "type" not in node and ("$ref" in node or "allOf" in node or "oneOf" in node or "anyOf" in node):
            node = {"anyOf": [node, {"type": "null"}]}
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(exclusive) is True:
            node[exclusive] = node.pop(bound)
        elif node.get(exclusive) is False:
            node.pop(exclusive)
    return node


def main(spec_dir):
    for name, (file, roots) in SETS.items():
        spec = yaml.safe_load((pathlib.Path(spec_dir) / file).read_text())
        schemas = spec["components"]["schemas"]
        keep, todo = set(), list(roots)
        while todo:
            current = todo.pop()
            if current in keep:
                continue
            keep.add(current)
            found = set()
            refs(schemas[current], found)
            todo.extend(found - keep)
        subset = {"components": {"schemas": {k: to_json_schema(schemas[k]) for k in sorted(keep)}}}
        (OUT / f"{name}.json").write_text(json.dumps(subset, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(keep)} schemas")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/specs")
