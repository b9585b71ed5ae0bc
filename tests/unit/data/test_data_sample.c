/* test_data_sample.c: pd_sample_fill() is deterministic in (seed, index), has labels
 * 0..9 in about equal shares, values about N(0, 1), a class signal strong enough for a
 * nearest-class-mean classifier, and cpu_work really costs CPU time. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd/pd_cnn.h"
#include "pd/pd_data.h"

#define PIX (PD_CNN_IMAGE_C * PD_CNN_IMAGE_H * PD_CNN_IMAGE_W)

Test(data_sample, same_seed_and_index_give_identical_bits) {
  static float a[PIX], b[PIX];
  int32_t la = -1, lb = -2;
  for (int64_t idx = 0; idx < 50; idx += 7) {
    pd_sample_fill(42, idx, 200, a, &la);
    pd_sample_fill(42, idx, 200, b, &lb);
    cr_expect_eq(la, lb, "index %lld: labels %d vs %d", (long long)idx, la, lb);
    cr_expect(memcmp(a, b, sizeof(a)) == 0, "index %lld: images differ", (long long)idx);
  }
}

Test(data_sample, index_and_seed_change_the_image) {
  static float a[PIX], b[PIX], c[PIX];
  int32_t la, lb, lc;
  pd_sample_fill(1, 10, 0, a, &la);
  pd_sample_fill(1, 11, 0, b, &lb);
  pd_sample_fill(2, 10, 0, c, &lc);
  cr_expect(memcmp(a, b, sizeof(a)) != 0, "two indices gave the same image");
  cr_expect(memcmp(a, c, sizeof(a)) != 0, "two seeds gave the same image");
  cr_expect_eq(la, lc, "the label must depend on the index only: %d vs %d", la, lc);
}

Test(data_sample, labels_cover_ten_classes_evenly) {
  static float img[PIX];
  int counts[PD_CNN_CLASSES] = {0};
  const int n = 5000;
  for (int i = 0; i < n; i++) {
    int32_t l = -1;
    pd_sample_fill(0, i, 0, img, &l);
    cr_assert(l >= 0 && l < PD_CNN_CLASSES, "label %d out of range at index %d", l, i);
    counts[l]++;
  }
  for (int k = 0; k < PD_CNN_CLASSES; k++) {
    /* 500 expected; a binomial sd is 21, so 400..600 is about 5 sd. */
    cr_expect(counts[k] > 400 && counts[k] < 600, "class %d has %d of %d samples", k, counts[k], n);
  }
}

Test(data_sample, values_are_about_standard_normal) {
  static float img[PIX];
  double sum = 0, sum2 = 0;
  const int n = 400;
  for (int i = 0; i < n; i++) {
    int32_t l;
    pd_sample_fill(3, i, 0, img, &l);
    for (int p = 0; p < PIX; p++) {
      cr_assert(isfinite(img[p]), "non-finite value at sample %d pixel %d", i, p);
      sum += img[p];
      sum2 += (double)img[p] * img[p];
    }
  }
  const double cnt = (double)n * PIX;
  const double mean = sum / cnt, sd = sqrt(sum2 / cnt - mean * mean);
  cr_expect(fabs(mean) < 0.05, "mean %.4f", mean);
  cr_expect(sd > 0.9 && sd < 1.1, "standard deviation %.4f", sd);
}

Test(data_sample, cpu_work_changes_values_only_negligibly) {
  static float a[PIX], b[PIX];
  int32_t la, lb;
  pd_sample_fill(5, 123, 0, a, &la);
  pd_sample_fill(5, 123, 4000, b, &lb);
  cr_expect_eq(la, lb);
  double maxdiff = 0;
  for (int p = 0; p < PIX; p++) maxdiff = fmax(maxdiff, fabs((double)a[p] - b[p]));
  cr_expect(maxdiff < 1e-5, "cpu_work moved a value by %g", maxdiff);
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Test(data_sample, cpu_work_costs_cpu_time) {
  static float img[PIX];
  int32_t l;
  const int n = 100;
  double t0 = thread_cpu_s();
  for (int i = 0; i < n; i++) pd_sample_fill(0, i, 0, img, &l);
  double light = thread_cpu_s() - t0;
  t0 = thread_cpu_s();
  for (int i = 0; i < n; i++) pd_sample_fill(0, i, 16000, img, &l);
  double heavy = thread_cpu_s() - t0;
  /* Thread CPU time is immune to other processes on a shared machine, not to a busy core
   * or to sanitizer instrumentation, which slow both loops: cpu_work 4000 read only 1.9x
   * under ASan on a loaded 2-CPU machine, so the work is 16000 (about 5x when idle). */
  cr_expect(heavy > 2.0 * light, "cpu_work 16000: %.3f ms vs cpu_work 0: %.3f ms for %d samples",
            heavy * 1e3, light * 1e3, n);
}

/* The class signal: means from 2000 samples classify 1000 others by nearest mean. */
Test(data_sample, classes_are_separable_by_their_mean_pattern) {
  const int ntrain = 2000, ntest = 1000;
  double *mean = calloc((size_t)PD_CNN_CLASSES * PIX, sizeof(double));
  int counts[PD_CNN_CLASSES] = {0};
  static float img[PIX];
  cr_assert_not_null(mean);
  for (int i = 0; i < ntrain; i++) {
    int32_t l;
    pd_sample_fill(9, i, 0, img, &l);
    counts[l]++;
    for (int p = 0; p < PIX; p++) mean[(size_t)l * PIX + p] += img[p];
  }
  for (int k = 0; k < PD_CNN_CLASSES; k++) {
    cr_assert(counts[k] > 0);
    for (int p = 0; p < PIX; p++) mean[(size_t)k * PIX + p] /= counts[k];
  }
  /* Every pair of class means differs clearly (RMS per pixel). */
  double min_rms = 1e9;
  for (int a = 0; a < PD_CNN_CLASSES; a++) {
    for (int b = a + 1; b < PD_CNN_CLASSES; b++) {
      double d2 = 0;
      for (int p = 0; p < PIX; p++) {
        double d = mean[(size_t)a * PIX + p] - mean[(size_t)b * PIX + p];
        d2 += d * d;
      }
      min_rms = fmin(min_rms, sqrt(d2 / PIX));
    }
  }
  cr_expect(min_rms > 0.3, "closest class means differ by only %.3f RMS per pixel", min_rms);

  int correct = 0;
  for (int i = ntrain; i < ntrain + ntest; i++) {
    int32_t l;
    pd_sample_fill(9, i, 0, img, &l);
    int best = -1;
    double best_d = 1e300;
    for (int k = 0; k < PD_CNN_CLASSES; k++) {
      double d2 = 0;
      for (int p = 0; p < PIX; p++) {
        double d = img[p] - mean[(size_t)k * PIX + p];
        d2 += d * d;
      }
      if (d2 < best_d) {
        best_d = d2;
        best = k;
      }
    }
    correct += best == l;
  }
  free(mean);
  cr_expect(correct > 0.9 * ntest, "nearest class mean: %d of %d correct", correct, ntest);
}
