/* cli_device_report.c - dfg inspect --device: the predicted time per stage and per step, as a
 * table and as the JSON report's "prediction" object. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli_device.h"

static const char *runs_note(const cli_step_time *t, const char *metrics) {
    static char buf[4400];
    if (t->from_metrics)
        snprintf(buf, sizeof(buf), "each stage at its mean runs per step in %s", metrics);
    else
        snprintf(buf, sizeof(buf), "the worst case the plan is sized for, the longest completions: every stage at its "
                                   "most runs (decode to max_completion_length), of a pass's prompt- or length-bucket "
                                   "copies the dearest, the decode tail not run");
    return buf;
}

void cli_print_prediction(const dfg_program *p, const cli_device *d, const cli_step_time *t, const char *metrics) {
    printf("device        %s: %s: %.4g TFLOP/s bf16 GEMMs, %.4g TFLOP/s f32, %.4g GB/s, %.3g us a kernel run\n", d->name,
           d->label, d->bf16_flops * 1e-12, d->f32_flops * 1e-12, d->bandwidth * 1e-9, d->kernel_s * 1e6);
    dfg_target plan = dfg_program_report(p)->target;
    if (plan != d->target) /* the plan's kernels, dtypes and fusions are its target's, not the device's */
        printf("              a %s plan predicted on a %s device: compile with --target %s for the plan that device runs\n",
               dfg_target_name(plan), dfg_target_name(d->target), dfg_target_name(d->target));
    printf("predicted     %-3s %-16s %7s %11s %11s %-8s %11s %11s %11s %8s\n", "#", "name", "runs", "ms a run", "ms a step",
           "bound", "roofline ms", "compute ms", "memory ms", "kernels");
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        const cli_stage_time *x = &t->stage[s];
        if (st->kind != DFG_STAGE_GRAPH) {
            printf("              %-3d %-16s %7s %11s %11s %-8s (host function %s: not predicted)\n", s + 1, st->name, "-",
                   "-", "-", "host", st->symbol);
            continue;
        }
        char step[32];
        if (t->counted[s]) snprintf(step, sizeof(step), "%.4g", x->s * t->runs[s] * 1e3);
        else snprintf(step, sizeof(step), "-");
        printf("              %-3d %-16s %7.4g %11.4g %11s %-8s %11.4g %11.4g %11.4g %8d\n", s + 1, st->name, t->runs[s],
               x->s * 1e3, step, cli_stage_bound(x), x->roofline_s * 1e3, x->compute_s * 1e3, x->memory_s * 1e3, x->kernels);
    }
    printf("              step: %.4g ms predicted, of which the roofline %.4g ms (the graph stages; %s; each kernel run "
           "at max(FLOPs / %s, bytes / %s) + %.3g us; host stages not counted)\n", t->step_s * 1e3,
           t->roofline_step_s * 1e3, runs_note(t, metrics),
           d->shaped ? "the rate measured for its GEMM shape or kernel class" : "peak",
           d->shaped ? "the bandwidth measured for its size" : "bandwidth", d->kernel_s * 1e6);
}

/* The measured CPU's rates: {threads, grid_m, grid_nk, gemm_flops [threads: the run's, one][m][n][k],
 * copy_bytes, copy_bytes_per_s [threads][in cache, not], vector_flops [transcendental, other][threads],
 * adamw_bytes_per_s [threads]}. */
static cJSON *rates_json(const cli_cpu_rates *r) {
    cJSON *o = cJSON_CreateObject(), *g = cJSON_CreateArray();
    cJSON_AddNumberToObject(o, "threads", r->threads);
    cJSON_AddItemToObject(o, "grid_m", cJSON_CreateDoubleArray(cli_grid_m, CLI_GRID_M));
    cJSON_AddItemToObject(o, "grid_nk", cJSON_CreateDoubleArray(cli_grid_nk, CLI_GRID_NK));
    for (int t = 0; t < 2; t++) {
        cJSON *by_m = cJSON_CreateArray();
        for (int i = 0; i < CLI_GRID_M; i++) {
            cJSON *by_n = cJSON_CreateArray();
            for (int j = 0; j < CLI_GRID_NK; j++) cJSON_AddItemToArray(by_n, cJSON_CreateDoubleArray(r->gemm[t][i][j], CLI_GRID_NK));
            cJSON_AddItemToArray(by_m, by_n);
        }
        cJSON_AddItemToArray(g, by_m);
    }
    cJSON_AddItemToObject(o, "gemm_flops", g);
    cJSON_AddItemToObject(o, "copy_bytes", cJSON_CreateDoubleArray(cli_copy_bytes, 2));
    cJSON *c = cJSON_AddArrayToObject(o, "copy_bytes_per_s"), *v = cJSON_AddArrayToObject(o, "vector_flops");
    for (int t = 0; t < 2; t++) cJSON_AddItemToArray(c, cJSON_CreateDoubleArray(r->copy[t], 2));
    for (int k = 0; k < 2; k++) cJSON_AddItemToArray(v, cJSON_CreateDoubleArray(r->vector[k], 2));
    cJSON_AddItemToObject(o, "adamw_bytes_per_s", cJSON_CreateDoubleArray(r->update, 2));
    return o;
}

cJSON *cli_prediction_json(const dfg_program *p, const cli_device *d, const cli_step_time *t, const char *metrics) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", d->name);
    cJSON_AddStringToObject(o, "device_label", d->label);
    cJSON_AddNumberToObject(o, "peak_bf16_flops", d->bf16_flops);
    cJSON_AddNumberToObject(o, "peak_f32_flops", d->f32_flops);
    cJSON_AddNumberToObject(o, "bandwidth_bytes_per_s", d->bandwidth);
    cJSON_AddNumberToObject(o, "kernel_s", d->kernel_s);
    if (d->shaped) cJSON_AddItemToObject(o, "cpu_rates", rates_json(&d->rates));
    else cJSON_AddNullToObject(o, "cpu_rates");
    cJSON_AddStringToObject(o, "runs_from", t->from_metrics ? "metrics" : "worst_case");
    if (t->from_metrics) cJSON_AddStringToObject(o, "metrics", metrics);
    else cJSON_AddNullToObject(o, "metrics");
    cJSON_AddNumberToObject(o, "step_ms", t->step_s * 1e3);
    cJSON_AddNumberToObject(o, "roofline_step_ms", t->roofline_step_s * 1e3);
    cJSON *by_name = cJSON_AddObjectToObject(o, "stage_ms"); /* keyed as dfg run --metrics' stage_ms */
    cJSON *arr = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; arr && s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        const cli_stage_time *x = &t->stage[s];
        bool graph = st->kind == DFG_STAGE_GRAPH;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            break;
        }
        cJSON_AddStringToObject(e, "name", st->name);
        cJSON_AddStringToObject(e, "kind", graph ? "graph" : "host");
        cJSON_AddNumberToObject(e, "runs", t->runs[s]);
        cJSON_AddBoolToObject(e, "counted", t->counted[s]);
        if (graph) {
            cJSON_AddNumberToObject(e, "predicted_ms", t->counted[s] ? x->s * t->runs[s] * 1e3 : 0.0);
            cJSON_AddNumberToObject(e, "run_ms", x->s * 1e3);
            cJSON_AddNumberToObject(e, "roofline_run_ms", x->roofline_s * 1e3);
            cJSON_AddStringToObject(e, "bound", cli_stage_bound(x));
        } else {
            cJSON_AddNullToObject(e, "predicted_ms");
            cJSON_AddNullToObject(e, "run_ms");
            cJSON_AddNullToObject(e, "roofline_run_ms");
            cJSON_AddNullToObject(e, "bound");
        }
        cJSON_AddNumberToObject(e, "compute_ms", x->compute_s * 1e3);
        cJSON_AddNumberToObject(e, "memory_ms", x->memory_s * 1e3);
        cJSON_AddNumberToObject(e, "flops", x->flops);
        cJSON_AddNumberToObject(e, "bytes", x->bytes);
        cJSON_AddNumberToObject(e, "kernels", x->kernels);
        if (graph && t->counted[s]) cJSON_AddNumberToObject(by_name, st->name, x->s * t->runs[s] * 1e3);
    }
    return o;
}
