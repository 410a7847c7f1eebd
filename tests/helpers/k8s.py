"""Checking rendered manifests against the CRD schemas in ../shared/k8s/ (skip when absent)."""
from __future__ import annotations


def strict(node):
    """A CRD schema made strict: unknown fields are errors (as with ``kubectl apply
    --validate=strict``) instead of being pruned silently."""
    if isinstance(node, dict):
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for v in node.values():
            strict(v)
    elif isinstance(node, list):
        for v in node:
            strict(v)
    return node


def validate(validator, manifest):
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:10])
