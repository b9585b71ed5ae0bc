/* cnn_kernels.cu: the SimpleCNN's own kernels (everything but the GEMMs) and their
 * C-callable launchers (declared in cnn_layers.h).
 *
 * Kernels first, launchers after. Activations are NHWC; a thread moves one 16-byte
 * vector (8 halves or 4 floats) so loads and stores are coalesced and wide. Every
 * ReLU is fused into the kernel that reads its input (im2col, pools) or into the
 * backward kernel that follows (pool backward, col2im), so no kernel is spent on it.
 * Arithmetic is fp32 whatever the storage type; results round to the storage type once.
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "cnn_layers.h"
#include "pd/pd_common.h"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float x) {
  return __float2half_rn(x);
}

/* torch's relu (clamp_min) keeps NaN, so an overflow upstream still reaches the loss
 * and GradScaler sees it. */
__device__ __forceinline__ float relu_f(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

/* One 16-byte vector of T, converted to/from floats. */
template <typename T>
struct Vec {
  static constexpr int N = 16 / (int)sizeof(T);
  union Raw {
    int4 i;
    T e[N];
  };
};

template <typename T>
__device__ __forceinline__ void load_vec(const T *p, float (&out)[Vec<T>::N]) {
  typename Vec<T>::Raw r;
  r.i = *reinterpret_cast<const int4 *>(p);
#pragma unroll
  for (int j = 0; j < Vec<T>::N; j++) out[j] = to_f(r.e[j]);
}

template <typename T>
__device__ __forceinline__ void store_vec(T *p, const float (&in)[Vec<T>::N]) {
  typename Vec<T>::Raw r;
#pragma unroll
  for (int j = 0; j < Vec<T>::N; j++) r.e[j] = from_f<T>(in[j]);
  *reinterpret_cast<int4 *>(p) = r.i;
}

/* ---- forward kernels ------------------------------------------------------------ */

/* conv1's im2col from the fp32 NCHW images; one thread per 16-byte vector of a row. */
template <typename T, typename I>
__global__ void k_im2col_nchw(const float *__restrict__ x, int n, int c, int h, int w, int k,
                              int kpad, T *__restrict__ cols) {
  constexpr int V = Vec<T>::N;
  const int nvec = kpad / V;
  const I total = (I)n * h * w * nvec;
  const I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int v = (int)(i % (I)nvec);
  const I pi = i / (I)nvec;
  const int xw = (int)(pi % (I)w);
  const int xh = (int)((pi / (I)w) % (I)h);
  const int64_t ni = (int64_t)(pi / ((I)w * h));
  const int64_t p = (int64_t)pi;
  float vals[V];
#pragma unroll
  for (int j = 0; j < V; j++) {
    const int kk = v * V + j;
    float val;
    if (kk < k) {
      const int t = kk / c, ch = kk - t * c;
      const int hh = xh + t / 3 - 1, ww = xw + t % 3 - 1;
      val = (hh >= 0 && hh < h && ww >= 0 && ww < w) ? x[((ni * c + ch) * h + hh) * w + ww] : 0.0f;
    } else {
      val = kk == k ? 1.0f : 0.0f; /* the bias column */
    }
    vals[j] = val;
  }
  store_vec(cols + p * kpad + (int64_t)v * V, vals);
}

/* im2col of an NHWC tensor; cin and k are multiples of the vector width, so a vector
 * never straddles two taps and the bias tail starts on a vector boundary. */
template <typename T, bool kRelu, typename I>
__global__ void k_im2col_nhwc(const T *__restrict__ x, int n, int h, int w, int cin, int k,
                              int kpad, T *__restrict__ cols) {
  constexpr int V = Vec<T>::N;
  const int nvec = kpad / V;
  const I total = (I)n * h * w * nvec;
  const I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int v = (int)(i % (I)nvec);
  const I pi = i / (I)nvec;
  const int xw = (int)(pi % (I)w);
  const int xh = (int)((pi / (I)w) % (I)h);
  const int64_t ni = (int64_t)(pi / ((I)w * h));
  const int64_t p = (int64_t)pi;
  const int k0 = v * V;
  float vals[V];
  if (k0 < k) {
    const int t = k0 / cin, c0 = k0 - t * cin;
    const int hh = xh + t / 3 - 1, ww = xw + t % 3 - 1;
    if (hh >= 0 && hh < h && ww >= 0 && ww < w) {
      load_vec(x + ((ni * h + hh) * w + ww) * cin + c0, vals);
      if (kRelu) {
#pragma unroll
        for (int j = 0; j < V; j++) vals[j] = relu_f(vals[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; j++) vals[j] = 0.0f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; j++) vals[j] = (k0 + j == k) ? 1.0f : 0.0f;
  }
  store_vec(cols + p * kpad + k0, vals);
}

/* 2x2 max pool of relu(x), NaN-propagating like torch. */
template <typename T, typename I>
__global__ void k_maxpool2_relu(const T *__restrict__ x, int n, int h, int w, int c,
                                T *__restrict__ y) {
  constexpr int V = Vec<T>::N;
  const int nvec = c / V, oh = h / 2, ow = w / 2;
  const I total = (I)n * oh * ow * nvec;
  const I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int v = (int)(i % (I)nvec);
  const I qi = i / (I)nvec;
  const int qw = (int)(qi % (I)ow);
  const int qh = (int)((qi / (I)ow) % (I)oh);
  const int64_t ni = (int64_t)(qi / ((I)ow * oh));
  const int64_t q = (int64_t)qi;
  float best[V];
#pragma unroll
  for (int j = 0; j < V; j++) best[j] = -INFINITY;
#pragma unroll
  for (int a = 0; a < 2; a++) {
#pragma unroll
    for (int b = 0; b < 2; b++) {
      float vals[V];
      load_vec(x + ((ni * h + 2 * qh + a) * w + 2 * qw + b) * c + v * V, vals);
#pragma unroll
      for (int j = 0; j < V; j++)
        if (vals[j] > best[j] || vals[j] != vals[j]) best[j] = vals[j];
    }
  }
#pragma unroll
  for (int j = 0; j < V; j++) best[j] = relu_f(best[j]);
  store_vec(y + q * c + v * V, best);
}

/* Global average pool of relu(x): one block per image; threads split the channels into
 * vectors and the pixels into groups, then sum the groups in shared memory. */
template <typename T>
__global__ void k_avgpool_relu(const T *__restrict__ x, int hw, int c, T *__restrict__ y) {
  constexpr int V = Vec<T>::N;
  __shared__ float part[kThreads * V];
  const int nvec = c / V;
  const int groups = kThreads / nvec;
  const int v = threadIdx.x % nvec, g = threadIdx.x / nvec;
  const T *img = x + (int64_t)blockIdx.x * hw * c;
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; j++) acc[j] = 0.0f;
  if (g < groups) {
    for (int p = g; p < hw; p += groups) {
      float vals[V];
      load_vec(img + (int64_t)p * c + v * V, vals);
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] += relu_f(vals[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < V; j++) part[threadIdx.x * V + j] = acc[j];
  __syncthreads();
  if (g == 0) {
    for (int gg = 1; gg < groups; gg++) {
#pragma unroll
      for (int j = 0; j < V; j++) acc[j] += part[(gg * nvec + v) * V + j];
    }
    const float inv = 1.0f / (float)hw;
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] *= inv;
    store_vec(y + (int64_t)blockIdx.x * c + v * V, acc);
  }
}

constexpr int kMaxClasses = 32;

/* Softmax cross entropy, its gradient and the bias gradient in one block, with a fixed
 * reduction order (deterministic). */
template <typename T>
__global__ void k_cross_entropy(const float *__restrict__ logits, const float *__restrict__ bias,
                                const int32_t *__restrict__ labels, int n, int classes,
                                cnn_state_t *state, int use_scale, T *__restrict__ dlogits,
                                float *__restrict__ dbias) {
  __shared__ float warp_part[kThreads / 32][kMaxClasses + 1];
  const float scale = use_scale ? state->scale : 1.0f;
  const float coef = scale / (float)n;
  float acc_loss = 0.0f;
  float acc_db[kMaxClasses];
#pragma unroll
  for (int j = 0; j < kMaxClasses; j++) acc_db[j] = 0.0f;
  for (int r = threadIdx.x; r < n; r += blockDim.x) {
    float z[kMaxClasses];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxClasses; j++) {
      z[j] = j < classes ? logits[(int64_t)r * classes + j] + bias[j] : -INFINITY;
      mx = fmaxf(mx, z[j]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxClasses; j++)
      if (j < classes) sum += expf(z[j] - mx);
    const int y = labels[r];
    const bool valid = y >= 0 && y < classes;
    float zy = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxClasses; j++)
      if (j == y) zy = z[j];
    acc_loss += valid ? (mx + logf(sum)) - zy : NAN;
    const float inv_sum = 1.0f / sum;
#pragma unroll
    for (int j = 0; j < kMaxClasses; j++) {
      if (j < classes) {
        const float gj = valid ? (expf(z[j] - mx) * inv_sum - (j == y ? 1.0f : 0.0f)) * coef : 0.0f;
        dlogits[(int64_t)r * classes + j] = from_f<T>(gj);
        acc_db[j] += gj;
      }
    }
  }
  /* Block reduction: warps by shuffles, then warp 0 over the warps' partials. */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    acc_loss += __shfl_down_sync(0xffffffffu, acc_loss, off);
#pragma unroll
    for (int j = 0; j < kMaxClasses; j++) acc_db[j] += __shfl_down_sync(0xffffffffu, acc_db[j], off);
  }
  if (lane == 0) {
    warp_part[warp][kMaxClasses] = acc_loss;
#pragma unroll
    for (int j = 0; j < kMaxClasses; j++) warp_part[warp][j] = acc_db[j];
  }
  __syncthreads();
  if (warp == 0) {
    const int nwarps = blockDim.x / 32;
    if (lane < classes) {
      float s = 0.0f;
      for (int ww = 0; ww < nwarps; ww++) s += warp_part[ww][lane];
      dbias[lane] = s;
    }
    if (lane == 0) {
      float s = 0.0f;
      for (int ww = 0; ww < nwarps; ww++) s += warp_part[ww][kMaxClasses];
      state->loss = s / (float)n;
    }
  }
}

/* TinyOpsBlock: __fmaf_rn / __fmul_rn pin the rounding, so the chain and the fused
 * kernel give the same bits. */
template <typename T>
__global__ void k_tiny_op(const T *in, T *out, int count, float a, float b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = from_f<T>(__fmaf_rn(to_f(in[i]), a, b));
}

template <typename T>
__global__ void k_tiny_fused(const T *__restrict__ in, T *__restrict__ out, int count, int depth) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float y = to_f(in[i]);
  for (int d = 0; d < depth; d++) {
    float a, b;
    cnn_tiny_coef(d, &a, &b);
    y = to_f(from_f<T>(__fmaf_rn(y, a, b)));
  }
  out[i] = from_f<T>(y);
}

template <typename T>
__global__ void k_tiny_bwd_op(const T *dout, T *din, int count, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) din[i] = from_f<T>(__fmul_rn(to_f(dout[i]), a));
}

template <typename T>
__global__ void k_tiny_bwd_fused(const T *__restrict__ dout, T *__restrict__ din, int count,
                                 int depth) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float d = to_f(dout[i]);
  for (int op = depth - 1; op >= 0; op--) {
    float a, b;
    cnn_tiny_coef(op, &a, &b);
    d = to_f(from_f<T>(__fmul_rn(d, a)));
  }
  din[i] = from_f<T>(d);
}

/* ---- backward kernels ----------------------------------------------------------- */

template <typename T, typename I>
__global__ void k_avgpool_relu_bwd(const T *__restrict__ x, const T *__restrict__ dy, int n,
                                   int hw, int c, T *__restrict__ dx) {
  constexpr int V = Vec<T>::N;
  const int nvec = c / V;
  const I total = (I)n * hw * nvec;
  const I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int v = (int)(i % (I)nvec);
  const I pi = i / (I)nvec;
  const int64_t ni = (int64_t)(pi / (I)hw);
  const int64_t p = (int64_t)pi;
  float xv[V], g[V];
  load_vec(x + p * c + v * V, xv);
  load_vec(dy + ni * c + v * V, g);
  const float inv = 1.0f / (float)hw;
#pragma unroll
  for (int j = 0; j < V; j++) g[j] = xv[j] > 0.0f ? g[j] * inv : 0.0f;
  store_vec(dx + p * c + v * V, g);
}

/* Sums the column gradient of input pixel (qh, qw) of image ni over the 9 taps:
 * cols[o][t * cin + c] = in[o + (dh, dw)][c], so pixel q receives from o = q - (dh, dw). */
template <typename T>
__device__ __forceinline__ void col2im_gather(const T *__restrict__ dcols, int64_t ni, int qh,
                                              int qw, int h, int w, int cin, int kpad, int c0,
                                              float (&acc)[Vec<T>::N]) {
  constexpr int V = Vec<T>::N;
#pragma unroll
  for (int j = 0; j < V; j++) acc[j] = 0.0f;
#pragma unroll
  for (int t = 0; t < 9; t++) {
    const int oh = qh - (t / 3 - 1), ow = qw - (t % 3 - 1);
    if (oh < 0 || oh >= h || ow < 0 || ow >= w) continue;
    float vals[V];
    load_vec(dcols + ((ni * h + oh) * w + ow) * kpad + t * cin + c0, vals);
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] += vals[j];
  }
}

/* col2im -> 2x2 max pool backward (first maximum wins, NaN like torch) -> ReLU
 * backward; one thread per pooled pixel and channel vector writes all 4 inputs. */
template <typename T, typename I>
__global__ void k_col2im_maxpool_relu_bwd(const T *__restrict__ dcols, int n, int h, int w,
                                          int cin, int kpad, const T *__restrict__ x,
                                          T *__restrict__ dx) {
  constexpr int V = Vec<T>::N;
  const int nvec = cin / V;
  const I total = (I)n * h * w * nvec;
  const I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int v = (int)(i % (I)nvec);
  const I qi = i / (I)nvec;
  const int qw = (int)(qi % (I)w);
  const int qh = (int)((qi / (I)w) % (I)h);
  const int64_t ni = (int64_t)(qi / ((I)w * h));
  float g[V];
  col2im_gather(dcols, ni, qh, qw, h, w, cin, kpad, v * V, g);
  const int xh = 2 * h, xw = 2 * w;
  float xv[4][V];
#pragma unroll
  for (int j = 0; j < 4; j++)
    load_vec(x + ((ni * xh + 2 * qh + j / 2) * xw + 2 * qw + j % 2) * cin + v * V, xv[j]);
  int arg[V];
#pragma unroll
  for (int e = 0; e < V; e++) {
    float best = -INFINITY;
    arg[e] = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (xv[j][e] > best || xv[j][e] != xv[j][e]) {
        best = xv[j][e];
        arg[e] = j;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; j++) {
    float out[V];
#pragma unroll
    for (int e = 0; e < V; e++) out[e] = (arg[e] == j && xv[j][e] > 0.0f) ? g[e] : 0.0f;
    store_vec(dx + ((ni * xh + 2 * qh + j / 2) * xw + 2 * qw + j % 2) * cin + v * V, out);
  }
}

template <typename T, typename I>
__global__ void k_col2im_relu_bwd(const T *__restrict__ dcols, int n, int h, int w, int cin,
                                  int kpad, const T *__restrict__ x, T *__restrict__ dx) {
  constexpr int V = Vec<T>::N;
  const int nvec = cin / V;
  const I total = (I)n * h * w * nvec;
  const I i = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int v = (int)(i % (I)nvec);
  const I qi = i / (I)nvec;
  const int qw = (int)(qi % (I)w);
  const int qh = (int)((qi / (I)w) % (I)h);
  const int64_t ni = (int64_t)(qi / ((I)w * h));
  const int64_t q = (int64_t)qi;
  float g[V];
  col2im_gather(dcols, ni, qh, qw, h, w, cin, kpad, v * V, g);
  if (x != nullptr) {
    float xv[V];
    load_vec(x + q * cin + v * V, xv);
#pragma unroll
    for (int e = 0; e < V; e++) g[e] = xv[e] > 0.0f ? g[e] : 0.0f;
  }
  store_vec(dx + q * cin + v * V, g);
}

/* ---- injected device time (the regression gate's GPU-side self-test) -------------- */

__device__ __forceinline__ uint64_t cnn_globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Busy-waits ns nanoseconds of the GPU's global timer in the calling thread. */
__device__ void cnn_spin_ns(int64_t ns) {
  if (ns <= 0) return;
  const uint64_t end = cnn_globaltimer() + (uint64_t)ns;
  while (cnn_globaltimer() < end) {
  }
}

/* One thread holding the stream for ns: work queued behind it waits, so the host can
 * enqueue a whole step before the GPU starts it (the step's GPU time, measured with
 * events around it, then holds no host gaps). */
__global__ void k_delay(int64_t ns) { cnn_spin_ns(ns); }

/* ---- optimizer kernels ---------------------------------------------------------- */

__global__ void k_grad_check(const float *__restrict__ g, int64_t count, cnn_state_t *state) {
  __shared__ float warp_sum[kThreads / 32];
  float s = 0.0f;
  int bad = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = g[i];
    if (!cnn_isfinite(v)) bad = 1;
    s += v * v;
  }
  bad = __syncthreads_or(bad);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int j = 0; j < (int)(blockDim.x / 32); j++) total += warp_sum[j];
    atomicAdd(&state->grad_sumsq, total);
    if (bad) atomicOr(&state->found_inf, 1);
  }
}

/* AdamW as torch.optim.AdamW (foreach): p *= 1 - lr*wd; m.lerp_(g, 1-b1);
 * v = b2*v + (1-b2)*g^2; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps). The scaler's
 * decision is read from device memory, and the last block to finish applies
 * GradScaler.update(), so AMP costs no host round trip. */
__global__ void k_adamw(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m,
                        float *__restrict__ v, __half *__restrict__ ph, int64_t count,
                        cnn_adamw_t hp, int use_scaler, int interval, cnn_state_t *state,
                        int64_t spin_ns) {
  __shared__ int s_skip;
  __shared__ float s_inv, s_step, s_bc2_sqrt;
  if (threadIdx.x == 0) {
    s_skip = use_scaler ? state->found_inf : 0;
    s_inv = use_scaler ? 1.0f / state->scale : 1.0f;
    const double t = (double)(state->step + 1);
    s_step = (float)((double)hp.lr / (1.0 - pow((double)hp.beta1, t)));
    s_bc2_sqrt = (float)sqrt(1.0 - pow((double)hp.beta2, t));
  }
  __syncthreads();
  if (!s_skip) {
    const float decay = 1.0f - hp.lr * hp.weight_decay;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (int64_t)gridDim.x * blockDim.x) {
      const float grad = g[i] * s_inv;
      float mi = m[i], vi = v[i], pi = p[i] * decay;
      mi = mi + (1.0f - hp.beta1) * (grad - mi);
      vi = hp.beta2 * vi + (1.0f - hp.beta2) * grad * grad;
      pi -= s_step * mi / (sqrtf(vi) / s_bc2_sqrt + hp.eps);
      m[i] = mi;
      v[i] = vi;
      p[i] = pi;
      if (ph != nullptr) ph[i] = __float2half_rn(pi);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned ticket = atomicAdd(&state->blocks_done, 1u);
    if (ticket == gridDim.x - 1) {
      /* Every block has read the state before taking its ticket: safe to update. */
      if (use_scaler) cnn_scaler_update(&state->scale, &state->growth_tracker, s_skip, interval);
      if (s_skip) state->skipped += 1;
      else state->step += 1;
      state->found_inf = 0;
      state->grad_sumsq = 0.0f;
      state->blocks_done = 0;
      /* Injected device time: the last block finishes last, so the kernel grows by
       * spin_ns while the step keeps its kernel count and launches. */
      cnn_spin_ns(spin_ns);
    }
  }
}

__global__ void k_cast_half(const float *__restrict__ src, __half *__restrict__ dst, int64_t count) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = __float2half_rn(src[i]);
}

unsigned blocks_for(int64_t total) { return (unsigned)((total + kThreads - 1) / kThreads); }

int vec_width(cnn_dtype_t dt) { return dt == CNN_F16 ? 8 : 4; }

/* Index math in 32 bits whenever the thread count allows: 64-bit division is a long
 * software sequence, and the elementwise kernels do several per thread (it made the
 * conv2 im2col instruction-bound). Addresses are still computed in 64 bits. */
#define CNN_INDEX_DISPATCH(total, ...)      \
  do {                                      \
    if ((total) <= (int64_t)UINT32_MAX) {   \
      using I = uint32_t;                   \
      __VA_ARGS__                           \
    } else {                                \
      using I = uint64_t;                   \
      __VA_ARGS__                           \
    }                                       \
  } while (0)

int check_launch(const char *file, int line, const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cnn_fail(PD_ECUDA, file, line, what, cudaGetErrorString(e));
  return 0;
}

#define CNN_LAUNCHED(what) check_launch(__FILE__, __LINE__, what)

/* The kernels move 16-byte vectors along a row: kpad must be a multiple of 8. */
bool geom_ok(const cnn_conv_geom_t *g) {
  return g != nullptr && g->cin > 0 && g->cout > 0 && g->h > 0 && g->w > 0 && g->k == 9 * g->cin &&
         g->kpad > g->k && g->kpad % 8 == 0;
}

}  // namespace

/* ---- launchers ---------------------------------------------------------------------- */

extern "C" int cnn_im2col_nchw(cnn_dtype_t dt, const float *x, int n, const cnn_conv_geom_t *g,
                               void *cols, cudaStream_t stream) {
  if (!geom_ok(g) || n < 1 || x == nullptr || cols == nullptr) return PD_EINVAL;
  const int64_t total = (int64_t)n * g->h * g->w * (g->kpad / vec_width(dt));
  CNN_INDEX_DISPATCH(total, {
    if (dt == CNN_F16)
      k_im2col_nchw<__half, I><<<blocks_for(total), kThreads, 0, stream>>>(
          x, n, g->cin, g->h, g->w, g->k, g->kpad, static_cast<__half *>(cols));
    else
      k_im2col_nchw<float, I><<<blocks_for(total), kThreads, 0, stream>>>(
          x, n, g->cin, g->h, g->w, g->k, g->kpad, static_cast<float *>(cols));
  });
  return CNN_LAUNCHED("k_im2col_nchw");
}

extern "C" int cnn_im2col_nhwc(cnn_dtype_t dt, const void *x, int n, const cnn_conv_geom_t *g,
                               bool relu, void *cols, cudaStream_t stream) {
  if (!geom_ok(g) || n < 1 || x == nullptr || cols == nullptr || g->cin % 8 != 0)
    return PD_EINVAL;
  const int64_t total = (int64_t)n * g->h * g->w * (g->kpad / vec_width(dt));
  const unsigned blocks = blocks_for(total);
  CNN_INDEX_DISPATCH(total, {
    if (dt == CNN_F16) {
      const __half *xs = static_cast<const __half *>(x);
      __half *cs = static_cast<__half *>(cols);
      if (relu)
        k_im2col_nhwc<__half, true, I><<<blocks, kThreads, 0, stream>>>(xs, n, g->h, g->w, g->cin, g->k, g->kpad, cs);
      else
        k_im2col_nhwc<__half, false, I><<<blocks, kThreads, 0, stream>>>(xs, n, g->h, g->w, g->cin, g->k, g->kpad, cs);
    } else {
      const float *xs = static_cast<const float *>(x);
      float *cs = static_cast<float *>(cols);
      if (relu)
        k_im2col_nhwc<float, true, I><<<blocks, kThreads, 0, stream>>>(xs, n, g->h, g->w, g->cin, g->k, g->kpad, cs);
      else
        k_im2col_nhwc<float, false, I><<<blocks, kThreads, 0, stream>>>(xs, n, g->h, g->w, g->cin, g->k, g->kpad, cs);
    }
  });
  return CNN_LAUNCHED("k_im2col_nhwc");
}

extern "C" int cnn_maxpool2_relu(cnn_dtype_t dt, const void *x, int n, int h, int w, int c,
                                 void *y, cudaStream_t stream) {
  if (n < 1 || h < 2 || w < 2 || h % 2 || w % 2 || c < 8 || c % 8 || x == nullptr || y == nullptr)
    return PD_EINVAL;
  const int64_t total = (int64_t)n * (h / 2) * (w / 2) * (c / vec_width(dt));
  CNN_INDEX_DISPATCH(total, {
    if (dt == CNN_F16)
      k_maxpool2_relu<__half, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const __half *>(x), n, h, w, c, static_cast<__half *>(y));
    else
      k_maxpool2_relu<float, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const float *>(x), n, h, w, c, static_cast<float *>(y));
  });
  return CNN_LAUNCHED("k_maxpool2_relu");
}

extern "C" int cnn_avgpool_relu(cnn_dtype_t dt, const void *x, int n, int hw, int c, void *y,
                                cudaStream_t stream) {
  const int nvec = c / vec_width(dt);
  /* The kernel splits a block's threads into groups of nvec channel vectors. */
  if (n < 1 || hw < 1 || c % 8 || nvec < 1 || nvec > kThreads || kThreads % nvec || x == nullptr ||
      y == nullptr)
    return PD_EINVAL;
  if (dt == CNN_F16)
    k_avgpool_relu<__half><<<(unsigned)n, kThreads, 0, stream>>>(static_cast<const __half *>(x), hw, c,
                                                                 static_cast<__half *>(y));
  else
    k_avgpool_relu<float><<<(unsigned)n, kThreads, 0, stream>>>(static_cast<const float *>(x), hw, c,
                                                                static_cast<float *>(y));
  return CNN_LAUNCHED("k_avgpool_relu");
}

extern "C" int cnn_cross_entropy(cnn_dtype_t dt, const float *logits, const float *bias,
                                 const int32_t *labels, int n, int classes, cnn_state_t *state,
                                 bool use_scale, void *dlogits, float *dbias, cudaStream_t stream) {
  if (n < 1 || classes < 1 || classes > kMaxClasses || logits == nullptr || bias == nullptr ||
      labels == nullptr || state == nullptr || dlogits == nullptr || dbias == nullptr)
    return PD_EINVAL;
  /* Small batches need few threads; the block never exceeds kThreads. */
  const int threads = n >= kThreads ? kThreads : (n + 31) / 32 * 32;
  if (dt == CNN_F16)
    k_cross_entropy<__half><<<1, threads, 0, stream>>>(logits, bias, labels, n, classes, state,
                                                       use_scale ? 1 : 0,
                                                       static_cast<__half *>(dlogits), dbias);
  else
    k_cross_entropy<float><<<1, threads, 0, stream>>>(logits, bias, labels, n, classes, state,
                                                      use_scale ? 1 : 0,
                                                      static_cast<float *>(dlogits), dbias);
  return CNN_LAUNCHED("k_cross_entropy");
}

extern "C" int cnn_tiny_forward(cnn_dtype_t dt, const void *in, void *out, int count, int depth,
                                bool chain, cudaStream_t stream) {
  if (count < 1 || depth < 1 || in == nullptr || out == nullptr) return PD_EINVAL;
  const unsigned blocks = blocks_for(count);
  if (!chain) {
    if (dt == CNN_F16)
      k_tiny_fused<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half *>(in),
                                                            static_cast<__half *>(out), count, depth);
    else
      k_tiny_fused<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float *>(in),
                                                           static_cast<float *>(out), count, depth);
    return CNN_LAUNCHED("k_tiny_fused");
  }
  for (int d = 0; d < depth; d++) {
    float a, b;
    cnn_tiny_coef(d, &a, &b);
    const void *src = d == 0 ? in : out;
    if (dt == CNN_F16)
      k_tiny_op<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half *>(src),
                                                         static_cast<__half *>(out), count, a, b);
    else
      k_tiny_op<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float *>(src),
                                                        static_cast<float *>(out), count, a, b);
  }
  /* One check for the whole chain: every launch has the same configuration, and a failed
   * launch leaves its error in the runtime's last-error slot until it is read, so this
   * catches any of them. A check per launch would double the API calls of the planted
   * launch-bound chain, and every call costs the profiler a CUPTI record. */
  return CNN_LAUNCHED("k_tiny_op chain");
}

extern "C" int cnn_tiny_backward(cnn_dtype_t dt, void *dout, void *din, int count, int depth,
                                 bool chain, cudaStream_t stream) {
  if (count < 1 || depth < 1 || dout == nullptr || din == nullptr) return PD_EINVAL;
  const unsigned blocks = blocks_for(count);
  if (!chain) {
    if (dt == CNN_F16)
      k_tiny_bwd_fused<__half><<<blocks, kThreads, 0, stream>>>(
          static_cast<const __half *>(dout), static_cast<__half *>(din), count, depth);
    else
      k_tiny_bwd_fused<float><<<blocks, kThreads, 0, stream>>>(
          static_cast<const float *>(dout), static_cast<float *>(din), count, depth);
    return CNN_LAUNCHED("k_tiny_bwd_fused");
  }
  for (int op = depth - 1; op >= 0; op--) {
    float a, b;
    cnn_tiny_coef(op, &a, &b);
    void *dst = op == 0 ? din : dout;
    if (dt == CNN_F16)
      k_tiny_bwd_op<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half *>(dout),
                                                             static_cast<__half *>(dst), count, a);
    else
      k_tiny_bwd_op<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float *>(dout),
                                                            static_cast<float *>(dst), count, a);
  }
  return CNN_LAUNCHED("k_tiny_bwd_op chain"); /* one check per chain, as in the forward */
}

extern "C" int cnn_avgpool_relu_backward(cnn_dtype_t dt, const void *x, const void *dy, int n,
                                         int hw, int c, void *dx, cudaStream_t stream) {
  if (n < 1 || hw < 1 || c < 8 || c % 8 || x == nullptr || dy == nullptr || dx == nullptr)
    return PD_EINVAL;
  const int64_t total = (int64_t)n * hw * (c / vec_width(dt));
  CNN_INDEX_DISPATCH(total, {
    if (dt == CNN_F16)
      k_avgpool_relu_bwd<__half, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const __half *>(x), static_cast<const __half *>(dy), n, hw, c,
          static_cast<__half *>(dx));
    else
      k_avgpool_relu_bwd<float, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const float *>(x), static_cast<const float *>(dy), n, hw, c,
          static_cast<float *>(dx));
  });
  return CNN_LAUNCHED("k_avgpool_relu_bwd");
}

extern "C" int cnn_col2im_maxpool_relu_backward(cnn_dtype_t dt, const void *dcols,
                                                const cnn_conv_geom_t *g, int n, const void *x,
                                                void *dx, cudaStream_t stream) {
  if (!geom_ok(g) || n < 1 || g->cin % 8 || dcols == nullptr || x == nullptr || dx == nullptr)
    return PD_EINVAL;
  const int64_t total = (int64_t)n * g->h * g->w * (g->cin / vec_width(dt));
  CNN_INDEX_DISPATCH(total, {
    if (dt == CNN_F16)
      k_col2im_maxpool_relu_bwd<__half, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const __half *>(dcols), n, g->h, g->w, g->cin, g->kpad,
          static_cast<const __half *>(x), static_cast<__half *>(dx));
    else
      k_col2im_maxpool_relu_bwd<float, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const float *>(dcols), n, g->h, g->w, g->cin, g->kpad,
          static_cast<const float *>(x), static_cast<float *>(dx));
  });
  return CNN_LAUNCHED("k_col2im_maxpool_relu_bwd");
}

extern "C" int cnn_col2im_relu_backward(cnn_dtype_t dt, const void *dcols, const cnn_conv_geom_t *g,
                                        int n, const void *x, void *dx, cudaStream_t stream) {
  if (!geom_ok(g) || n < 1 || g->cin % 8 || dcols == nullptr || dx == nullptr) return PD_EINVAL;
  const int64_t total = (int64_t)n * g->h * g->w * (g->cin / vec_width(dt));
  CNN_INDEX_DISPATCH(total, {
    if (dt == CNN_F16)
      k_col2im_relu_bwd<__half, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const __half *>(dcols), n, g->h, g->w, g->cin, g->kpad,
          static_cast<const __half *>(x), static_cast<__half *>(dx));
    else
      k_col2im_relu_bwd<float, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const float *>(dcols), n, g->h, g->w, g->cin, g->kpad,
          static_cast<const float *>(x), static_cast<float *>(dx));
  });
  return CNN_LAUNCHED("k_col2im_relu_bwd");
}

extern "C" int cnn_grad_check(const float *grads, size_t count, cnn_state_t *state,
                              cudaStream_t stream) {
  if (grads == nullptr || state == nullptr || count == 0) return PD_EINVAL;
  /* Each thread covers several elements: fewer blocks, fewer atomics. */
  int64_t blocks = ((int64_t)count + kThreads * 4 - 1) / (kThreads * 4);
  if (blocks > 1024) blocks = 1024;
  k_grad_check<<<(unsigned)blocks, kThreads, 0, stream>>>(grads, (int64_t)count, state);
  return CNN_LAUNCHED("k_grad_check");
}

extern "C" int cnn_adamw(float *params, const float *grads, float *m, float *v, void *params_half,
                         size_t count, const cnn_adamw_t *hp, bool use_scaler, int scaler_interval,
                         cnn_state_t *state, int64_t spin_ns, cudaStream_t stream) {
  if (params == nullptr || grads == nullptr || m == nullptr || v == nullptr || hp == nullptr ||
      state == nullptr || count == 0 || scaler_interval < 1 || spin_ns < 0)
    return PD_EINVAL;
  int64_t blocks = ((int64_t)count + kThreads * 4 - 1) / (kThreads * 4);
  if (blocks > 1024) blocks = 1024;
  k_adamw<<<(unsigned)blocks, kThreads, 0, stream>>>(params, grads, m, v,
                                                     static_cast<__half *>(params_half),
                                                     (int64_t)count, *hp, use_scaler ? 1 : 0,
                                                     scaler_interval, state, spin_ns);
  return CNN_LAUNCHED("k_adamw");
}

extern "C" int cnn_delay(int64_t ns, cudaStream_t stream) {
  if (ns < 0) return PD_EINVAL;
  k_delay<<<1, 1, 0, stream>>>(ns);
  return CNN_LAUNCHED("k_delay");
}

extern "C" int cnn_cast_to_half(const float *src, void *dst, size_t count, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr || count == 0) return PD_EINVAL;
  int64_t blocks = ((int64_t)count + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  k_cast_half<<<(unsigned)blocks, kThreads, 0, stream>>>(src, static_cast<__half *>(dst),
                                                         (int64_t)count);
  return CNN_LAUNCHED("k_cast_half");
}
