/* fuzz_config.c - libFuzzer entry point for the reader of a TRL config file (dfg compile --config;
 * tools/cli_config_read.c): JSON or YAML a user writes, read before any field means anything.
 *
 * Any input must either be refused with one line "LINE: ..." (LINE a positive number) and an
 * empty document, or give a document whose every field has a name (no two alike), a line >= 1,
 * a kind, and text for every scalar and list item. A violated fact aborts, which the fuzzer
 * reports as a crash. The reader is compiled in here (it calls nothing of dfg's). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_target.h"
#include "tools/cli_config_read.c"

static void fuzz_fail(const char *why, const char *detail) {
    fprintf(stderr, "fuzz_config: invariant violated: %s (%s)\n", why, detail ? detail : "");
    abort();
}

static void check_doc(const cfg_doc *doc) {
    for (int i = 0; i < doc->n; i++) {
        const cfg_field *f = &doc->fields[i];
        if (!f->key || !*f->key || f->line < 1) fuzz_fail("a field without a name or a line", f->key);
        for (int j = 0; j < i; j++)
            if (!strcmp(doc->fields[j].key, f->key)) fuzz_fail("a key kept twice", f->key);
        if (f->kind == CFG_LIST) {
            for (int k = 0; k < f->n_items; k++)
                if (!f->items[k].text || f->items[k].kind > CFG_STRING) fuzz_fail("a list item without text", f->key);
        } else if (f->kind != CFG_MAP && (!f->value.text || f->value.kind != f->kind)) {
            fuzz_fail("a scalar without text, or of another kind than its field", f->key);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cfg_doc doc;
    char err[512] = "";
    if (cfg_parse((const char *)data, size, &doc, err, sizeof(err))) {
        check_doc(&doc);
        cfg_free(&doc);
        return 0;
    }
    char *end;
    long line = strtol(err, &end, 10);
    if (line < 1 || strncmp(end, ": ", 2) || strchr(err, '\n') || !end[2]) fuzz_fail("the message is not one line 'LINE: why'", err);
    if (doc.n || doc.fields) fuzz_fail("a refused file left fields", err);
    return 0;
}

/* For the replay: whether the reader accepts the input. */
static bool fuzz_config_accepts(const uint8_t *data, size_t size) {
    cfg_doc doc;
    char err[512];
    bool ok = cfg_parse((const char *)data, size, &doc, err, sizeof(err));
    if (ok) cfg_free(&doc);
    return ok;
}

static const char cfg_tokens[] = "{}[],:\"'#- \n  \\null true false yes ~ 1e-6 0.5 &*!|>---";
const fuzz_target fuzz_this_target = {"fuzz_config", cfg_tokens, sizeof(cfg_tokens) - 1, -1, 0, fuzz_config_accepts};
