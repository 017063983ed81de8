/* test_vec.c — k_vec.h's building blocks against their plain definitions: k_lanes_sum adds
 * lane i + w into lane i for w = 8, 4, 2, 1 (bit for bit, with values whose sum depends on
 * the order), and k_store_block writes or adds exactly n floats at every length around the
 * vector width, touching nothing past them. */
#include <math.h>
#include <string.h>

#include "kt_harness.h"
#include "k_vec.h"

static float pairwise_sum(const float *in) {
  float l[K_LANES];
  memcpy(l, in, sizeof l);
  for (int w = K_LANES / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) l[i] += l[i + w];
  return l[0];
}

static void test_lanes_sum(void) {
  k_tensor t = kt_tensor_f32(kt_shape(1, 64 * K_LANES), -1, 1, 7);
  float *v = t.data;
  for (int64_t i = 0; i < 64 * K_LANES; i += 3) v[i] *= 1e7f;   /* order-sensitive sums */
  int same = 1;
  for (int r = 0; r < 64; r++) {
    float l[K_LANES], want = pairwise_sum(v + r * K_LANES);
    memcpy(l, v + r * K_LANES, sizeof l);
    float got = k_lanes_sum(l);
    same &= memcmp(&got, &want, sizeof got) == 0;
  }
  KT_CHECK(same, "k_lanes_sum folds the lanes pairwise, bit for bit");
  float nan_lanes[K_LANES] = {0}, inf_lanes[K_LANES] = {0};
  nan_lanes[13] = NAN;
  inf_lanes[2] = INFINITY;
  KT_CHECK(isnan(k_lanes_sum(nan_lanes)) && k_lanes_sum(inf_lanes) == INFINITY,
           "k_lanes_sum propagates NaN and inf");
  kt_tensor_free(&t);
}

static void test_store_block(void) {
  int64_t lens[] = {0, 1, 15, 16, 17, 31, 32, 33, 255, 256};
  float t[K_BLOCK + 1], y[K_BLOCK + 8];
  for (int i = 0; i <= K_BLOCK; i++) t[i] = (float)i + 0.5f;
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    int64_t n = lens[k];
    for (int req = kWriteTo; req <= kAddTo; req += kAddTo - kWriteTo) {
      for (int i = 0; i < K_BLOCK + 8; i++) y[i] = -1.0f;
      k_store_block(y, t, n, (k_req)req);
      int ok = 1;
      for (int64_t i = 0; i < n; i++) ok &= y[i] == (req == kAddTo ? t[i] - 1.0f : t[i]);
      for (int64_t i = n; i < K_BLOCK + 8; i++) ok &= y[i] == -1.0f;
      KT_CHECK(ok, "k_store_block n=%lld req=%d", (long long)n, req);
    }
  }
}

int main(void) {
  test_lanes_sum();
  test_store_block();
  return kt_finish("vec");
}
