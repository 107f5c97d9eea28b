/* The backend interface. A backend is discovered once per environment and yields devices;
 * a device is a struct of function pointers (tdm_device_iface) plus a context pointer. The
 * scheduler and executor talk to devices only through this interface, by its wrappers
 * (tdm_device_*, below).
 *
 * Layers: backend (registry entry) -> device -> (queues, buffers). The CPU device runs
 * kernels synchronously on the calling thread plus its thread pool; accelerator devices
 * queue work and signal events. */
#ifndef TDM_BACKENDS_BACKEND_H
#define TDM_BACKENDS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/kernel.h"
#include "core/log.h"
#include "core/settings.h"
#include "core/status.h"

#define TDM_DEVICE_IFACE_VERSION 9

typedef struct tdm_device tdm_device;

typedef struct tdm_device_iface {
    int api_version; /* TDM_DEVICE_IFACE_VERSION; members are only ever appended */
    /* The kernel for a node given its input dtypes, or NULL when the device cannot run it.
     * Answered from the device's kernel table, so placement and dispatch agree. */
    const tdm_kernel_def *(*find_kernel)(tdm_device *dev, const tdm_node *node,
                                         const tdm_dtype *in_types, int n_in);
    /* Runs one kernel. Tensors in ctx are in this device's memory. */
    tdm_status *(*execute)(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx);
    /* Optional (NULL for host-memory devices): waits until all queued work is done. */
    tdm_status *(*synchronize)(tdm_device *dev);
    /* Frees the device. */
    void (*close)(tdm_device *dev);

    /* ---- version 2: devices with memory of their own (host_memory == false) ----------
     * Tensors on such a device have t->data = the device's buffer handle (cl_mem, device
     * pointer, ...) and t->device set; kernels of the device receive those. Work on a device
     * is ordered: an upload, the kernels that read it and a download run in issue order, so
     * the executor only needs the blocking download to wait for a producer on another
     * device. Required when host_memory is false, NULL otherwise. */
    /* A buffer of `size` bytes (size may be 0: return a valid handle anyway). */
    tdm_status *(*buffer_alloc)(tdm_device *dev, size_t size, void **buf);
    void (*buffer_free)(tdm_device *dev, void *buf);
    /* host -> device; may return before the copy is done, but the host memory must stay
     * valid until the next synchronize/download on this device (the executor keeps it). */
    tdm_status *(*upload)(tdm_device *dev, void *buf, const void *host, size_t size);
    /* device -> host; returns when the bytes are in host memory (after all earlier work). */
    tdm_status *(*download)(tdm_device *dev, void *host, const void *buf, size_t size);

    /* ---- version 3: asynchronous devices (every member optional; NULL = the executor
     * falls back to the blocking members above) -------------------------------------------
     * An event marks a point in one device's queue: it completes when all work issued on
     * that device before it is done. Events never imply a global synchronize. */
    /* Records an event after all work issued so far on dev. */
    tdm_status *(*event_record)(tdm_device *dev, void **event);
    /* Work issued on dev after this call starts only once `event` (recorded on `owner`,
     * which may be another device of any backend) has completed. A device that cannot wait
     * on a foreign backend's event may block the calling host thread instead. */
    tdm_status *(*event_wait)(tdm_device *dev, tdm_device *owner, void *event);
    /* Blocks the calling host thread until the event has completed. Several threads may
     * wait on one event at once; an event stays valid until event_free. */
    tdm_status *(*event_sync)(tdm_device *dev, void *event);
    void (*event_free)(tdm_device *dev, void *event);
    /* device -> host without blocking: the bytes are in host memory once the returned event
     * (owned by the caller, freed with event_free) has completed. size may be 0 (an event is
     * still returned). The executor (sched/xfer.h) uses these members only when a device has
     * all of event_record/wait/sync/free, download_async and host_alloc/free. */
    tdm_status *(*download_async)(tdm_device *dev, void *host, const void *buf, size_t size,
                                  void **event);
    /* Staging host memory the device copies fastest (page-locked / mapped); the executor and
     * sessions reuse it across runs. host_free releases it. The memory may be used with
     * upload/download_async of this device and, by the executor, as the source of an upload
     * to another device after that device waited (event_wait) on the download into it. */
    tdm_status *(*host_alloc)(tdm_device *dev, size_t size, void **host);
    void (*host_free)(tdm_device *dev, void *host);
    /* Session-level settings for this device, e.g. "precision=fp16" (see
     * tdm_session_options.precision); unknown keys are ignored, bad values are an error. */
    tdm_status *(*configure)(tdm_device *dev, const char *key, const char *value);

    /* ---- version 4: launch windows (every member optional; NULL = not used) ------------
     * The executor brackets each segment of a plan run (consecutive nodes of the main graph
     * on one device, run by one host thread) with segment_begin / segment_end on that
     * thread; the executes in between belong to the segment. `key` names the segment across
     * runs: the same plan, segment and input shapes give the same key, other input shapes
     * another. Every segment_begin is followed by exactly one segment_end on the same thread
     * (ok = false when the run stopped inside the segment). A device may hold back the
     * segment's kernels until segment_end (e.g. to replay them as one CUDA graph): it must
     * then issue them before any copy or event that another device or the host could
     * observe, and segment_end returns the status of that work. */
    tdm_status *(*segment_begin)(tdm_device *dev, uint64_t key);
    tdm_status *(*segment_end)(tdm_device *dev, bool ok);
    /* ---- version 5: memory hints (optional; NULL = none) --------------------------------
     * What kernel k promises about the outputs of `node` on this device (TDM_KF_*,
     * backends/kernel.h): a device with a kernel table answers tdm_kernel_flags(k, node),
     * the table's column. Asked once per node at plan time, used only for the plan's kernel. */
    unsigned (*kernel_flags)(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node);
    /* ---- version 6: layouts and implementations (optional; NULL = none) ----------------
     * The channel block of the activation layout the device's convolutions prefer
     * ([N, C/B, H, W, B], ops/fused.h), decided by its kernel library for the machine that
     * runs (the CPU: what oneDNN picks with format_tag any; 8 on AVX2, 16 on AVX-512
     * without brgemm convolutions); TDM_BLOCK_CHANNELS_LAST (ops/fused.h: one block of all
     * C channels, NHWC) where they prefer channels-last; 0 = plain layouts. Asked at plan
     * time; the blocked-layout pass uses it. */
    int64_t (*channel_block)(tdm_device *dev);
    /* Writes into buf (NUL-terminated, at most size bytes) what implements kernel k with
     * prepared `state` for the shapes run so far, e.g. oneDNN's implementation name
     * ("jit:avx512_core", "brg:avx512_core"; "ref:any" is oneDNN's slow reference code) or
     * "tandem" for an own kernel; "" before the first run when it is decided per shape.
     * Returns the length. Safe while other threads run the kernel. */
    size_t (*kernel_impl)(tdm_device *dev, const tdm_kernel_def *k, void *state, char *buf,
                          size_t size);
    /* ---- version 7: a copy queue (optional; NULL = none; needs the version 3 events) ------
     * host -> device on a queue of the device's own, beside its kernels: the copy starts once
     * `after` (an event of this device, or NULL) has completed and does NOT order the device's
     * later kernels after it; *done (owned by the caller, freed with event_free) completes
     * when the bytes are in buf: a kernel reads buf only after event_wait(dev, dev, *done).
     * `host` must stay valid and unchanged until *done has completed; `after` may be freed
     * as soon as the call returns. Streamed weights
     * (sched/budget.h) go up this way while earlier layers compute. */
    tdm_status *(*upload_queued)(tdm_device *dev, void *buf, const void *host, size_t size,
                                 void *after, void **done);
    /* ---- version 8: registered host memory (optional; NULL = none) ----------------------
     * Page-locks existing host memory [host, host + size) for this device (CUDA:
     * cudaHostRegister), so that upload / upload_queued from it copy directly by DMA rather
     * than through the device's staging buffers (a host memcpy per piece). The memory must
     * stay valid until host_unregister(dev, host) with the same pointer; registering memory
     * that overlaps a registered range is an error. Streamed weights (sched/budget.h) are
     * registered for their device when a plan first streams them. */
    tdm_status *(*host_register)(tdm_device *dev, void *host, size_t size);
    void (*host_unregister)(tdm_device *dev, void *host);
    /* ---- version 9: channels-last (optional; NULL = never) ------------------------------
     * Whether the device's convolutions prefer channels-last activations (ops/fused.h,
     * TDM_BLOCK_CHANNELS_LAST) to channel_block's blocks: a tdm_channels_last (ops/fused.h:
     * never, where the graph suits them as the blocked-layout pass judges, or always when a
     * setting forces it). Asked at plan time. */
    int (*channels_last)(tdm_device *dev);
} tdm_device_iface;

/* The TDM_KF_* flags are in backends/kernel.h (tdm_kernel_def.flags). */

/* The most devices an environment holds (and so a plan, a session or a placement uses):
 * the size of every per-device array. */
#define TDM_MAX_DEVICES 16

struct tdm_device {
    const tdm_device_iface *iface;
    void *ctx;
    char name[32];          /* "cpu", "cuda:0", "opencl:0" */
    char description[160];
    bool host_memory;       /* tensors for this device live in ordinary host memory */
    char isa[24];           /* CPU devices: the instruction-set level its kernels use
                               ("avx2", "avx512_core", ...; backends/cpu/cpu_isa.h); "" else */
    int index;              /* position in the environment's device list (< TDM_MAX_DEVICES) */
};

/* Backend registry entry. discover() appends up to `max` devices to devs (returning how
 * many in *n) or, when the backend is present but unusable, sets *n = 0 and writes why.
 * `set`: the environment's settings (core/settings.h; NULL = the built-in defaults), which
 * outlive the devices: a device may keep the pointer. */
typedef struct tdm_backend_reg {
    const char *name;
    tdm_status *(*discover)(const tdm_allocator *a, const tdm_logger *log, const tdm_settings *set,
                            tdm_device **devs, int max, int *n, char *why, size_t why_size);
    /* Starting the backend is expensive (a driver or ICD loader): it is discovered when a
     * device of its name is asked for or the device list is read, not at environment
     * creation. */
    bool lazy;
} tdm_backend_reg;

/* One line per backend (one source for the registry, see backends/registry.c). Optional
 * backends are listed only when CMake built them (TANDEM_HAVE_<NAME> compile definition). */
#ifdef TANDEM_HAVE_OPENCL
#define TDM_BACKEND_OPENCL_(X) X(opencl)
#else
#define TDM_BACKEND_OPENCL_(X)
#endif
/* cuda: always listed; a loader (backends/cuda_loader.c) for the plugin libtandem_cuda.so */
#define TDM_BACKENDS(X) X(cpu) TDM_BACKEND_OPENCL_(X) X(cuda) X(testdev)

#define TDM_X_(b) extern const tdm_backend_reg tdm_backend_##b;
TDM_BACKENDS(TDM_X_)
#undef TDM_X_

/* All registered backends, NULL-terminated. */
extern const tdm_backend_reg *const tdm_backends[];

/* ---- The wrappers (backends/device.c) --------------------------------------------------
 * Code outside a backend calls a device only through these, never through dev->iface: each
 * wrapper checks the interface version and the member once and supplies the default of an
 * optional member, or a status that says what the device lacks (TDM_ERR_UNSUPPORTED for a
 * member the device does not have). One wrapper per member, in the order of the struct. */

/* version 1 */
/* The device's kernel for node (NULL: it cannot run it). */
const tdm_kernel_def *tdm_device_find_kernel(tdm_device *dev, const tdm_node *node,
                                             const tdm_dtype *in_types, int n_in);
tdm_status *tdm_device_execute(tdm_device *dev, const tdm_kernel_def *k, tdm_kernel_ctx *ctx);
/* Waits for the device's queued work; a no-op for a device without synchronize. */
tdm_status *tdm_device_synchronize(tdm_device *dev);
/* Frees the device; NULL-safe. */
void tdm_device_close(tdm_device *dev);

/* version 2: memory of the device's own (an error for a device without it; buffer_free of
 * such a device does nothing) */
tdm_status *tdm_device_buffer_alloc(tdm_device *dev, size_t size, void **buf);
void tdm_device_buffer_free(tdm_device *dev, void *buf);
tdm_status *tdm_device_upload(tdm_device *dev, void *buf, const void *host, size_t size);
tdm_status *tdm_device_download(tdm_device *dev, void *host, const void *buf, size_t size);

/* version 3: events, asynchronous downloads, staging memory, settings. event_free and
 * host_free do nothing for a device without them (or a NULL event / pointer). event_wait on a
 * device without it blocks the calling thread until the event completed (owner's
 * event_sync), as its contract allows. configure on a device without it ignores the key. */
tdm_status *tdm_device_event_record(tdm_device *dev, void **event);
tdm_status *tdm_device_event_wait(tdm_device *dev, tdm_device *owner, void *event);
tdm_status *tdm_device_event_sync(tdm_device *dev, void *event);
void tdm_device_event_free(tdm_device *dev, void *event);
tdm_status *tdm_device_download_async(tdm_device *dev, void *host, const void *buf, size_t size,
                                      void **event);
tdm_status *tdm_device_host_alloc(tdm_device *dev, size_t size, void **host);
void tdm_device_host_free(tdm_device *dev, void *host);
tdm_status *tdm_device_configure(tdm_device *dev, const char *key, const char *value);

/* version 4: the launch-window hooks; no-ops for devices without them */
tdm_status *tdm_device_segment_begin(tdm_device *dev, uint64_t key);
tdm_status *tdm_device_segment_end(tdm_device *dev, bool ok);

/* version 5: the device's kernel_flags for kernel k on node (0 when it has none) */
unsigned tdm_device_kernel_flags(tdm_device *dev, const tdm_kernel_def *k, const tdm_node *node);

/* version 6: the device's channel_block (0 when it has none) and kernel_impl ("" when it
 * has none) */
int64_t tdm_device_channel_block(tdm_device *dev);
size_t tdm_device_kernel_impl(tdm_device *dev, const tdm_kernel_def *k, void *state, char *buf,
                              size_t size);

/* version 7: the device's upload_queued (TDM_ERR_UNSUPPORTED when it has none) */
tdm_status *tdm_device_upload_queued(tdm_device *dev, void *buf, const void *host, size_t size,
                                     void *after, void **done);

/* version 8: the device's host_register (TDM_ERR_UNSUPPORTED when it has none) and
 * host_unregister (nothing for a device without it, or NULL) */
tdm_status *tdm_device_host_register(tdm_device *dev, void *host, size_t size);
void tdm_device_host_unregister(tdm_device *dev, void *host);

/* version 9: the device's channels_last (0 when it has none) */
int tdm_device_channels_last(tdm_device *dev);

/* What a device has, for callers that choose a path before calling (all false for NULL). */
/* synchronize */
bool tdm_device_has_synchronize(const tdm_device *dev);
/* buffer_alloc, buffer_free, upload and download */
bool tdm_device_has_buffers(const tdm_device *dev);
/* event_record, event_wait, event_sync and event_free */
bool tdm_device_has_events(const tdm_device *dev);
/* host_alloc and host_free */
bool tdm_device_has_staging(const tdm_device *dev);
/* events, upload, download_async and staging memory: what asynchronous copies need */
bool tdm_device_has_async_copies(const tdm_device *dev);
/* segment_begin and segment_end */
bool tdm_device_has_segments(const tdm_device *dev);
/* upload_queued and the events */
bool tdm_device_has_copy_queue(const tdm_device *dev);
/* host_register and host_unregister */
bool tdm_device_has_host_register(const tdm_device *dev);

/* Tensors in a device's memory. tdm_device_tensor_new allocates a device buffer for the shape
 * (the tensor frees it through its release hook); to_device/to_host copy a tensor across
 * (new tensor, caller owns it). */
tdm_status *tdm_device_tensor_new(tdm_device *dev, const tdm_allocator *a, tdm_dtype dtype,
                                  int rank, const int64_t *dims, tdm_tensor **out);
tdm_status *tdm_device_to_device(tdm_device *dev, const tdm_allocator *a, const tdm_tensor *host,
                                 tdm_tensor **out);
tdm_status *tdm_device_to_host(const tdm_allocator *a, const tdm_tensor *t, tdm_tensor **out);

#endif
