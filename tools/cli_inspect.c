/* cli_inspect.c - `dfg inspect P.dfg [--json]`: the memory report of a plan, compiled for its
 * target (and with its memory budget and fusion option) as dfg run compiles it: arena, lower
 * bound and naive bytes, the budget and the arena's margin under it, what is live at the peak by
 * category (with what each category's bytes are and why they are there), the largest temporary,
 * FLOPs, the fuse pass's rewrites and remat's recomputed nodes, node counts, the winning placement
 * ordering and the stages with their FLOPs, bytes moved and peak live bytes. Human table by default; --json
 * prints one JSON object (keys in the usage text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli_device.h"
#include "cli_inspect.h"

#define CMD "inspect"

static void usage(FILE *f) {
    fprintf(f, "usage: dfg inspect P.dfg [--json] [--device h100|h200|a100|l40s|cpu [--runs METRICS.jsonl]]\n"
               "\n"
               "Compiles a plan for its target with the options dfg compile recorded (as dfg run\n"
               "does; a cuda plan is inspected on any machine) and prints its memory report: arena,\n"
               "lower bound, naive bytes, the memory budget and the arena's margin under it, what is\n"
               "live at the peak step by category (with the most each category holds at any step\n"
               "and a line on what its bytes are and why they are there), the largest temporary,\n"
               "FLOPs, fused ops and recomputed nodes, node counts, the placement ordering that won,\n"
               "and the stages with their FLOPs, bytes moved and peak live bytes.\n"
               "\n"
               "  --device D  also predict the step's time on D (h100, h200, a100, l40s, cpu): per stage and per\n"
               "           step, each kernel run at max(FLOPs / peak, bytes / bandwidth) (ops.def's cost column) plus\n"
               "           the device's time a kernel run (launch, dispatch), summed; bf16 GEMMs at the bf16\n"
               "           tensor-core peak, every other FLOP at the f32 one; host stages not predicted. The GPUs:\n"
               "           NVIDIA's datasheet figures, 3 us a kernel (measured on an H100); cpu: this machine,\n"
               "           measured at first use through dfg's own kernels (matmuls at 36 shapes, M 1..512 by N, K\n"
               "           64..1024, each GEMM-like node at its shape's rate; copies at 256 KiB and 128 MiB; gelu and\n"
               "           layernorm rates for the other FLOPs; AdamW's bandwidth; tiny ops; 2-7 s) on the run's threads\n"
               "           (OMP_NUM_THREADS) and on one, cached in $XDG_CACHE_HOME/dfg or ~/.cache/dfg (delete\n"
               "           cpu-rates there to measure again; DFG_CPU_RATES=FILE reads fixed rates in its format;\n"
               "           DFG_CPU_ROOFLINE=F32_FLOPS,BYTES_PER_S[,S] the plain roofline). Runs per step: the worst\n"
               "           case the plan is sized for, the longest\n"
               "           completions (decode to max_completion_length, of a pass's bucket copies the dearest, the\n"
               "           decode tail not run)\n"
               "  --runs M    with --device: each stage at its mean stage_runs in M, a dfg run --metrics file\n"
               "\n"
               "  --json   print one JSON object instead of the table. Keys (bytes are integers):\n"
               "           plan, program, target (\"cpu\"|\"cuda\"), align, no_reuse, keep_order,\n"
               "           no_fuse (compiled with --no-fuse), memory_min (dfg fit --min), memory_budget (bytes,\n"
               "           null: none),\n"
               "           arena_bytes (what the run allocates), lower_bound_bytes (max over the\n"
               "           steps of the live bytes), arena_over_lower_bound, naive_bytes (no reuse),\n"
               "           saving_vs_naive (fraction), persistent_bytes, device_workspace {gpu, emulated:\n"
               "           what a cuda run allocates after the arena: {total_bytes, kernel_bytes,\n"
               "           library_bytes, largest_node}, null for a cpu plan or a device this build\n"
               "           lacks}, n_steps, peak_step,\n"
               "           peak_stage, peak_node (null at a host stage), peak_op,\n"
               "           peak_breakdown {params, base_model, grads, optimizer, ref_model, kv_cache,\n"
               "           activations, logits, workspace, other: bytes live at the peak},\n"
               "           categories {the same names: {peak_bytes, peak_tensors, largest_at_peak\n"
               "           {name, bytes} (null when none), max_bytes (most at any step), max_step,\n"
               "           max_stage (null when never live), why (one sentence)}},\n"
               "           largest_temp {name, dtype, shape [dims], bytes} (null when none),\n"
               "           flops (one step, every stage at all its runs, without recompute),\n"
               "           fused {logprob, linear_logprob, bias_gelu: rewrites by the fuse pass},\n"
               "           remat {recomputed_nodes (copies\n"
               "           added to recompute activations in the backward), extra_flops (their\n"
               "           flops, not in flops)}, n_nodes (after dce; recomputed copies included),\n"
               "           n_nodes_removed (by dce), n_inplace (outputs placed in an input's bytes),\n"
               "           placement (ordering),\n"
               "           stages [{name, kind (\"graph\"|\"host\"), graph, function, nodes, repeat, runs\n"
               "           (\"fixed\", or \"until\" a flag, a \"count\", \"when\" a condition: see dfg_stage_runs),\n"
               "           runs_by (the tensor that decides, when not fixed),\n"
               "           flops (without recompute), bytes_moved (read + written by its kernels, all\n"
               "           runs), peak_live_bytes (most live at one of its steps), first_step,\n"
               "           last_step}],\n"
               "           prediction (null without --device) {device, device_label, peak_bf16_flops, peak_f32_flops,\n"
               "           bandwidth_bytes_per_s, runs_from (\"worst_case\"|\"metrics\"), metrics (the --runs file or\n"
               "           null), step_ms, stage_ms {stage name: predicted ms a step, the graph stages counted, keyed\n"
               "           as dfg run --metrics' stage_ms}, stages [{name, kind, runs (a step's), counted (in step_ms),\n"
               "           predicted_ms (a step's; null at a host stage), run_ms, bound (\"compute\"|\"memory\"),\n"
               "           compute_ms, memory_ms, flops, bytes (one run's), kernels}]}\n");
}

/* ---------------------------------------------------------------- facts both outputs print */
typedef struct {
    const char *path;
    const dfg_program *p;
    const dfg_plan_info *info;
    const dfg_plan *plan;
    const dfg_report *r;
    int peak_stage;       /* index, or -1 */
    const dfg_node *peak; /* the node at the peak step; NULL at a host stage */
    cli_category_facts cat[DFG_CAT_COUNT];
    cli_stage_facts *stage; /* [p->n_stages] */
    const cli_device *device; /* --device, or NULL */
    const cli_step_time *time; /* its prediction */
    const char *metrics;      /* --runs */
} inspection;

static inspection inspect_of(const char *path, const dfg_program *p, const dfg_plan_info *info) {
    inspection in = {.path = path, .p = p, .info = info, .plan = p->plan, .r = dfg_program_report(p), .peak_stage = -1};
    int step = in.r->peak_step, s = in.peak_stage = cli_stage_at(p, step);
    if (s < 0) return in;
    int i = step - in.plan->stage_step[s];
    const dfg_stage *st = &p->stages[s];
    if (st->kind == DFG_STAGE_GRAPH && i < st->graph->n_nodes) in.peak = st->graph->nodes[i];
    return in;
}

/* Without recomputed copies, as the report's flops: the stages sum to it. */
static double stage_flops(const dfg_stage *st) {
    double f = 0;
    if (st->kind != DFG_STAGE_GRAPH) return 0;
    for (int i = 0; i < st->graph->n_nodes; i++)
        if (!(st->graph->nodes[i]->flags & DFG_NF_RECOMPUTED))
            f += dfg_ops[st->graph->nodes[i]->op].cost(st->graph->nodes[i]).flops;
    return f * st->repeat;
}

static double ratio(size_t a, size_t b) { return b ? (double)a / (double)b : 0.0; }

/* ---------------------------------------------------------------- device workspace (cuda) */
/* What a run allocates after the arena, on this build's GPU device and on the emulated one. */
static void print_device_workspace(const inspection *in) {
    static const char *const where[2] = {"on a GPU", "--emulate-gpu"};
    bool first = true;
    for (int emu = 0; emu < 2; emu++) {
        dfg_device_workspace w;
        char a[32], b[32], c[32], big[320] = "";
        if (dfg_runtime_device_workspace(in->p, emu, &w)) continue; /* no such device in this build */
        if (w.largest_node)
            snprintf(big, sizeof(big), " (the largest: '%s', %s in '%s')", w.largest_node, w.largest_op, w.largest_graph);
        printf("%s%12s  after the arena, in the same allocation, %s: kernel scratch %s%s, GEMM library %s\n",
               first ? "workspace     " : "              ", dfg_bytes_str((double)w.total_bytes, a, sizeof(a)), where[emu],
               dfg_bytes_str((double)w.kernel_bytes, b, sizeof(b)), big, dfg_bytes_str((double)w.library_bytes, c, sizeof(c)));
        first = false;
    }
}

static cJSON *device_workspace_json(const inspection *in, bool emulated) {
    dfg_device_workspace w;
    if (in->r->target != DFG_TARGET_CUDA || dfg_runtime_device_workspace(in->p, emulated, &w)) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total_bytes", (double)w.total_bytes);
    cJSON_AddNumberToObject(o, "kernel_bytes", (double)w.kernel_bytes);
    cJSON_AddNumberToObject(o, "library_bytes", (double)w.library_bytes);
    if (w.largest_node) cJSON_AddStringToObject(o, "largest_node", w.largest_node);
    else cJSON_AddNullToObject(o, "largest_node");
    return o;
}

/* ---------------------------------------------------------------- data parallel */
/* One stage's collectives: all-reduce and all-gather nodes, their tensors and payload bytes per
 * run; and the gradient buckets, which run on the stage's last run only (dfg_allreduce_last). */
typedef struct {
    int reduces, gathers, tensors, buckets, bucket_tensors;
    double reduce_bytes, gather_bytes, bucket_bytes;
} stage_comm;

static stage_comm comm_of(const dfg_stage *st) {
    stage_comm c = {0};
    for (int i = 0; st->kind == DFG_STAGE_GRAPH && i < st->graph->n_nodes; i++) {
        const dfg_node *n = st->graph->nodes[i];
        if (!dfg_op_flag(n->op, DFG_OPF_COLLECTIVE)) continue;
        double bytes = 0;
        for (int k = 0; k < n->n_out; k++) bytes += (double)dfg_tensor_bytes(n->out[k]);
        if (dfg_node_is_late_allreduce(n)) c.buckets++, c.bucket_tensors += n->n_in, c.bucket_bytes += bytes;
        else if (n->op == DFG_OP_ALLREDUCE) c.reduces++, c.tensors += n->n_in, c.reduce_bytes += bytes;
        if (n->op == DFG_OP_ALL_GATHER) c.gathers++, c.gather_bytes += bytes;
    }
    return c;
}

/* Per-rank memory (every figure of the plan is one rank's) and the bytes communicated per step. */
static void print_data_parallel(const inspection *in) {
    const dfg_report *r = in->r;
    char a[32], b[32], c[32];
    if (r->world <= 1) {
        printf("ranks         1             one process (dfg compile --set world_size=W: data parallel over W)\n");
        return;
    }
    printf("ranks         %-12d  data parallel (mpirun -n %d): every figure here is one rank's; %d ranks hold %s of "
           "arenas\n", r->world, r->world, r->world, dfg_bytes_str((double)r->arena_bytes * r->world, a, sizeof(a)));
    printf("communicated  %12s  per rank and step: %d collectives' payload; a ring implementation (NCCL, MPI) sends "
           "and receives %s per rank\n", dfg_bytes_str(r->comm_bytes, b, sizeof(b)), r->n_collectives,
           dfg_bytes_str(r->comm_ring_bytes, c, sizeof(c)));
    for (int s = 0; s < in->p->n_stages; s++) {
        const dfg_stage *st = &in->p->stages[s];
        stage_comm m = comm_of(st);
        if (!m.reduces && !m.gathers && !m.buckets) continue;
        printf("              stage '%s' x%d:", st->name, st->repeat);
        const char *sep = " ";
        if (m.buckets) /* issued during the backward, each as soon as its gradients are final */
            printf("%s%d gradient bucket%s of %d tensor%s (%s) in its %sbackward", sep, m.buckets, m.buckets == 1 ? "" : "s",
                   m.bucket_tensors, m.bucket_tensors == 1 ? "" : "s", dfg_bytes_str(m.bucket_bytes, c, sizeof(c)),
                   st->repeat > 1 ? "last run's " : ""), sep = "; ";
        if (m.reduces)
            printf("%s%d all-reduce%s of %d tensor%s (%s)", sep, m.reduces, m.reduces == 1 ? "" : "s", m.tensors,
                   m.tensors == 1 ? "" : "s", dfg_bytes_str(m.reduce_bytes, a, sizeof(a))), sep = ", ";
        if (m.gathers) printf("%s%d all-gather%s (%s gathered)", sep, m.gathers, m.gathers == 1 ? "" : "s",
                              dfg_bytes_str(m.gather_bytes, b, sizeof(b)));
        printf("%s\n", st->repeat > 1 && (m.reduces || m.gathers) ? " per run" : "");
    }
}

static cJSON *json_data_parallel(const inspection *in) {
    const dfg_report *r = in->r;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "world_size", r->world);
    cJSON_AddNumberToObject(o, "collectives_per_step", r->n_collectives);
    cJSON_AddNumberToObject(o, "payload_bytes_per_step", r->comm_bytes);
    cJSON_AddNumberToObject(o, "ring_bytes_per_rank_per_step", r->comm_ring_bytes);
    cJSON *arr = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; arr && s < in->p->n_stages; s++) {
        stage_comm m = comm_of(&in->p->stages[s]);
        if (!m.reduces && !m.gathers && !m.buckets) continue;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e)) {
            cJSON_Delete(e);
            break;
        }
        cJSON_AddStringToObject(e, "name", in->p->stages[s].name);
        cJSON_AddNumberToObject(e, "repeat", in->p->stages[s].repeat);
        cJSON_AddNumberToObject(e, "allreduce_nodes", m.reduces);
        cJSON_AddNumberToObject(e, "allreduce_tensors", m.tensors);
        cJSON_AddNumberToObject(e, "allreduce_bytes", m.reduce_bytes);
        cJSON_AddNumberToObject(e, "all_gather_nodes", m.gathers);
        cJSON_AddNumberToObject(e, "all_gather_bytes", m.gather_bytes);
        cJSON_AddNumberToObject(e, "gradient_buckets", m.buckets); /* on the stage's last run only */
        cJSON_AddNumberToObject(e, "gradient_bucket_tensors", m.bucket_tensors);
        cJSON_AddNumberToObject(e, "gradient_bucket_bytes", m.bucket_bytes);
    }
    return o;
}

/* A graph stage's runs per step: N, or 1-N (until), 0-N (a count), 0|N (a condition), 0|1-N
 * (a condition, then until). */
static const char *runs_str(const dfg_stage *st, char *buf, size_t len) {
    const char *rule = st->until ? "1-%d" : st->runs ? "0-%d" : st->when ? "0|%d" : "%d";
    if (st->when && st->until) rule = "0|1-%d"; /* on a condition, then until its flag */
    snprintf(buf, len, rule, st->repeat);
    return buf;
}

/* How many times the stage runs: "fixed", or what decides (dfg_stage_until / _runs / _when). */
static const char *runs_rule(const dfg_stage *st) {
    return st->until ? "until" : st->runs ? "count" : st->when ? "when" : "fixed";
}

/* ---------------------------------------------------------------- the table */
static void print_totals(const inspection *in) {
    const dfg_report *r = in->r;
    char a[32], b[32];
    printf("plan          %s: program '%s', target %s, alignment %zu B%s%s%s%s\n", in->path, in->p->name,
           dfg_target_name(r->target), r->align, in->info->no_reuse ? ", no reuse" : "",
           in->info->keep_order ? ", build order kept" : "", in->info->no_fuse ? ", no fusion" : "",
           dfg_program_batch_invariant(in->p) ? ", batch-invariant kernels" : "");
    printf("arena         %12s  %s\n", dfg_bytes_str((double)r->arena_bytes, a, sizeof(a)),
           r->target == DFG_TARGET_CUDA ? "the run's tensors (its device workspace follows it: below)" : "what the run allocates");
    printf("lower bound   %12s  arena / lower bound = %.3f\n", dfg_bytes_str((double)r->lower_bound_bytes, a, sizeof(a)),
           ratio(r->arena_bytes, r->lower_bound_bytes));
    printf("naive         %12s  planning saves %s (%.1f%%)\n", dfg_bytes_str((double)r->naive_bytes, a, sizeof(a)),
           dfg_bytes_str((double)(r->naive_bytes - r->arena_bytes), b, sizeof(b)),
           100.0 * (1.0 - ratio(r->arena_bytes, r->naive_bytes)));
    printf("persistent    %12s  live for the whole step, at the bottom of the arena\n",
           dfg_bytes_str((double)r->persistent_bytes, a, sizeof(a)));
    int64_t budget = in->info->memory_budget;
    if (budget > 0) /* compile refuses a plan over its budget: the margin is never negative */
        printf("budget        %12s  the arena is %s (%.2f%%) under it\n", dfg_bytes_str((double)budget, a, sizeof(a)),
               dfg_bytes_str((double)(budget - (int64_t)r->arena_bytes), b, sizeof(b)),
               100.0 * (1.0 - ratio(r->arena_bytes, (size_t)budget)));
    else if (in->info->memory_min) printf("budget        %12s  the least arena remat reaches (dfg fit --min)\n", "least");
    else printf("budget        %12s  (dfg compile --memory-budget sets one)\n", "none");
    if (r->target == DFG_TARGET_CUDA) print_device_workspace(in);
    print_data_parallel(in);
}

static void print_peak(const inspection *in) {
    const dfg_report *r = in->r;
    char a[32], m[32], why[1024];
    printf("peak          step %d of %d: stage '%s'", r->peak_step, r->n_steps,
           in->peak_stage >= 0 ? in->p->stages[in->peak_stage].name : "?");
    if (in->peak) printf(", node '%s' (%s)", in->peak->name, dfg_op_name(in->peak->op));
    printf("\nlive at peak  %-12s %12s %8s %8s %15s\n", "category", "bytes", "share", "tensors", "most, any step");
    size_t total = 0;
    int tensors = 0;
    for (int c = 0; c < DFG_CAT_COUNT; c++) {
        total += r->peak[c];
        tensors += in->cat[c].peak_tensors;
        printf("              %-12s %12s %7.1f%% %8d %15s\n", dfg_category_name((dfg_category)c),
               dfg_bytes_str((double)r->peak[c], a, sizeof(a)), 100.0 * ratio(r->peak[c], r->lower_bound_bytes),
               in->cat[c].peak_tensors, dfg_bytes_str((double)in->cat[c].max_bytes, m, sizeof(m)));
    }
    printf("              %-12s %12s %7.1f%% %8d\n", "total", dfg_bytes_str((double)total, a, sizeof(a)),
           100.0 * ratio(total, r->lower_bound_bytes), tensors);
    for (int c = 0; c < DFG_CAT_COUNT; c++)
        printf("%-13s %-12s %s\n", c ? "" : "why", dfg_category_name((dfg_category)c),
               cli_category_why(in->p, in->cat, (dfg_category)c, why, sizeof(why)));
}

static void print_work(const inspection *in) {
    const dfg_report *r = in->r;
    char a[32], shape[96];
    if (r->largest_temp)
        printf("largest temp  '%s' %s %s, %s\n", r->largest_temp->name, dfg_dtype_name(r->largest_temp->dtype),
               dfg_shape_str(r->largest_temp->shape, shape, sizeof(shape)),
               dfg_bytes_str((double)r->largest_temp_bytes, a, sizeof(a)));
    else printf("largest temp  (none)\n");
    bool by_data = false; /* stages whose runs the step's data decides: the sum is an upper bound */
    for (int s = 0; s < in->p->n_stages; s++)
        by_data = by_data || in->p->stages[s].until || in->p->stages[s].when || in->p->stages[s].runs;
    printf("flops         %.4g GFLOP per step%s%s\n", r->flops * 1e-9, r->recomputed_nodes ? ", without recompute" : "",
           by_data ? ", every stage at all its runs (an upper bound: the data decides some stages' runs)" : "");
    char line[256];
    printf("fused         %s\n", in->info->no_fuse ? "none (compiled with --no-fuse)" : cli_fused_str(r, line, sizeof(line)));
    printf("recomputed    %s\n", cli_remat_str(r, in->info->memory_min ? 1 : in->info->memory_budget, line, sizeof(line)));
    printf("nodes         %d scheduled", r->n_nodes);
    if (r->recomputed_nodes) printf(" (%d of them recomputed copies)", r->recomputed_nodes);
    printf(", %d removed by dce, %d output%s placed in place\n", r->n_nodes_removed, r->n_inplace,
           r->n_inplace == 1 ? "" : "s");
    printf("placement     ordering '%s' won (greedy best-fit, smallest arena of the orderings tried)\n",
           r->placement ? r->placement : "?");
}

static void print_stages(const inspection *in) {
    const dfg_program *p = in->p;
    printf("stages        %-3s %-16s %-6s %7s %6s %12s %10s %10s  %s\n", "#", "name", "kind", "nodes", "runs", "GFLOP",
           "moved", "peak live", "steps");
    int rules = 0;
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        int a = in->plan->stage_step[s], b = in->plan->stage_step[s + 1] - 1;
        char steps[48], moved[32], live[32], runs[24];
        if (a == b) snprintf(steps, sizeof(steps), "%d", a);
        else snprintf(steps, sizeof(steps), "%d-%d", a, b);
        dfg_bytes_str(in->stage[s].peak_live_bytes, live, sizeof(live));
        if (st->kind == DFG_STAGE_HOST)
            printf("              %-3d %-16s %-6s %7s %6d %12s %10s %10s  %s (function %s)\n", s + 1, st->name, "host",
                   "-", 1, "-", "-", live, steps, st->symbol);
        else
            printf("              %-3d %-16s %-6s %7d %6s %12.4g %10s %10s  %s\n", s + 1, st->name, "graph",
                   st->graph->n_nodes, runs_str(st, runs, sizeof(runs)), stage_flops(st) * 1e-9,
                   dfg_bytes_str(in->stage[s].bytes_moved, moved, sizeof(moved)), live, steps);
        rules += st->until || st->when || st->runs;
    }
    if (rules) /* what the planned memory covers: the largest of them, whichever runs */
        printf("              runs: 1-N ends once its flag is set, 0-N as many as a count says, 0|N on a "
               "condition (length buckets, the decode tail: each is planned; GFLOP and moved are for N runs)\n");
}

/* ---------------------------------------------------------------- JSON */
static cJSON *json_stages(const inspection *in) {
    cJSON *arr = cJSON_CreateArray();
    for (int s = 0; arr && s < in->p->n_stages; s++) {
        const dfg_stage *st = &in->p->stages[s];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            break;
        }
        bool graph = st->kind == DFG_STAGE_GRAPH;
        cJSON_AddStringToObject(o, "name", st->name);
        cJSON_AddStringToObject(o, "kind", graph ? "graph" : "host");
        if (graph) cJSON_AddStringToObject(o, "graph", st->graph->name);
        else cJSON_AddStringToObject(o, "function", st->symbol);
        cJSON_AddNumberToObject(o, "nodes", graph ? st->graph->n_nodes : 0);
        cJSON_AddNumberToObject(o, "repeat", st->repeat);
        cJSON_AddStringToObject(o, "runs", runs_rule(st));
        const dfg_tensor *by = st->until ? st->until : st->runs ? st->runs : st->when;
        if (by) cJSON_AddStringToObject(o, "runs_by", by->name);
        cJSON_AddNumberToObject(o, "flops", stage_flops(st));
        cJSON_AddNumberToObject(o, "bytes_moved", in->stage[s].bytes_moved);
        cJSON_AddNumberToObject(o, "peak_live_bytes", (double)in->stage[s].peak_live_bytes);
        cJSON_AddNumberToObject(o, "first_step", in->plan->stage_step[s]);
        cJSON_AddNumberToObject(o, "last_step", in->plan->stage_step[s + 1] - 1);
    }
    return arr;
}

static cJSON *json_largest_temp(const dfg_report *r) {
    if (!r->largest_temp) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", r->largest_temp->name);
    cJSON_AddStringToObject(o, "dtype", dfg_dtype_name(r->largest_temp->dtype));
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; shape && d < r->largest_temp->shape.rank; d++)
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)r->largest_temp->shape.d[d]));
    cJSON_AddNumberToObject(o, "bytes", (double)r->largest_temp_bytes);
    return o;
}

static cJSON *json_categories(const inspection *in) {
    cJSON *o = cJSON_CreateObject();
    char why[1024];
    for (int c = 0; o && c < DFG_CAT_COUNT; c++) {
        const cli_category_facts *f = &in->cat[c];
        cJSON *k = cJSON_AddObjectToObject(o, dfg_category_name((dfg_category)c));
        cJSON_AddNumberToObject(k, "peak_bytes", (double)f->peak_bytes);
        cJSON_AddNumberToObject(k, "peak_tensors", f->peak_tensors);
        if (f->largest) {
            cJSON *l = cJSON_AddObjectToObject(k, "largest_at_peak");
            cJSON_AddStringToObject(l, "name", in->p->tensors[f->largest->owner]->name);
            cJSON_AddNumberToObject(l, "bytes", (double)f->largest->size);
        } else cJSON_AddNullToObject(k, "largest_at_peak");
        cJSON_AddNumberToObject(k, "max_bytes", (double)f->max_bytes);
        cJSON_AddNumberToObject(k, "max_step", f->max_step);
        int s = f->max_bytes ? cli_stage_at(in->p, f->max_step) : -1;
        if (s >= 0) cJSON_AddStringToObject(k, "max_stage", in->p->stages[s].name);
        else cJSON_AddNullToObject(k, "max_stage");
        cJSON_AddStringToObject(k, "why", cli_category_why(in->p, in->cat, (dfg_category)c, why, sizeof(why)));
    }
    return o;
}

static cJSON *json_report(const inspection *in) {
    const dfg_report *r = in->r;
    /* cJSON's calls accept NULL objects: out of memory, the report loses keys or (no root) fails to print */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "plan", in->path);
    cJSON_AddStringToObject(o, "program", in->p->name);
    cJSON_AddStringToObject(o, "target", dfg_target_name(r->target));
    cJSON_AddNumberToObject(o, "align", (double)r->align);
    cJSON_AddBoolToObject(o, "no_reuse", in->info->no_reuse);
    cJSON_AddBoolToObject(o, "keep_order", in->info->keep_order);
    cJSON_AddBoolToObject(o, "no_fuse", in->info->no_fuse);
    cJSON_AddBoolToObject(o, "memory_min", in->info->memory_min);
    cJSON_AddBoolToObject(o, "batch_invariant", dfg_program_batch_invariant(in->p));
    if (in->info->memory_budget > 0) cJSON_AddNumberToObject(o, "memory_budget", (double)in->info->memory_budget);
    else cJSON_AddNullToObject(o, "memory_budget");
    cJSON_AddNumberToObject(o, "arena_bytes", (double)r->arena_bytes);
    cJSON_AddNumberToObject(o, "lower_bound_bytes", (double)r->lower_bound_bytes);
    cJSON_AddNumberToObject(o, "arena_over_lower_bound", ratio(r->arena_bytes, r->lower_bound_bytes));
    cJSON_AddNumberToObject(o, "naive_bytes", (double)r->naive_bytes);
    cJSON_AddNumberToObject(o, "saving_vs_naive", 1.0 - ratio(r->arena_bytes, r->naive_bytes));
    cJSON_AddNumberToObject(o, "persistent_bytes", (double)r->persistent_bytes);
    cJSON *dw = cJSON_AddObjectToObject(o, "device_workspace");
    if (dw) {
        cJSON_AddItemToObject(dw, "gpu", device_workspace_json(in, false));
        cJSON_AddItemToObject(dw, "emulated", device_workspace_json(in, true));
    }
    cJSON_AddNumberToObject(o, "n_steps", r->n_steps);
    cJSON_AddNumberToObject(o, "peak_step", r->peak_step);
    cJSON_AddStringToObject(o, "peak_stage", in->peak_stage >= 0 ? in->p->stages[in->peak_stage].name : "");
    if (in->peak) cJSON_AddStringToObject(o, "peak_node", in->peak->name);
    else cJSON_AddNullToObject(o, "peak_node");
    if (in->peak) cJSON_AddStringToObject(o, "peak_op", dfg_op_name(in->peak->op));
    else cJSON_AddNullToObject(o, "peak_op");
    cJSON *peak = cJSON_AddObjectToObject(o, "peak_breakdown");
    for (int c = 0; peak && c < DFG_CAT_COUNT; c++)
        cJSON_AddNumberToObject(peak, dfg_category_name((dfg_category)c), (double)r->peak[c]);
    cJSON_AddItemToObject(o, "categories", json_categories(in));
    cJSON_AddItemToObject(o, "largest_temp", json_largest_temp(r));
    cJSON_AddNumberToObject(o, "flops", r->flops);
    cJSON *fused = cJSON_AddObjectToObject(o, "fused");
    for (int k = 0; fused && k < 3; k++) cJSON_AddNumberToObject(fused, cli_fused_kinds[k], r->fused[k]);
    cJSON *remat = cJSON_AddObjectToObject(o, "remat");
    cJSON_AddNumberToObject(remat, "recomputed_nodes", r->recomputed_nodes);
    cJSON_AddNumberToObject(remat, "extra_flops", r->extra_flops);
    cJSON_AddNumberToObject(o, "n_nodes", r->n_nodes);
    cJSON_AddNumberToObject(o, "n_nodes_removed", r->n_nodes_removed);
    cJSON_AddNumberToObject(o, "n_inplace", r->n_inplace);
    cJSON_AddStringToObject(o, "placement", r->placement ? r->placement : "");
    cJSON_AddItemToObject(o, "stages", json_stages(in));
    cJSON_AddItemToObject(o, "data_parallel", json_data_parallel(in));
    if (in->device) cJSON_AddItemToObject(o, "prediction", cli_prediction_json(in->p, in->device, in->time, in->metrics));
    else cJSON_AddNullToObject(o, "prediction");
    return o;
}

static int print_json(const inspection *in) {
    cJSON *o = json_report(in);
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return cli_error(CMD, CLI_FAILED, "out of memory writing the JSON report");
    printf("%s\n", text);
    free(text);
    return CLI_OK;
}

/* ---------------------------------------------------------------- the command */
/* --device [--runs]: the step's predicted time on the device, into *t (in points at it). */
static int predict(inspection *in, const cli_device *d, const char *metrics, cli_step_time *t) {
    double *runs = NULL;
    if (metrics) {
        if (!(runs = calloc((size_t)in->p->n_stages + 1, sizeof(double)))) return cli_error(CMD, CLI_FAILED, "out of memory");
        if (!cli_step_runs_from_metrics(CMD, metrics, in->p, runs)) {
            free(runs);
            return CLI_USAGE;
        }
    }
    bool ok = cli_step_time_of(in->p, d, runs, t);
    free(runs);
    if (!ok) return cli_error(CMD, CLI_FAILED, "out of memory");
    in->device = d, in->time = t, in->metrics = metrics;
    return CLI_OK;
}

int cli_inspect(int argc, char **argv) {
    static const cli_option opts[] = {{"--json", false}, {"--device", true}, {"--runs", true},
                                      {"--help", false}, {"-h", false},    {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val, *path = NULL, *device = NULL, *metrics = NULL;
    bool json = false;
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        if (k == CLI_ARG_POSITIONAL) {
            if (path) return cli_error(CMD, CLI_USAGE, "one plan file at a time (got '%s' and '%s')", path, val);
            path = val;
        } else if (!strcmp(opt, "--json")) {
            json = true;
        } else if (!strcmp(opt, "--device")) {
            device = val;
        } else if (!strcmp(opt, "--runs")) {
            metrics = val;
        } else {
            usage(stdout);
            return CLI_OK;
        }
    }
    if (!path) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the plan file (P.dfg, made by dfg compile)");
    }
    if (metrics && !device) return cli_error(CMD, CLI_USAGE, "--runs needs --device (the device to predict on)");
    cli_device dev;
    if (device && !cli_device_named(CMD, device, &dev)) return CLI_USAGE;
    dfg_program *p = NULL;
    dfg_plan_info info;
    int rc = cli_load_plan(CMD, path, &p, &info);
    if (rc) return rc;
    inspection in = inspect_of(path, p, &info);
    cli_step_time time = {0};
    in.stage = calloc((size_t)p->n_stages + 1, sizeof(*in.stage));
    if (!in.stage || !cli_category_facts_of(p, in.cat) || !cli_stage_facts_of(p, in.stage))
        rc = cli_error(CMD, CLI_FAILED, "out of memory");
    else if (device && (rc = predict(&in, &dev, metrics, &time))) {
        /* its message printed */
    } else if (json) {
        rc = print_json(&in);
    } else {
        print_totals(&in);
        print_peak(&in);
        print_work(&in);
        print_stages(&in);
        if (device) cli_print_prediction(p, &dev, &time, metrics);
    }
    cli_step_time_free(&time);
    free(in.stage);
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    return rc;
}
