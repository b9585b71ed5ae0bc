/* data_sample.c: the synthetic dataset, pd_sample_fill().
 *
 * A sample is a pure function of (seed, index): a counter-based hash (splitmix64's
 * finalizer) gives every random number from (seed, index, lane), so any worker can
 * make any sample, in any order, with the same bits. No global RNG state, no rand().
 *
 * Speed matters: outside the dataloader scenario, data loading must not interfere
 * (PRD 4.2), and two workers have to keep ahead of a step of about 0.25 ms on an H200.
 * So the pixel noise is read from a fixed table of 65536 N(0, 1) values (made once,
 * from a fixed seed) along a per-sample odd stride from a per-sample offset: 3072
 * distinct entries per channel walk, one load per pixel instead of a hash.
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
#include <pthread.h>
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
 * the n-th output of the stream starting at `base`. */
static inline uint64_t pd_wyrand_at(uint64_t base, uint64_t n) {
  const uint64_t state = base + (n + 1) * 0xA0761D6478BD642Full;
  const __uint128_t r = (__uint128_t)state * (state ^ 0xE7037ED1A0B428DBull);
  return (uint64_t)(r >> 64) ^ (uint64_t)r;
}

#define PD_NOISE_TABLE_BITS 16
#define PD_NOISE_TABLE_SIZE (1u << PD_NOISE_TABLE_BITS)
static float pd_noise_table[PD_NOISE_TABLE_SIZE];
static pthread_once_t pd_noise_once = PTHREAD_ONCE_INIT;

/* Fills the table once per process (any worker may be first): Irwin-Hall sums of four
 * 16-bit uniforms, standardized, from a fixed seed, so every process has the same table. */
static void pd_noise_table_init(void) {
  const double sd = sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0);
  for (uint32_t i = 0; i < PD_NOISE_TABLE_SIZE; i++) {
    const uint64_t h = pd_wyrand_at(0x6E6F697365ull, i);
    const double u = (double)(h & 0xFFFF) + (double)((h >> 16) & 0xFFFF) + (double)((h >> 32) & 0xFFFF) +
                     (double)(h >> 48);
    pd_noise_table[i] = (float)((u - 2.0 * 65535.0) / sd);
  }
}

/* Uniform in [0, 1) from the top 53 bits. */
static inline double pd_unit(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

/* The label depends on the index alone, so it is the same under every seed. */
static int32_t pd_sample_label(int64_t index) {
  return (int32_t)(pd_mix64((uint64_t)index ^ 0x6C6162656C5F7064ull) % PD_CNN_CLASSES);
}

void pd_sample_fill(uint64_t seed, int64_t index, int cpu_work, float *image, int32_t *label) {
  pthread_once(&pd_noise_once, pd_noise_table_init);
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
    /* The channel's walk through the noise table: an odd stride visits 3072 distinct
     * entries of the 65536. */
    const uint64_t walk = pd_mix64(key + 0x200u + (uint64_t)c);
    const uint32_t mask = PD_NOISE_TABLE_SIZE - 1;
    uint32_t at = (uint32_t)walk & mask;
    const uint32_t stride = ((uint32_t)(walk >> 32) & mask) | 1u;
    /* Single precision from here on: the values are stored as float anyway. */
    const float amp = (float)(PD_SAMPLE_AMPLITUDE * scale);
    const float sigma = (float)(PD_SAMPLE_NOISE_SIGMA * scale);
    float fsx[PD_CNN_IMAGE_W], fcx[PD_CNN_IMAGE_W];
    for (int x = 0; x < PD_CNN_IMAGE_W; x++) {
      fsx[x] = (float)sx[x] * amp;
      fcx[x] = (float)cx[x] * amp;
    }
    for (int y = 0; y < PD_CNN_IMAGE_H; y++) {
      const float fcy = (float)cy[y], fsy = (float)sy[y];
      float *row = plane + y * PD_CNN_IMAGE_W;
      for (int x = 0; x < PD_CNN_IMAGE_W; x++) {
        row[x] = fsx[x] * fcy + fcx[x] * fsy + sigma * pd_noise_table[at] + tweak;
        at = (at + stride) & mask;
      }
    }
  }
  *label = cls;
}
