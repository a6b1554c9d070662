// Pre-norm transformer block (12 heads, FFN 3072) from custom kernels: LayerNorm, tiled GEMMs with fused bias/GELU/residual, block-per-query attention.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

// Activation codes shared by the kernels of this file.
constexpr int ACT_NONE = 0, ACT_RELU = 1, ACT_GELU = 2, ACT_GELU_TANH = 3;

__device__ __forceinline__ float activate(float v, int act) {
    switch (act) {
        case ACT_RELU: return fmaxf(v, 0.0f);
        case ACT_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        case ACT_GELU_TANH: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        default: return v;
    }
}

constexpr int TILE = 32;

// y = act(x @ W.T + b) (+ res), x [rows, in_f], W [out_f, in_f], res [rows, out_f] or null; 32x32 shared-memory tiles.
__global__ void linear_act(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                           const float* __restrict__ res, float* __restrict__ y, int rows, int in_f, int out_f, int act) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    const int wrow = blockIdx.x * TILE + threadIdx.y;
    float acc = 0.0f;
    for (int t = 0; t < in_f; t += TILE) {
        xs[threadIdx.y][threadIdx.x] = (row < rows && t + threadIdx.x < in_f) ? x[(int64_t)row * in_f + t + threadIdx.x] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (wrow < out_f && t + threadIdx.x < in_f) ? w[(int64_t)wrow * in_f + t + threadIdx.x] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[threadIdx.x][k];
        __syncthreads();
    }
    if (row < rows && col < out_f) {
        const int64_t idx = (int64_t)row * out_f + col;
        float v = activate(acc + (b ? b[col] : 0.0f), act);
        if (res) v += res[idx];
        y[idx] = v;
    }
}

static void launch_linear(const torch::Tensor& x, const torch::Tensor& w, const float* b, const float* res, torch::Tensor& y, int act) {
    const int rows = (int)(x.numel() / x.size(-1)), in_f = (int)x.size(-1), out_f = (int)w.size(0);
    dim3 block(TILE, TILE), grid((out_f + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    linear_act<<<grid, block>>>(x.data_ptr<float>(), w.data_ptr<float>(), b, res, y.data_ptr<float>(), rows, in_f, out_f, act);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Block-wide reductions for blockDim.x a multiple of 32; every thread receives the result.
// The leading barrier protects `scratch` from a previous call whose readers may still be running.
__device__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// LayerNorm over the last dim, one block per row, two-pass statistics (eps 1e-5).
__global__ void layer_norm_rows(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ b,
                                float* __restrict__ y, int cols) {
    __shared__ float scratch[32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    const float mean = block_sum(s, scratch) / (float)cols;
    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = xr[c] - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(block_sum(sq, scratch) / (float)cols + 1e-5f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * g[c] + b[c];
}

constexpr int ATT_THREADS = 256, ATT_WARPS = ATT_THREADS / 32;

// One block per (query position, batch*head) over a packed qkv buffer [B, S, 3E] (q | k | v, head h at columns
// h*D..h*D+D-1 of each part). Scores of the query against all (or, causal, the first i+1) keys are kept in shared
// memory, softmaxed, and the context row is accumulated by ATT_THREADS / D groups of D threads over interleaved keys.
__global__ void attention_rows(const float* __restrict__ qkv, float* __restrict__ ctx, int seq, int embed, int heads,
                               int causal, float scale) {
    extern __shared__ float smem[];
    const int d = embed / heads;
    const int i = blockIdx.x, bh = blockIdx.y, b = bh / heads, h = bh % heads;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* qs = smem;             // [d]
    float* p = smem + d;          // [seq]
    float* part = p + seq;        // [ATT_THREADS]
    __shared__ float red[ATT_WARPS];
    const int64_t row_stride = 3LL * embed;
    const float* base = qkv + (int64_t)b * seq * row_stride;
    for (int t = threadIdx.x; t < d; t += ATT_THREADS) qs[t] = base[(int64_t)i * row_stride + h * d + t];
    __syncthreads();
    const int n_keys = causal ? i + 1 : seq;
    float m = -INFINITY;
    for (int j = warp; j < n_keys; j += ATT_WARPS) {
        const float* kr = base + (int64_t)j * row_stride + embed + h * d;
        float acc = 0.0f;
        for (int t = lane; t < d; t += 32) acc += qs[t] * kr[t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        acc *= scale;
        if (lane == 0) p[j] = acc;
        m = fmaxf(m, acc);
    }
    if (lane == 0) red[warp] = m;
    __syncthreads();
    float gm = red[0];
    for (int w = 1; w < ATT_WARPS; ++w) gm = fmaxf(gm, red[w]);
    float s = 0.0f;
    for (int j = threadIdx.x; j < n_keys; j += ATT_THREADS) {
        const float e = expf(p[j] - gm);
        p[j] = e;
        s += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    __syncthreads();  // red[] (maxima) fully read before it holds sums
    if (lane == 0) red[warp] = s;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < ATT_WARPS; ++w) total += red[w];
    const float inv = 1.0f / total;
    // context: group g of D threads handles keys j = g, g + groups, ...; thread t of the group owns dim t
    const int groups = ATT_THREADS / d;
    const int g = threadIdx.x / d, t = threadIdx.x % d;
    float acc = 0.0f;
    if (g < groups)
        for (int j = g; j < n_keys; j += groups) acc += p[j] * base[(int64_t)j * row_stride + 2 * embed + h * d + t];
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x < d) {
        float r = 0.0f;
        for (int q = 0; q < groups; ++q) r += part[q * d + threadIdx.x];
        ctx[((int64_t)b * seq + i) * embed + h * d + threadIdx.x] = r * inv;
    }
}

static void launch_attention(const torch::Tensor& qkv, torch::Tensor& ctx, int batch, int seq, int embed, int heads, bool causal) {
    const int d = embed / heads;
    TORCH_CHECK(d <= ATT_THREADS && ATT_THREADS % d == 0, "head dim must divide the block size");
    const size_t smem = (size_t)(d + seq + ATT_THREADS) * sizeof(float);
    TORCH_CHECK(smem <= 48 * 1024 && (int64_t)batch * heads <= 65535, "sequence too long for the shared score row");
    attention_rows<<<dim3((unsigned)seq, (unsigned)(batch * heads)), ATT_THREADS, smem>>>(
        qkv.data_ptr<float>(), ctx.data_ptr<float>(), seq, embed, heads, causal ? 1 : 0, 1.0f / sqrtf((float)d));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Pre-norm transformer block from custom kernels only: LayerNorm -> QKV GEMM -> attention -> output GEMM with the
// residual fused into its epilogue -> LayerNorm -> FFN GEMM with fused activation -> FFN GEMM with fused residual.
torch::Tensor forward(torch::Tensor x, torch::Tensor in_proj_weight, torch::Tensor in_proj_bias, torch::Tensor out_proj_weight, torch::Tensor out_proj_bias, torch::Tensor linear1_weight, torch::Tensor linear1_bias, torch::Tensor linear2_weight, torch::Tensor linear2_bias, torch::Tensor norm1_weight, torch::Tensor norm1_bias, torch::Tensor norm2_weight, torch::Tensor norm2_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 3, "x must be a 3-D CUDA tensor");
    x = x.contiguous();
    in_proj_weight = in_proj_weight.contiguous();
    in_proj_bias = in_proj_bias.contiguous();
    out_proj_weight = out_proj_weight.contiguous();
    out_proj_bias = out_proj_bias.contiguous();
    linear1_weight = linear1_weight.contiguous();
    linear1_bias = linear1_bias.contiguous();
    linear2_weight = linear2_weight.contiguous();
    linear2_bias = linear2_bias.contiguous();
    norm1_weight = norm1_weight.contiguous();
    norm1_bias = norm1_bias.contiguous();
    norm2_weight = norm2_weight.contiguous();
    norm2_bias = norm2_bias.contiguous();
    const int batch = (int)x.size(0), seq = (int)x.size(1), embed = (int)x.size(2), heads = 12;
    const int64_t rows = (int64_t)batch * seq;
    auto h = torch::empty_like(x);
    layer_norm_rows<<<(unsigned)rows, 256>>>(x.data_ptr<float>(), norm1_weight.data_ptr<float>(), norm1_bias.data_ptr<float>(),
                                            h.data_ptr<float>(), embed);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto qkv = torch::empty({batch, seq, 3 * embed}, x.options());
    launch_linear(h, in_proj_weight, in_proj_bias.data_ptr<float>(), nullptr, qkv, ACT_NONE);
    auto ctx = torch::empty_like(x);
    launch_attention(qkv, ctx, batch, seq, embed, heads, false);
    auto x1 = torch::empty_like(x);
    launch_linear(ctx, out_proj_weight, out_proj_bias.data_ptr<float>(), x.data_ptr<float>(), x1, ACT_NONE);
    layer_norm_rows<<<(unsigned)rows, 256>>>(x1.data_ptr<float>(), norm2_weight.data_ptr<float>(), norm2_bias.data_ptr<float>(),
                                            h.data_ptr<float>(), embed);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    auto ffn = torch::empty({batch, seq, linear1_weight.size(0)}, x.options());
    launch_linear(h, linear1_weight, linear1_bias.data_ptr<float>(), nullptr, ffn, ACT_GELU);
    auto y = torch::empty_like(x);
    launch_linear(ffn, linear2_weight, linear2_bias.data_ptr<float>(), x1.data_ptr<float>(), y, ACT_NONE);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "transformer block (custom kernels)"); }
