/* attrs.c - the attribute layout descriptors, generated from attrs.def, and the field-by-field
 * encoder, decoder, comparison and printer that plan files, passes and reports use. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "attrs.h"

/* ---------------------------------------------------------------- descriptors */
#define ATTRS_BEGIN(layout) static const dfg_attr_field fields_##layout[] = {
#define FIELD(layout, type, fname, lo, hi) \
    {#fname, DFG_AF_##type, offsetof(union dfg_attrs, layout.fname), sizeof(((dfg_attrs *)0)->layout.fname), lo, hi},
#define ATTRS_END(layout) };
#include "attrs.def"
#undef ATTRS_BEGIN
#undef FIELD
#undef ATTRS_END

#define ATTRS_BEGIN(layout)                                                                             \
    const dfg_attr_layout dfg_attr_layout_##layout = {#layout, fields_##layout,                         \
                                                      (int)(sizeof(fields_##layout) / sizeof(dfg_attr_field)), \
                                                      sizeof(dfg_attrs_##layout)};
#define FIELD(layout, type, fname, lo, hi)
#define ATTRS_END(layout)
#include "attrs.def"
#undef ATTRS_BEGIN
#undef FIELD
#undef ATTRS_END
const dfg_attr_layout dfg_attr_layout_none = {"none", NULL, 0, 0};

/* ---------------------------------------------------------------- little-endian bytes */
static void put_le(unsigned char *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_le(const unsigned char *b, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static int64_t field_int(const dfg_attr_field *f, const unsigned char *p) {
    if (f->type == DFG_AF_i32) {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
    }
    int64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

size_t dfg_attrs_encode(const dfg_attr_layout *l, const dfg_attrs *a, unsigned char *buf) {
    const unsigned char *base = (const unsigned char *)a;
    size_t n = 0;
    for (int i = 0; i < l->n_fields; i++) {
        const dfg_attr_field *f = &l->fields[i];
        const unsigned char *p = base + f->offset;
        switch (f->type) {
        case DFG_AF_f32: {
            uint32_t bits;
            memcpy(&bits, p, 4);
            put_le(buf + n, bits, 4), n += 4;
            break;
        }
        case DFG_AF_i32: put_le(buf + n, (uint64_t)field_int(f, p), 4), n += 4; break;
        case DFG_AF_i64: put_le(buf + n, (uint64_t)field_int(f, p), 8), n += 8; break;
        case DFG_AF_bool: buf[n++] = *(const bool *)p ? 1 : 0; break;
        case DFG_AF_dtype: buf[n++] = (unsigned char)*(const dfg_dtype *)p; break;
        case DFG_AF_shape: {
            const dfg_shape *s = (const dfg_shape *)p;
            int rank = s->rank >= 0 && s->rank <= DFG_MAX_RANK ? s->rank : 0;
            buf[n++] = (unsigned char)rank;
            for (int d = 0; d < rank; d++) put_le(buf + n, (uint64_t)s->d[d], 8), n += 8;
            break;
        }
        case DFG_AF_perm:
            for (int d = 0; d < DFG_MAX_RANK; d++) buf[n++] = (unsigned char)((const int *)p)[d];
            break;
        }
    }
    return n;
}

static bool in_range(const dfg_attr_field *f, int64_t v) { return v >= f->lo && v <= f->hi; }

/* Decodes one field at buf[*at]; false with why set when it runs past n or out of range. */
static bool decode_field(const dfg_attr_field *f, const unsigned char *buf, size_t n, size_t *at, unsigned char *p,
                         char *why, size_t why_len) {
    static const int widths[] = {[DFG_AF_f32] = 4, [DFG_AF_i32] = 4, [DFG_AF_i64] = 8, [DFG_AF_bool] = 1,
                                 [DFG_AF_dtype] = 1, [DFG_AF_shape] = 1, [DFG_AF_perm] = DFG_MAX_RANK};
    if (n - *at < (size_t)widths[f->type]) return snprintf(why, why_len, "'%s' is cut short", f->name), false;
    const unsigned char *b = buf + *at;
    *at += (size_t)widths[f->type];
    switch (f->type) {
    case DFG_AF_f32: {
        uint32_t bits = (uint32_t)get_le(b, 4);
        memcpy(p, &bits, 4);
        return true;
    }
    case DFG_AF_i32: {
        int32_t v = (int32_t)(uint32_t)get_le(b, 4);
        if (!in_range(f, v)) return snprintf(why, why_len, "'%s' is %" PRId32 ", outside %" PRId64 "..%" PRId64, f->name, v, f->lo, f->hi), false;
        memcpy(p, &v, sizeof(v));
        return true;
    }
    case DFG_AF_i64: {
        int64_t v = (int64_t)get_le(b, 8);
        if (!in_range(f, v)) return snprintf(why, why_len, "'%s' is %" PRId64 ", outside %" PRId64 "..%" PRId64, f->name, v, f->lo, f->hi), false;
        memcpy(p, &v, sizeof(v));
        return true;
    }
    case DFG_AF_bool:
        if (b[0] > 1) return snprintf(why, why_len, "'%s' is %u, not a flag (0 or 1)", f->name, b[0]), false;
        *(bool *)p = b[0];
        return true;
    case DFG_AF_dtype:
        if (b[0] >= DFG_DTYPE_COUNT) return snprintf(why, why_len, "'%s' is dtype %u, unknown", f->name, b[0]), false;
        *(dfg_dtype *)p = (dfg_dtype)b[0];
        return true;
    case DFG_AF_shape: {
        dfg_shape *s = (dfg_shape *)p;
        if (b[0] > DFG_MAX_RANK) return snprintf(why, why_len, "'%s' has rank %u", f->name, b[0]), false;
        s->rank = b[0];
        if (n - *at < (size_t)s->rank * 8) return snprintf(why, why_len, "'%s' is cut short", f->name), false;
        for (int d = 0; d < s->rank; d++, *at += 8) {
            s->d[d] = (int64_t)get_le(buf + *at, 8);
            if (!in_range(f, s->d[d]))
                return snprintf(why, why_len, "'%s' dim %d is %" PRId64 ", outside %" PRId64 "..%" PRId64, f->name, d,
                                s->d[d], f->lo, f->hi),
                       false;
        }
        return true;
    }
    case DFG_AF_perm:
        for (int d = 0; d < DFG_MAX_RANK; d++) {
            if (!in_range(f, b[d])) return snprintf(why, why_len, "'%s' entry %d is %u", f->name, d, b[d]), false;
            ((int *)p)[d] = b[d];
        }
        return true;
    }
    return false;
}

bool dfg_attrs_decode(const dfg_attr_layout *l, const unsigned char *buf, size_t n, dfg_attrs *a, char *why,
                      size_t why_len) {
    memset(a, 0, sizeof(*a));
    size_t at = 0;
    for (int i = 0; i < l->n_fields; i++)
        if (!decode_field(&l->fields[i], buf, n, &at, (unsigned char *)a + l->fields[i].offset, why, why_len))
            return false;
    if (at != n) return snprintf(why, why_len, "%zu bytes where layout '%s' takes %zu", n, l->name, at), false;
    return true;
}

bool dfg_attrs_equal(const dfg_attr_layout *l, const dfg_attrs *a, const dfg_attrs *b) {
    unsigned char ea[DFG_ATTRS_MAX_ENCODED], eb[DFG_ATTRS_MAX_ENCODED];
    size_t na = dfg_attrs_encode(l, a, ea), nb = dfg_attrs_encode(l, b, eb);
    return na == nb && !memcmp(ea, eb, na);
}

char *dfg_attrs_format(const dfg_attr_layout *l, const dfg_attrs *a, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->n_fields && used < len; i++) {
        const dfg_attr_field *f = &l->fields[i];
        const unsigned char *p = (const unsigned char *)a + f->offset;
        int k = snprintf(buf + used, len - used, "%s%s=", i ? " " : "", f->name);
        if (k < 0 || (size_t)k >= len - used) break;
        used += (size_t)k;
        char sb[96];
        switch (f->type) {
        case DFG_AF_f32: k = snprintf(buf + used, len - used, "%g", (double)*(const float *)p); break;
        case DFG_AF_i32: case DFG_AF_i64: k = snprintf(buf + used, len - used, "%" PRId64, field_int(f, p)); break;
        case DFG_AF_bool: k = snprintf(buf + used, len - used, "%s", *(const bool *)p ? "true" : "false"); break;
        case DFG_AF_dtype: k = snprintf(buf + used, len - used, "%s", dfg_dtype_name(*(const dfg_dtype *)p)); break;
        case DFG_AF_shape: k = snprintf(buf + used, len - used, "%s", dfg_shape_str(*(const dfg_shape *)p, sb, sizeof(sb))); break;
        case DFG_AF_perm: {
            const int *q = (const int *)p;
            k = snprintf(buf + used, len - used, "(%d,%d,%d,%d,%d,%d)", q[0], q[1], q[2], q[3], q[4], q[5]);
            break;
        }
        }
        if (k < 0 || (size_t)k >= len - used) break;
        used += (size_t)k;
    }
    return buf;
}
