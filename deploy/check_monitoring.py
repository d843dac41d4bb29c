#!/usr/bin/env python3
"""Checks the monitoring files in deploy/ against what the daemon exports (python3, stdlib only).

- grafana/inferscope.json parses, has panels, and every query (panel targets, template
  variables) names only metrics that `inferscope daemon` serves on /metrics;
- the alert rules (kubernetes/optional/prometheusrule.yaml) name only such metrics;
- kustomization.yaml lists files that exist, and every manifest of kubernetes/ but the stress
  Job (so a new manifest is not forgotten).

The exported names are read from the daemon's source: the signal catalogue
(daemon/src/collect/catalog.rs: counters get `_total`) and the names the Prometheus renderer
and the trigger counters write literally. Usage: deploy/check_monitoring.py (from anywhere).
"""
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\binferscope_[a-z0-9_]+\b")


def non_test(path):
    """The file's text before its first `#[cfg(test)]`."""
    return path.read_text().split("#[cfg(test)]")[0]


def exported():
    names = set()
    signals = non_test(ROOT / "daemon/src/collect/catalog.rs")
    rows = re.findall(r'signal!\("[^"]+",\s*"(inferscope_[a-z0-9_]+)",\s*"[^"]*",\s*(Counter|Gauge)', signals)
    if len(rows) < 20:
        sys.exit(f"check_monitoring: found only {len(rows)} signals in signals.rs: has its format changed?")
    for name, kind in rows:
        names.add(name + "_total" if kind == "Counter" else name)
    literal = re.compile(r'"(inferscope_[a-z0-9_]+)"')
    for path in [ROOT / "daemon/src/export/prometheus.rs", *sorted((ROOT / "daemon/src/triggers").glob("*.rs"))]:
        names.update(literal.findall(non_test(path)))
    return names


def check_queries(where, queries, names, errors):
    for q in queries:
        used = METRIC.findall(q)
        if not used:
            errors.append(f"{where}: `{q}` names no inferscope metric")
        for m in used:
            if m not in names:
                errors.append(f"{where}: `{m}` is not a metric the daemon exports")


def dashboard(names, errors):
    path = DEPLOY / "grafana/inferscope.json"
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        errors.append(f"{path}: {e}")
        return 0
    for key in ("title", "uid", "panels", "schemaVersion"):
        if key not in d:
            errors.append(f"{path}: no `{key}`")
    panels = d.get("panels", [])
    if not panels:
        errors.append(f"{path}: no panels")
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        errors.append(f"{path}: panel ids repeat: {ids}")
    for p in panels:
        where = f"{path.name}: panel `{p.get('title', '?')}`"
        for key in ("type", "gridPos", "targets"):
            if key not in p:
                errors.append(f"{where}: no `{key}`")
        exprs = [t.get("expr", "") for t in p.get("targets", [])]
        if not exprs or not all(exprs):
            errors.append(f"{where}: a target has no expr")
        check_queries(where, exprs, names, errors)
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            check_queries(f"{path.name}: variable `{v.get('name')}`", [q.get("query", "")], names, errors)
    return len(panels)


def rules(names, errors):
    path = DEPLOY / "kubernetes/optional/prometheusrule.yaml"
    exprs = [e.strip().strip("'\"") for e in re.findall(r"^\s*expr:\s*(.+)$", path.read_text(), re.M)]
    if not exprs:
        errors.append(f"{path}: no rule expressions")
    check_queries(path.name, exprs, names, errors)
    return len(exprs)


def kustomization(errors):
    path = DEPLOY / "kustomization.yaml"
    text = path.read_text()
    for key in ("apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:"):
        if key not in text:
            errors.append(f"{path}: no `{key}`")
    listed = re.findall(r"^\s*-\s+([\w./-]+\.(?:ya?ml|json))\s*$", text, re.M)
    for f in listed:
        if not (DEPLOY / f).is_file():
            errors.append(f"{path}: {f} does not exist")
    manifests = {f"kubernetes/{p.name}" for p in (DEPLOY / "kubernetes").glob("*.yaml")}
    for m in sorted(manifests - set(listed) - {"kubernetes/stress-job.yaml"}):
        errors.append(f"{path}: {m} is not listed in resources (or say why not)")
    return len(listed)


def main():
    names = exported()
    errors = []
    n_panels = dashboard(names, errors)
    n_rules = rules(names, errors)
    n_files = kustomization(errors)
    for e in errors:
        print(f"check_monitoring: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(
        f"check_monitoring: ok: {n_panels} panels and {n_rules} alert rules name only the daemon's "
        f"{len(names)} metrics; kustomization lists {n_files} files"
    )


if __name__ == "__main__":
    main()
