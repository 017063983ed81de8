/* k_philox.h — Philox4x32-10, the counter-based generator behind every random draw.
 * Header-only and free of libc so the GPU back end can paste it into NVRTC source: CPU and
 * GPU then draw the same numbers for the same (seed, counter, element index). */
#ifndef KILN_K_PHILOX_H
#define KILN_K_PHILOX_H

#include "k_base.h"   /* the integer types, also under NVRTC */

typedef struct { uint32_t v[4]; } k_philox4;

static inline uint32_t k_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

/* Ten rounds of Philox4x32 (Salmon et al., SC'11) with its published constants. */
static inline k_philox4 k_philox4x32(k_philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = k_philox_mulhilo(0xD2511F53u, ctr.v[0], &hi0);
    uint32_t lo1 = k_philox_mulhilo(0xCD9E8D57u, ctr.v[2], &hi1);
    k_philox4 n = {{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    ctr = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/* The block for element i of a draw: counter words are (i, i>>32, counter, counter>>32). */
static inline k_philox4 k_philox_block(uint64_t seed, uint64_t counter, uint64_t i) {
  k_philox4 c = {{(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)counter, (uint32_t)(counter >> 32)}};
  return k_philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in [0, 1) with 24 random bits; element i uses lane i&3 of block i>>2. */
static inline float k_philox_uniform(uint64_t seed, uint64_t counter, uint64_t i) {
  k_philox4 b = k_philox_block(seed, counter, i >> 2);
  return (float)(b.v[i & 3] >> 8) * (1.0f / 16777216.0f);
}

#endif
