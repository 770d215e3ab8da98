/* adamw_schedule_dump.c - the dfg side of lr_schedule_golden.py: AdamW under a learning-rate
 * schedule (dfg_nn_adamw_step_scheduled) against torch.optim.AdamW and transformers' scheduler.
 *
 *   adamw_schedule_dump WORKDIR [KEY=VALUE ...]
 *
 * The settings (learning_rate, weight_decay, max_steps, lr_scheduler_type, warmup_steps,
 * warmup_ratio, ...) are the program's. Reads WORKDIR/in.safetensors: "w" (3, 4) and "b" (5) f32,
 * the starting weights (w decays, b, rank 1, does not), and "grads.w" (K, 3, 4), "grads.b" (K, 5),
 * the gradients of K steps; runs the K steps and writes "w", "b" and "lr" (K), the rate each step
 * used, to WORKDIR/dfg_out.safetensors. Any failure prints one line and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "dfg_nn.h"
#include "dfg_runtime.h"
#include "safetensors.h"

#define GOLDEN_DRIVER "adamw_schedule_dump"
#include "golden_dump.h"

#define MAX_K 4096

static const dfg_st_tensor *f32_input(const dfg_safetensors *st, const char *name, int rank) {
    const dfg_st_tensor *t = dfg_st_find(st, name);
    if (!t || t->dtype != DFG_F32 || t->shape.rank != rank) {
        fail("in.safetensors: '%s' must be an f32 tensor of rank %d", name, rank);
        return NULL;
    }
    return t;
}

/* The program: w and b updated by one scheduled AdamW step from the gradient inputs; "lr" out. */
static int build(dfg_program *p, int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        char key[128];
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq - argv[i] >= (long)sizeof(key)) return fail("'%s' is not KEY=VALUE", argv[i]);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[i]), argv[i]);
        if (dfg_program_set(p, key, eq + 1)) return fail("%s", dfg_program_error(p));
    }
    dfg_adamw_config cfg;
    dfg_lr_schedule sched;
    double lr = dfg_setting_float(p, "learning_rate", 1e-3);
    int64_t max_steps = dfg_setting_int(p, "max_steps", -1);
    dfg_adamw_config d = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    if (dfg_adamw_config_from_settings(p, d, &cfg) ||
        dfg_lr_schedule_from_settings(p, lr, max_steps > 0 ? max_steps : 0, 0, &sched))
        return fail("settings: %s", dfg_program_error(p));
    dfg_graph *g = dfg_graph_new(p, "update");
    dfg_tensor *params[2] = {dfg_param(p, "w", DFG_F32, DFG_SHAPE(3, 4), dfg_init_zeros()),
                             dfg_param(p, "b", DFG_F32, DFG_SHAPE(5), dfg_init_zeros())};
    dfg_tensor *grads[2] = {dfg_input(g, "grad.w", DFG_F32, DFG_SHAPE(3, 4)), dfg_input(g, "grad.b", DFG_F32, DFG_SHAPE(5))};
    dfg_tensor *rate = NULL;
    if (dfg_nn_adamw_step_scheduled(p, g, params, grads, 2, cfg, &sched, "", &rate))
        return fail("adamw: %s", dfg_graph_error(g)[0] ? dfg_graph_error(g) : dfg_program_error(p));
    dfg_output(g, rate, "lr");
    if (dfg_graph_status(g) || dfg_stage_graph(p, g, 1)) return fail("building: %s", dfg_program_error(p));
    printf("schedule %s, %lld steps, %lld of warm-up, %s\n", dfg_lr_scheduler_name(sched.type), (long long)sched.total,
           (long long)sched.warmup, sched.on ? "a rate a step" : "the rate of learning_rate");
    return 0;
}

/* Runs the K steps; lr[k] is the rate step k used. */
static int run(dfg_runtime *rt, const dfg_safetensors *in, float *lr, int64_t *K) {
    const dfg_st_tensor *w = f32_input(in, "w", 2), *b = f32_input(in, "b", 1);
    const dfg_st_tensor *gw = f32_input(in, "grads.w", 3), *gb = f32_input(in, "grads.b", 2);
    if (!w || !b || !gw || !gb) return 1;
    *K = gw->shape.d[0];
    if (*K < 1 || *K > MAX_K || gb->shape.d[0] != *K) return fail("grads.w and grads.b need the same K in 1..%d", MAX_K);
    if (dfg_runtime_write(rt, "w", w->data, w->bytes) || dfg_runtime_write(rt, "b", b->data, b->bytes))
        return fail("the weights: %s", dfg_runtime_error(rt));
    size_t sw = gw->bytes / (size_t)*K, sb = gb->bytes / (size_t)*K;
    for (int64_t k = 0; k < *K; k++) {
        if (dfg_runtime_write(rt, "grad.w", (const char *)gw->data + sw * (size_t)k, sw) ||
            dfg_runtime_write(rt, "grad.b", (const char *)gb->data + sb * (size_t)k, sb) || dfg_runtime_step(rt) ||
            dfg_runtime_read(rt, "lr", &lr[k], sizeof(float)))
            return fail("step %lld: %s", (long long)k + 1, dfg_runtime_error(rt));
    }
    return 0;
}

static int dump(dfg_runtime *rt, const float *lr, int64_t K, const char *path) {
    dfg_buffer w, b;
    if (dfg_runtime_buffer(rt, "w", &w) || dfg_runtime_buffer(rt, "b", &b)) return fail("%s", dfg_runtime_error(rt));
    dfg_st_tensor out[3] = {
        {.name = "w", .dtype = DFG_F32, .dtype_name = "F32", .shape = w.shape, .data = w.data, .bytes = w.bytes},
        {.name = "b", .dtype = DFG_F32, .dtype_name = "F32", .shape = b.shape, .data = b.data, .bytes = b.bytes},
        {.name = "lr", .dtype = DFG_F32, .dtype_name = "F32", .shape = DFG_SHAPE(K), .data = (void *)lr,
         .bytes = sizeof(float) * (size_t)K}};
    char err[512] = "";
    if (dfg_st_write(path, out, 3, NULL, 0, err, sizeof(err))) return fail("writing %s: %s", path, err[0] ? err : "failed");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return fail("usage: adamw_schedule_dump WORKDIR [KEY=VALUE ...]");
    char ipath[4096], opath[4096], err[512] = "";
    snprintf(ipath, sizeof(ipath), "%s/in.safetensors", argv[1]);
    snprintf(opath, sizeof(opath), "%s/dfg_out.safetensors", argv[1]);
    dfg_program *p = dfg_program_new("adamw_schedule");
    if (!p) return fail("out of memory");
    if (build(p, argc, argv)) return 1;
    dfg_safetensors *in = NULL;
    if (dfg_st_open(ipath, &in, err, sizeof(err))) return fail("%s", err);
    dfg_run_options opt = dfg_run_options_default();
    dfg_runtime *rt = NULL;
    if (dfg_runtime_create(p, &opt, &rt)) return fail("dfg_runtime_create: %s", dfg_runtime_error(rt));
    static float lr[MAX_K];
    int64_t K = 0;
    int rc = run(rt, in, lr, &K);
    if (!rc) rc = dump(rt, lr, K, opath);
    if (!rc) printf("%lld steps written to %s\n", (long long)K, opath);
    dfg_runtime_free(rt);
    dfg_st_free(in);
    dfg_program_free(p);
    return rc;
}
