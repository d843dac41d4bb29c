#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/kubernetes:
#   1. kubernetes-validate (PyPI): every manifest against the schemas of a current Kubernetes
#      (--strict: unknown fields are errors). Custom resources (optional/) are skipped: it
#      knows only built-in kinds.
#   2. checkov (PyPI): the Kubernetes policy checks. Findings that are the nature of a node
#      agent are skipped in the manifests with a checkov.io/skipN annotation giving the reason;
#      any other finding fails this script. The privileged-container (CKV_K8S_16) and
#      read-only-root-filesystem (CKV_K8S_22) checks must pass outright: they are never skipped.
#
# Usage: deploy/validate.sh [VENV]   (default VENV: target/venv-deploy; created when missing)
# Environment: K8S_VERSION (default 1.37.0, the newest schema set kubernetes-validate 1.37 ships).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-target/venv-deploy}"
k8s="${K8S_VERSION:-1.37.0}"

if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1 || ! [ -x "$venv/bin/checkov" ]; then
    echo "validate: installing kubernetes-validate and checkov into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q kubernetes-validate checkov
fi

manifests=(deploy/kubernetes/*.yaml)

echo "validate: kubernetes-validate --strict -k $k8s ${manifests[*]}"
"$venv/bin/kubernetes-validate" --strict -k "$k8s" "${manifests[@]}"

# The skips in annotations must never cover these two.
if grep -rE 'checkov.io/skip[0-9]*: *CKV_K8S_(16|22)=' deploy/kubernetes; then
    echo "validate: privileged / read-only root filesystem checks must not be skipped" >&2
    exit 1
fi

echo "validate: checkov -d deploy/kubernetes --framework kubernetes"
"$venv/bin/checkov" -d deploy/kubernetes --framework kubernetes --compact --quiet \
    --skip-download
echo "validate: ok"
