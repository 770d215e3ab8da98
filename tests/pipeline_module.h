/* pipeline_module.h - compiles a C file that uses the public dfg headers into a shared object
 * and loads it, as `dfg compile` does with pipelines: the planner tests build the example
 * pipelines and host-stage functions this way. The module's calls into dfg resolve to the API
 * the test executable exports (ENABLE_EXPORTS). Header-only: every test links testutil.c alone. */
#ifndef DFG_PIPELINE_MODULE_H
#define DFG_PIPELINE_MODULE_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The source tree: this header sits in <root>/tests/. */
static inline const char *pm_source_dir(void) {
    static char dir[1024];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s", __FILE__);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof(dir), "..");
    }
    return dir;
}

/* Compiles `src` (a path) into <tmpdir>/<name>.so and dlopens it; NULL (after a failed CHECK
 * naming the compiler's complaint) when either fails. The compiler is $CC or cc. */
static inline void *pm_build(const char *src, const char *name) {
    char so[512], log[600], cmd[16384];
    snprintf(so, sizeof(so), "%s", dfg_test_tmp_path(name));
    snprintf(log, sizeof(log), "%s.log", so);
    strncat(so, ".so", sizeof(so) - strlen(so) - 1);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    /* the one include folder and the archives, as dfg compile gives them */
    snprintf(cmd, sizeof(cmd), "%s -std=c11 -O1 -fPIC -shared -D_GNU_SOURCE -I'%s' -o '%s' '%s' '%s' '%s' 2>'%s'", cc,
             DFG_INCLUDE_DIR, so, src, DFG_GRPO_LIB, DFG_TASKS_LIB, log);
    int rc = system(cmd);
    if (rc != 0) {
        char msg[2048] = "";
        FILE *f = fopen(log, "r");
        if (f) {
            size_t n = fread(msg, 1, sizeof(msg) - 1, f);
            msg[n] = '\0';
            fclose(f);
        }
        CHECK(rc == 0, "compiling %s failed (%s):\n%s", src, cmd, msg);
        remove(log);
        return NULL;
    }
    remove(log);
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s: %s", so, dlerror());
    remove(so); /* the mapping stays valid; the temp dir can go */
    return lib;
}

/* As pm_build, for source text. */
static inline void *pm_build_text(const char *text, const char *name) {
    char src[512];
    snprintf(src, sizeof(src), "%s.c", dfg_test_tmp_path(name));
    FILE *f = fopen(src, "w");
    CHECK(f, "cannot write %s", src);
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    void *lib = pm_build(src, name);
    remove(src);
    return lib;
}

#endif
