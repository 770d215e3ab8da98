/* plan_writer.c - writes the plan file of a pipeline module with given settings, as dfg compile
 * does (without the embedded host code): the same engine compiled three ways (as built, and with
 * -ftrivial-auto-var-init=pattern and =zero) must write byte-identical files (test
 * plan_determinism): no uninitialised byte, no address, no time reaches a plan.
 * Usage: plan_writer PIPELINE.so OUT.dfg [cpu|cuda] [key=value ...] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfg.h"
#include "runtime/formats/planfile.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: plan_writer PIPELINE.so OUT.dfg [cpu|cuda] [key=value ...]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    dfg_pipeline_fn fn = NULL;
    if (lib) *(void **)&fn = dlsym(lib, DFG_PIPELINE_SYMBOL);
    if (!fn) {
        fprintf(stderr, "plan_writer: cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    bool cuda = argc > 3 && !strcmp(argv[3], "cuda");
    dfg_program *p = dfg_program_new("pipeline");
    dfg_program_set(p, "target", cuda ? "cuda" : "cpu");
    for (int i = cuda || (argc > 3 && !strcmp(argv[3], "cpu")) ? 4 : 3; i < argc; i++) {
        char key[256];
        const char *eq = strchr(argv[i], '=');
        if (!eq) continue;
        snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[i]), argv[i]);
        dfg_program_set(p, key, eq + 1);
    }
    fn(p);
    char err[1024];
    dfg_plan_info info = {.target = cuda ? DFG_TARGET_CUDA : DFG_TARGET_CPU};
    snprintf(info.source, sizeof(info.source), "%s", "pipeline.c");
    if (dfg_program_status(p) || dfg_plan_save(p, &info, argv[2], err, sizeof(err))) {
        fprintf(stderr, "plan_writer: %s\n", dfg_program_status(p) ? dfg_program_error(p) : err);
        return 1;
    }
    dfg_program_free(p);
    return 0;
}
