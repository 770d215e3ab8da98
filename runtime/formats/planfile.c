/* planfile.c - pieces of the plan-file format shared by the writer (planfile_write.c) and the
 * reader (planfile_read.c): the checksum, section names, the compile options a loaded info
 * asks for, and freeing a loaded info. */
#include <stdlib.h>
#include <string.h>

#include "planfile_internal.h"

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), as zlib's crc32(). The byte table is
 * rebuilt per call (256 x 8 steps) rather than kept in a global: it costs nothing next to the
 * payloads it checks. */
uint32_t dfg_plan_crc32(const void *data, size_t n) {
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

const char *dfg_plan_section_name(uint32_t kind) {
    static const char *const names[DFG_PLAN_SEC_END] = {
        [DFG_PLAN_SEC_INFO] = "info",     [DFG_PLAN_SEC_SETTINGS] = "settings", [DFG_PLAN_SEC_TENSORS] = "tensors",
        [DFG_PLAN_SEC_GRAPHS] = "graphs", [DFG_PLAN_SEC_STAGES] = "stages",     [DFG_PLAN_SEC_HOSTLIB] = "hostlib",
        [DFG_PLAN_SEC_PLAN] = "plan",     [DFG_PLAN_SEC_DECLARATIONS] = "declarations",
    };
    return kind > 0 && kind < DFG_PLAN_SEC_END ? names[kind] : "?";
}

dfg_options dfg_plan_options(const dfg_plan_info *info) {
    dfg_options o = dfg_options_default(info ? info->target : DFG_TARGET_CPU);
    if (!info) return o;
    o.align = info->align;
    o.no_reuse = info->no_reuse;
    o.keep_order = info->keep_order;
    o.no_fuse = info->no_fuse;
    o.memory_budget = info->memory_budget;
    o.memory_min = info->memory_min;
    o.remat_replay = info->plan ? info->plan->remat : NULL; /* a loaded plan is not searched for again */
    return o;
}

void dfg_plan_info_free(dfg_plan_info *info) {
    if (!info) return;
    free(info->host_lib);
    info->host_lib = NULL;
    info->host_lib_size = 0;
    dfg_plan_record_free(info->plan);
    info->plan = NULL;
}
