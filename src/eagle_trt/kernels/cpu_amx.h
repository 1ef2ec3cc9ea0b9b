/* AMX (Intel's tile unit: Sapphire Rapids and later) for the CPU kernels: the tile state Linux grants a process on
 * request (arch_prctl), asked once per process, and the one tile layout both users share. Tiles 0-3 hold int32 sums
 * [rows][16 outputs], tile 4 the activation bytes [rows][a_bytes], tiles 5-7 weight bytes [b_rows][64] (b_rows quads
 * of inputs x 16 outputs x 4 bytes, as tdpb*d's second operand reads them). User: cpu_int8.h (the int8 precision,
 * a_bytes 64). Integer tile sums are exact, so a kernel on tiles gives the bits of its vector twin. EAGLE_TRT_AMX=0
 * in the environment keeps a process off the tiles (read at the first ask). Included by cpu_forward.c.
 *
 * Not used by native-q8 (cpu_linear_q8.h): each 32-weight block has its own scales, so a tile's sums would go back
 * through memory to the vector unit after every block. Tried on 2026-11-29 (SmolLM2 Q4_1, one thread, context 128,
 * `eagle-trt profile` with EAGLE_TRT_AMX=1/0 in turn): a 2-row forward 11.7-11.8 ms against 8.0-8.3 on VNNI, 8 rows
 * 14.9-15.4 against 11.9-12.8; one tile product per block waits on the last. Tried again the same day with every
 * block's product of a 16-output group first (four tiles in flight, sums to memory), then each row's scales in one
 * pass (bit-identical): a whole forward 1.30x VNNI's time at 16 rows, 1.17x at 32, 1.02x at 64 (one thread, context
 * 128, both in one process). A 32-input product is too small for the tile unit: zeroing, two loads and the 1 KiB
 * store of its sums cost more than VNNI's 8 vpdpbusd per row and block. */

#if SIMD_AVX512 && defined(__AVX512VNNI__) && defined(__AMX_INT8__) && defined(__AMX_TILE__)
#define HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023 /* arch_prctl: ask Linux for an extended state component */
#define XFEATURE_XTILEDATA 18      /* the AMX tile data */

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) amx_tile_config;

/* This thread's tiles as above: sums and activations `rows` rows, activations a_bytes wide, weights b_rows rows. */
static void amx_configure(int rows, int a_bytes, int b_rows) {
    amx_tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = t < 5 ? (uint8_t)rows : (uint8_t)b_rows;
        c.colsb[t] = t == 4 ? a_bytes : 64;
    }
    _tile_loadconfig(&c);
}

/* 1 where this process may use the tiles: asked of Linux once (the answer holds for every thread, as the permission
 * does), 0 under EAGLE_TRT_AMX=0 or where Linux refuses. */
static int amx_granted(void) {
    static int granted = -1;
    if (granted < 0) {
        const char *env = getenv("EAGLE_TRT_AMX");
        granted = !(env && env[0] == '0') && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return granted;
}
#else
#define HAVE_AMX 0
#endif
