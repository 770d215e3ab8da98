/* cli_info.c - `dfg info P.dfg`: what a plan holds, without running it: where it came from,
 * its settings, its stages with node counts, the persistent tensors' bytes by role, and the
 * memory plan in one line (the program is compiled as dfg run compiles it; dfg inspect has the
 * details). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../graph/ir.h"
#include "cli.h"

#define CMD "info"

static void usage(FILE *f) {
    fprintf(f, "usage: dfg info P.dfg\n"
               "\n"
               "Prints a plan's origin, settings, stages (with node counts after dead-code\n"
               "elimination), its persistent tensors' bytes by role and its memory plan\n"
               "(dfg inspect P.dfg shows the plan in detail).\n");
}

static void print_origin(const char *path, const dfg_program *p, const dfg_plan_info *info) {
    char when[64] = "?", sb[32];
    time_t t = (time_t)info->compile_time;
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    printf("plan      %s (format %u, written by dfg %s)\n", path, DFG_PLAN_VERSION, info->dfg_version);
    printf("program   %s, target %s", p->name, dfg_target_name(info->target));
    if (info->align) printf(", alignment %zu", info->align);
    if (info->no_reuse) printf(", no reuse");
    if (info->keep_order) printf(", build order kept");
    if (info->no_fuse) printf(", no fusion");
    if (info->memory_budget > 0) printf(", memory budget %s", dfg_bytes_str((double)info->memory_budget, sb, sizeof(sb)));
    printf("\n");
    printf("source    %s, compiled %s\n", info->source, when);
    if (info->host_lib) printf("host code %s embedded\n", dfg_bytes_str((double)info->host_lib_size, sb, sizeof(sb)));
}

static void print_settings(const dfg_program *p) {
    printf("settings ");
    if (!p->n_settings) printf(" (none)");
    for (int i = 0; i < p->n_settings; i++) printf(" %s=%s", p->settings[i].key, p->settings[i].value);
    printf("\n");
}

static void print_stages(const dfg_program *p) {
    for (int s = 0; s < p->n_stages; s++) {
        const dfg_stage *st = &p->stages[s];
        printf("%-9s %d. %-12s ", s ? "" : "stages", s + 1, st->name);
        if (st->kind == DFG_STAGE_HOST) {
            printf("host function %s\n", st->symbol);
            continue;
        }
        printf("graph '%s', %d nodes", st->graph->name, st->graph->n_nodes);
        if (st->repeat > 1) printf(", runs %d times", st->repeat);
        printf("\n");
    }
}

/* Persistent tensors counted and summed by role; those without a role (inputs, constants) by
 * kind, so every byte the program keeps between steps shows up on some line. */
static void print_memory(const dfg_program *p) {
    enum { N_GROUPS = DFG_ROLE_COUNT + DFG_KIND_COUNT };
    int count[N_GROUPS] = {0};
    double bytes[N_GROUPS] = {0}, total = 0;
    int64_t temps = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const dfg_tensor *t = p->tensors[i];
        if (t->kind == DFG_TEMP) {
            temps++;
            continue;
        }
        int group = t->role != DFG_ROLE_NONE ? (int)t->role : DFG_ROLE_COUNT + (int)t->kind;
        count[group]++;
        bytes[group] += (double)dfg_tensor_bytes(t);
        total += (double)dfg_tensor_bytes(t);
    }
    char sb[32];
    printf("tensors   %d in all: %lld temporaries; persistent ones hold %s:\n", p->n_tensors, (long long)temps,
           dfg_bytes_str(total, sb, sizeof(sb)));
    for (int g = 0; g < N_GROUPS; g++) {
        if (!count[g]) continue;
        const char *name = g < DFG_ROLE_COUNT ? dfg_role_name((dfg_role)g) : dfg_kind_name((dfg_kind)(g - DFG_ROLE_COUNT));
        printf("          %-10s %5d tensor%s %12s\n", name, count[g], count[g] == 1 ? " " : "s",
               dfg_bytes_str(bytes[g], sb, sizeof(sb)));
    }
}

int cli_info(int argc, char **argv) {
    static const cli_option opts[] = {{"--help", false}, {"-h", false}, {NULL, false}};
    cli_args a = {.cmd = CMD, .options = opts, .argc = argc, .argv = argv, .i = 1};
    const char *opt, *val, *path = NULL;
    for (cli_arg_kind k; (k = cli_next(&a, &opt, &val)) != CLI_ARG_END;) {
        if (k == CLI_ARG_ERROR) return CLI_USAGE;
        if (k == CLI_ARG_OPTION) {
            usage(stdout);
            return CLI_OK;
        }
        if (path) return cli_error(CMD, CLI_USAGE, "one plan file at a time (got '%s' and '%s')", path, val);
        path = val;
    }
    if (!path) {
        usage(stderr);
        return cli_error(CMD, CLI_USAGE, "missing the plan file (P.dfg)");
    }
    dfg_program *p = NULL;
    dfg_plan_info info;
    int rc = cli_load_plan(CMD, path, &p, &info);
    if (rc) return rc;
    char line[512];
    print_origin(path, p, &info);
    print_settings(p);
    print_stages(p);
    print_memory(p);
    printf("memory    %s\n", cli_memory_summary(dfg_program_report(p), line, sizeof(line)));
    /* cli_load_plan refuses a file whose recorded plan this dfg does not reproduce */
    printf("          the file's recorded schedule and memory plan match this dfg's compile, node for node and byte for byte\n");
    dfg_program_free(p);
    dfg_plan_info_free(&info);
    return CLI_OK;
}
