/* golden_dump.h - what the C drivers of the golden tests (gpt2_dump, nf4_dump, padded_logp)
 * share: their one-line failure report. Define GOLDEN_DRIVER (the program's name) first. */
#ifndef GOLDEN_DUMP_H
#define GOLDEN_DUMP_H

#include <stdarg.h>
#include <stdio.h>

/* Prints "GOLDEN_DRIVER: message" on stderr; returns 1, the driver's exit code on failure. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", GOLDEN_DRIVER);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

#endif
