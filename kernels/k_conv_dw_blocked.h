/* k_conv_dw_blocked.h — the depthwise forward on channel-blocked tensors for one block width
 * and one instruction set. Not a normal header: k_conv_dw_isa.h includes it twice per
 * instruction set, inside that set's K_DW_ATTR and K_DW_SFX, after defining
 *   KDWB_V  the block width (8 or 16: passes/pass_layout.c's [N][ceil(C / V)][H][W][V]),
 * and it defines k_dw_brows_<V>_<sfx>, then undefines KDWB_V.
 *
 * A block's V channels are a vector's lanes, so every tap is one vector multiply-add per
 * output position, whatever the stride, padding and plane size (MobileNet's 7x7 planes too),
 * with no phase planes and no conversion to NCHW and back around the layer. */

#define KDWB_CAT3(a, b, c) a##_##b##_##c
#define KDWB_CAT(a, b, c) KDWB_CAT3(a, b, c)
#define KDWB(name) KDWB_CAT(name, KDWB_V, K_DW_SFX)
#define KDWB_T 8   /* output positions a tile holds in registers */
/* Whether kdwb_tile_k's registers for a row of kw taps fit the instruction set's: T
 * accumulators, kw weights and about three inputs live, each KDWB_V / K_DW_V native vectors
 * (16 of them on AVX2 and SSE, 32 on AVX-512). */
#define KDWB_NATIVE (KDWB_V > K_DW_V ? KDWB_V / K_DW_V : 1)
#define KDWB_FITS(kw) (((KDWB_T + (kw) + 3) * KDWB_NATIVE) <= (K_DW_V == 16 ? 32 : 16))

typedef float KDWB(kdwb_vec) __attribute__((vector_size(KDWB_V * sizeof(float))));
typedef int32_t KDWB(kdwb_ivec) __attribute__((vector_size(KDWB_V * sizeof(int32_t))));
#define KDWB_VEC KDWB(kdwb_vec)
#define KDWB_IVEC KDWB(kdwb_ivec)

K_DW_ATTR K_DW_INLINE KDWB_VEC KDWB(kdwb_ld)(const float *p) {
  KDWB_VEC v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* v as the epilogue's relu or clip leaves it (t NULL: as it is; k_epilogue.h's selects, so the
 * bits of the epilogue's pass, without the pass: the block's rows are stored once). */
K_DW_ATTR K_DW_INLINE KDWB_VEC KDWB(kdwb_tail)(KDWB_VEC v, const k_epi_store *t) {
  if (!t) return v;
  if (t->relu) v = K_EPI_VRELU(KDWB_VEC, KDWB_IVEC, v);
  if (t->clip) {
    KDWB_VEC lo = (KDWB_VEC){0} + t->clip_lo, hi = (KDWB_VEC){0} + t->clip_hi;
    v = K_EPI_VCLIP_LO(KDWB_VEC, KDWB_IVEC, v, lo);
    v = K_EPI_VCLIP_HI(KDWB_VEC, KDWB_IVEC, v, hi);
  }
  return v;
}

/* T neighbouring output positions [ow, ow + T) of row oh, every tap inside the row's columns
 * (the caller checks): T accumulators, each weight vector loaded once for all of them. A row
 * of taps outside the input adds w * 0 to each, as the zero-padded phase planes of the NCHW
 * path do. */
K_DW_ATTR K_DW_INLINE void KDWB(kdwb_tile)(const k_dw_bgeom *g, const float *x, const float *wv, KDWB_VEC b,
                                           const k_epi_store *tail, float *y, int64_t oh, int64_t ow, const int T) {
  KDWB_VEC acc[KDWB_T];
  for (int t = 0; t < T; t++) acc[t] = b;
  for (int64_t ki = 0; ki < g->kh; ki++) {
    int64_t ih = oh * g->sh - g->ph + ki * g->dh;
    const float *xr = x + (ih * g->W + ow * g->sw - g->pw) * KDWB_V;
    int inside = ih >= 0 && ih < g->H;
    for (int64_t kj = 0; kj < g->kw; kj++) {
      KDWB_VEC w = KDWB(kdwb_ld)(wv + (ki * g->kw + kj) * KDWB_V);
      const float *xp = xr + kj * g->dw * KDWB_V;
      for (int t = 0; t < T; t++) acc[t] += w * (inside ? KDWB(kdwb_ld)(xp + t * g->sw * KDWB_V) : (KDWB_VEC){0});
    }
  }
  for (int t = 0; t < T; t++) acc[t] = KDWB(kdwb_tail)(acc[t], tail);
  for (int t = 0; t < T; t++) memcpy(y + (oh * g->OW + ow + t) * KDWB_V, &acc[t], sizeof acc[t]);
}

/* The same tile at column stride 1 and dilation 1 for a row of KW taps (3 or 5) known at
 * compile time: a row's KW weight vectors loaded once, and each of its T + KW - 1 input vectors
 * loaded once for the KW accumulators that read it (the tile above loads one per multiply-add,
 * which left the load ports the bound: 9 loads for 8 multiply-adds; this took MNASNet's
 * depthwise layers from 1.26 to 0.89 ms on a Zen 4). Each accumulator adds the same terms in
 * the same order as there, so the same bits. At stride 2 the same scheme was slower (MNASNet's
 * four stride-2 layers 197 -> 227 us), so those keep the tile above; so does a KW whose
 * accumulators, weights and a few inputs would not fit the registers (KDWB_FITS). */
K_DW_ATTR K_DW_INLINE void KDWB(kdwb_tile_k)(const k_dw_bgeom *g, const float *x, const float *wv, KDWB_VEC b,
                                             const k_epi_store *tail, float *y, int64_t oh, int64_t ow, const int KW,
                                             const int T) {
  KDWB_VEC acc[KDWB_T];
  for (int t = 0; t < T; t++) acc[t] = b;
  for (int64_t ki = 0; ki < g->kh; ki++) {
    int64_t ih = oh * g->sh - g->ph + ki * g->dh;
    const float *xr = x + (ih * g->W + ow - g->pw) * KDWB_V;
    int inside = ih >= 0 && ih < g->H;
    KDWB_VEC w[5], xv[KDWB_T + 4];
    for (int kj = 0; kj < KW; kj++) w[kj] = KDWB(kdwb_ld)(wv + (ki * KW + kj) * KDWB_V);
    for (int i = 0; i < T + KW - 1; i++) xv[i] = inside ? KDWB(kdwb_ld)(xr + i * KDWB_V) : (KDWB_VEC){0};
    for (int t = 0; t < T; t++)
      for (int kj = 0; kj < KW; kj++) acc[t] += w[kj] * xv[t + kj];
  }
  for (int t = 0; t < T; t++) acc[t] = KDWB(kdwb_tail)(acc[t], tail);
  for (int t = 0; t < T; t++) memcpy(y + (oh * g->OW + ow + t) * KDWB_V, &acc[t], sizeof acc[t]);
}

/* T output positions (oh[t], ow[t]) whose taps may fall outside the input in either axis:
 * a tap outside adds w * 0, as in the tile, so each position gets the tile's sum term for term.
 * The positions are independent accumulators: one edge position at a time was a chain of
 * dependent multiply-adds, 6% of MNASNet's time on its 7x7 and 14x14 planes. */
K_DW_ATTR K_DW_INLINE void KDWB(kdwb_edges)(const k_dw_bgeom *g, const float *x, const float *wv, KDWB_VEC b,
                                            const k_epi_store *tail, float *y, const int64_t *oh, const int64_t *ow,
                                            const int T) {
  KDWB_VEC acc[KDWB_T];
  for (int t = 0; t < T; t++) acc[t] = b;
  for (int64_t ki = 0; ki < g->kh; ki++)
    for (int64_t kj = 0; kj < g->kw; kj++) {
      KDWB_VEC w = KDWB(kdwb_ld)(wv + (ki * g->kw + kj) * KDWB_V);
      for (int t = 0; t < T; t++) {
        int64_t ih = oh[t] * g->sh - g->ph + ki * g->dh, iw = ow[t] * g->sw - g->pw + kj * g->dw;
        int in = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W;
        acc[t] += w * (in ? KDWB(kdwb_ld)(x + (ih * g->W + iw) * KDWB_V) : (KDWB_VEC){0});
      }
    }
  for (int t = 0; t < T; t++) acc[t] = KDWB(kdwb_tail)(acc[t], tail);
  for (int t = 0; t < T; t++) memcpy(y + (oh[t] * g->OW + ow[t]) * KDWB_V, &acc[t], sizeof acc[t]);
}

#define KDWB_ECASE(T) case T: KDWB(kdwb_edges)(g, x, wv, b, tail, y, eh, ew, T); break;

/* The edge positions queued in eh/ew (n of them), computed KDWB_T at a time. */
K_DW_ATTR static void KDWB(kdwb_edge_flush)(const k_dw_bgeom *g, const float *x, const float *wv, KDWB_VEC b,
                                            const k_epi_store *tail, float *y, const int64_t *eh, const int64_t *ew, int n) {
  switch (n) { KDWB_ECASE(1) KDWB_ECASE(2) KDWB_ECASE(3) KDWB_ECASE(4) KDWB_ECASE(5) KDWB_ECASE(6) KDWB_ECASE(7) KDWB_ECASE(8) }
}

#undef KDWB_ECASE

#define KDWB_CASE(T)                                                              \
  case T:                                                                         \
    if (kw == 3) KDWB(kdwb_tile_k)(g, x, wv, b, tail, y, oh, ow, 3, T);          \
    else if (kw == 5) KDWB(kdwb_tile_k)(g, x, wv, b, tail, y, oh, ow, 5, T);     \
    else KDWB(kdwb_tile)(g, x, wv, b, tail, y, oh, ow, T);                        \
    break;

/* Rows [oh0, oh1) of one channel block's output y [OH][OW][V] from its input x [H][W][V], the
 * taps' weights wv [kh*kw][V] and the bias bias [V]. Each output vector is 0 + bias, then
 * + w_t * x_t over the taps t in the weights' order, one multiply-add each (contracted into an
 * FMA where K_DW_ATTR allows it, as k_dw_sum's are): k_dw_sum's sum term for term, so the same
 * bits as the NCHW path; then the epilogue's relu or clip when tail says so (NULL: none). The
 * columns whose every tap lies inside the row run in tiles of up to KDWB_T positions; the
 * others, at the edges, are queued and run KDWB_T at a time. */
K_DW_ATTR static void KDWB(k_dw_brows)(const k_dw_bgeom *g, const float *x, const float *wv, const float *bias,
                                       const k_epi_store *tail, float *y, int64_t oh0, int64_t oh1) {
  KDWB_VEC b = (KDWB_VEC){0} + KDWB(kdwb_ld)(bias);
  int64_t lo, hi;
  k_dwb_interior(g, &lo, &hi);
  int64_t eh[KDWB_T], ew[KDWB_T];
  int ne = 0;
  int64_t kw = g->sw == 1 && g->dw == 1 && KDWB_FITS(g->kw) ? g->kw : 0;   /* 3 or 5: kdwb_tile_k's */
  for (int64_t oh = oh0; oh < oh1; oh++) {
    for (int64_t ow = 0; ow < g->OW; ow++) {   /* the edge columns [0, lo) and [hi, OW) */
      if (ow == lo) ow = hi;
      if (ow == g->OW) break;
      eh[ne] = oh, ew[ne] = ow;
      if (++ne == KDWB_T) KDWB(kdwb_edge_flush)(g, x, wv, b, tail, y, eh, ew, ne), ne = 0;
    }
    for (int64_t ow = lo; ow < hi;) {
      int64_t T = hi - ow < KDWB_T ? hi - ow : KDWB_T;
      switch (T) { KDWB_CASE(1) KDWB_CASE(2) KDWB_CASE(3) KDWB_CASE(4) KDWB_CASE(5) KDWB_CASE(6) KDWB_CASE(7) KDWB_CASE(8) }
      ow += T;
    }
  }
  if (ne) KDWB(kdwb_edge_flush)(g, x, wv, b, tail, y, eh, ew, ne);
}

#undef KDWB_CASE
#undef KDWB_VEC
#undef KDWB_IVEC
#undef KDWB_FITS
#undef KDWB_NATIVE
#undef KDWB_T
#undef KDWB
#undef KDWB_CAT
#undef KDWB_CAT3
#undef KDWB_V
