/* A stand-in for libcuda.so.1 (it is not CUDA, and says so): the driver API's memory calls over
 * a device with a capacity, for engines under test that allocate through the driver API the way
 * PyTorch's caching allocator does. The tests build it as `libcuda.so.1`, so inferscope finds it
 * in the engine's maps and hooks it as it would the real driver.
 *
 * The capacity is INFERSCOPE_STANDIN_DEVICE_MIB (default 1024). Nothing of that size is taken
 * from the host: a block is a record of its size, and its address is the record's. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((noipa, used, visibility("default")))

typedef uint64_t CUdeviceptr;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t used;

static size_t capacity(void) {
    static size_t bytes;
    if (!bytes) {
        const char *mib = getenv("INFERSCOPE_STANDIN_DEVICE_MIB");
        bytes = (size_t)(mib ? atol(mib) : 1024) << 20;
    }
    return bytes;
}

EXPORT int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    int rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (n <= capacity() - used) {
        size_t *rec = malloc(sizeof *rec);
        if (rec) {
            *rec = n;
            used += n;
            *p = (CUdeviceptr)(uintptr_t)rec;
            rc = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT int cuMemFree_v2(CUdeviceptr p) {
    size_t *rec = (size_t *)(uintptr_t)p;
    if (!rec) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    used -= *rec;
    pthread_mutex_unlock(&lock);
    free(rec);
    return CUDA_SUCCESS;
}

EXPORT int cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    pthread_mutex_lock(&lock);
    *free_bytes = capacity() - used;
    *total = capacity();
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* The device runs nothing: a synchronize returns at once. */
EXPORT int cuCtxSynchronize_v2(void *ctx) {
    (void)ctx;
    return CUDA_SUCCESS;
}
