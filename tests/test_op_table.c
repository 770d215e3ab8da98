/* test_op_table.c - what the compiler cannot check of ops/ops.def and ops/attrs.def, walked over
 * the whole table:
 *   - every op has a CPU kernel, a shape rule and a cost rule, and the gradient rule exactly when
 *     it is differentiable (the compiler checks the names; this checks the generated table);
 *   - every attribute layout encodes and decodes field by field: random valid values come back
 *     equal, the encoding fits DFG_ATTRS_MAX_ENCODED, and the decoder refuses a value just
 *     outside each integer field's range, a flag that is neither 0 nor 1, an unknown dtype, a
 *     rank over DFG_MAX_RANK, a short and a long buffer -- each with a message naming the field;
 *   - encoding is a function of the fields alone: two attribute structs that differ only in
 *     padding and unused union bytes encode to the same bytes (what makes plan files
 *     deterministic);
 *   - the in-place rules name inputs that exist, and only ops that compute in f32 are refused
 *     other float dtypes by the CPU backend (the dtypes column);
 *   - the flags column against truths of its own: GEMM exactly on the ops whose cost rule counts
 *     matrix products (matmul, attention, attention_prefix, linear_logprob: 2 M N K per product);
 *     COLLECTIVE exactly on the ops whose kernel is one of those that call the communicator,
 *     found by reading the kernel sources (the files of ops/cpu and ops/cuda that use ctx->comm,
 *     and the kernels they define), and exactly on the ops with the `collective` attribute
 *     layout (whose world the verify pass and the report read). */
#include <dirent.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "ops/cpu/cpu.h"
#include "ops/op.h"
#include "testutil.h"

static void check_rows(void) {
    int diff = 0;
    for (int op = 0; op < DFG_OP_COUNT; op++) {
        const dfg_op_info *o = &dfg_ops[op];
        CHECK(o->name && o->infer && o->cost && o->attrs, "op %d: a rule is missing", op);
        CHECK(dfg_cpu_kernels[op] != NULL, "op '%s' has no CPU kernel", o->name);
        CHECK((o->grad_kind == DFG_GRAD_DIFF) == (o->grad != NULL), "op '%s': gradient rule and kind disagree", o->name);
        CHECK(o->n_in >= -1 && o->n_out >= -1 && o->n_out != 0, "op '%s': arity %d -> %d", o->name, o->n_in, o->n_out);
        if (o->inplace == DFG_INPLACE_IN12) CHECK(o->n_in < 0 || o->n_in >= 3, "op '%s': inplace IN12 with %d inputs", o->name, o->n_in);
        if (o->inplace == DFG_INPLACE_IN01) CHECK(o->n_in < 0 || o->n_in >= 2, "op '%s': inplace IN01 with %d inputs", o->name, o->n_in);
        for (int other = 0; other < op; other++)
            CHECK(strcmp(o->name, dfg_ops[other].name), "ops %d and %d are both named '%s'", other, op, o->name);
        diff += o->grad_kind == DFG_GRAD_DIFF;
    }
    printf("ops.def: %d ops, %d differentiable, every one with a CPU kernel\n", DFG_OP_COUNT, diff);
}

/* ---------------------------------------------------------------- the flags column */
/* The source tree: this file is tests/test_op_table.c in it. */
static void source_dir(char *dir, size_t len) {
    snprintf(dir, len, "%s", __FILE__);
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, len, "..");
    }
}

/* Into names (space-separated, each " name "), the kernels defined in the files of dir ending in
 * ext that reach the communicator (ctx->comm): the first group of `def` in each such file. */
static int comm_kernels(const char *dir, const char *ext, const char *def, char *names, size_t len) {
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot list %s", dir);
    if (!d) return 0;
    regex_t re;
    CHECK(!regcomp(&re, def, REG_EXTENDED | REG_NEWLINE), "bad pattern %s", def);
    int n = 0, files = 0;
    names[0] = '\0';
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name), le = strlen(ext);
        if (l <= le || strcmp(e->d_name + l - le, ext)) continue;
        char path[1400];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        static char text[1 << 20];
        size_t got = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[got] = '\0';
        files++;
        if (!strstr(text, "ctx->comm")) continue;
        regmatch_t m[2];
        for (const char *at = text; !regexec(&re, at, 2, m, at == text ? 0 : REG_NOTBOL); at += m[0].rm_eo) {
            size_t used = strlen(names);
            snprintf(names + used, len - used, " %.*s ", (int)(m[1].rm_eo - m[1].rm_so), at + m[1].rm_so);
            n++;
        }
    }
    closedir(d);
    regfree(&re);
    CHECK(files > 0, "no %s files in %s", ext, dir);
    return n;
}

static void check_flags(void) {
    /* the cost rules that count matrix products (ops/matmul.c, attention.c, attention_prefix.c,
     * logprob.c): what fit's estimate runs at the tensor-core rate */
    const dfg_cost_fn matrix_cost[] = {dfg_cost_matmul, dfg_cost_attention, dfg_cost_attention_prefix,
                                       dfg_cost_linear_logprob};
    /* the kernels that call the communicator, checked against the sources below */
    static const struct {
        const char *name;
        dfg_cpu_fn cpu;
    } comm[] = {{"allreduce", dfg_cpu_allreduce}, {"all_gather", dfg_cpu_all_gather}, {"rank", dfg_cpu_rank}};
    const int n_comm = (int)(sizeof(comm) / sizeof(comm[0]));
    char src[1024], dir[1100], names[2][1024];
    source_dir(src, sizeof(src));
    snprintf(dir, sizeof(dir), "%s/ops/cpu", src);
    int n_cpu =
        comm_kernels(dir, ".c", "^dfg_status dfg_cpu_([a-z0-9_]+)\\(const dfg_node", names[0], sizeof(names[0]));
    snprintf(dir, sizeof(dir), "%s/ops/cuda", src);
    int n_cuda = comm_kernels(dir, ".cu", "^DFG_CUDA_LAUNCHER\\(([a-z0-9_]+)\\)", names[1], sizeof(names[1]));
    CHECK(n_cpu == n_comm && n_cuda == n_comm, "kernels that use ctx->comm: cpu%s, cuda%s; this test knows %d",
          names[0], names[1], n_comm);
    for (int i = 0; i < n_comm; i++) {
        char pat[64];
        snprintf(pat, sizeof(pat), " %s ", comm[i].name);
        CHECK(strstr(names[0], pat) && strstr(names[1], pat), "kernel '%s' does not use ctx->comm in ops/cpu and ops/cuda",
              comm[i].name);
    }
    int gemm = 0, coll = 0;
    for (int op = 0; op < DFG_OP_COUNT; op++) {
        const dfg_op_info *o = &dfg_ops[op];
        bool matrix = false, calls_comm = false;
        for (size_t k = 0; k < sizeof(matrix_cost) / sizeof(matrix_cost[0]); k++) matrix |= o->cost == matrix_cost[k];
        for (int k = 0; k < n_comm; k++) calls_comm |= dfg_cpu_kernels[op] == comm[k].cpu;
        CHECK(dfg_op_flag(op, DFG_OPF_GEMM) == matrix, "op '%s': flag GEMM %s, but its cost rule %s matrix products",
              o->name, dfg_op_flag(op, DFG_OPF_GEMM) ? "set" : "not set", matrix ? "counts" : "does not count");
        CHECK(dfg_op_flag(op, DFG_OPF_COLLECTIVE) == calls_comm,
              "op '%s': flag COLLECTIVE %s, but its kernel %s the communicator", o->name,
              dfg_op_flag(op, DFG_OPF_COLLECTIVE) ? "set" : "not set", calls_comm ? "calls" : "does not call");
        CHECK(dfg_op_flag(op, DFG_OPF_COLLECTIVE) == (o->attrs == &dfg_attr_layout_collective),
              "op '%s': flag COLLECTIVE %s, attribute layout '%s'", o->name,
              dfg_op_flag(op, DFG_OPF_COLLECTIVE) ? "set" : "not set", o->attrs->name);
        gemm += dfg_op_flag(op, DFG_OPF_GEMM);
        coll += dfg_op_flag(op, DFG_OPF_COLLECTIVE);
    }
    CHECK(!dfg_op_flag(DFG_OP_COUNT, DFG_OPF_GEMM) && !dfg_op_flag(DFG_OP_COUNT, 0), "dfg_op_flag of an id that is no op");
    printf("flags: %d GEMM ops (their cost rules count matrix products), %d COLLECTIVE (their kernels call the "
           "communicator)\n", gemm, coll);
}

/* Random valid values for every field of layout l in a. */
static void random_fields(const dfg_attr_layout *l, dfg_attrs *a) {
    unsigned char *base = (unsigned char *)a;
    for (int i = 0; i < l->n_fields; i++) {
        const dfg_attr_field *f = &l->fields[i];
        unsigned char *p = base + f->offset;
        int64_t span = f->hi - f->lo, v = f->lo + (span > 0 ? (int64_t)(dfg_test_u64() % (uint64_t)(span < (1 << 30) ? span + 1 : (1 << 30))) : 0);
        switch (f->type) {
        case DFG_AF_f32: *(float *)p = dfg_test_uniform(-10.0f, 10.0f); break;
        case DFG_AF_i32: *(int32_t *)p = (int32_t)v; break;
        case DFG_AF_i64: *(int64_t *)p = v; break;
        case DFG_AF_bool: *(bool *)p = dfg_test_int(0, 1); break;
        case DFG_AF_dtype: *(dfg_dtype *)p = (dfg_dtype)dfg_test_int(0, DFG_DTYPE_COUNT - 1); break;
        case DFG_AF_shape: {
            dfg_shape *s = (dfg_shape *)p;
            s->rank = dfg_test_int(0, DFG_MAX_RANK);
            for (int d = 0; d < s->rank; d++) s->d[d] = f->lo + dfg_test_int(0, 1000) % (f->hi - f->lo + 1);
            break;
        }
        case DFG_AF_perm:
            for (int d = 0; d < DFG_MAX_RANK; d++) ((int *)p)[d] = (int)(f->lo + dfg_test_int(0, (int)(f->hi - f->lo)));
            break;
        }
    }
}

/* Where field i starts in the encoding of a (its bytes before it). */
static size_t field_at(const dfg_attr_layout *l, const dfg_attrs *a, int i) {
    dfg_attr_layout head = *l;
    head.n_fields = i;
    unsigned char buf[DFG_ATTRS_MAX_ENCODED];
    return dfg_attrs_encode(&head, a, buf);
}

static void expect_refused(const dfg_attr_layout *l, const unsigned char *buf, size_t n, const char *want, const char *what) {
    dfg_attrs back;
    char why[256] = "";
    bool ok = dfg_attrs_decode(l, buf, n, &back, why, sizeof(why));
    CHECK(!ok && strstr(why, want), "layout '%s', %s: %s (message '%s' lacks '%s')", l->name, what,
          ok ? "accepted" : "refused", why, want);
}

static void check_layout(const dfg_attr_layout *l) {
    for (int draw = 0; draw < 20; draw++) {
        dfg_attrs a, b, back;
        memset(&a, 0x5A, sizeof(a)); /* garbage in padding and unused bytes */
        memset(&b, 0xC3, sizeof(b));
        random_fields(l, &a);
        for (int i = 0; i < l->n_fields; i++) /* the same field values over other garbage */
            memcpy((unsigned char *)&b + l->fields[i].offset, (unsigned char *)&a + l->fields[i].offset, l->fields[i].size);
        if (l->n_fields && l->fields[0].type == DFG_AF_shape) { /* dims past the rank are not fields' values */
            const dfg_shape *sa = (const dfg_shape *)((unsigned char *)&a + l->fields[0].offset);
            CHECK(sa->rank <= DFG_MAX_RANK, "layout '%s': rank", l->name);
        }
        unsigned char ea[DFG_ATTRS_MAX_ENCODED], eb[DFG_ATTRS_MAX_ENCODED];
        size_t na = dfg_attrs_encode(l, &a, ea), nb = dfg_attrs_encode(l, &b, eb);
        CHECK(na <= DFG_ATTRS_MAX_ENCODED, "layout '%s': %zu encoded bytes", l->name, na);
        CHECK(na == nb && !memcmp(ea, eb, na), "layout '%s': padding or unused bytes reach the encoding", l->name);
        char why[256] = "";
        CHECK(dfg_attrs_decode(l, ea, na, &back, why, sizeof(why)), "layout '%s': its own encoding refused: %s", l->name, why);
        CHECK(dfg_attrs_equal(l, &a, &back), "layout '%s': decode(encode(a)) != a", l->name);
        if (na) {
            expect_refused(l, ea, na - 1, "", "one byte short");
            unsigned char longer[DFG_ATTRS_MAX_ENCODED + 1];
            memcpy(longer, ea, na);
            longer[na] = 0;
            expect_refused(l, longer, na + 1, "bytes where layout", "one byte long");
        }
        for (int i = 0; i < l->n_fields && draw == 0; i++) { /* a value out of range in each field */
            const dfg_attr_field *f = &l->fields[i];
            unsigned char bad[DFG_ATTRS_MAX_ENCODED];
            memcpy(bad, ea, na);
            size_t at = field_at(l, &a, i);
            char what[96];
            snprintf(what, sizeof(what), "field '%s' out of range", f->name);
            if (f->type == DFG_AF_bool) bad[at] = 2, expect_refused(l, bad, na, f->name, what);
            if (f->type == DFG_AF_dtype) bad[at] = DFG_DTYPE_COUNT, expect_refused(l, bad, na, f->name, what);
            if (f->type == DFG_AF_perm) bad[at] = (unsigned char)(f->hi + 1), expect_refused(l, bad, na, f->name, what);
            if (f->type == DFG_AF_shape) bad[at] = DFG_MAX_RANK + 1, expect_refused(l, bad, na, f->name, what);
            if ((f->type == DFG_AF_i32 && f->lo > INT32_MIN) || (f->type == DFG_AF_i64 && f->lo > INT64_MIN)) {
                int64_t v = f->lo - 1;
                for (int k = 0; k < (f->type == DFG_AF_i32 ? 4 : 8); k++) bad[at + (size_t)k] = (unsigned char)((uint64_t)v >> (8 * k));
                expect_refused(l, bad, na, f->name, what);
            }
        }
    }
}

static void check_layouts(void) {
    const dfg_attr_layout *seen[DFG_OP_COUNT];
    int n = 0;
    for (int op = 0; op < DFG_OP_COUNT; op++) {
        const dfg_attr_layout *l = dfg_ops[op].attrs;
        bool dup = false;
        for (int i = 0; i < n; i++) dup |= seen[i] == l;
        if (dup) continue;
        seen[n++] = l;
        check_layout(l);
    }
    printf("attrs.def: %d layouts round-trip, refuse every out-of-range field, ignore padding\n", n);
}

int main(void) {
    dfg_test_init("test_op_table");
    check_rows();
    check_flags();
    check_layouts();
    return dfg_test_finish();
}
