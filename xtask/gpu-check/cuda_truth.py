#!/usr/bin/env python3
"""Known CUDA work that counts itself, for checking inferscope's CUDA probes against a real libcuda
(`cargo xtask gpu-check`). Waits for a go-file, then does each kind of call a real engine makes and
prints, as one JSON line each, what it did ({"expect": {...}}): direct cuMemAlloc_v2/cuMemFree_v2
pairs (ctypes), PyTorch allocations (run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so each is one
cudaMalloc), kernel launches (x.add_), device synchronizes (torch.cuda.synchronize), event
synchronizes, pinned async copies both ways, and a physical allocation mapped into a virtual
reservation (cuMemCreate / cuMemAddressReserve / cuMemMap / cuMemUnmap, as expandable segments do).
First it prints what cuGetProcAddress returns next to each exported symbol. It sleeps at the end so
the daemon's last window closes while it lives."""
import ctypes, json, os, sys, time
import torch

go = sys.argv[1]
D, T, K, S, E, C = 50, 40, 2000, 100, 50, 20
COPY = 1 << 20
torch.cuda.init(); x = torch.zeros(1 << 20, device="cuda"); torch.cuda.synchronize()
lib = ctypes.CDLL("libcuda.so.1")
gpa = getattr(lib, "cuGetProcAddress_v2", None) or lib.cuGetProcAddress
addrs = {}
for name, exported in [("cuMemAlloc", "cuMemAlloc_v2"), ("cuMemFree", "cuMemFree_v2"),
                       ("cuLaunchKernel", "cuLaunchKernel"), ("cuLaunchKernelEx", "cuLaunchKernelEx"),
                       ("cuStreamSynchronize", "cuStreamSynchronize"), ("cuCtxSynchronize", "cuCtxSynchronize"),
                       ("cuEventSynchronize", "cuEventSynchronize"), ("cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2"),
                       ("cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2"), ("cuMemMap", "cuMemMap"),
                       ("cuMemAllocAsync", "cuMemAllocAsync"), ("cuMemCreate", "cuMemCreate")]:
    pfn = ctypes.c_void_p(); st = ctypes.c_int(0)
    try:
        rc = gpa(name.encode(), ctypes.byref(pfn), ctypes.c_int(12080), ctypes.c_uint64(0), ctypes.byref(st))
    except Exception as e:  # noqa: BLE001
        rc = str(e)
    try:
        sym = ctypes.cast(getattr(lib, exported), ctypes.c_void_p).value
    except AttributeError:
        sym = None
    addrs[name] = {"rc": rc, "proc": pfn.value, "dlsym": sym, "same": pfn.value == sym}
print(json.dumps({"procaddr": addrs}), flush=True)
print(json.dumps({"ready": os.getpid()}), flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
t0 = time.time()
ptr = ctypes.c_uint64()
ok = 0
for _ in range(D):
    if lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)) == 0:
        ok += 1
        lib.cuMemFree_v2(ptr)
keep = [torch.empty(4 << 20, dtype=torch.uint8, device="cuda") for _ in range(T)]
del keep
for _ in range(K):
    x.add_(1)
for _ in range(S):
    torch.cuda.synchronize()
for _ in range(E):
    ev = torch.cuda.Event()
    x.add_(1)
    ev.record()
    ev.synchronize()
host = torch.zeros(COPY, dtype=torch.uint8).pin_memory()
dev = torch.zeros(COPY, dtype=torch.uint8, device="cuda")
for _ in range(C):
    dev.copy_(host, non_blocking=True)
    host.copy_(dev, non_blocking=True)
torch.cuda.synchronize()


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


mapped = {"mapped": 0, "unmapped": 0, "error": None}
try:
    prop = Prop(type=1, requestedHandleTypes=0, location=Location(type=1, id=torch.cuda.current_device()))
    gran = ctypes.c_size_t()
    rc = lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0)
    size = gran.value * 4
    handle, va = ctypes.c_uint64(), ctypes.c_uint64()
    rc = rc or lib.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0))
    rc = rc or lib.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0))
    rc = rc or lib.cuMemMap(va, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_uint64(0))
    if rc == 0:
        mapped["mapped"] = size
        lib.cuMemUnmap(va, ctypes.c_size_t(size))
        mapped["unmapped"] = size
        lib.cuMemAddressFree(va, ctypes.c_size_t(size))
        lib.cuMemRelease(handle)
    else:
        mapped["error"] = f"CUresult {rc}"
except Exception as e:  # noqa: BLE001
    mapped["error"] = str(e)
print(json.dumps({"expect": {
    "allocations": ok + T + 1 + (1 if mapped["mapped"] else 0),
    "frees": ok + T + (1 if mapped["mapped"] else 0),
    "launches": K + E, "syncs": S + E + 1, "copy_h2d_bytes": C * COPY, "copy_d2h_bytes": C * COPY,
    "mapped_bytes_held": mapped["mapped"] - mapped["unmapped"], "maps": 1 if mapped["mapped"] else 0,
    "map_error": mapped["error"], "secs": round(time.time() - t0, 3), "torch_version": torch.__version__,
    "note": "allocations: direct + torch + the copies' device buffer + cuMemCreate (pinned host memory is not device memory)",
}}), flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 6)
