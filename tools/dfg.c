/* dfg.c - the dfg command-line tool: dispatches to a command (tools/cli_*.c).
 *
 *   dfg compile PIPELINE.c [--set k=v ...] [--target cpu|cuda] [--memory-budget B] [-o P.dfg]
 *   dfg run P.dfg [--steps N] [--every K] [--weights W.safetensors|DIR] [--save OUT.safetensors]
 *           [--seed S] [--threads N] [--metrics F.jsonl] [--checkpoint-dir D] [--save-every K]
 *           [--resume D] [--rollouts R.safetensors] [--dump OUT.safetensors]
 *   dfg info P.dfg
 *   dfg inspect P.dfg [--json]
 *   dfg dot P.dfg [-o OUT.dot] [--timeline] [--svg]
 *   dfg plot METRICS.jsonl [-o OUT.svg] [--y reward,kl]
 *
 * Exit codes: 0 success, 1 a failure while running (or writing), 2 a usage error or bad input
 * (unknown option, a pipeline that does not compile, a plan file that cannot be read), 130/143
 * a run stopped by SIGINT/SIGTERM after saving its checkpoint. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_run.h"
#include "dfg.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"compile", cli_compile, "build a pipeline (C file) into a plan file"},
    {"fit", cli_fit, "find the plan that fits a memory budget with the math unchanged (or the smallest)"},
    {"run", cli_run, "run a plan for N steps, printing its metrics"},
    {"info", cli_info, "show what a plan holds: settings, stages, memory by role"},
    {"inspect", cli_inspect, "show a plan's memory report: arena, lower bound, what is live at the peak"},
    {"dot", cli_dot, "draw a plan's dataflow and memory with Graphviz (.dot, or SVG)"},
    {"plot", cli_plot, "draw a run's metric curves (dfg run --metrics FILE.jsonl) as SVG"},
};
#define N_COMMANDS (int)(sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: dfg <command> [options]   (dfg <command> --help for its options)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n  dfg --version    print the version\n"
               "\nexample:\n"
               "  dfg compile examples/gpt2_train.c -o gpt2.dfg\n"
               "  dfg run gpt2.dfg --steps 100\n"
               "  dfg inspect gpt2.dfg\n"
               "  dfg dot gpt2.dfg --timeline --svg\n"
               "\nexit codes: 0 ok, 1 failed while running, 2 usage error or bad input\n");
}

int main(int argc, char **argv) {
    /* stdout line by line even into a pipe or a file: a reader of `dfg run ... 2>&1 | tee log`
     * sees the header, each step and an error in the order they happened (block-buffered stdout
     * would hold the header back until after the error on stderr) */
    setvbuf(stdout, NULL, _IOLBF, 0);
    cli_program = argv[0];
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
        printf("dfg %s (plan format %u)\n", DFG_VERSION_STRING, DFG_PLAN_VERSION);
        return CLI_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "dfg: unknown command '%s' (valid: ", cmd);
    for (int i = 0; i < N_COMMANDS; i++) fprintf(stderr, "%s%s", i ? ", " : "", commands[i].name);
    fprintf(stderr, "; see dfg --help)\n");
    return CLI_USAGE;
}
