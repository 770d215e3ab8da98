/* arena.h - a chunked bump allocator: the IR of a program is allocated here and freed at once. */
#ifndef DFG_ARENA_H
#define DFG_ARENA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dfg_arena_chunk dfg_arena_chunk;

typedef struct {
    dfg_arena_chunk *head;
    size_t bytes; /* total handed out, for reports */
} dfg_arena;

/* Zeroed memory aligned to 16 bytes, or NULL when out of memory. */
void *dfg_arena_alloc(dfg_arena *a, size_t size);
void dfg_arena_free_all(dfg_arena *a);

#ifdef __cplusplus
}
#endif
#endif
