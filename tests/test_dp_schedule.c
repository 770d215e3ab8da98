/* test_dp_schedule.c - where the gradient buckets of a data-parallel step land (ops/nn/nn_dp.c,
 * dfg_allreduce_last, passes/schedule.c), planning only (running needs mpirun: ctest
 * data_parallel). A random MLP of L layers is trained in a stage repeated R times (gradient
 * accumulation), its gradient buffers reduced for 2 ranks in buckets of one layer each:
 *   - every bucket is marked for the stage's last repeat, and the report counts its bytes once
 *     per step, not R times;
 *   - each bucket is issued right after the last node it depends on (its gradient's last write),
 *     so the last layer's bucket comes before the backward of the first layer: on a GPU the
 *     communication overlaps the rest of the backward; and the buckets keep their order (last
 *     layer first), the order every rank issues them in;
 *   - --keep-order (no scheduling) leaves them where they were built, after the backward;
 *   - a temporary in dfg_allreduce_last is refused, naming it. */
#include <string.h>

#include "ops/nn/dfg_nn.h"
#include "passes/plan.h"
#include "testutil.h"

#define MAX_L 8

typedef struct {
    dfg_program *p;
    int L;
    dfg_tensor *grads[MAX_L]; /* the buffers */
} mlp;

/* loss = mean over rows of sum(h_L), h_l = gelu(h_{l-1} W_l), in a stage of `repeat` runs */
static mlp build(int L, int rows, int d, int repeat) {
    mlp m = {dfg_program_new("dp_schedule"), L, {0}};
    dfg_tensor *W[MAX_L];
    char name[32];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof(name), "w%d", l);
        W[l] = dfg_param(m.p, name, DFG_F32, DFG_SHAPE(d, d), dfg_init_normal(0.0f, 0.1f));
    }
    dfg_nn_grad_buffers(m.p, W, L, "", m.grads);
    dfg_graph *g = dfg_graph_new(m.p, "train");
    dfg_tensor *h = dfg_input(g, "x", DFG_F32, DFG_SHAPE(rows, d));
    for (int l = 0; l < L; l++) h = dfg_gelu(g, dfg_matmul(g, h, W[l], false, false));
    dfg_tensor *loss = dfg_mean(g, dfg_sum(g, h, 1), 0);
    dfg_backward_accumulate(g, loss, W, L, m.grads);
    dfg_tensor *gs[MAX_L];
    memcpy(gs, m.grads, sizeof(gs));
    dfg_nn_allreduce_grads(g, gs, L, 2, (int64_t)d * d * 4); /* one layer a bucket */
    dfg_stage_graph(m.p, g, repeat);
    return m;
}

static const dfg_graph *train_graph(const dfg_program *p) { return p->stages[0].graph; }

/* Position of the node that last writes or makes tensor t's storage before position `before`. */
static int last_write(const dfg_graph *g, const dfg_tensor *t, int before) {
    int at = -1;
    for (int i = 0; i < before; i++)
        for (int k = 0; k < g->nodes[i]->n_out; k++)
            if (g->nodes[i]->out[k]->storage == t->storage) at = i;
    return at;
}

/* The buffer (grads index) bucket node n reduces. */
static int bucket_layer(const mlp *m, const dfg_node *n) {
    for (int l = 0; l < m->L; l++)
        if (n->in[0]->storage == m->grads[l]->storage) return l;
    return -1;
}

static void test_schedule(void) {
    int L = dfg_test_int(3, MAX_L), rows = dfg_test_int(2, 9), d = dfg_test_int(4, 24), R = dfg_test_int(2, 4);
    mlp m = build(L, rows, d, R);
    dfg_options o = dfg_options_default(DFG_TARGET_CPU);
    CHECK(dfg_compile(m.p, &o) == DFG_OK, "compile: %s", dfg_program_error(m.p));
    if (dfg_program_status(m.p)) return dfg_program_free(m.p);
    const dfg_graph *g = train_graph(m.p);
    int n_buckets = 0, prev_layer = L, first_bucket = -1, first_layer_grad = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const dfg_node *n = g->nodes[i];
        if (n->op != DFG_OP_ALLREDUCE) continue;
        n_buckets++;
        int l = bucket_layer(&m, n);
        CHECK(dfg_node_is_late_allreduce(n) && n->n_in == 1 && l >= 0, "bucket %d: one gradient, on the last repeat", n_buckets);
        CHECK(l < prev_layer, "buckets in the order they were built: layer %d after layer %d", l, prev_layer);
        prev_layer = l;
        int w = last_write(g, n->in[0], i);
        CHECK(w == i - 1 || (w >= 0 && dfg_node_is_late_allreduce(g->nodes[i - 1])),
              "the bucket of layer %d at position %d comes right after its gradient's last write (position %d)", l, i, w);
        if (first_bucket < 0) first_bucket = i;
        if (l == 0) first_layer_grad = w;
        CHECK(!dfg_node_runs_on(n, 0, R) && dfg_node_runs_on(n, R - 1, R), "runs on repeat %d of %d only", R, R);
    }
    CHECK(n_buckets == L, "%d buckets for %d layers", n_buckets, L);
    CHECK(first_bucket >= 0 && first_bucket < first_layer_grad,
          "the last layer's bucket (position %d) is issued before the first layer's gradient is final (%d): it "
          "overlaps the rest of the backward", first_bucket, first_layer_grad);
    const dfg_report *r = dfg_program_report(m.p);
    double grads = (double)L * d * d * 4;
    CHECK(r->world == 2 && r->n_collectives == L && r->comm_bytes == grads,
          "report: world %d, %d collectives, %.0f bytes per step (want 2, %d, %.0f: once per step, not x%d)", r->world,
          r->n_collectives, r->comm_bytes, L, grads, R);
    printf("L %d, rows %d, d %d, %d repeats: %d nodes, the last layer's bucket at %d, the first layer's gradient final at %d\n",
           L, rows, d, R, g->n_nodes, first_bucket, first_layer_grad);
    dfg_program_free(m.p);

    /* keep_order: the build order, so every bucket after the whole backward */
    m = build(L, rows, d, R);
    o.keep_order = true;
    CHECK(dfg_compile(m.p, &o) == DFG_OK, "compile --keep-order: %s", dfg_program_error(m.p));
    g = train_graph(m.p);
    int last_other = -1, first_ar = g->n_nodes;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == DFG_OP_ALLREDUCE) first_ar = i < first_ar ? i : first_ar;
        else last_other = i;
    CHECK(first_ar > last_other, "--keep-order: the buckets stay after the backward (first at %d, last other node %d)",
          first_ar, last_other);
    dfg_program_free(m.p);
}

static void test_refuses_temporary(void) {
    dfg_program *p = dfg_program_new("late_temp");
    dfg_graph *g = dfg_graph_new(p, "g");
    dfg_tensor *x = dfg_gelu(g, dfg_input(g, "x", DFG_F32, DFG_SHAPE(3, 4)));
    dfg_tensor *xs[1] = {x};
    CHECK(dfg_allreduce_last(g, xs, 1, DFG_COLL_MEAN, 2) != DFG_OK, "dfg_allreduce_last of a temporary fails");
    const char *e = dfg_program_error(p);
    CHECK(strstr(e, x->name) && strstr(e, "persistent"), "... naming it and why: %s", e);
    dfg_program_free(p);
}

int main(void) {
    for (int i = 0; i < 20; i++) test_schedule();
    test_refuses_temporary();
    return dfg_test_finish();
}
