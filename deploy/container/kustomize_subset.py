#!/usr/bin/env python3
"""Render a kustomization of deploy/k8s to one YAML stream, offline, for the tests.

No kustomize binary can be installed on the test machines, so this renders the subset of
kustomize that deploy/k8s uses, with kustomize's meaning: `resources` (files, or folders
holding a kustomization), `components`, `namespace`, `labels` (pairs added to each
object's metadata only), `images` (newName, newTag) and `patches` (JSON 6902, selected by
kind and name). Any other field is refused, so a manifest change that would need the real
tool fails the test instead of rendering differently. Users run `kubectl apply -k`.

    kustomize_subset.py deploy/k8s/overlays/small > rendered.yaml
"""
import copy
import os
import sys

import yaml

KNOWN = {"apiVersion", "kind", "resources", "components", "namespace", "labels", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def fail(msg):
    sys.exit(f"kustomize_subset: {msg}")


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_op(obj, op):
    parts = pointer(op["path"])
    parent = obj
    for p in parts[:-1]:
        parent = parent[int(p)] if isinstance(parent, list) else parent[p]
    last = parts[-1]
    kind = op["op"]
    if kind in ("replace", "add"):
        if isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            elif kind == "add":
                parent.insert(int(last), op["value"])
            else:
                parent[int(last)] = op["value"]
        else:
            if kind == "replace" and last not in parent:
                fail(f"replace of missing path {op['path']}")
            parent[last] = op["value"]
    elif kind == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    else:
        fail(f"patch op {kind} not supported")


def containers(obj):
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec if obj.get("kind") == "Pod" else {})
    return pod.get("containers", []) + pod.get("initContainers", [])


def render(folder, want_kind=("Kustomization",)):
    path = os.path.join(folder, "kustomization.yaml")
    if not os.path.isfile(path):
        fail(f"{folder}: no kustomization.yaml")
    k = yaml.safe_load(open(path))
    if k.get("kind", "Kustomization") not in want_kind:
        fail(f"{path}: kind {k.get('kind')} where {want_kind} was expected")
    unknown = set(k) - KNOWN
    if unknown:
        fail(f"{path}: fields {sorted(unknown)} are outside the subset this renders")
    objs = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(folder, r))
        objs += render(p) if os.path.isdir(p) else load_docs(p)
    for c in k.get("components", []):
        objs += render(os.path.normpath(os.path.join(folder, c)), ("Component",))
    for pair in k.get("labels", []):
        if set(pair) - {"pairs"}:
            fail(f"{path}: labels options {sorted(set(pair) - {'pairs'})} are not supported")
        for o in objs:
            o.setdefault("metadata", {}).setdefault("labels", {}).update(pair["pairs"])
    for img in k.get("images", []):
        for o in objs:
            for c in containers(o):
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    for p in k.get("patches", []):
        t = p["target"]
        ops = yaml.safe_load(p["patch"])
        hits = [o for o in objs if o["kind"] == t["kind"] and o["metadata"]["name"] == t["name"]]
        if not hits:
            fail(f"{path}: patch target {t} matches nothing")
        for o in hits:
            for op in ops:
                apply_op(o, op)
    if "namespace" in k:
        for o in objs:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    return [copy.deepcopy(o) for o in objs]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: kustomize_subset.py FOLDER")
    yaml.safe_dump_all(render(sys.argv[1]), sys.stdout, sort_keys=False)
