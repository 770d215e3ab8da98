// fiber.cpp - stacks and context switches for the SIMT emulator's threads (see fiber.h).
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#ifdef DFG_SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifndef DFG_SIMT_UCONTEXT
// dfg_simt_ctx_switch(&save_sp, load_sp): pushes the callee-saved registers of the SysV ABI,
// stores the stack pointer, loads the other one and pops the same. Everything else is
// caller-saved, so the compiler has spilled it around the call already. MXCSR and the x87
// control word are not switched (a quarter of a switch's cost): every fiber starts with the
// launching thread's, and kernels do not change the floating-point environment.
// dfg_simt_ctx_start is where a new fiber's first `ret` lands: entry (r12) is called with the
// fiber (r13); entry never returns, and rbp = 0 ends frame-pointer walks (ASan's reports) there.
extern "C" __attribute__((visibility("hidden"))) void dfg_simt_ctx_switch(void **save_sp, void *load_sp);
extern "C" __attribute__((visibility("hidden"))) void dfg_simt_ctx_start(void);
asm(R"(
    .pushsection .text
    .globl dfg_simt_ctx_switch
    .hidden dfg_simt_ctx_switch
    .type dfg_simt_ctx_switch, @function
    .p2align 4
dfg_simt_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size dfg_simt_ctx_switch, .-dfg_simt_ctx_switch

    .globl dfg_simt_ctx_start
    .hidden dfg_simt_ctx_start
    .type dfg_simt_ctx_start, @function
    .p2align 4
dfg_simt_ctx_start:
    movq %r13, %rdi
    callq *%r12
    ud2
    .size dfg_simt_ctx_start, .-dfg_simt_ctx_start
    .popsection
)");

// The frame dfg_simt_ctx_switch pops for a fiber that has not run yet: r15..rbp, then the return
// address. After the six pops and the `ret` (56 bytes), rsp is 16-byte aligned, as the call in
// dfg_simt_ctx_start needs.
static void frame_init(dfg_simt_fiber *f) {
    const uintptr_t top = ((uintptr_t)f->stack_lo + f->stack_bytes) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);
    sp[0] = 0;                                // r15
    sp[1] = 0;                                // r14
    sp[2] = (uint64_t)(uintptr_t)f;           // r13: entry's argument
    sp[3] = (uint64_t)(uintptr_t)f->entry;    // r12: entry
    sp[4] = 0;                                // rbx
    sp[5] = 0;                                // rbp: the end of the frame chain
    sp[6] = (uint64_t)(uintptr_t)&dfg_simt_ctx_start;
    sp[7] = 0;                                // a null return address above the first frame
    sp[8] = 0;
    f->sp = sp;
}
#else
// makecontext passes int arguments only: the fiber's address goes in two halves
static void uc_start(unsigned lo, unsigned hi) {
    dfg_simt_fiber *f = (dfg_simt_fiber *)(((uintptr_t)hi << 32) | lo);
    f->entry(f);
}

static void frame_init(dfg_simt_fiber *f) {
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = (void *)f->stack_lo;
    f->uc.uc_stack.ss_size = f->stack_bytes;
    f->uc.uc_link = nullptr;
    const uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)())uc_start, 2, (unsigned)(p & 0xffffffffu), (unsigned)((uint64_t)p >> 32));
}
#endif

int dfg_simt_fiber_create(dfg_simt_fiber *f, size_t stack_bytes, dfg_simt_fiber_entry entry) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_bytes = (stack_bytes + page - 1) / page * page;
    std::memset(static_cast<void *>(f), 0, sizeof *f);
    // pages are committed as the stack touches them; the guard page turns an overflow into a fault
    void *m = mmap(nullptr, stack_bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return -1;
    if (mprotect(m, page, PROT_NONE) != 0) {
        munmap(m, stack_bytes + page);
        return -1;
    }
    f->map = (char *)m;
    f->map_bytes = stack_bytes + page;
    f->stack_lo = f->map + page;
    f->stack_bytes = stack_bytes;
    f->entry = entry;
    frame_init(f);
    return 0;
}

void dfg_simt_fiber_reset(dfg_simt_fiber *f) {
#ifdef DFG_SIMT_ASAN
    // frames abandoned mid-function leave their redzones poisoned in the shadow memory
    __asan_unpoison_memory_region(f->stack_lo, f->stack_bytes);
#endif
    f->asan_fake = nullptr;
    frame_init(f);
}

void dfg_simt_fiber_destroy(dfg_simt_fiber *f) {
    if (f->map) munmap(f->map, f->map_bytes);
    f->map = nullptr;
}

#ifdef DFG_SIMT_ASAN
// Completes a switch into `self`. The host thread's own stack is learnt here, the first time a
// fiber is entered from it, because ASan needs its bounds to switch back.
static void asan_arrived(dfg_simt_fiber *self, void *fake) {
    const void *lo;
    size_t bytes;
    __sanitizer_finish_switch_fiber(fake, &lo, &bytes);
    dfg_simt_fiber *prev = self->came_from;
    if (prev && !prev->map) {
        prev->stack_lo = lo;
        prev->stack_bytes = bytes;
    }
}
#endif

void dfg_simt_fiber_entered(dfg_simt_fiber *self) {
#ifdef DFG_SIMT_ASAN
    asan_arrived(self, nullptr);
#else
    (void)self;
#endif
}

void dfg_simt_fiber_switch(dfg_simt_fiber *from, dfg_simt_fiber *to) {
    to->came_from = from;
#ifdef DFG_SIMT_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake, to->stack_lo, to->stack_bytes);
#endif
#ifdef DFG_SIMT_UCONTEXT
    swapcontext(&from->uc, &to->uc);
#else
    dfg_simt_ctx_switch(&from->sp, to->sp);
#endif
#ifdef DFG_SIMT_ASAN
    asan_arrived(from, from->asan_fake);
#endif
}
