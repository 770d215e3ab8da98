// simt.cpp - the SIMT emulator's scheduler: runs a grid's blocks one at a time, each thread of a
// block as a fiber, with barriers, warp operations, launch checks and schedule fuzzing.
//
// Threads start lazily: a fiber runs one thread after another on the same stack until a thread
// waits (barrier, warp operation, fence); only then does the next thread get a fiber of its own.
// A kernel without synchronisation therefore runs a whole block on one stack with no switch.
// Waiting threads hold their fiber until released; the fibers' stacks are pooled for the next
// block and launch. All state is in one device context `D`; it is single-threaded by design.
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "dfg_simt.h"
#include "fiber.h"

#ifdef DFG_SIMT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;
unsigned char *dfg_simt_dynamic_smem;
int dfg_simt_fuzzing;

namespace {

enum : uint8_t { ST_FRESH, ST_READY, ST_RUN, ST_BAR, ST_WARP, ST_DONE };

const size_t kSmemDefault = 48 * 1024;   // without the opt-in
const size_t kSmemOptinSm90 = 227 * 1024;

struct Thread {
    dfg_simt_fiber *fiber; // null until the thread starts
    uint8_t state;
    uint8_t op;            // while in a warp operation: what it waits in, and with which arguments
    uint32_t mask;
    int32_t arg, width;
    uint64_t value;
    uint64_t result;       // the warp operation's or the counting barrier's result
    const char *file;
    int line;
};

struct Warp {
    uint32_t present; // lanes that exist (a block's last warp may be partial)
    uint32_t exited;
    uint32_t waiting; // lanes waiting in a warp operation
};

struct OptIn {
    const void *fn;
    size_t bytes;
};

struct Device {
    bool initialised = false;
    uint64_t seed = 0;
    int verbose = 0;
    size_t stack_bytes = 0;
    size_t optin_limit = kSmemOptinSm90;
    std::vector<OptIn> optin;
    // the launch
    bool in_launch = false;
    bool fuzz = false;
    const dfg_simt_kernel_desc *k = nullptr;
    unsigned n = 0;                 // threads per block
    std::vector<uint3> tidx;        // threadIdx of each linear thread id
    std::vector<Thread> thr;
    std::vector<Warp> warps;
    // ready threads: a ring holding each thread at most once
    std::vector<uint16_t> ring;
    unsigned head = 0, count = 0, rmask = 0;
    uint64_t rng = 0;
    // the block
    int cur = -1;                   // running thread
    unsigned done = 0;
    int first_done = -1;
    unsigned bar_n = 0, bar_sum = 0; // threads at the barrier, and their predicates' sum
    int bar_first = -1, bar_kind = 0, bar_line = 0;
    const char *bar_file = nullptr;
    // fibers
    dfg_simt_fiber host{};          // the launching thread's own context
    std::vector<dfg_simt_fiber *> fibers, pool;
    // status
    int status = DFG_SIMT_OK, last_status = DFG_SIMT_OK;
    char msg[1024] = "";
    dfg_simt_stats stats{};

    ~Device() { release(); }
    void release() {
        for (dfg_simt_fiber *f : fibers) {
            dfg_simt_fiber_destroy(f);
            delete f;
        }
        fibers.clear();
        pool.clear();
    }
};

Device D;

const char *coords(int t);

#ifdef DFG_SIMT_ASAN
// ASan's report names the kernel's function and line; this adds the emulated block and thread
void asan_death() {
    if (D.in_launch && D.cur >= 0 && D.k)
        fprintf(stderr, "dfg_simt: the report above comes from kernel '%s' (launched at %s:%d) block (%u,%u,%u) thread %s\n",
                D.k->name, D.k->file, D.k->line, blockIdx.x, blockIdx.y, blockIdx.z, coords(D.cur));
}
#endif

void dev_init() {
    if (D.initialised) return;
    D.initialised = true;
#ifdef DFG_SIMT_ASAN
    __sanitizer_set_death_callback(asan_death);
#endif
    if (const char *s = getenv("DFG_SIMT_SEED")) D.seed = strtoull(s, nullptr, 0);
    if (const char *s = getenv("DFG_SIMT_VERBOSE")) D.verbose = atoi(s);
    // ASan's redzones make frames several times larger
#ifdef DFG_SIMT_ASAN
    D.stack_bytes = 512 * 1024;
#else
    D.stack_bytes = 64 * 1024;
#endif
    if (const char *s = getenv("DFG_SIMT_STACK_KB")) {
        const long kb = atol(s);
        if (kb >= 16) D.stack_bytes = (size_t)kb * 1024;
    }
}

// ---------------------------------------------------------------- random order (splitmix64)
uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
inline uint64_t rng_next() { return mix64(D.rng += 0x9e3779b97f4a7c15ull); }
inline unsigned rand_below(unsigned n) { return (unsigned)(((rng_next() >> 32) * (uint64_t)n) >> 32); }

// ---------------------------------------------------------------- the ready ring
inline void ready_push(int t) {
    D.ring[(D.head + D.count) & D.rmask] = (uint16_t)t;
    D.count++;
}
inline void ready_push_front(int t) {
    D.head = (D.head - 1) & D.rmask;
    D.ring[D.head] = (uint16_t)t;
    D.count++;
}
// In order, or (fuzzing) a ready thread drawn at random
inline int ready_pop() {
    if (D.count == 0) return -1;
    if (D.fuzz && D.count > 1) {
        const unsigned r = (D.head + rand_below(D.count)) & D.rmask;
        const uint16_t t = D.ring[r];
        D.ring[r] = D.ring[D.head];
        D.ring[D.head] = t;
    }
    const int t = D.ring[D.head];
    D.head = (D.head + 1) & D.rmask;
    D.count--;
    return t;
}

inline void set_current(int t) {
    D.cur = t;
    threadIdx = D.tidx[t];
}

// ---------------------------------------------------------------- messages
const char *op_name(int op) {
    switch (op) {
    case DFG_SIMT_OP_SHFL_IDX: return "__shfl_sync";
    case DFG_SIMT_OP_SHFL_UP: return "__shfl_up_sync";
    case DFG_SIMT_OP_SHFL_DOWN: return "__shfl_down_sync";
    case DFG_SIMT_OP_SHFL_XOR: return "__shfl_xor_sync";
    case DFG_SIMT_OP_BALLOT: return "__ballot_sync";
    case DFG_SIMT_OP_ANY: return "__any_sync";
    case DFG_SIMT_OP_ALL: return "__all_sync";
    case DFG_SIMT_OP_UNI: return "__uni_sync";
    case DFG_SIMT_OP_SYNCWARP: return "__syncwarp";
    case DFG_SIMT_OP_MATCH_ANY: return "__match_any_sync";
    case DFG_SIMT_OP_MATCH_ALL: return "__match_all_sync";
    case DFG_SIMT_OP_REDUCE_ADD: return "__reduce_add_sync";
    case DFG_SIMT_OP_REDUCE_MIN: case DFG_SIMT_OP_REDUCE_MIN_S: return "__reduce_min_sync";
    case DFG_SIMT_OP_REDUCE_MAX: case DFG_SIMT_OP_REDUCE_MAX_S: return "__reduce_max_sync";
    case DFG_SIMT_OP_REDUCE_AND: return "__reduce_and_sync";
    case DFG_SIMT_OP_REDUCE_OR: return "__reduce_or_sync";
    case DFG_SIMT_OP_REDUCE_XOR: return "__reduce_xor_sync";
    default: return "a warp operation";
    }
}
const char *bar_name(int kind) {
    static const char *const names[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                        "__syncthreads_or"};
    return names[kind & 3];
}

// "(x,y,z)" of a thread of the running block; buffers rotate so one message can name several
const char *coords(int t) {
    static char buf[4][40];
    static int next = 0;
    char *b = buf[next++ & 3];
    const uint3 c = D.tidx[t];
    snprintf(b, sizeof buf[0], "(%u,%u,%u)", c.x, c.y, c.z);
    return b;
}

// Records a failure of the launch: kernel, launch site, and when `tid` >= 0 the block and thread
__attribute__((format(printf, 3, 4))) void fail(int status, int tid, const char *fmt, ...) {
    if (D.status != DFG_SIMT_OK) return; // the first failure is the one reported
    int len = 0;
    if (D.k)
        len = snprintf(D.msg, sizeof D.msg, "dfg_simt: kernel '%s' (launched at %s:%d)", D.k->name, D.k->file,
                       D.k->line);
    else
        len = snprintf(D.msg, sizeof D.msg, "dfg_simt");
    if (tid >= 0 && len < (int)sizeof D.msg)
        len += snprintf(D.msg + len, sizeof D.msg - len, " block (%u,%u,%u) thread %s", blockIdx.x, blockIdx.y,
                        blockIdx.z, coords(tid));
    if (len < (int)sizeof D.msg) len += snprintf(D.msg + len, sizeof D.msg - len, ": ");
    if (len < (int)sizeof D.msg) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(D.msg + len, sizeof D.msg - len, fmt, ap);
        va_end(ap);
    }
    D.status = D.last_status = status;
    if (D.verbose) fprintf(stderr, "%s\n", D.msg);
}

// From a fiber: the launch stops; the host abandons (resets) every fiber of the block
[[noreturn]] void stop_launch() {
    dfg_simt_fiber_switch(D.thr[D.cur].fiber, &D.host);
    __builtin_unreachable();
}
#define RAISE(status, tid, ...)         \
    do {                                \
        fail(status, tid, __VA_ARGS__); \
        stop_launch();                  \
    } while (0)

// `what` is a function, so the hot path does not look names up
bool outside_kernel(const char *(*what)(int), int arg) {
    if (__builtin_expect(D.in_launch && D.cur >= 0, 1)) return false;
    fail(DFG_SIMT_ERR_TRAP, -1, "%s called outside a kernel", what(arg));
    return true;
}

// ---------------------------------------------------------------- fibers
void runner(dfg_simt_fiber *self);

dfg_simt_fiber *pool_get() {
    if (!D.pool.empty()) {
        dfg_simt_fiber *f = D.pool.back();
        D.pool.pop_back();
        f->in_pool = 0;
        return f;
    }
    dfg_simt_fiber *f = new dfg_simt_fiber;
    if (dfg_simt_fiber_create(f, D.stack_bytes, runner) != 0) {
        delete f;
        return nullptr;
    }
    D.fibers.push_back(f);
    D.stats.fibers++;
    return f;
}

inline void park(dfg_simt_fiber *f) {
    f->in_pool = 1;
    D.pool.push_back(f);
}

inline void switch_to(dfg_simt_fiber *from, dfg_simt_fiber *to) {
    D.stats.switches++;
    dfg_simt_fiber_switch(from, to);
}

// Gives the CPU to the next ready thread; `me` is waiting or queued. Returns when `me` runs again.
void suspend(int me) {
    Thread &t = D.thr[me];
    dfg_simt_fiber *self = t.fiber;
    const int next = ready_pop();
    if (next == me) {
        t.state = ST_RUN;
        return;
    }
    if (next < 0) {
        switch_to(self, &D.host); // nothing can run: the host reports the deadlock and resets us
    } else if (D.thr[next].fiber) {
        switch_to(self, D.thr[next].fiber);
    } else {
        dfg_simt_fiber *f = pool_get();
        if (!f) RAISE(DFG_SIMT_ERR_RESOURCES, me, "could not map a %zu-byte fiber stack", D.stack_bytes);
        f->start_tid = next;
        switch_to(self, f);
    }
    set_current(me);
    t.state = ST_RUN;
}

void thread_exit(int me) {
    D.thr[me].state = ST_DONE;
    D.done++;
    if (D.first_done < 0) D.first_done = me;
    if (D.bar_n)
        RAISE(DFG_SIMT_ERR_BARRIER, me, "exited without reaching the %s at %s:%d where thread %s waits",
              bar_name(D.bar_kind), D.bar_file, D.bar_line, coords(D.bar_first));
    Warp &w = D.warps[me >> 5];
    const uint32_t bit = 1u << (me & 31);
    w.exited |= bit;
    for (uint32_t m = w.waiting; m; m &= m - 1) {
        const Thread &u = D.thr[(me & ~31) + __builtin_ctz(m)];
        if (u.mask & bit)
            RAISE(DFG_SIMT_ERR_WARP, me, "exited while thread %s waits for it in %s (mask 0x%08x) at %s:%d",
                  coords((me & ~31) + __builtin_ctz(m)), op_name(u.op), u.mask, u.file, u.line);
    }
}

// A fiber's life: run threads, one after another on this stack, until one waits (it keeps this
// fiber; suspend() carries on elsewhere) or none is ready; then park in the pool. Taken from
// the pool, it goes on here with the thread in start_tid.
void runner(dfg_simt_fiber *self) {
    dfg_simt_fiber_entered(self);
    for (;;) {
        int tid = self->start_tid;
        for (;;) {
            Thread &t = D.thr[tid];
            t.fiber = self;
            t.state = ST_RUN;
            set_current(tid);
            D.k->invoke(D.k->args);
            thread_exit(tid);
            tid = ready_pop();
            if (tid >= 0 && !D.thr[tid].fiber) continue; // not started yet: run it here
            break;
        }
        park(self);
        // a suspended thread to resume, or none ready: the block is done or deadlocked
        switch_to(self, tid >= 0 ? D.thr[tid].fiber : &D.host);
    }
}

// ---------------------------------------------------------------- warp operations
// PTX shfl.sync's source lane: c = ((32 - width) << 8) | clamp, clamp 0 for up and 31 otherwise;
// a source outside the lane's segment (or, for xor, above it) gives the lane its own value.
unsigned shfl_source(int op, unsigned lane, int b, int width) {
    const unsigned segmask = (unsigned)(32 - width) & 0x1f;
    const unsigned clamp = op == DFG_SIMT_OP_SHFL_UP ? 0 : 0x1f;
    const unsigned max_lane = (lane & segmask) | (clamp & ~segmask);
    const unsigned min_lane = lane & segmask;
    const unsigned bval = (unsigned)b & 0x1f;
    switch (op) {
    case DFG_SIMT_OP_SHFL_UP: {
        const int j = (int)lane - (int)bval;
        return j >= (int)max_lane ? (unsigned)j : lane;
    }
    case DFG_SIMT_OP_SHFL_DOWN: {
        const unsigned j = lane + bval;
        return j <= max_lane ? j : lane;
    }
    case DFG_SIMT_OP_SHFL_XOR: {
        const unsigned j = lane ^ bval;
        return j <= max_lane ? j : lane;
    }
    default: {
        const unsigned j = min_lane | (bval & ~segmask);
        return j <= max_lane ? j : lane;
    }
    }
}

// Every lane of `mask` (warp starting at thread `base`) has arrived: compute each one's result
void warp_execute(int base, uint32_t mask, int op) {
    Thread *lanes = &D.thr[base];
    if (op <= DFG_SIMT_OP_SHFL_XOR) { // the common case first
        for (uint32_t m = mask; m; m &= m - 1) {
            const unsigned lane = (unsigned)__builtin_ctz(m);
            Thread &u = lanes[lane];
            const unsigned src = shfl_source(op, lane, u.arg, u.width);
            // reading a lane outside the mask is undefined in CUDA: poison (all ones is a NaN)
            u.result = (mask >> src & 1) ? lanes[src].value : ~0ull;
        }
        return;
    }
    if (op == DFG_SIMT_OP_SYNCWARP) return;
    uint32_t ballot = 0, sum = 0, all_and = ~0u, all_or = 0, all_xor = 0, umin = ~0u, umax = 0;
    int32_t smin = INT32_MAX, smax = INT32_MIN;
    bool all_equal = true;
    const uint64_t first = lanes[__builtin_ctz(mask)].value;
    for (uint32_t m = mask; m; m &= m - 1) {
        const uint64_t v = lanes[__builtin_ctz(m)].value;
        const uint32_t v32 = (uint32_t)v;
        ballot |= (uint32_t)(v != 0) << __builtin_ctz(m);
        sum += v32;
        all_and &= v32;
        all_or |= v32;
        all_xor ^= v32;
        umin = v32 < umin ? v32 : umin;
        umax = v32 > umax ? v32 : umax;
        smin = (int32_t)v32 < smin ? (int32_t)v32 : smin;
        smax = (int32_t)v32 > smax ? (int32_t)v32 : smax;
        all_equal = all_equal && v == first;
    }
    for (uint32_t m = mask; m; m &= m - 1) {
        Thread &u = lanes[__builtin_ctz(m)];
        switch (op) {
        case DFG_SIMT_OP_BALLOT: u.result = ballot; break;
        case DFG_SIMT_OP_ANY: u.result = ballot != 0; break;
        case DFG_SIMT_OP_ALL: u.result = ballot == mask; break;
        case DFG_SIMT_OP_UNI: u.result = ballot == 0 || ballot == mask; break;
        case DFG_SIMT_OP_MATCH_ANY: {
            uint32_t same = 0;
            for (uint32_t k = mask; k; k &= k - 1)
                if (lanes[__builtin_ctz(k)].value == u.value) same |= 1u << __builtin_ctz(k);
            u.result = same;
            break;
        }
        case DFG_SIMT_OP_MATCH_ALL: u.result = all_equal ? ((uint64_t)1 << 32 | mask) : 0; break;
        case DFG_SIMT_OP_REDUCE_ADD: u.result = sum; break;
        case DFG_SIMT_OP_REDUCE_MIN: u.result = umin; break;
        case DFG_SIMT_OP_REDUCE_MAX: u.result = umax; break;
        case DFG_SIMT_OP_REDUCE_MIN_S: u.result = (uint32_t)smin; break;
        case DFG_SIMT_OP_REDUCE_MAX_S: u.result = (uint32_t)smax; break;
        case DFG_SIMT_OP_REDUCE_AND: u.result = all_and; break;
        case DFG_SIMT_OP_REDUCE_OR: u.result = all_or; break;
        default: u.result = all_xor; break; // DFG_SIMT_OP_REDUCE_XOR
        }
    }
}

const char *state_text(const Thread &u, char *buf, size_t n) {
    switch (u.state) {
    case ST_DONE: return "has exited";
    case ST_FRESH: return "has not started";
    case ST_BAR: snprintf(buf, n, "waits at the %s at %s:%d", bar_name(D.bar_kind), D.bar_file, D.bar_line); return buf;
    case ST_WARP: snprintf(buf, n, "waits in %s with mask 0x%08x at %s:%d", op_name(u.op), u.mask, u.file, u.line); return buf;
    default: return "is ready to run";
    }
}

} // namespace

uint64_t dfg_simt_warp_op(int op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line) {
    if (outside_kernel(op_name, op)) return 0;
    const int me = D.cur;
    const unsigned lane = (unsigned)me & 31;
    const int base = me & ~31;
    Warp &w = D.warps[me >> 5];
    if (!(mask >> lane & 1))
        RAISE(DFG_SIMT_ERR_WARP, me, "%s at %s:%d with mask 0x%08x, which leaves out the calling lane %u",
              op_name(op), file, line, mask, lane);
    if (mask & ~w.present)
        RAISE(DFG_SIMT_ERR_WARP, me,
              "%s at %s:%d with mask 0x%08x names lanes 0x%08x that do not exist (the block has %u threads: "
              "warp %d has lanes 0..%d)",
              op_name(op), file, line, mask, mask & ~w.present, D.n, me >> 5, 31 - __builtin_clz(w.present));
    if (mask & w.exited) {
        const int gone = base + __builtin_ctz(mask & w.exited);
        RAISE(DFG_SIMT_ERR_WARP, me, "%s at %s:%d with mask 0x%08x names lane %d (thread %s), which has exited",
              op_name(op), file, line, mask, gone & 31, coords(gone));
    }
    if (width < 1 || width > 32 || (width & (width - 1)))
        RAISE(DFG_SIMT_ERR_WARP, me, "%s at %s:%d: width %d is not a power of two in 1..32", op_name(op), file,
              line, width);
    Thread &t = D.thr[me];
    t.op = (uint8_t)op;
    t.mask = mask;
    t.value = value;
    t.arg = arg;
    t.width = width;
    t.file = file;
    t.line = line;
    t.state = ST_WARP;
    w.waiting |= 1u << lane;
    if ((w.waiting & mask) != mask) {
        suspend(me);
        return t.result;
    }
    // every lane named has arrived: each must be in this operation, with this mask
    for (uint32_t m = mask; m; m &= m - 1) {
        const Thread &u = D.thr[base + __builtin_ctz(m)];
        if (u.mask != mask || u.op != op)
            RAISE(DFG_SIMT_ERR_WARP, me,
                  "%s at %s:%d with mask 0x%08x, but lane %d (thread %s) waits in %s with mask 0x%08x at %s:%d",
                  op_name(op), file, line, mask, __builtin_ctz(m), coords(base + __builtin_ctz(m)), op_name(u.op),
                  u.mask, u.file, u.line);
    }
    warp_execute(base, mask, op);
    w.waiting &= ~mask;
    // released lanes run next, lowest first: a warp goes on through its operations while its
    // stacks are in cache, rather than after every other ready thread of the block
    for (uint32_t m = mask & ~(1u << lane); m; m &= ~(1u << (31 - __builtin_clz(m)))) {
        const int l = 31 - __builtin_clz(m);
        D.thr[base + l].state = ST_READY;
        ready_push_front(base + l);
    }
    if (D.fuzz) { // the lanes leave in a random order, this one included
        t.state = ST_READY;
        ready_push(me);
        suspend(me);
    } else {
        t.state = ST_RUN;
    }
    return t.result;
}

int dfg_simt_barrier(int kind, int pred, const char *file, int line) {
    if (outside_kernel(bar_name, kind)) return 0;
    const int me = D.cur;
    if (D.first_done >= 0)
        RAISE(DFG_SIMT_ERR_BARRIER, D.first_done, "exited without reaching the %s at %s:%d that thread %s reached",
              bar_name(kind), file, line, coords(me));
    if (D.bar_n == 0) {
        D.bar_kind = kind;
        D.bar_file = file;
        D.bar_line = line;
        D.bar_first = me;
        D.bar_sum = 0;
    } else if (kind != D.bar_kind || line != D.bar_line || (file != D.bar_file && strcmp(file, D.bar_file) != 0)) {
        RAISE(DFG_SIMT_ERR_BARRIER, me, "reached the %s at %s:%d while thread %s waits at the %s at %s:%d",
              bar_name(kind), file, line, coords(D.bar_first), bar_name(D.bar_kind), D.bar_file, D.bar_line);
    }
    D.bar_sum += pred != 0;
    D.bar_n++;
    Thread &t = D.thr[me];
    t.state = ST_BAR;
    if (D.bar_n < D.n) {
        suspend(me);
        return (int)t.result;
    }
    const unsigned r = kind == DFG_SIMT_BAR_COUNT ? D.bar_sum
                       : kind == DFG_SIMT_BAR_AND ? D.bar_sum == D.n
                       : kind == DFG_SIMT_BAR_OR  ? D.bar_sum > 0
                                                  : 0;
    D.bar_n = 0;
    for (unsigned i = 0; i < D.n; i++) {
        D.thr[i].result = r;
        if ((int)i == me) continue;
        D.thr[i].state = ST_READY;
        ready_push((int)i);
    }
    if (D.fuzz) {
        t.state = ST_READY;
        ready_push(me);
        suspend(me);
    } else {
        t.state = ST_RUN;
    }
    return (int)r;
}

unsigned dfg_simt_activemask(void) {
    if (outside_kernel([](int) { return "__activemask"; }, 0)) return 0;
    const Warp &w = D.warps[D.cur >> 5];
    return w.present & ~w.exited;
}

void dfg_simt_yield(void) {
    if (!D.in_launch || D.cur < 0) return; // a fence in host code is harmless
    D.thr[D.cur].state = ST_READY;
    ready_push(D.cur);
    suspend(D.cur);
}

void dfg_simt_atomic_point(void) {
    if (D.fuzz && (rng_next() & 3) == 0) dfg_simt_yield();
}

void dfg_simt_trap(const char *file, int line) {
    if (outside_kernel([](int) { return "__trap"; }, 0)) return;
    RAISE(DFG_SIMT_ERR_TRAP, D.cur, "__trap() at %s:%d", file, line);
}

long long dfg_simt_clock64(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

// ---------------------------------------------------------------- launching
namespace {

size_t optin_of(const void *fn) {
    for (const OptIn &o : D.optin)
        if (o.fn == fn) return o.bytes;
    return 0;
}

bool config_ok(dim3 grid, dim3 block, size_t smem) {
    if (!grid.x || !grid.y || !grid.z) {
        fail(DFG_SIMT_ERR_CONFIG, -1, "grid (%u,%u,%u) has a zero dimension", grid.x, grid.y, grid.z);
        return false;
    }
    if (!block.x || !block.y || !block.z) {
        fail(DFG_SIMT_ERR_CONFIG, -1, "block (%u,%u,%u) has a zero dimension", block.x, block.y, block.z);
        return false;
    }
    const uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (threads > 1024) {
        fail(DFG_SIMT_ERR_CONFIG, -1, "block (%u,%u,%u) has %" PRIu64 " threads, over the limit of 1024", block.x,
             block.y, block.z, threads);
        return false;
    }
    if (block.x > 1024 || block.y > 1024 || block.z > 64) {
        fail(DFG_SIMT_ERR_CONFIG, -1, "block (%u,%u,%u) is beyond the limits (1024,1024,64)", block.x, block.y,
             block.z);
        return false;
    }
    if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        fail(DFG_SIMT_ERR_CONFIG, -1, "grid (%u,%u,%u) is beyond the limits (2147483647,65535,65535)", grid.x,
             grid.y, grid.z);
        return false;
    }
    const size_t optin = optin_of(D.k->fn);
    const size_t allowed = optin > kSmemDefault ? optin : kSmemDefault;
    if (smem > allowed) {
        if (optin > kSmemDefault)
            fail(DFG_SIMT_ERR_SMEM, -1, "%zu bytes of dynamic shared memory, over the kernel's opt-in of %zu bytes",
                 smem, optin);
        else
            fail(DFG_SIMT_ERR_SMEM, -1,
                 "%zu bytes of dynamic shared memory, over 48 KB (49152 bytes) without the opt-in "
                 "(DFG_SET_MAX_DYNAMIC_SMEM)",
                 smem);
        return false;
    }
    if (smem > D.optin_limit) {
        fail(DFG_SIMT_ERR_SMEM, -1, "%zu bytes of dynamic shared memory, over the device's limit of %zu bytes", smem,
             D.optin_limit);
        return false;
    }
    return true;
}

void prepare(dim3 block) {
    D.n = block.x * block.y * block.z;
    D.tidx.resize(D.n);
    for (unsigned i = 0; i < D.n; i++) D.tidx[i] = make_uint3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
    D.thr.assign(D.n, Thread{});
    D.warps.assign((D.n + 31) / 32, Warp{~0u, 0, 0});
    if (D.n % 32) D.warps.back().present = (1u << (D.n % 32)) - 1;
    unsigned cap = 1;
    while (cap < D.n) cap <<= 1;
    D.ring.assign(cap, 0);
    D.rmask = cap - 1;
}

void block_begin(uint64_t block_linear, size_t smem) {
    for (unsigned i = 0; i < D.n; i++) {
        D.thr[i].fiber = nullptr;
        D.thr[i].state = ST_FRESH;
        D.ring[i] = (uint16_t)i;
    }
    for (Warp &w : D.warps) w.exited = w.waiting = 0;
    D.head = 0;
    D.count = D.n;
    D.done = 0;
    D.first_done = -1;
    D.bar_n = 0;
    D.cur = -1;
    // a block's schedule depends on the seed and the block only, so a failing block replays alone
    D.rng = mix64(D.seed ^ mix64(block_linear + 1));
    // CUDA leaves shared memory undefined at block start: all-ones bytes read as NaN or -1
    if (smem) memset(dfg_simt_dynamic_smem, 0xff, smem);
}

// Nothing can run but threads still wait: name a waiting thread and what it waits for
void report_deadlock() {
    char buf[200];
    for (unsigned i = 0; i < D.n; i++) {
        const Thread &t = D.thr[i];
        if (t.state != ST_WARP) continue;
        const int base = (int)i & ~31;
        for (uint32_t m = t.mask; m; m &= m - 1) {
            const Thread &u = D.thr[base + __builtin_ctz(m)];
            if (u.state == ST_WARP && u.mask == t.mask && u.op == t.op) continue;
            fail(DFG_SIMT_ERR_DEADLOCK, (int)i, "deadlock: waits in %s (mask 0x%08x) at %s:%d for lane %d (thread %s), which %s",
                 op_name(t.op), t.mask, t.file, t.line, __builtin_ctz(m), coords(base + __builtin_ctz(m)),
                 state_text(u, buf, sizeof buf));
            return;
        }
    }
    for (unsigned i = 0; i < D.n; i++)
        if (D.thr[i].state != ST_DONE) {
            fail(DFG_SIMT_ERR_DEADLOCK, (int)i, "deadlock: no thread can run; this one %s",
                 state_text(D.thr[i], buf, sizeof buf));
            return;
        }
}

} // namespace

int dfg_simt_run(const dfg_simt_kernel_desc *k, dim3 grid, dim3 block, size_t smem) {
    dev_init();
    if (D.in_launch) { // keep the running launch's state: report through the sticky status only
        const dfg_simt_kernel_desc *outer = D.k;
        D.k = k;
        fail(DFG_SIMT_ERR_TRAP, -1, "launched from inside a kernel: dynamic parallelism is not emulated");
        D.k = outer;
        return DFG_SIMT_ERR_TRAP;
    }
    D.status = DFG_SIMT_OK;
    D.k = k;
    D.stats.launches++;
    if (!config_ok(grid, block, smem)) {
        D.k = nullptr;
        return D.status;
    }
    prepare(block);
    // its own allocation, exactly smem bytes, so ASan catches an access past its end
    dfg_simt_dynamic_smem = smem ? (unsigned char *)malloc(smem) : nullptr;
    gridDim = grid;
    blockDim = block;
    D.fuzz = D.seed != 0;
    dfg_simt_fuzzing = D.fuzz;
    D.in_launch = true;
    for (unsigned z = 0; z < grid.z && !D.status; z++)
        for (unsigned y = 0; y < grid.y && !D.status; y++)
            for (unsigned x = 0; x < grid.x && !D.status; x++) {
                blockIdx = make_uint3(x, y, z);
                block_begin(((uint64_t)z * grid.y + y) * grid.x + x, smem);
                dfg_simt_fiber *f = pool_get();
                if (!f) {
                    fail(DFG_SIMT_ERR_RESOURCES, -1, "could not map a %zu-byte fiber stack", D.stack_bytes);
                    break;
                }
                f->start_tid = ready_pop();
                switch_to(&D.host, f);
                D.stats.blocks++;
                D.stats.threads += D.n;
                if (!D.status && D.done != D.n) report_deadlock();
                if (D.status) // fibers left mid-kernel start afresh next time
                    for (dfg_simt_fiber *g : D.fibers)
                        if (!g->in_pool) {
                            dfg_simt_fiber_reset(g);
                            park(g);
                        }
            }
    D.in_launch = false;
    D.cur = -1;
    dfg_simt_fuzzing = 0;
    free(dfg_simt_dynamic_smem);
    dfg_simt_dynamic_smem = nullptr;
    D.k = nullptr;
    return D.status;
}

// A failure found outside a running grid (graph.cpp: capture misuse), kept like a launch's.
void dfg_simt_report(int status, const char *msg) {
    snprintf(D.msg, sizeof D.msg, "dfg_simt: %s", msg);
    D.status = D.last_status = status;
    if (D.verbose) fprintf(stderr, "%s\n", D.msg);
}

cudaError_t dfg_simt_cuda_error(int status) {
    switch (status) {
    case DFG_SIMT_OK: return cudaSuccess;
    case DFG_SIMT_ERR_CONFIG: return cudaErrorInvalidConfiguration;
    case DFG_SIMT_ERR_SMEM: return cudaErrorInvalidValue;
    case DFG_SIMT_ERR_RESOURCES: return cudaErrorLaunchOutOfResources;
    default: return cudaErrorLaunchFailure;
    }
}

// ---------------------------------------------------------------- control (dfg_simt_ctl.h)
extern "C" {

int dfg_simt_get_last_status(void) {
    const int s = D.last_status;
    D.last_status = DFG_SIMT_OK;
    return s;
}
int dfg_simt_peek_last_status(void) { return D.last_status; }
const char *dfg_simt_last_message(void) { return D.msg; }
void dfg_simt_set_verbose(int on) {
    dev_init();
    D.verbose = on;
}
void dfg_simt_set_seed(uint64_t seed) {
    dev_init();
    D.seed = seed;
}
uint64_t dfg_simt_get_seed(void) {
    dev_init();
    return D.seed;
}

int dfg_simt_set_max_dynamic_smem(const void *kernel, size_t bytes) {
    dev_init();
    if (bytes > D.optin_limit) {
        D.status = DFG_SIMT_OK; // a fresh report, not part of a launch
        fail(DFG_SIMT_ERR_SMEM, -1, "opt-in to %zu bytes of dynamic shared memory, over the device's limit of %zu bytes",
             bytes, D.optin_limit);
        return DFG_SIMT_ERR_SMEM;
    }
    for (OptIn &o : D.optin)
        if (o.fn == kernel) {
            o.bytes = bytes;
            return DFG_SIMT_OK;
        }
    D.optin.push_back(OptIn{kernel, bytes});
    return DFG_SIMT_OK;
}
void dfg_simt_set_smem_optin_limit(size_t bytes) {
    dev_init();
    D.optin_limit = bytes;
}

void dfg_simt_get_stats(dfg_simt_stats *out) { *out = D.stats; }

void dfg_simt_release(void) {
    if (!D.in_launch) D.release();
}

} // extern "C"
