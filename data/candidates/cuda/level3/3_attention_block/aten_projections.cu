// Attention block with the projections in at::linear and only the attention core as a custom kernel.
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

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

torch::Tensor forward(torch::Tensor x, torch::Tensor in_proj_weight, torch::Tensor in_proj_bias, torch::Tensor out_proj_weight, torch::Tensor out_proj_bias) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 3, "x must be a 3-D CUDA tensor");
    x = x.contiguous();
    in_proj_weight = in_proj_weight.contiguous(); in_proj_bias = in_proj_bias.contiguous();
    out_proj_weight = out_proj_weight.contiguous(); out_proj_bias = out_proj_bias.contiguous();
    const int batch = (int)x.size(0), seq = (int)x.size(1), embed = (int)x.size(2), heads = 8;
    auto qkv = at::linear(x, in_proj_weight, in_proj_bias).contiguous();
    auto ctx = torch::empty({batch, seq, embed}, x.options());
    launch_attention(qkv, ctx, batch, seq, embed, heads, false);
    return at::linear(ctx, out_proj_weight, out_proj_bias);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward, "attention block (ATen projections)"); }
