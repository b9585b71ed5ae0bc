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
    /* sin(kx x + ky y + phase) = sin(kx x + phase) cos(ky y) + cos(kx x + phase) sin(ky y):
     * 4 x 32 trig calls per channel instead of 1024. */
    double sx[PD_CNN_IMAGE_W], cx[PD_CNN_IMAGE_W], sy[PD_CNN_IMAGE_H], cy[PD_CNN_IMAGE_H];
    for (int x = 0; x < PD_CNN_IMAGE_W; x++) {
      sx[x] = sin(kx * x + phase);
      cx[x] = cos(kx * x + phase);
    }
    for (int y = 0; y < PD_CNN_IMAGE_H; y++) {
      sy[y] = sin(ky * y);
      cy[y] = cos(ky * y);
    }
    float *plane = image + (size_t)c * hw;
    const uint64_t noise_base = pd_mix64(key + 0x200u + (uint64_t)c);
    for (int y = 0; y < PD_CNN_IMAGE_H; y++) {
      for (int x = 0; x < PD_CNN_IMAGE_W; x++) {
        const int p = y * PD_CNN_IMAGE_W + x;
        /* Irwin-Hall: four 16-bit uniforms from one hash, sum has mean 2, variance 1/3. */
        const uint64_t h = pd_mix64(noise_base + (uint64_t)p);
        const double u = (double)(h & 0xFFFF) + (double)((h >> 16) & 0xFFFF) +
                         (double)((h >> 32) & 0xFFFF) + (double)(h >> 48);
        const double noise = (u / 65536.0 - 2.0) * 1.7320508075688772; /* sqrt(3) */
        const double signal = sx[x] * cy[y] + cx[x] * sy[y];
        plane[p] = (float)((PD_SAMPLE_AMPLITUDE * signal + PD_SAMPLE_NOISE_SIGMA * noise) * scale) +
                   tweak;
      }
    }
  }
  *label = cls;
}
