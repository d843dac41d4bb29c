#!/usr/bin/env bash
# Validates deploy/:
#   1. Monitoring (python3 and promtool; `cargo xtask test` runs the whole script when promtool
#      is installed, as `cargo xtask setup` does):
#      a. deploy/check_monitoring.py: the Grafana dashboard parses and its panels, and the alert
#         rules, name only metrics the daemon exports; kustomization.yaml lists what exists;
#      b. `promtool check rules` and `promtool test rules` (deploy/prometheus/rules.test.yaml)
#         on the rule groups of kubernetes/optional/prometheusrule.yaml;
#      c. `kubectl kustomize deploy` renders, when kubectl is installed (skipped, said, if not).
#   2. Manifests (skipped with --monitoring-only):
#      a. kubernetes-validate (PyPI): every manifest against the schemas of a current Kubernetes
#         (--strict: unknown fields are errors). Custom resources (optional/) are skipped: it
#         knows only built-in kinds.
#      b. checkov (PyPI): the Kubernetes policy checks. Findings that are the nature of a node
#         agent are skipped in the manifests with a checkov.io/skipN annotation giving the
#         reason; any other finding fails this script. The privileged-container (CKV_K8S_16) and
#         read-only-root-filesystem (CKV_K8S_22) checks must pass outright: never skipped.
#
# Usage: deploy/validate.sh [--monitoring-only | --install-only] [VENV]   (default VENV:
#        target/venv-deploy; created when missing. --install-only creates it and checks nothing:
#        `cargo xtask test` runs it while cargo compiles)
# Environment: K8S_VERSION (default 1.37.0, the newest schema set kubernetes-validate 1.37 ships).
set -euo pipefail
cd "$(dirname "$0")/.."
monitoring_only=0
install_only=0
case "${1:-}" in
--monitoring-only) monitoring_only=1 && shift ;;
--install-only) install_only=1 && shift ;;
esac
venv="${1:-target/venv-deploy}"

# The manifests' checkers (PyPI), once.
install() {
    if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1 || ! [ -x "$venv/bin/checkov" ]; then
        echo "validate: installing kubernetes-validate and checkov into $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q kubernetes-validate checkov
    fi
}
if [ "$install_only" = 1 ]; then
    install
    exit 0
fi

echo "validate: deploy/check_monitoring.py"
python3 deploy/check_monitoring.py

if ! command -v promtool >/dev/null; then
    echo "validate: promtool not found (Debian: apt-get install prometheus; cargo xtask setup installs it)" >&2
    exit 1
fi
rules_dir="$(mktemp -d)"
trap 'rm -rf "$rules_dir"' EXIT
# The rule groups are what follows `spec:` (the file's last key), one indent less.
awk 'f { sub(/^  /, ""); print } /^spec:/ { f = 1 }' \
    deploy/kubernetes/optional/prometheusrule.yaml >"$rules_dir/rules.yaml"
cp deploy/prometheus/rules.test.yaml "$rules_dir/"
echo "validate: promtool check rules (kubernetes/optional/prometheusrule.yaml)"
promtool check rules "$rules_dir/rules.yaml"
echo "validate: promtool test rules deploy/prometheus/rules.test.yaml"
promtool test rules "$rules_dir/rules.test.yaml"

if command -v kubectl >/dev/null; then
    echo "validate: kubectl kustomize deploy"
    kubectl kustomize deploy >/dev/null
else
    echo "validate: kubectl not installed: kustomization rendering skipped (its files were checked above)"
fi

if [ "$monitoring_only" = 1 ]; then
    echo "validate: ok (monitoring; manifests not checked: --monitoring-only)"
    exit 0
fi

k8s="${K8S_VERSION:-1.37.0}"

install

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
