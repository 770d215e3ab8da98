/* nf4.h - bitsandbytes' NF4 tables (QLoRA's 4-bit NormalFloat), shared by the quantisers and the
 * shape rule (ops/nf4.c), the CPU kernel (ops/cpu/nf4.c) and the CUDA kernel (ops/cuda/nf4.cu). They
 * are value lists (macros), so that the C files make plain arrays of them and the CUDA file
 * __constant__ ones from the same lines.
 *
 * Read from bitsandbytes (github.com/bitsandbytes-foundation/bitsandbytes, commit 95f9af30):
 *   - csrc/kernels.cu, nf4_dequantization_lut: the 16 codes below (create_normal_map(offset=
 *     0.9677083, use_extra_value=True), bitsandbytes/functional.py), in code order: code q is
 *     DFG_NF4_CODE[q], sorted, 7 being 0.0;
 *   - csrc/kernels.cu, dQuantizeNF4: a binary tree of `x > t` tests whose 15 thresholds are the
 *     f32 literals below, the midpoints of neighbouring codes printed with 16 digits. Each is one
 *     of the two floats nearest its midpoint; 7 midpoints lie exactly halfway between two floats,
 *     and the decimal literal, rounded straight to f32 by the compiler, takes the side its last
 *     digit falls on: for k = 0, 8, 12 and 14 not the even one that (float)midpoint would give
 *     (the Python float32 of the same decimal, rounded twice, is off there too). dfg keeps the literals
 *     verbatim, so its thresholds are bitsandbytes' bits. A value exactly at a threshold takes
 *     the LOWER code; a NaN fails every test and takes code 0;
 *   - bitsandbytes/functional.py, create_dynamic_map(signed=True, max_exponent_bits=7,
 *     total_bits=8): the 256-entry map the absmax values are quantised with under double
 *     quantisation (quantize_4bit(compress_statistics=True) -> quantize_blockwise(blocksize=256)).
 *     Its values are what torch's f32 arithmetic gives (torch.linspace(0.1, 1, 2^i + 1), the means
 *     of neighbours, times 10^(i-6)), generated with torch 1.13 and printed with 9 digits (exact
 *     for f32); tests/golden/nf4_golden.py rebuilds the map with torch and requires it bit for bit.
 *     Sorted: 127 negative values, 0.0 at 127, 127 positive ones, 1.0 at 255. */
#ifndef DFG_NF4_H
#define DFG_NF4_H

/* the value of each 4-bit code, (16) */
#define DFG_NF4_CODE_VALUES                                                                          \
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f, \
        -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, \
        0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,        \
        0.7229568362236023f, 1.0f

/* dQuantizeNF4's thresholds, (15): t[k] separates codes k and k + 1 (x > t[k]: k + 1 or above) */
#define DFG_NF4_THRESHOLD_VALUES                                                                      \
    -0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,           \
        -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,     \
        0.1202552504837513f, 0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,            \
        0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f

/* create_dynamic_map(signed=True), (256), sorted */
#define DFG_NF4_DYNAMIC_MAP_VALUES \
    -0.992968738f, -0.978906214f, -0.96484375f, -0.950781226f, \
    -0.936718702f, -0.922656238f, -0.908593774f, -0.89453125f, \
    -0.880468726f, -0.866406202f, -0.852343738f, -0.838281214f, \
    -0.82421875f, -0.810156226f, -0.796093702f, -0.782031238f, \
    -0.767968774f, -0.75390625f, -0.739843786f, -0.725781262f, \
    -0.711718798f, -0.697656274f, -0.68359375f, -0.669531286f, \
    -0.655468762f, -0.641406238f, -0.627343774f, -0.61328125f, \
    -0.599218726f, -0.585156262f, -0.571093798f, -0.557031274f, \
    -0.54296875f, -0.528906226f, -0.514843762f, -0.500781238f, \
    -0.486718774f, -0.47265625f, -0.458593726f, -0.444531262f, \
    -0.430468738f, -0.416406214f, -0.40234375f, -0.388281226f, \
    -0.374218762f, -0.360156238f, -0.346093714f, -0.33203125f, \
    -0.317968726f, -0.303906262f, -0.289843738f, -0.275781274f, \
    -0.26171875f, -0.247656256f, -0.233593762f, -0.219531253f, \
    -0.205468744f, -0.19140625f, -0.177343741f, -0.163281247f, \
    -0.149218753f, -0.135156244f, -0.12109375f, -0.107031256f, \
    -0.0985937491f, -0.0957812443f, -0.0929687545f, -0.0901562497f, \
    -0.0873437524f, -0.0845312476f, -0.0817187428f, -0.078906253f, \
    -0.0760937482f, -0.0732812509f, -0.0704687461f, -0.0676562563f, \
    -0.0648437515f, -0.0620312467f, -0.0592187531f, -0.0564062484f, \
    -0.053593751f, -0.05078125f, -0.047968749f, -0.0451562516f, \
    -0.0423437469f, -0.0395312496f, -0.0367187522f, -0.0339062475f, \
    -0.0310937501f, -0.0282812472f, -0.0254687499f, -0.0226562507f, \
    -0.0198437497f, -0.0170312505f, -0.0142187504f, -0.0114062503f, \
    -0.00971874967f, -0.00915624946f, -0.00859375019f, -0.00803124998f, \
    -0.00746874977f, -0.00690625003f, -0.00634374982f, -0.00578125007f, \
    -0.00521875033f, -0.00465624966f, -0.00409374991f, -0.00353124971f, \
    -0.00296874996f, -0.00240624999f, -0.00184375001f, -0.00128124992f, \
    -0.000943750085f, -0.000831249985f, -0.00071875006f, -0.000606250076f, \
    -0.000493750034f, -0.000381250022f, -0.000268750038f, -0.000156250011f, \
    -8.87499991e-05f, -6.62500024e-05f, -4.37499984e-05f, -2.12499981e-05f, \
    -7.7499999e-06f, -3.25000019e-06f, -5.50000038e-07f, 0.0f, \
    5.50000038e-07f, 3.25000019e-06f, 7.7499999e-06f, 2.12499981e-05f, \
    4.37499984e-05f, 6.62500024e-05f, 8.87499991e-05f, 0.000156250011f, \
    0.000268750038f, 0.000381250022f, 0.000493750034f, 0.000606250076f, \
    0.00071875006f, 0.000831249985f, 0.000943750085f, 0.00128124992f, \
    0.00184375001f, 0.00240624999f, 0.00296874996f, 0.00353124971f, \
    0.00409374991f, 0.00465624966f, 0.00521875033f, 0.00578125007f, \
    0.00634374982f, 0.00690625003f, 0.00746874977f, 0.00803124998f, \
    0.00859375019f, 0.00915624946f, 0.00971874967f, 0.0114062503f, \
    0.0142187504f, 0.0170312505f, 0.0198437497f, 0.0226562507f, \
    0.0254687499f, 0.0282812472f, 0.0310937501f, 0.0339062475f, \
    0.0367187522f, 0.0395312496f, 0.0423437469f, 0.0451562516f, \
    0.047968749f, 0.05078125f, 0.053593751f, 0.0564062484f, \
    0.0592187531f, 0.0620312467f, 0.0648437515f, 0.0676562563f, \
    0.0704687461f, 0.0732812509f, 0.0760937482f, 0.078906253f, \
    0.0817187428f, 0.0845312476f, 0.0873437524f, 0.0901562497f, \
    0.0929687545f, 0.0957812443f, 0.0985937491f, 0.107031256f, \
    0.12109375f, 0.135156244f, 0.149218753f, 0.163281247f, \
    0.177343741f, 0.19140625f, 0.205468744f, 0.219531253f, \
    0.233593762f, 0.247656256f, 0.26171875f, 0.275781274f, \
    0.289843738f, 0.303906262f, 0.317968726f, 0.33203125f, \
    0.346093714f, 0.360156238f, 0.374218762f, 0.388281226f, \
    0.40234375f, 0.416406214f, 0.430468738f, 0.444531262f, \
    0.458593726f, 0.47265625f, 0.486718774f, 0.500781238f, \
    0.514843762f, 0.528906226f, 0.54296875f, 0.557031274f, \
    0.571093798f, 0.585156262f, 0.599218726f, 0.61328125f, \
    0.627343774f, 0.641406238f, 0.655468762f, 0.669531286f, \
    0.68359375f, 0.697656274f, 0.711718798f, 0.725781262f, \
    0.739843786f, 0.75390625f, 0.767968774f, 0.782031238f, \
    0.796093702f, 0.810156226f, 0.82421875f, 0.838281214f, \
    0.852343738f, 0.866406202f, 0.880468726f, 0.89453125f, \
    0.908593774f, 0.922656238f, 0.936718702f, 0.950781226f, \
    0.96484375f, 0.978906214f, 0.992968738f, 1.0f

#endif
