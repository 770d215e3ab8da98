// layout.cu - ops that move bytes on the GPU: reshape (a view; a copy only when the planner gave
// the output its own buffer), permute, slice, concat, expand. They are dtype-agnostic, as
// ops/cpu/layout.c: elements are moved by size (1, 2 or 4 bytes), so f32, bf16, f16, i32 and u8
// all take the same kernels.
//
// Two kernels do most of the work:
//   rows_kernel<W>: out is `rows` rows of the same byte length, each copied from a source row
//     whose offset is a sum over up to 5 outer dims (one dim with a pitch for slice and concat,
//     several for permute and expand). W is the widest chunk (16, 8, 4, 2, 1 bytes) dividing every
//     length, pitch, stride and address involved, so the common cases move 16-byte vectors; the
//     threads walk the (rows, chunks) grid in grid-stride order (coalesced along a row).
//   transpose_kernel<T>: a permute that changes the innermost dim goes through a 32 x 32 shared
//     memory tile (padded to 33 columns against bank conflicts): read along the input's inner
//     dim, written along the output's, both coalesced.
// Dims of size 1 are dropped and dims that stay adjacent are merged first, so (B, T, H, D) ->
// (B, H, T, D) is a row copy of D elements and (M, N) -> (N, M) one batch of tiles.
#include "common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxOuter = DFG_MAX_RANK - 1;
constexpr int kTile = 32, kTileRows = 8; // transpose: a (32, 8) block moves a 32 x 32 tile

template <int W> struct Chunk;
template <> struct Chunk<16> { typedef uint4 type; };
template <> struct Chunk<8> { typedef uint2 type; };
template <> struct Chunk<4> { typedef uint32_t type; };
template <> struct Chunk<2> { typedef uint16_t type; };
template <> struct Chunk<1> { typedef uint8_t type; };

// ---------------------------------------------------------------- row copies
struct Rows {
    int64_t rows, chunks;       // the output: rows of `chunks` W-byte chunks
    int64_t dst_pitch;          // bytes from one output row to the next
    int nd;                     // the source row offset: sum over outer dims of index * src_st bytes
    int narrow;                 // rows < 2^32: row indices split with 32-bit divisions
    int64_t dims[kMaxOuter], src_st[kMaxOuter];
    const int32_t *start;       // slice_at: the first index along the axis, read on the device; or NULL
    int64_t start_max, start_bytes; // its largest valid value, and the bytes one index moves the source
    int start_rows;             // 1: start holds one index a row (start[r] for row r); 0: one for all
};

// The source byte offset of output row r (common.cuh: the plan stays in the kernel's parameter space)
__device__ __forceinline__ int64_t src_offset(const Rows &p, int64_t r) {
    return dfg_outer_offset(p.dims, p.src_st, p.nd, p.narrow, r);
}

// The start index s (slice_at's run-time start) clamped into range; out of range (which the CPU
// kernel reports) sets *flags when report.
__device__ __forceinline__ int64_t clamped_start(const Rows &p, int64_t s, int *flags, bool report) {
    if (s < 0 || s > p.start_max) {
        if (flags && report) atomicOr(flags, 1);
        s = s < 0 ? 0 : p.start_max;
    }
    return s;
}

// dst row r (chunks) = the source row of r, moved by the start (p.start[r] when one a row). A
// start out of range sets *flags and is clamped into range.
template <int W>
__global__ void __launch_bounds__(kThreads) rows_kernel(char *dst /* (rows, pitch) bytes */,
                                                        const char *src /* rows at src_offset */, Rows p, int *flags) {
    typedef typename Chunk<W>::type C;
    if (p.start && !p.start_rows)
        src += clamped_start(p, *p.start, flags, blockIdx.x == 0 && threadIdx.x == 0) * p.start_bytes;
    int64_t cur = -1;
    const C *s = nullptr;
    C *d = nullptr;
    for (DfgWalk w(p.chunks); w.r < p.rows; w.next()) {
        if (w.r != cur) {
            cur = w.r;
            int64_t at = src_offset(p, cur);
            if (p.start_rows) at += clamped_start(p, p.start[cur], flags, w.c == 0) * p.start_bytes;
            s = reinterpret_cast<const C *>(src + at);
            d = reinterpret_cast<C *>(dst + cur * p.dst_pitch);
        }
        d[w.c] = s[w.c];
    }
}

// ---------------------------------------------------------------- broadcast of the innermost dim
// (expand of (..., 1) to (..., C)): each output row is one source element repeated
template <class T>
__global__ void __launch_bounds__(kThreads)
    repeat_kernel(T *dst /* (rows, cols) */, const T *src /* row r's element at src_offset(r) bytes */, Rows p,
                  int64_t cols) {
    int64_t cur = -1;
    T v = T();
    for (DfgWalk w(cols); w.r < p.rows; w.next()) {
        if (w.r != cur) cur = w.r, v = src[src_offset(p, cur) / (int64_t)sizeof(T)];
        dst[cur * cols + w.c] = v;
    }
}

// ---------------------------------------------------------------- transpose tiles
struct Trans {
    int64_t A, B;        // the input's inner dim (output dim q) and the output's inner dim
    int64_t in_b, out_a; // element strides: of B's dim in the input, of A's dim in the output
    int64_t ta, tb, tiles; // tiles along A, along B, and in all (times the batch)
    int nb;              // batch dims: the other dims, with their sizes and strides
    int64_t bdims[DFG_MAX_RANK - 2], bin[DFG_MAX_RANK - 2], bout[DFG_MAX_RANK - 2];
};

template <class T>
__global__ void __launch_bounds__(kTile * kTileRows) transpose_kernel(T *out /* permuted */, const T *in /* input */,
                                                                     Trans p) {
    __shared__ T tile[kTile][kTile + 1]; // [b][a]
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) { // the same tiles for the whole block
        int64_t tb = t % p.tb, rest = t / p.tb, ta = rest % p.ta, bi = rest / p.ta, ib = 0, ob = 0;
#pragma unroll
        for (int d = DFG_MAX_RANK - 3; d >= 0; d--)
            if (d < p.nb) {
                int64_t q = bi / p.bdims[d], i = bi - q * p.bdims[d];
                ib += i * p.bin[d], ob += i * p.bout[d], bi = q;
            }
        const int64_t a0 = ta * kTile, b0 = tb * kTile;
        for (int k = 0; k < kTile; k += kTileRows) { // coalesced along the input's inner dim (a)
            int64_t a = a0 + tx, b = b0 + ty + k;
            if (a < p.A && b < p.B) tile[ty + k][tx] = in[ib + a + b * p.in_b];
        }
        __syncthreads();
        for (int k = 0; k < kTile; k += kTileRows) { // coalesced along the output's inner dim (b)
            int64_t b = b0 + tx, a = a0 + ty + k;
            if (a < p.A && b < p.B) out[ob + b + a * p.out_a] = tile[tx][ty + k];
        }
        __syncthreads(); // the tile is rewritten for the next t
    }
}

// ================================================================ host side
inline cudaStream_t stream_of(const dfg_cuda_ctx *ctx) { return (cudaStream_t)ctx->stream; }

// The widest chunk (<= 16 bytes) dividing `g`, the OR of every length, stride and address
inline int chunk_of(uint64_t g) {
    int w = 16;
    while (w > 1 && g % (uint64_t)w) w >>= 1;
    return w;
}

// Copies p's rows (row length `bytes`) from src to dst in the widest chunk that fits.
dfg_status launch_rows(const dfg_node *n, void *dst, const void *src, Rows p, int64_t bytes, dfg_cuda_ctx *ctx) {
    uint64_t g = (uint64_t)bytes | (uint64_t)p.dst_pitch | (uint64_t)p.start_bytes | (uintptr_t)dst | (uintptr_t)src;
    for (int d = 0; d < p.nd; d++) g |= (uint64_t)p.src_st[d];
    const int w = chunk_of(g);
    p.chunks = bytes / w, p.narrow = p.rows <= (int64_t)UINT32_MAX;
    if (p.rows * p.chunks == 0) return DFG_OK;
    unsigned grid = dfg_grid_for(p.rows * p.chunks, kThreads, ctx);
    cudaError_t e;
    char *d = (char *)dst;
    const char *s = (const char *)src;
    switch (w) {
    case 16: e = DFG_LAUNCH(rows_kernel<16>, grid, kThreads, 0, stream_of(ctx), d, s, p, ctx->flags); break;
    case 8: e = DFG_LAUNCH(rows_kernel<8>, grid, kThreads, 0, stream_of(ctx), d, s, p, ctx->flags); break;
    case 4: e = DFG_LAUNCH(rows_kernel<4>, grid, kThreads, 0, stream_of(ctx), d, s, p, ctx->flags); break;
    case 2: e = DFG_LAUNCH(rows_kernel<2>, grid, kThreads, 0, stream_of(ctx), d, s, p, ctx->flags); break;
    default: e = DFG_LAUNCH(rows_kernel<1>, grid, kThreads, 0, stream_of(ctx), d, s, p, ctx->flags); break;
    }
    return dfg_cuda_launched(ctx, n, e, "rows_kernel");
}

// One contiguous copy of `bytes`.
dfg_status copy_flat(const dfg_node *n, void *dst, const void *src, int64_t bytes, dfg_cuda_ctx *ctx) {
    Rows p = {};
    p.rows = 1, p.nd = 1, p.dims[0] = 1;
    return launch_rows(n, dst, src, p, bytes, ctx);
}

template <class T>
dfg_status launch_transpose(const dfg_node *n, void *out, const void *in, const Trans &p, dfg_cuda_ctx *ctx) {
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 8;
    unsigned grid = (unsigned)(p.tiles < cap ? p.tiles : cap);
    cudaError_t e = DFG_LAUNCH(transpose_kernel<T>, grid, dim3(kTile, kTileRows), 0, stream_of(ctx), (T *)out,
                               (const T *)in, p);
    return dfg_cuda_launched(ctx, n, e, "transpose_kernel");
}

template <class T>
dfg_status launch_repeat(const dfg_node *n, void *out, const void *in, Rows p, int64_t cols, dfg_cuda_ctx *ctx) {
    p.narrow = p.rows <= (int64_t)UINT32_MAX;
    cudaError_t e = DFG_LAUNCH(repeat_kernel<T>, dfg_grid_for(p.rows * cols, kThreads, ctx), kThreads, 0,
                               stream_of(ctx), (T *)out, (const T *)in, p, cols);
    return dfg_cuda_launched(ctx, n, e, "repeat_kernel");
}

// (outer, len, inner) around `axis`
void split_axis(dfg_shape s, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = 1, *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s.d[i];
    *len = s.d[axis];
    for (int i = axis + 1; i < s.rank; i++) *inner *= s.d[i];
}

} // namespace

// ================================================================ launchers
// reshape and detach: views, so nothing to do unless the output has bytes of its own
DFG_CUDA_LAUNCHER(reshape) {
    if (out[0] == in[0]) return DFG_OK;
    return copy_flat(n, out[0], in[0], (int64_t)dfg_tensor_bytes(n->out[0]), ctx);
}

DFG_CUDA_LAUNCHER(permute) {
    const dfg_shape is = n->in[0]->shape;
    const size_t esz = dfg_dtype_size(n->in[0]->dtype);
    const int r = is.rank;
    if (dfg_shape_numel(is) == 0) return DFG_OK;
    // drop dims of size 1; merge output dims that are adjacent and in order in the input too
    int id[DFG_MAX_RANK], m = 0, q[DFG_MAX_RANK], mq = 0;
    for (int d = 0; d < r; d++) id[d] = is.d[d] > 1 ? m++ : -1;
    for (int k = 0; k < r; k++)
        if (id[n->attr->permute.perm[k]] >= 0) q[mq++] = id[n->attr->permute.perm[k]];
    int first[DFG_MAX_RANK], ng = 0;  // per group (output order): its first kept input dim
    int64_t gsz[DFG_MAX_RANK];        // its size
    int kept_dim[DFG_MAX_RANK];       // kept input dim -> the dim of the input it is
    for (int d = 0; d < r; d++)
        if (id[d] >= 0) kept_dim[id[d]] = (int)d;
    for (int j = 0; j < mq; j++) {
        int64_t size = is.d[kept_dim[q[j]]];
        if (j > 0 && q[j] == q[j - 1] + 1) gsz[ng - 1] *= size;
        else first[ng] = q[j], gsz[ng++] = size;
    }
    if (ng <= 1) return copy_flat(n, out[0], in[0], (int64_t)dfg_tensor_bytes(n->out[0]), ctx);
    // P[k]: the input position of output group k; input strides istr, output strides ostr (elements)
    int P[DFG_MAX_RANK];
    int64_t isize[DFG_MAX_RANK], istr[DFG_MAX_RANK], ostr[DFG_MAX_RANK];
    for (int k = 0; k < ng; k++) {
        P[k] = 0;
        for (int j = 0; j < ng; j++) P[k] += first[j] < first[k];
        isize[P[k]] = gsz[k];
    }
    istr[ng - 1] = 1, ostr[ng - 1] = 1;
    for (int i = ng - 2; i >= 0; i--) istr[i] = istr[i + 1] * isize[i + 1], ostr[i] = ostr[i + 1] * gsz[i + 1];
    if (P[ng - 1] == ng - 1) { // the innermost dim stays: copy rows of gsz[ng - 1] elements
        Rows p = {};
        p.nd = ng - 1, p.rows = 1, p.dst_pitch = gsz[ng - 1] * (int64_t)esz;
        for (int k = 0; k < ng - 1; k++) p.dims[k] = gsz[k], p.src_st[k] = istr[P[k]] * (int64_t)esz, p.rows *= gsz[k];
        return launch_rows(n, out[0], in[0], p, p.dst_pitch, ctx);
    }
    Trans t = {};
    int qa = 0; // the output position of the input's innermost dim
    while (P[qa] != ng - 1) qa++;
    t.B = gsz[ng - 1], t.in_b = istr[P[ng - 1]], t.A = gsz[qa], t.out_a = ostr[qa];
    t.ta = (t.A + kTile - 1) / kTile, t.tb = (t.B + kTile - 1) / kTile, t.tiles = t.ta * t.tb;
    for (int k = 0; k < ng - 1; k++)
        if (k != qa) {
            t.bdims[t.nb] = gsz[k], t.bin[t.nb] = istr[P[k]], t.bout[t.nb] = ostr[k], t.nb++;
            t.tiles *= gsz[k];
        }
    switch (esz) {
    case 4: return launch_transpose<uint32_t>(n, out[0], in[0], t, ctx);
    case 2: return launch_transpose<uint16_t>(n, out[0], in[0], t, ctx);
    case 1: return launch_transpose<uint8_t>(n, out[0], in[0], t, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "elements of %zu bytes", esz);
    }
}

// inputs x [, start (i32 read on the device: one, or (B) one a row along axis 1, whose outer index
// is the row)]
DFG_CUDA_LAUNCHER(slice) {
    int64_t outer, total, inner, len = n->attr->slice.len, start = n->attr->slice.start;
    split_axis(n->in[0]->shape, n->attr->slice.axis, &outer, &total, &inner);
    const int64_t esz = (int64_t)dfg_dtype_size(n->in[0]->dtype), row = len * inner * esz;
    Rows p = {};
    p.rows = outer, p.nd = 1, p.dims[0] = outer, p.src_st[0] = total * inner * esz, p.dst_pitch = row;
    if (n->n_in == 2) {
        p.start = (const int32_t *)in[1], p.start_max = total - len, p.start_bytes = inner * esz, start = 0;
        p.start_rows = dfg_shape_numel(n->in[1]->shape) > 1;
    } else if (start < 0 || start + len > total) {
        return dfg_cuda_fail(ctx, n, DFG_ERR_RANGE, "rows [%lld, %lld) of '%s' are outside its %lld rows",
                             (long long)start, (long long)(start + len), n->in[0]->name, (long long)total);
    }
    return launch_rows(n, out[0], (const char *)in[0] + start * inner * esz, p, row, ctx);
}

// inputs x0, x1, ... of one dtype, equal but along the axis: one row copy per input
DFG_CUDA_LAUNCHER(concat) {
    const int ax = n->attr->concat.axis;
    int64_t outer, total, inner, off = 0;
    split_axis(n->out[0]->shape, ax, &outer, &total, &inner);
    const int64_t esz = (int64_t)dfg_dtype_size(n->out[0]->dtype);
    for (int i = 0; i < n->n_in; i++) {
        const int64_t len = n->in[i]->shape.d[ax], row = len * inner * esz;
        Rows p = {};
        p.rows = outer, p.nd = 1, p.dims[0] = outer, p.src_st[0] = row, p.dst_pitch = total * inner * esz;
        dfg_status st = launch_rows(n, (char *)out[0] + off * inner * esz, in[i], p, row, ctx);
        if (st) return st;
        off += len;
    }
    return DFG_OK;
}

// x broadcast to the target shape: rows of the runs the input has in full, or (a broadcast
// innermost dim) each row one repeated element
DFG_CUDA_LAUNCHER(expand) {
    const dfg_shape os = n->out[0]->shape, is = n->in[0]->shape;
    const int64_t esz = (int64_t)dfg_dtype_size(n->in[0]->dtype);
    if (dfg_shape_numel(os) == 0) return DFG_OK;
    int64_t st[DFG_MAX_RANK], d[DFG_MAX_RANK], s[DFG_MAX_RANK], acc = 1;
    for (int i = os.rank - 1; i >= 0; i--) { // the input's strides along the output's dims, 0 where broadcast
        int k = is.rank - os.rank + i;
        int64_t dim = k >= 0 ? is.d[k] : 1;
        st[i] = dim == 1 ? 0 : acc;
        acc *= dim;
    }
    int m = 0; // collapsed dims: drop size 1, merge where the strides continue
    for (int i = 0; i < os.rank; i++) {
        if (os.d[i] == 1) continue;
        if (m > 0 && s[m - 1] == st[i] * os.d[i]) d[m - 1] *= os.d[i], s[m - 1] = st[i];
        else d[m] = os.d[i], s[m] = st[i], m++;
    }
    if (m == 0) d[0] = 1, s[0] = 1, m = 1; // one element
    Rows p = {};
    p.nd = m > 1 ? m - 1 : 1, p.rows = 1, p.dims[0] = 1;
    for (int i = 0; i < m - 1; i++) p.dims[i] = d[i], p.src_st[i] = s[i] * esz, p.rows *= d[i];
    const int64_t cols = d[m - 1];
    if (s[m - 1] == 1) { // rows of cols elements, each contiguous in the input
        p.dst_pitch = cols * esz;
        return launch_rows(n, out[0], in[0], p, cols * esz, ctx);
    }
    switch (esz) {
    case 4: return launch_repeat<uint32_t>(n, out[0], in[0], p, cols, ctx);
    case 2: return launch_repeat<uint16_t>(n, out[0], in[0], p, cols, ctx);
    case 1: return launch_repeat<uint8_t>(n, out[0], in[0], p, cols, ctx);
    default: return dfg_cuda_fail(ctx, n, DFG_ERR_UNSUPPORTED, "elements of %lld bytes", (long long)esz);
    }
}
