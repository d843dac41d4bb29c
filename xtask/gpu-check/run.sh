#!/usr/bin/env bash
# A GPU check laid out by `cargo xtask gpu-check`: real libcuda + NVML + a real PyTorch engine on
# the GPU. On the GPU machine: bash run.sh (the inferscope binary beside it; writes its files to
# $OUT); back here: cargo xtask gpu-check --read THAT_OUT prints the truth table.
set -u
R=${OUT:-/tmp/gpuout}; O=/tmp/gpuwork; rm -rf "$O"; mkdir -p "$O" "$R"
G=$(cd "$(dirname "$0")" && pwd)
# Every file of the run, plain (the reader wants them one by one), and packed.
trap 'cp -r "$O"/. "$R/" 2>/dev/null; tar czf "$R/all.tgz" -C "$O" .' EXIT
B=${INFERSCOPE_BIN:-$G/inferscope}; chmod +x "$B" 2>/dev/null
log() { echo "== $(date +%T) $*" | tee -a "$O/steps.log"; }
{
log facts
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing; mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug; mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
uname -r; nproc; ls -la /sys/kernel/btf/vmlinux 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,utilization.gpu --format=csv 2>&1
ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml' 2>&1; ls /usr/local/nvidia/lib64 2>&1 | head -20
echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH
mount | grep -E 'tracefs|debugfs|bpf' ; ls /sys/kernel/tracing/events 2>&1 | head -3; ls -d /sys/kernel/tracing/events/nvidia 2>&1
cat /proc/sys/kernel/unprivileged_bpf_disabled 2>&1; ldd "$B" 2>&1 | head
python3 -c 'import torch;print("torch",torch.__version__,torch.cuda.is_available())' 2>&1
} > "$O/facts.txt" 2>&1
cat "$O/facts.txt"

if [ -z "${SKIP_TRUTH:-}" ]; then
log "runqlat (does eBPF load here?)"
timeout 20 "$B" runqlat --interval 2s --count 1 --top 3 > "$O/runqlat.txt" 2>&1; echo "rc=$?" >> "$O/runqlat.txt"; tail -15 "$O/runqlat.txt"

log "cuda truth: direct + torch (no caching) under the daemon"
rm -f /tmp/go
PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$G/cuda_truth.py" /tmp/go 8 > "$O/truth-py.txt" 2>&1 &
TP=$!
for _ in $(seq 100); do grep -q ready "$O/truth-py.txt" && break; sleep 0.2; done
timeout 60 "$B" daemon --pid $TP --metrics-listen 127.0.0.1:9464 --api-listen 127.0.0.1:7070 > "$O/truth-daemon.log" 2>&1 &
DP=$!
sleep 6; touch /tmp/go
for _ in $(seq 100); do grep -q launches "$O/truth-py.txt" && break; sleep 0.2; done
sleep 4
curl -s 127.0.0.1:9464/metrics > "$O/truth-metrics.txt"
curl -s 127.0.0.1:9464/api/v1/timeline > "$O/truth-timeline.json"
nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu,clocks.sm,power.draw --format=csv >> "$O/truth-py.txt" 2>&1
wait $TP; kill -INT $DP 2>/dev/null; wait $DP
cat "$O/truth-py.txt"; grep -E '^inferscope_gpu|^inferscope_probe' "$O/truth-metrics.txt" | head -60; tail -20 "$O/truth-daemon.log"

fi
run_engine() { # $1 tag, rest: engine flags
  local tag=$1; shift
  log "engine $tag: start"
  python3 "$G/torch_engine.py" --port 8100 "$@" > "$O/engine-$tag.log" 2>&1 &
  EP=$!
  for _ in $(seq 300); do curl -sf 127.0.0.1:8100/health >/dev/null && break; sleep 0.2; done
  head -3 "$O/engine-$tag.log"
  for i in 1 2 3; do curl -s -m 20 -H 'content-type: application/json' -d '{"model":"torch-tiny","messages":[{"role":"user","content":"warm up words here"}],"max_tokens":8}' 127.0.0.1:8100/v1/chat/completions > /dev/null; done
  log "engine $tag: stress --explain"
  timeout 150 "$B" stress "$G/gpu-matrix.yaml" --explain --pid $EP --out "$O/load-$tag.json" --report-dir "$O/explain-$tag" -q > "$O/stress-$tag.txt" 2>&1
  echo "rc=$?" >> "$O/stress-$tag.txt"
  nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv >> "$O/stress-$tag.txt" 2>&1
  kill $EP; wait $EP 2>/dev/null
  cat "$O/stress-$tag.txt"; tail -5 "$O/engine-$tag.log"
}
run_engine metrics
run_engine nometrics --no-metrics
log done
