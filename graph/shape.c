/* shape.c - shapes, dtypes and enum names. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

static const char *const status_names[DFG_STATUS_COUNT] = {
    [DFG_OK] = "ok",
    [DFG_ERR_ARG] = "bad argument",
    [DFG_ERR_SHAPE] = "shape error",
    [DFG_ERR_STATE] = "bad state",
    [DFG_ERR_NOMEM] = "out of memory",
    [DFG_ERR_IO] = "I/O error",
    [DFG_ERR_FORMAT] = "malformed file",
    [DFG_ERR_RANGE] = "value out of range",
    [DFG_ERR_UNSUPPORTED] = "unsupported",
    [DFG_ERR_NUMERIC] = "non-finite value",
    [DFG_ERR_RUNTIME] = "runtime error",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == DFG_STATUS_COUNT, "status names");

static const char *const dtype_names[DFG_DTYPE_COUNT] = {
    [DFG_F32] = "f32", [DFG_BF16] = "bf16", [DFG_F16] = "f16", [DFG_I32] = "i32", [DFG_U8] = "u8"};
static const size_t dtype_sizes[DFG_DTYPE_COUNT] = {
    [DFG_F32] = 4, [DFG_BF16] = 2, [DFG_F16] = 2, [DFG_I32] = 4, [DFG_U8] = 1};
static const char *const kind_names[DFG_KIND_COUNT] = {
    [DFG_PARAM] = "param", [DFG_STATE] = "state", [DFG_INPUT] = "input", [DFG_CONST] = "const", [DFG_TEMP] = "temp"};
static const char *const role_names[DFG_ROLE_COUNT] = {
    [DFG_ROLE_NONE] = "none",         [DFG_ROLE_PARAM] = "param",     [DFG_ROLE_GRAD] = "grad",
    [DFG_ROLE_OPTIM] = "optimizer",   [DFG_ROLE_REF_MODEL] = "ref_model", [DFG_ROLE_KV_CACHE] = "kv_cache",
    [DFG_ROLE_ROLLOUT] = "rollout",   [DFG_ROLE_RNG] = "rng",         [DFG_ROLE_METRIC] = "metric",
    [DFG_ROLE_BASE_MODEL] = "base_model"};

const char *dfg_status_name(dfg_status s) { return (unsigned)s < DFG_STATUS_COUNT ? status_names[s] : "?"; }
const char *dfg_dtype_name(dfg_dtype t) { return (unsigned)t < DFG_DTYPE_COUNT ? dtype_names[t] : "?"; }
const char *dfg_kind_name(dfg_kind k) { return (unsigned)k < DFG_KIND_COUNT ? kind_names[k] : "?"; }
const char *dfg_role_name(dfg_role r) { return (unsigned)r < DFG_ROLE_COUNT ? role_names[r] : "?"; }
bool dfg_is_float(dfg_dtype t) { return t == DFG_F32 || t == DFG_BF16 || t == DFG_F16; }

size_t dfg_dtype_size(dfg_dtype t) { return (unsigned)t < DFG_DTYPE_COUNT ? dtype_sizes[t] : 0; }

int64_t dfg_shape_numel(dfg_shape s) {
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) n *= s.d[i];
    return n;
}

char *dfg_shape_str(dfg_shape s, char *buf, size_t len) {
    size_t used = 0;
    if (len == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < s.rank && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, i ? ",%lld" : "%lld", (long long)s.d[i]);
    if (used < len) snprintf(buf + used, len - used, ")");
    return buf;
}

bool dfg_shape_equal(dfg_shape a, dfg_shape b) {
    if (a.rank != b.rank) return false;
    for (int i = 0; i < a.rank; i++)
        if (a.d[i] != b.d[i]) return false;
    return true;
}

int dfg_norm_axis(int axis, int rank) {
    if (axis < 0) axis += rank;
    return (axis < 0 || axis >= rank) ? -1 : axis;
}

bool dfg_shape_broadcast(dfg_shape a, dfg_shape b, dfg_shape *out) {
    dfg_shape r = {.rank = a.rank > b.rank ? a.rank : b.rank};
    for (int i = 0; i < r.rank; i++) {
        int ia = a.rank - r.rank + i, ib = b.rank - r.rank + i;
        int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        r.d[i] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}

dfg_shape dfg_shape_of(int rank, const int64_t *dims) {
    dfg_shape s = {.rank = rank};
    for (int i = 0; i < rank && i < DFG_MAX_RANK; i++) s.d[i] = dims[i];
    return s;
}

char *dfg_bytes_str(double bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, u++;
    if (u == 0) snprintf(buf, len, "%.0f B", bytes);
    else snprintf(buf, len, "%.*f %s", bytes < 10 ? 2 : 1, bytes, units[u]);
    return buf;
}
