/* test_cuda_attention_shared.c - attention_shared_cached's CUDA kernels (ops/cuda/attention_shared.cu)
 * under the SIMT emulator against its CPU kernel (tests/cuda_harness.h: fresh random inputs,
 * poisoned outputs, several thread schedules, f32 and bf16). The CPU kernel itself is checked
 * against attention_cached on the copied cache in test_attention_shared.c.
 *
 * Cases: multi-head and grouped-query heads, a head_dim off the 4-element vector width, prompts
 * of more than one split (256 columns) and own parts of more than one, one position for every row
 * and one a row, left padding (a start a group, and starts that differ inside one), queries inside
 * the prompt (Tq > 1 from before Tp), prompt_of (decode_tail's rows, a block a row), more queries
 * of a group than a block serves. Then out-of-range positions, starts and prompts set the flag. */
#include <stdlib.h>
#include <string.h>

#include "cuda_harness.h"

typedef struct {
    int P, G, Tp, Tc, Tq, H, Hkv, D;
    int pos;        /* every row's column, or the first row's with rows_pos (pos + b % 3) */
    bool rows_pos;
    int pad;        /* 0: no start; 1: a start a group; 2: starts that differ inside a group */
    bool prompt_of; /* rows' prompts permuted */
} sh_case;

static dfg_node *build(dfg_graph *g, dfg_dtype dt, void *user) {
    const sh_case *c = user;
    int64_t N = (int64_t)c->P * c->G, C = (int64_t)c->H * c->D, W = (int64_t)c->Hkv * c->D;
    dfg_tensor *y = dfg_attention_shared_cached(
        g, dfg_input(g, "q", dt, DFG_SHAPE(N, c->Tq, C)), dfg_input(g, "kp", dt, DFG_SHAPE(c->P, c->Tp, W)),
        dfg_input(g, "vp", dt, DFG_SHAPE(c->P, c->Tp, W)), dfg_input(g, "k", dt, DFG_SHAPE(N, c->Tc, W)),
        dfg_input(g, "v", dt, DFG_SHAPE(N, c->Tc, W)), dfg_input(g, "pos", DFG_I32, c->rows_pos ? DFG_SHAPE(N) : DFG_SCALAR),
        c->pad ? dfg_input(g, "start", DFG_I32, DFG_SHAPE(N)) : NULL,
        c->prompt_of ? dfg_input(g, "prompt_of", DFG_I32, DFG_SHAPE(N)) : NULL, c->H);
    return dfg_graph_status(g) ? NULL : y->producer;
}

static int32_t prompt_of_row(const sh_case *c, int64_t b) {
    return c->prompt_of ? (int32_t)((b * 5 + 3) % c->P) : (int32_t)(b / c->G);
}

static void fill(int slot, const dfg_tensor *t, void *data, int64_t n, void *user) {
    const sh_case *c = user;
    if (cuda_fill_floats(t, data, n)) return;
    int32_t *x = data;
    bool has_start = c->pad != 0;
    for (int64_t b = 0; b < n; b++) {
        int32_t pr = prompt_of_row(c, b);
        if (slot == 5) x[b] = c->pos + (c->rows_pos ? (int32_t)(b % 3) : 0);
        else if (slot == 6 && has_start)
            x[b] = c->pad == 2 ? (int32_t)((b + pr) % (c->Tp > 3 ? 4 : 1)) : (int32_t)(pr % (c->Tp > 2 ? 3 : 1));
        else x[b] = pr;
    }
}

static void check(sh_case c) {
    char label[160];
    snprintf(label, sizeof(label), "attention_shared_cached P%d G%d Tp%d Tc%d Tq%d pos%d%s H%d Hkv%d D%d%s%s", c.P, c.G,
             c.Tp, c.Tc, c.Tq, c.pos, c.rows_pos ? " (a row)" : "", c.H, c.Hkv, c.D,
             c.pad == 1 ? " padded" : c.pad == 2 ? " padded per row" : "", c.prompt_of ? " prompt_of" : "");
    cuda_case k = {.label = label, .build = build, .user = &c, .fill = fill, .bf16 = true};
    if (cuda_check(&k)) printf("%s: the emulated kernels = the CPU kernel\n", label);
}

/* A row's column past the caches, a start outside its row, a prompt that is not one: the flag. */
static void check_flags(void) {
    sh_case c = {.P = 2, .G = 2, .Tp = 6, .Tc = 4, .Tq = 1, .H = 2, .Hkv = 2, .D = 4, .pos = 6, .rows_pos = true,
                 .pad = 1, .prompt_of = true};
    dfg_program *p;
    dfg_node *n = cuda_node_alone(build, &c, DFG_F32, "attention_shared_cached flags", &p);
    if (!n) return;
    void *buf[8];
    for (int i = 0; i < n->n_in; i++) {
        int64_t e = dfg_tensor_numel(n->in[i]);
        buf[i] = malloc(dfg_tensor_bytes(n->in[i]));
        fill(i, n->in[i], buf[i], e, &c);
    }
    float *y = malloc(dfg_tensor_bytes(n->out[0]));
    int32_t *pos = buf[5], *start = buf[6], *of = buf[7];
    CHECK(cuda_run_emulated("in range", n, buf, (void *[]){y}, 0, 0) == 0, "in range: no flag");
    pos[3] = c.Tp + c.Tc;
    CHECK(cuda_run_emulated("a column past the caches", n, buf, (void *[]){y}, 0, 0) == 1, "a column past the caches: the flag");
    pos[3] = c.pos, start[1] = -1;
    CHECK(cuda_run_emulated("a negative start", n, buf, (void *[]){y}, 0, 0) == 1, "a negative start: the flag");
    start[1] = 0, of[2] = c.P;
    CHECK(cuda_run_emulated("a prompt that is not one", n, buf, (void *[]){y}, 0, 0) == 1, "prompt_of outside: the flag");
    for (int i = 0; i < n->n_in; i++) free(buf[i]);
    free(y);
    dfg_program_free(p);
    printf("attention_shared_cached: a column past the caches, a negative start, prompt_of outside set the flag\n");
}

int main(void) {
    if (!cuda_test_begin("test_cuda_attention_shared")) return DFG_TEST_SKIP;
    check((sh_case){.P = 2, .G = 4, .Tp = 7, .Tc = 5, .Tq = 1, .H = 2, .Hkv = 2, .D = 16, .pos = 7});
    check((sh_case){.P = 3, .G = 2, .Tp = 9, .Tc = 6, .Tq = 1, .H = 8, .Hkv = 2, .D = 8, .pos = 11, .rows_pos = true});
    check((sh_case){.P = 2, .G = 3, .Tp = 6, .Tc = 4, .Tq = 1, .H = 3, .Hkv = 1, .D = 5, .pos = 6, .pad = 1});
    check((sh_case){.P = 2, .G = 3, .Tp = 8, .Tc = 5, .Tq = 1, .H = 2, .Hkv = 2, .D = 4, .pos = 9, .rows_pos = true, .pad = 2});
    check((sh_case){.P = 2, .G = 2, .Tp = 6, .Tc = 6, .Tq = 4, .H = 2, .Hkv = 2, .D = 8, .pos = 3, .pad = 1});
    check((sh_case){.P = 3, .G = 2, .Tp = 7, .Tc = 5, .Tq = 1, .H = 2, .Hkv = 1, .D = 8, .pos = 8, .rows_pos = true,
                    .pad = 1, .prompt_of = true});
    /* two splits of the prompt and of the own part; 80 queries of a group: two blocks of them */
    check((sh_case){.P = 1, .G = 10, .Tp = 300, .Tc = 270, .Tq = 1, .H = 8, .Hkv = 1, .D = 8, .pos = 560, .pad = 1});
    check_flags();
    return cuda_test_end();
}
