"""The `fusion` rule (builder/embed/fusion.py, docs/embeddings.md) on small kernels, fused and not."""

from __future__ import annotations

import pytest

from builder.embed.fusion import op_kinds
from builder.embed.tags import strategy_tags

FUSED = {
    "epilogue_in_a_device_helper": """
        __device__ __forceinline__ float epilogue(float v) { return v / (1.0f + expf(-v)) * 2.5f; }
        __global__ void k(const float* x, const float* w, float* y, int n) {
            float acc = 0.0f;
            for (int k = 0; k < n; ++k) acc += x[k] * w[k];
            y[threadIdx.x] = epilogue(acc);
        }""",
    "register_operand_contraction_with_deeply_nested_relu_pooling": """
        __global__ void k(const float* xp, const float* wp, float* y) {
            float acc[4];
            const float wv = wp[0];
            for (int i = 0; i < 4; ++i) acc[i] += xp[i] * wv;
            y[0] = fmaxf(fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3])), 0.0f);
        }""",
    "maxpool_then_relu_over_a_buffer": """
        __global__ void k(const float* c, float* y, int wd) {
            const float* p = c + blockIdx.x * 4;
            y[blockIdx.x] = fmaxf(fmaxf(fmaxf(p[0], p[1]), fmaxf(p[wd], p[wd + 1])), 0.0f);
        }""",
    "two_convolutions_chained_through_registers": """
        __global__ void k(const float* x, const float* dw, const float* pw, float* y, int ic, int oc) {
            float dwv[128];
            for (int c = 0; c < ic; ++c) {
                float acc = 0.0f;
                for (int t = 0; t < 9; ++t) acc += x[c * 9 + t] * dw[c * 9 + t];
                dwv[c] = acc;
            }
            for (int o = 0; o < oc; ++o) {
                float acc = 0.0f;
                for (int c = 0; c < ic; ++c) acc += dwv[c] * pw[o * ic + c];
                y[o] = acc;
            }
        }""",
    "residual_add_fused_into_layer_norm": """
        __global__ void k(const float* xr, const float* rr, const float* w, const float* b, float* yr, int cols) {
            float s = 0.0f;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c] + rr[c];
            const float mean = s / cols;
            const float rstd = rsqrtf(mean + 1e-5f);
            for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] + rr[c] - mean) * rstd * w[c] + b[c];
        }""",
    "squared_difference_and_row_mean": """
        __device__ float term(float d) { return d * d; }
        __global__ void k(const float* pr, const float* tr, float* out, int cols) {
            float acc = 0.0f;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += term(pr[c] - tr[c]);
            out[blockIdx.x] = acc / cols;
        }""",
    "gemm_with_residual_at_the_output_index": """
        __global__ void k(const float* x, const float* w, const float* bias, const float* residual, float* y, int n) {
            const int idx = blockIdx.x * blockDim.x + threadIdx.x;
            float acc = 0.0f;
            for (int k = 0; k < n; ++k) acc += x[k] * w[idx * n + k];
            y[idx] = (acc + bias[idx % 16]) * 0.5f + residual[idx];
        }""",
    "group_norm_apply_with_precomputed_statistics_and_gelu": """
        __global__ void k(const float* y, const float* stats, const float* gamma, const float* beta, float* out) {
            const int i = threadIdx.x, c = i % 8, g = c / 2;
            const float v = (y[i] - stats[2 * g]) * stats[2 * g + 1] * gamma[c] + beta[c];
            out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678f));
        }""",
    "group_norm_with_hardtanh_clamp": """
        __global__ void k(const float* src, const float* gamma, const float* beta, float* dst, float mean, float rstd) {
            const int i = threadIdx.x;
            dst[i] = fminf(fmaxf((src[i] - mean) * rstd * gamma[i] + beta[i], -2.0f), 2.0f);
        }""",
    "gemm_then_row_max": """
        __global__ void k(const float* xs, const float* w, float* out, int n, int m) {
            float best = -INFINITY;
            for (int c = 0; c < m; ++c) {
                float acc = 0.0f;
                for (int k = 0; k < n; ++k) acc += xs[k] * w[c * n + k];
                best = fmaxf(best, acc);
            }
            out[blockIdx.x] = best;
        }""",
    "kl_term_of_two_log_softmaxes_through_locals": """
        __global__ void k(const float* pr, const float* tr, float* out, int cols, float lse_p, float lse_q) {
            float acc = 0.0f;
            for (int c = threadIdx.x; c < cols; c += 32) {
                const float log_p = pr[c] - lse_p, log_q = tr[c] - lse_q;
                acc += expf(log_q) * (log_q - log_p);
            }
            out[blockIdx.x] = acc;
        }""",
    "row_sum_of_sigmoids": """
        __global__ void k(const float* r, float* out, int cols) {
            float s = 0.0f;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) s += 1.0f / (1.0f + expf(-r[c]));
            out[blockIdx.x] = s;
        }""",
}

NOT_FUSED = {
    "softmax_exp_and_reductions_are_one_op": """
        __global__ void k(const float* x, float* y, int cols) {
            float m = -INFINITY;
            for (int c = 0; c < cols; ++c) m = fmaxf(m, x[c]);
            float s = 0.0f;
            for (int c = 0; c < cols; ++c) s += expf(x[c] - m);
            for (int c = 0; c < cols; ++c) y[c] = expf(x[c] - m) / s;
        }""",
    "layer_norm_affine_is_not_an_elementwise_second_op": """
        __global__ void k(const float* xr, const float* w, const float* b, float* yr, int cols, float eps) {
            float s = 0.0f, sq = 0.0f;
            for (int c = 0; c < cols; ++c) { s += xr[c]; sq += xr[c] * xr[c]; }
            const float mean = s / cols, rstd = rsqrtf(sq / cols - mean * mean + eps);
            for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
        }""",
    "batch_norm_eval_with_fma_and_folded_shift": """
        __global__ void k(const float* x, const float* weight, const float* bias, const float* mean, const float* var,
                          float* y, int n, int hw, int channels) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int ch = (i / hw) % channels;
                const float a = weight[ch] * rsqrtf(var[ch] + 1e-5f);
                const float s = bias[ch] - mean[ch] * a;
                y[i] = fmaf(x[i], a, s);
            }
        }""",
    "variance_clamped_at_zero_is_not_a_relu": """
        __global__ void k(float* acc, float eps) {
            const int g = threadIdx.x;
            const float m = acc[2 * g];
            const float var = fmaxf(acc[2 * g + 1] - m * m, 0.0f);
            acc[2 * g + 1] = rsqrtf(var + eps);
        }""",
    "elementwise_chain_is_one_op": """
        __global__ void k(const float* a, const float* b, const float* c, float* y, int n) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = a[i] * b[i] + c[i];
        }""",
    "gemm_with_bias_only": """
        __global__ void k(const float* x, const float* w, const float* bias, float* y, int n, int out_f) {
            const int col = threadIdx.x, row = blockIdx.x;
            float acc = 0.0f;
            for (int k = 0; k < n; ++k) acc += x[row * n + k] * w[col * n + k];
            y[row * out_f + col] = acc + bias[col];
        }""",
    "residual_written_to_global_and_read_back": """
        __global__ void k(float* xr, const float* rr, float* out, int cols) {
            for (int c = threadIdx.x; c < cols; c += blockDim.x) xr[c] += rr[c];
            __syncthreads();
            float s = 0.0f;
            for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
            out[blockIdx.x] = rsqrtf(s + 1e-5f);
        }""",
    "one_op_per_kernel_across_two_kernels": """
        __global__ void gemm(const float* x, const float* w, float* y, int n) {
            float acc = 0.0f;
            for (int k = 0; k < n; ++k) acc += x[k] * w[k];
            y[threadIdx.x] = acc;
        }
        __global__ void act(const float* y, float* z) { z[threadIdx.x] = tanhf(y[threadIdx.x]); }""",
    "cross_entropy_log_sum_exp_minus_the_target_logit": """
        __global__ void k(const float* logits, const long* targets, float* out, int cols) {
            const float* row = logits + blockIdx.x * cols;
            float m = -INFINITY;
            for (int c = 0; c < cols; ++c) m = fmaxf(m, row[c]);
            float s = 0.0f;
            for (int c = 0; c < cols; ++c) s += expf(row[c] - m);
            out[blockIdx.x] = m + logf(s) - row[targets[blockIdx.x]];
        }""",
    "cosine_similarity_dot_product_through_locals": """
        __global__ void k(const float* ar, const float* br, float* out, int cols) {
            float dot = 0.0f, na = 0.0f, nb = 0.0f;
            for (int c = threadIdx.x; c < cols; c += 32) {
                const float u = ar[c], v = br[c];
                dot += u * v;
                na += u * u;
                nb += v * v;
            }
            out[blockIdx.x] = 1.0f - dot / sqrtf((na + 1e-12f) * (nb + 1e-12f));
        }""",
    "a_sum_of_squares_of_one_array_is_not_a_contraction": """
        __global__ void k(const float* x, float* out, int n) {
            float sq = 0.0f;
            for (int i = 0; i < n; ++i) sq += x[i] * x[i];
            out[0] = sqrtf(sq);
        }""",
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_kernels_are_tagged(name):
    assert "fusion" in strategy_tags(FUSED[name], "cuda"), name


@pytest.mark.parametrize("name", sorted(NOT_FUSED))
def test_single_op_kernels_are_not_tagged(name):
    assert "fusion" not in strategy_tags(NOT_FUSED[name], "cuda"), name


def test_kinds_name_what_was_seen():
    assert op_kinds(NOT_FUSED["elementwise_chain_is_one_op"]) == {"elementwise"}
    assert op_kinds(FUSED["squared_difference_and_row_mean"]) == {"elementwise", "reduction"}
    assert op_kinds(NOT_FUSED["softmax_exp_and_reductions_are_one_op"]) == {"activation"}


def test_cpu_code_is_read_as_one_body():
    source = """
    torch::Tensor forward(torch::Tensor x, torch::Tensor w) {
        for (int64_t o = 0; o < out; ++o) {
            float acc = 0.0f;
            for (int64_t i = 0; i < in; ++i) acc += xa[r][i] * wa[o][i];
            ya[r][o] = acc > 0.0f ? acc : 0.0f;
        }
    }"""
    assert strategy_tags(source, "cpp") == ["naive", "fusion"]
