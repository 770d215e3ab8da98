/* memplan.c - see memplan.h. */
#include <stdlib.h>

#include "memplan.h"

void dfg_memplan_free(dfg_memplan *m) {
    free(m->offset);
    m->offset = NULL;
}
