/* arena.c - chunked bump allocator for IR objects (see arena.h). */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DFG_ARENA_CHUNK (64 * 1024)

struct dfg_arena_chunk {
    dfg_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *dfg_arena_alloc(dfg_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0) size = 16;
    dfg_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > DFG_ARENA_CHUNK ? size : DFG_ARENA_CHUNK;
        c = malloc(sizeof(*c) + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    a->bytes += size;
    memset(p, 0, size);
    return p;
}

void dfg_arena_free_all(dfg_arena *a) {
    dfg_arena_chunk *c = a->head;
    while (c) {
        dfg_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->bytes = 0;
}
