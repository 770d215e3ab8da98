/* fiber.h - the emulator's fibers: a stack and a saved context per emulated GPU thread.
 * Internal to runtime/cuda/emu/simt.
 *
 * On x86-64 a switch saves the SysV callee-saved registers, MXCSR and the x87 control word on the
 * old stack and loads the new stack pointer: no system call (ucontext's swapcontext makes one to
 * save the signal mask, which made a prototype 10x slower). Elsewhere, or with
 * -DDFG_SIMT_UCONTEXT, ucontext does the same job. Under AddressSanitizer every switch is
 * announced to it (__sanitizer_start/finish_switch_fiber) so it knows which stack is live. */
#ifndef DFG_SIMT_FIBER_H
#define DFG_SIMT_FIBER_H

#include <cstddef>

#if !defined(__x86_64__) && !defined(DFG_SIMT_UCONTEXT)
#define DFG_SIMT_UCONTEXT 1
#endif
#ifdef DFG_SIMT_UCONTEXT
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define DFG_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DFG_SIMT_ASAN 1
#endif
#endif

struct dfg_simt_fiber;
typedef void (*dfg_simt_fiber_entry)(dfg_simt_fiber *self);

struct dfg_simt_fiber {
    void *sp; /* the saved stack pointer while switched out */
#ifdef DFG_SIMT_UCONTEXT
    ucontext_t uc;
#endif
    dfg_simt_fiber_entry entry;
    char *map;               /* the mapping: a guard page, then the stack; null for the host's own stack */
    size_t map_bytes;
    const void *stack_lo;    /* the stack's lowest address and size, as AddressSanitizer wants them */
    size_t stack_bytes;
    void *asan_fake;         /* AddressSanitizer's fake stack of this fiber while switched out */
    dfg_simt_fiber *came_from; /* who switched to this fiber last */
    /* the scheduler's */
    int start_tid;           /* the emulated thread this fiber starts or goes on with */
    int in_pool;             /* parked at its loop's top, free for any thread */
};

/* Maps a stack (stack_bytes, plus a guard page below it) and prepares `f` to run entry(f) when first
 * switched to. Returns 0, or -1 if the memory could not be mapped. */
int dfg_simt_fiber_create(dfg_simt_fiber *f, size_t stack_bytes, dfg_simt_fiber_entry entry);
/* Makes `f` start afresh at entry(f) next time, forgetting the frames on its stack (a launch
 * that stopped on an error abandons the threads it had suspended). */
void dfg_simt_fiber_reset(dfg_simt_fiber *f);
void dfg_simt_fiber_destroy(dfg_simt_fiber *f);
/* Saves the running context into `from` and resumes `to`; returns when something switches back
 * to `from`. */
void dfg_simt_fiber_switch(dfg_simt_fiber *from, dfg_simt_fiber *to);
/* The first call of every entry function (completes AddressSanitizer's switch). */
void dfg_simt_fiber_entered(dfg_simt_fiber *self);

#endif /* DFG_SIMT_FIBER_H */
