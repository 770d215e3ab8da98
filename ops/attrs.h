/* attrs.h - op attributes: one plain struct per layout (ops/attrs.def), the union a node points
 * to, and the layout descriptors that encode, decode, check, compare and print them field by
 * field. Plan files store attributes through these (never as raw struct bytes, whose padding and
 * unused union members C leaves unspecified), so the same program always writes the same bytes. */
#ifndef DFG_ATTRS_H
#define DFG_ATTRS_H

#include "../graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- the structs */
#define DFG_ATTR_DECL_f32(name) float name;
#define DFG_ATTR_DECL_i32(name) int32_t name;
#define DFG_ATTR_DECL_i64(name) int64_t name;
#define DFG_ATTR_DECL_bool(name) bool name;
#define DFG_ATTR_DECL_dtype(name) dfg_dtype name;
#define DFG_ATTR_DECL_shape(name) dfg_shape name;
#define DFG_ATTR_DECL_perm(name) int name[DFG_MAX_RANK];

#define ATTRS_BEGIN(layout) typedef struct {
#define FIELD(layout, type, name, lo, hi) DFG_ATTR_DECL_##type(name)
#define ATTRS_END(layout) } dfg_attrs_##layout;
#include "attrs.def"
#undef ATTRS_BEGIN
#undef FIELD
#undef ATTRS_END

union dfg_attrs {
#define ATTRS_BEGIN(layout) dfg_attrs_##layout layout;
#define FIELD(layout, type, name, lo, hi)
#define ATTRS_END(layout)
#include "attrs.def"
#undef ATTRS_BEGIN
#undef FIELD
#undef ATTRS_END
};

/* ---------------------------------------------------------------- layout descriptors */
typedef enum { DFG_AF_f32, DFG_AF_i32, DFG_AF_i64, DFG_AF_bool, DFG_AF_dtype, DFG_AF_shape, DFG_AF_perm } dfg_attr_type;

typedef struct {
    const char *name;
    dfg_attr_type type;
    size_t offset, size; /* in union dfg_attrs */
    int64_t lo, hi;      /* i32, i64, shape dims, perm entries */
} dfg_attr_field;

typedef struct {
    const char *name; /* "affine"; "none" for ops without attributes */
    const dfg_attr_field *fields;
    int n_fields;
    size_t size; /* sizeof(dfg_attrs_<layout>) */
} dfg_attr_layout;

#define ATTRS_BEGIN(layout) extern const dfg_attr_layout dfg_attr_layout_##layout;
#define FIELD(layout, type, name, lo, hi)
#define ATTRS_END(layout)
#include "attrs.def"

#undef ATTRS_BEGIN
#undef FIELD
#undef ATTRS_END
extern const dfg_attr_layout dfg_attr_layout_none;

/* The most bytes dfg_attrs_encode writes for any layout. */
#define DFG_ATTRS_MAX_ENCODED 128

/* Writes a's fields in order, little-endian (f32 as its IEEE bits, bool and dtype as a byte,
 * shape as a rank byte and rank i64 dims, perm as DFG_MAX_RANK bytes); returns the byte count. */
size_t dfg_attrs_encode(const dfg_attr_layout *l, const dfg_attrs *a, unsigned char *buf /* DFG_ATTRS_MAX_ENCODED */);
/* Reads n bytes written by dfg_attrs_encode into *a (zeroed first). false, with the field and
 * the problem in why, when n is not what the layout takes or a value is out of its range. */
bool dfg_attrs_decode(const dfg_attr_layout *l, const unsigned char *buf, size_t n, dfg_attrs *a, char *why,
                      size_t why_len);
/* Whether the layout's fields are equal (floats by bits). */
bool dfg_attrs_equal(const dfg_attr_layout *l, const dfg_attrs *a, const dfg_attrs *b);
/* "alpha=0.5 beta=0" into buf (empty for none); returns buf. */
char *dfg_attrs_format(const dfg_attr_layout *l, const dfg_attrs *a, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
