/* opdef.h - the preprocessor pieces every includer of ops.def uses to turn a row's columns into
 * names: a column holds a short name that is pasted onto a prefix (infer "binary" is
 * dfg_infer_binary), or the word `none`. DFG_IS_NONE tells the two apart while preprocessing,
 * so a table entry becomes NULL and a declaration disappears for `none` with no hand-kept list.
 * (The probe: DFG_NONE_PROBE_##x is a macro with a comma in it only when x is `none`.) */
#ifndef DFG_OPDEF_H
#define DFG_OPDEF_H

#define DFG_CAT_(a, b) a##b
#define DFG_CAT(a, b) DFG_CAT_(a, b)
#define DFG_SECOND_(a, b, ...) b
#define DFG_SECOND(...) DFG_SECOND_(__VA_ARGS__)
#define DFG_NONE_PROBE_none ~, 1
/* 1 when x is the token `none`, else 0 */
#define DFG_IS_NONE(x) DFG_SECOND(DFG_NONE_PROBE_##x, 0, ~)

/* prefix##x, or NULL when x is `none` */
#define DFG_FN_OR_NULL(prefix, x) DFG_CAT(DFG_FN_OR_NULL_, DFG_IS_NONE(x))(prefix, x)
#define DFG_FN_OR_NULL_0(prefix, x) prefix##x
#define DFG_FN_OR_NULL_1(prefix, x) NULL
/* prefix##name, or NULL when the column `gate` is `none` (a column saying whether name exists) */
#define DFG_FN_IF(gate, prefix, name) DFG_CAT(DFG_FN_IF_, DFG_IS_NONE(gate))(prefix, name)
#define DFG_FN_IF_0(prefix, name) prefix##name
#define DFG_FN_IF_1(prefix, name) NULL
/* the tokens after it, unless x is `none` */
#define DFG_UNLESS_NONE(x) DFG_CAT(DFG_UNLESS_NONE_, DFG_IS_NONE(x))
#define DFG_UNLESS_NONE_0(...) __VA_ARGS__
#define DFG_UNLESS_NONE_1(...)

#endif
