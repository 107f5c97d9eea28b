/* Device profiles through the public API (see sched/profile.h for what is measured). */
#include <string.h>

#include "api/api_impl.h"
#include "sched/profile.h"

tdm_status *tdm_env_device_profile(tdm_env *env, size_t index, bool reprofile,
                                   tdm_device_info *out) {
    if (!env || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_env_device_profile: env or out is NULL");
    if (index >= (size_t)env->n_devices)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT,
                       "tdm_env_device_profile: no device %zu (the environment has %d)", index,
                       env->n_devices);
    tdm_device *dev = env->devices[index];
    tdm_device_profile p;
    tdm_status *st = tdm_profile_device(dev, env->alloc, &env->settings, env->threads, reprofile, &p);
    if (st) return st;
    tdm_device_info info;
    memset(&info, 0, sizeof info);
    info.name = dev->name;
    info.description = dev->description;
    info.host_memory = dev->host_memory;
    info.threads = p.threads;
    info.gemm_gflops = p.gemm_gflops;
    info.conv_gflops = p.conv_gflops;
    info.mem_gbps = p.mem_gbps;
    info.launch_us = p.launch_us;
    info.h2d_gbps = p.h2d_gbps;
    info.d2h_gbps = p.d2h_gbps;
    info.link_latency_us = p.link_latency_us;
    info.memory_bytes = p.memory_bytes;
    info.from_cache = p.from_cache;
    info.h2d_latency_us = p.h2d_latency_us;
    info.d2h_latency_us = p.d2h_latency_us;
    info.h2d_pinned_gbps = p.h2d_pinned_gbps;
    info.d2h_pinned_gbps = p.d2h_pinned_gbps;
    info.h2d_pinned_latency_us = p.h2d_pinned_latency_us;
    info.d2h_pinned_latency_us = p.d2h_pinned_latency_us;
    info.conv1x1_gflops = p.conv1x1_gflops;
    info.dwconv_gflops = p.dwconv_gflops;
    info.host_busy_speed = p.host_busy_speed;
    *out = info;
    return NULL;
}
