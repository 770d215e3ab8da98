/* module.c - finding and opening dfg's modules (module.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "module.h"

#ifndef DFG_MODULE_BUILD_DIR
#define DFG_MODULE_BUILD_DIR ""
#endif

/* dir/file into out; false when it is not a file there. */
static bool module_at(const char *dir, const char *file, char *out, size_t len) {
    struct stat sb;
    if (!dir || !*dir || snprintf(out, len, "%s/%s", dir, file) >= (int)len) return false;
    return stat(out, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Where the module is: in $DFG_MODULE_DIR when it is set (and only there), else beside the object
 * this code is linked into (the dfg executable, a test, or libdfg.so), in ../lib/dfg from there
 * (an installed dfg: cmake --install), or in the build tree's top directory. */
static bool find_module(const char *file, char *out, size_t len, char *where, size_t where_len) {
    const char *env = getenv("DFG_MODULE_DIR");
    if (env && *env) {
        snprintf(where, where_len, "%s ($DFG_MODULE_DIR)", env);
        return module_at(env, file, out, len);
    }
    char self[4096] = "";
    Dl_info info;
    if (dladdr((void *)find_module, &info) && info.dli_fname) {
        snprintf(self, sizeof(self), "%s", info.dli_fname);
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        else snprintf(self, sizeof(self), ".");
    }
    char installed[4200];
    snprintf(installed, sizeof(installed), "%s/../lib/dfg", self);
    const char *dirs[] = {self, installed, DFG_MODULE_BUILD_DIR};
    snprintf(where, where_len, "%s, %s%s%s", self, installed, *DFG_MODULE_BUILD_DIR ? " or " : "", DFG_MODULE_BUILD_DIR);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if (module_at(dirs[i], file, out, len)) return true;
    return false;
}

dfg_status dfg_module_open(const char *file, const char *symbol, void **fn, char *err, size_t len) {
    char path[4200], where[8400];
    *fn = NULL;
    if (!find_module(file, path, sizeof(path), where, sizeof(where)))
        return snprintf(err, len, "this dfg has no %s (not in %s): it was built without what the module needs, or "
                                  "$DFG_MODULE_DIR names where it is", file, where),
               DFG_ERR_UNSUPPORTED;
    /* RTLD_LOCAL: the module's libraries (cuBLASLt, MPI, Graphviz) stay its own; never unloaded */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) return snprintf(err, len, "cannot load %s: %s", path, dlerror()), DFG_ERR_UNSUPPORTED;
    *fn = dlsym(h, symbol);
    if (!*fn) return snprintf(err, len, "%s does not export %s (a module of another dfg?)", path, symbol), DFG_ERR_UNSUPPORTED;
    return DFG_OK;
}

static const dfg_module_host host = {
    .abi = DFG_MODULE_ABI,
    .dist_comm = dfg_dist_comm,
    .dist_timeout = dfg_dist_timeout,
    .dist_diagnose = dfg_dist_diagnose,
};

dfg_status dfg_backend_open(const char *file, const dfg_backend **be, char *err, size_t len) {
    dfg_backend_module_fn entry = NULL;
    *be = NULL;
    dfg_status st = dfg_module_open(file, DFG_BACKEND_MODULE_SYMBOL, (void **)&entry, err, len);
    if (st) return st;
    if (!(*be = entry(&host)))
        return snprintf(err, len, "%s was built for another dfg (module ABI): rebuild dfg", file), DFG_ERR_UNSUPPORTED;
    return DFG_OK;
}
