/* data_sample.c: the synthetic dataset, pd_sample_fill().
 *
 * A sample is a pure function of (seed, index): a counter-based hash (splitmix64's
 * finalizer) gives every random number from (seed, index, lane), so any worker can
 * make any sample, in any order, with the same bits. No global RNG state, no rand().
 *
 * The image of class k carries, per channel c, an oriented sinusoid whose angle comes
 * from k (ten orientations 18 degrees apart) and whose frequency comes from c, with a
 * small random phase jitter, plus noise; values are scaled to about N(0, 1). A nearest
 * class mean already separates the classes, so the CNN's loss really falls.
 *
 * `cpu_work` sin/cos iterations model CPU augmentation; their result is added to every
 * pixel (scaled far below the noise) so the compiler cannot drop the work.
 */
#include <math.h>
#include <stdint.h>

#include "pd/pd_cnn.h"
#include "pd/pd_data.h"

#define PD_SAMPLE_PI 3.14159265358979323846

/* Signal amplitude and noise standard deviation: A^2/2 + sigma^2 ~= 1. */
#define PD_SAMPLE_AMPLITUDE 1.0
#define PD_SAMPLE_NOISE_SIGMA 0.7
/* Phase jitter per sample and channel, +-PI/4: the class mean keeps cos(PI/4) ~ 0.7 of
 * the pattern while single samples still differ. */
#define PD_SAMPLE_JITTER (PD_SAMPLE_PI / 4.0)

static inline uint64_t pd_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* wyrand (Wang Yi's counter-based generator: one 64x64->128 multiply per 64 bits):
 * the n-th output of the stream starting at `base`. Cheaper than pd_mix64 for the
 * per-pixel noise, which is otherwise most of a sample's cost. */
static inline uint64_t pd_wyrand_at(uint64_t base, uint64_t n) {
  const uint64_t state = base + (n + 1) * 0xA0761D6478BD642Full;
  const __uint128_t r = (__uint128_t)state * (state ^ 0xE7037ED1A0B428DBull);
  return (uint64_t)(r >> 64) ^ (uint64_t)r;
}

/* Uniform in [0, 1) from the top 53 bits. */
static inline double pd_unit(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

/* The label depends on the index alone, so it is the same under every seed. */
static int32_t pd_sample_label(int64_t index) {
  return (int32_t)(pd_mix64((uint64_t)index ^ 0x6C6162656C5F7064ull) % PD_CNN_CLASSES);
}

void pd_sample_fill(uint64_t seed, int64_t index, int cpu_work, float *image, int32_t *label) {
  const int hw = PD_CNN_IMAGE_H * PD_CNN_IMAGE_W;
  const uint64_t key = pd_mix64(pd_mix64(seed) ^ (uint64_t)index);
  const int32_t cls = pd_sample_label(index);
  const double scale = 1.0 / sqrt(PD_SAMPLE_AMPLITUDE * PD_SAMPLE_AMPLITUDE / 2.0 +
                                   PD_SAMPLE_NOISE_SIGMA * PD_SAMPLE_NOISE_SIGMA);

  /* CPU augmentation stand-in: a dependent chain the optimizer cannot shorten. */
  double acc = pd_unit(pd_mix64(key ^ 0x63707577ull));
  for (int i = 0; i < cpu_work; i++) acc = 0.5 * sin(acc + 1e-3 * i) + 0.5 * cos(acc);
  const float tweak = (float)(acc * 1e-7);

  const double theta = PD_SAMPLE_PI * cls / PD_CNN_CLASSES;
  for (int c = 0; c < PD_CNN_IMAGE_C; c++) {
    const double cycles = 2.0 + c; /* across the image */
    const double kx = 2.0 * PD_SAMPLE_PI * cycles * cos(theta) / PD_CNN_IMAGE_W;
    const double ky = 2.0 * PD_SAMPLE_PI * cycles * sin(theta) / PD_CNN_IMAGE_H;
    const double phase = 0.7 * cls + 1.3 * c +
                         PD_SAMPLE_JITTER * (2.0 * pd_unit(pd_mix64(key + 0x100u + (uint64_t)c)) - 1.0);
    /* sin(kx x + ky y + phase) = sin(kx x + phase) cos(ky y) + cos(kx x + phase) sin(ky y),
     * and each factor steps by a rotation (angle addition), so a channel costs 6 trig
     * calls instead of 2048: the generator must stay far cheaper than a training step
     * (PRD 4.2: outside the dataloader scenario, data loading should not interfere). */
    double sx[PD_CNN_IMAGE_W], cx[PD_CNN_IMAGE_W], sy[PD_CNN_IMAGE_H], cy[PD_CNN_IMAGE_H];
    const double skx = sin(kx), ckx = cos(kx), sky = sin(ky), cky = cos(ky);
    sx[0] = sin(phase);
    cx[0] = cos(phase);
    for (int x = 1; x < PD_CNN_IMAGE_W; x++) {
      sx[x] = sx[x - 1] * ckx + cx[x - 1] * skx;
      cx[x] = cx[x - 1] * ckx - sx[x - 1] * skx;
    }
    sy[0] = 0.0;
    cy[0] = 1.0;
    for (int y = 1; y < PD_CNN_IMAGE_H; y++) {
      sy[y] = sy[y - 1] * cky + cy[y - 1] * sky;
      cy[y] = cy[y - 1] * cky - sy[y - 1] * sky;
    }
    float *plane = image + (size_t)c * hw;
    const uint64_t noise_base = pd_mix64(key + 0x200u + (uint64_t)c);
    /* Single precision from here on: the values are stored as float anyway. */
    const float amp = (float)(PD_SAMPLE_AMPLITUDE * scale);
    /* Irwin-Hall noise: the sum of four uniform bytes has mean 510 and variance
     * 4 * (256^2 - 1) / 12; one hash feeds two pixels. */
    const float sigma = (float)(PD_SAMPLE_NOISE_SIGMA * scale / sqrt(4.0 * (256.0 * 256.0 - 1.0) / 12.0));
    float fsx[PD_CNN_IMAGE_W], fcx[PD_CNN_IMAGE_W];
    for (int x = 0; x < PD_CNN_IMAGE_W; x++) {
      fsx[x] = (float)sx[x] * amp;
      fcx[x] = (float)cx[x] * amp;
    }
    for (int y = 0; y < PD_CNN_IMAGE_H; y++) {
      const float fcy = (float)cy[y], fsy = (float)sy[y];
      for (int x = 0; x < PD_CNN_IMAGE_W; x += 2) {
        const int p = y * PD_CNN_IMAGE_W + x;
        const uint64_t h = pd_wyrand_at(noise_base, (uint64_t)p / 2);
        const uint32_t u0 = (uint32_t)(h & 0xFF) + (uint32_t)((h >> 8) & 0xFF) + (uint32_t)((h >> 16) & 0xFF) +
                            (uint32_t)((h >> 24) & 0xFF);
        const uint32_t u1 = (uint32_t)((h >> 32) & 0xFF) + (uint32_t)((h >> 40) & 0xFF) +
                            (uint32_t)((h >> 48) & 0xFF) + (uint32_t)(h >> 56);
        plane[p] = fsx[x] * fcy + fcx[x] * fsy + sigma * ((float)u0 - 510.0f) + tweak;
        plane[p + 1] = fsx[x + 1] * fcy + fcx[x + 1] * fsy + sigma * ((float)u1 - 510.0f) + tweak;
      }
    }
  }
  *label = cls;
}
