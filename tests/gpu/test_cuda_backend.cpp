// The CUDA backend against the CPU backend on the same inputs: identical tokens, predict,
// accept_index, accept_length and row errors; logprobs within 1e-5. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#include "kernels/det_math.h"

using namespace ds;

namespace {

struct outputs {
    std::vector<int32_t> packed, accept_index;
    std::vector<float> logprobs;
    std::vector<uint8_t> row_error;
    outputs(int32_t bs, int32_t n)
        : packed(static_cast<size_t>(bs) * (n + 1), -9),
          accept_index(static_cast<size_t>(bs) * n, -9),
          logprobs(static_cast<size_t>(bs) * n, 0.0f),
          row_error(static_cast<size_t>(bs), 9) {}
    step_output view() { return {packed.data(), accept_index.data(), logprobs.data(), row_error.data()}; }
};

// One random step: logits, requests and options drawn from `rng`.
struct random_step {
    int32_t vocab, bs, n;
    logits_dtype dtype = logits_dtype::f32;
    int64_t stride;
    std::vector<float> f32;
    std::vector<uint16_t> half;
    std::vector<int32_t> slots, candidates;
    std::vector<int64_t> positions;
    std::vector<uint32_t> bitmask;
    std::vector<sampling_params> params;
    std::vector<std::vector<int32_t>> histories;
    verify_thresholds thresholds;

    random_step(std::mt19937_64& rng, int32_t v, int32_t b, int32_t tokens) : vocab(v), bs(b), n(tokens) {
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        stride = vocab + (unit(rng) < 0.2f ? static_cast<int64_t>(rng() % 37) : 0);
        const int dtype_pick = static_cast<int>(rng() % 6);
        dtype = dtype_pick == 4 ? logits_dtype::bf16 : dtype_pick == 5 ? logits_dtype::f16 : logits_dtype::f32;
        const size_t rows = static_cast<size_t>(bs) * n;
        std::normal_distribution<float> normal(0.0f, 1.0f + 3.0f * unit(rng));
        f32.assign(rows * static_cast<size_t>(stride), 0.0f);
        const bool ties = unit(rng) < 0.25f;
        for (size_t r = 0; r < rows; ++r) {
            for (int32_t i = 0; i < vocab; ++i) {
                float l = normal(rng) - 0.0002f * static_cast<float>(i);
                if (ties) l = std::round(l);
                if (unit(rng) < 0.002f) l = -std::numeric_limits<float>::infinity();
                if (unit(rng) < 0.001f) l = std::numeric_limits<float>::quiet_NaN();
                f32[r * static_cast<size_t>(stride) + static_cast<size_t>(i)] = l;
            }
            // Now and then an infinite maximum: its tokens take all the mass.
            if (unit(rng) < 0.03f)
                f32[r * static_cast<size_t>(stride) + rng() % static_cast<uint64_t>(vocab)] =
                    std::numeric_limits<float>::infinity();
        }
        if (dtype != logits_dtype::f32) {
            half.resize(f32.size());
            for (size_t i = 0; i < f32.size(); ++i) {
                // Round to the half format's bits through its float value (exactness does not depend on how).
                uint32_t bits;
                std::memcpy(&bits, &f32[i], 4);
                if (dtype == logits_dtype::bf16) {
                    half[i] = static_cast<uint16_t>(bits >> 16);
                } else {
                    half[i] = static_cast<uint16_t>(0x3C00 + (bits % 0x800));  // values in [1, 4)
                }
            }
        }
        const int32_t words = bitmask_words(vocab);
        if (unit(rng) < 0.3f) {
            bitmask.resize(rows * static_cast<size_t>(words));
            for (uint32_t& w : bitmask) w = unit(rng) < 0.5f ? 0xFFFFFFFFu : static_cast<uint32_t>(rng());
            if (rows > 1 && unit(rng) < 0.5f)
                std::fill(bitmask.begin(), bitmask.begin() + words, 0u);  // nothing allowed
        }
        thresholds.single = unit(rng) < 0.7f ? 1.0f : unit(rng);
        thresholds.acc = unit(rng) < 0.7f ? 1.0f : 0.1f + 0.9f * unit(rng);
        for (int32_t q = 0; q < bs; ++q) {
            slots.push_back(unit(rng) < 0.05f ? 0 : q + 1);  // some phantom rows
            positions.push_back(static_cast<int64_t>(rng() % 100000));
            sampling_params p;
            p.seed = rng();
            const float g = unit(rng);
            p.temperature = g < 0.15f ? 0.0f : 0.1f + 1.9f * unit(rng);
            const uint64_t k_range = unit(rng) < 0.75f ? 100 : 3000;
            p.top_k = unit(rng) < 0.5f ? -1 : 1 + static_cast<int32_t>(rng() % k_range);
            p.top_p = unit(rng) < 0.5f ? 1.0f : 0.05f + 0.95f * unit(rng);
            p.min_p = unit(rng) < 0.6f ? 0.0f : 0.2f * unit(rng);
            std::vector<int32_t> history;
            if (unit(rng) < 0.3f) {
                p.presence_penalty = 2.0f * unit(rng) - 1.0f;
                p.frequency_penalty = 2.0f * unit(rng) - 1.0f;
                p.repetition_penalty = 0.5f + 1.5f * unit(rng);
                for (int k = 0; k < 20; ++k)
                    history.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
            }
            if (unit(rng) < 0.3f) {
                for (int k = 0; k < 5; ++k) {
                    p.logit_bias.push_back(
                        {static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)), 20.0f * unit(rng) - 10.0f});
                }
            }
            params.push_back(p);
            histories.push_back(history);
            for (int32_t j = 0; j < n; ++j) {
                // Drafts: often the likely token 0..3, sometimes anything.
                candidates.push_back(unit(rng) < 0.6f ? static_cast<int32_t>(rng() % 4) % vocab
                                                      : static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
            }
        }
    }

    // Plain decoding, which the CUDA backend runs on its streaming kernel: every request greedy
    // (T = 0 or top_k = 1), no penalties, no bias, no phantom rows; drafts usually the previous
    // row's argmax so that chains get accepted.
    void make_plain_greedy(std::mt19937_64& rng) {
        for (int32_t q = 0; q < bs; ++q) {
            slots[static_cast<size_t>(q)] = q + 1;
            sampling_params& p = params[static_cast<size_t>(q)];
            p = sampling_params{};
            p.seed = rng();
            if (rng() % 2)
                p.temperature = 0.0f;
            else
                p.top_k = 1;
            histories[static_cast<size_t>(q)].clear();
            for (int32_t j = 0; j + 1 < n; ++j) {
                if (rng() % 10 < 7)
                    candidates[static_cast<size_t>(q) * n + j + 1] = argmax_of_row(static_cast<int64_t>(q) * n + j);
            }
        }
    }

    // Temperature sampling with nothing to filter: every request samples its whole tempered
    // distribution or is greedy, no penalties, no bias, no bitmask; drafts often the previous
    // row's argmax.
    void make_plain_sampled(std::mt19937_64& rng) {
        std::uniform_real_distribution<float> unit(0.0f, 1.0f);
        bitmask.clear();
        for (int32_t q = 0; q < bs; ++q) {
            sampling_params& p = params[static_cast<size_t>(q)];
            p = sampling_params{};
            p.seed = rng();
            const float pick = unit(rng);
            p.temperature = pick < 0.1f ? 0.0f : 0.1f + 1.9f * unit(rng);
            if (pick > 0.95f) p.top_k = 1;  // greedy by top_k
            histories[static_cast<size_t>(q)].clear();
            for (int32_t j = 0; j + 1 < n; ++j) {
                if (rng() % 10 < 6)
                    candidates[static_cast<size_t>(q) * n + j + 1] = argmax_of_row(static_cast<int64_t>(q) * n + j);
            }
        }
    }

    float logit(int64_t row, int32_t token) const {
        const size_t i = static_cast<size_t>(row * stride + token);
        if (dtype == logits_dtype::f32) return f32[i];
        return dtype == logits_dtype::bf16 ? detmath::bf16_bits_to_float(half[i])
                                           : detmath::fp16_bits_to_float(half[i]);
    }

    int32_t argmax_of_row(int64_t row) const {
        const int32_t words = bitmask_words(vocab);
        int32_t best = 0;
        for (int32_t t = 1; t < vocab; ++t) {
            const bool allowed =
                bitmask.empty() || ((bitmask[static_cast<size_t>(row * words + t / 32)] >> (t % 32)) & 1u);
            if (allowed && logit(row, t) > logit(row, best)) best = t;
        }
        return best;
    }

    // The requests' parameters, for failure messages.
    std::string describe() const {
        std::string out = bitmask.empty() ? "" : " bitmask";
        for (size_t q = 0; q < params.size(); ++q) {
            const sampling_params& p = params[q];
            out += "\n  request " + std::to_string(q) + ": slot " + std::to_string(slots[q]) +
                   " T=" + std::to_string(p.temperature) + " top_k=" + std::to_string(p.top_k) +
                   " top_p=" + std::to_string(p.top_p) + " min_p=" + std::to_string(p.min_p) +
                   " penalties=" + std::to_string(p.has_penalties()) + " bias=" + std::to_string(p.logit_bias.size());
        }
        return out;
    }

    kernel_config config() const {
        kernel_config c;
        c.vocab_size = vocab;
        c.max_batch = bs;
        c.max_slots = bs + 1;
        c.max_tokens_per_req = n;
        c.max_penalty_tokens = 32;
        c.max_logit_bias = 8;
        c.threads = 0;
        return c;
    }

    void register_all(sampling_backend& backend) const {
        for (int32_t q = 0; q < bs; ++q) {
            if (slots[static_cast<size_t>(q)] == 0) continue;
            const std::vector<int32_t>& h = histories[static_cast<size_t>(q)];
            const status s = backend.pool().register_request(q + 1, params[static_cast<size_t>(q)], h.data(),
                                                             static_cast<int32_t>(h.size()));
            ASSERT_TRUE(s.is_ok()) << s.message;
        }
    }

    step_input input(step_kind kind) const {
        step_input in;
        in.logits = logits_view{dtype == logits_dtype::f32 ? static_cast<const void*>(f32.data()) : half.data(), dtype,
                                static_cast<int64_t>(bs) * n, vocab, stride};
        in.slots = slots.data();
        in.positions = positions.data();
        in.batch_size = bs;
        in.tokens_per_req = n;
        in.candidates = kind == step_kind::verify ? candidates.data() : nullptr;
        in.bitmask = bitmask.empty() ? nullptr : bitmask.data();
        in.thresholds = thresholds;
        return in;
    }
};

void expect_same(const outputs& cpu, const outputs& gpu, const std::string& what) {
    ASSERT_EQ(cpu.packed, gpu.packed) << what;
    ASSERT_EQ(cpu.accept_index, gpu.accept_index) << what;
    ASSERT_EQ(cpu.row_error, gpu.row_error) << what;
    for (size_t i = 0; i < cpu.logprobs.size(); ++i) {
        if (std::isnan(cpu.logprobs[i])) {
            ASSERT_TRUE(std::isnan(gpu.logprobs[i])) << what << " logprob " << i;
        } else {
            ASSERT_NEAR(cpu.logprobs[i], gpu.logprobs[i], 1e-5) << what << " logprob " << i;
        }
    }
}

class CudaBackend : public ::testing::Test {
   protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

}  // namespace

// Runs `step` on the CPU and the CUDA backend and expects the same outputs.
void expect_backends_agree(const random_step& step, step_kind kind, const std::string& what) {
    std::unique_ptr<sampling_backend> cpu_backend, gpu_backend;
    ASSERT_TRUE(make_backend(backend_kind::cpu, step.config(), cpu_backend).is_ok());
    const status made = make_backend(backend_kind::cuda, step.config(), gpu_backend);
    ASSERT_TRUE(made.is_ok()) << made.message;
    step.register_all(*cpu_backend);
    step.register_all(*gpu_backend);
    outputs cpu(step.bs, step.n), gpu(step.bs, step.n);
    const step_input in = step.input(kind);
    const status s_cpu =
        kind == step_kind::sample ? cpu_backend->sample(in, cpu.view()) : cpu_backend->verify(in, cpu.view());
    const status s_gpu =
        kind == step_kind::sample ? gpu_backend->sample(in, gpu.view()) : gpu_backend->verify(in, gpu.view());
    ASSERT_TRUE(s_cpu.is_ok()) << s_cpu.message;
    ASSERT_TRUE(s_gpu.is_ok()) << s_gpu.message;
    expect_same(cpu, gpu,
                what + " V=" + std::to_string(step.vocab) + " bs=" + std::to_string(step.bs) +
                    " N=" + std::to_string(step.n) + " dtype=" + dtype_name(step.dtype) + step.describe());
}

int trials_from_environment(int fallback) {
    // DS_GPU_TRIALS shortens the run (e.g. under compute-sanitizer).
    const char* trials_env = std::getenv("DS_GPU_TRIALS");
    return trials_env != nullptr ? std::atoi(trials_env) : fallback;
}

TEST_F(CudaBackend, MatchesCpuOnTwoThousandRandomBatches) {
    const int32_t vocabs[] = {16, 1000, 32000, 128256, 151936, 8191, 8190, 262144};
    const int32_t batches[] = {1, 7, 64, 256};
    const int32_t tokens[] = {1, 2, 4, 8};
    const int trials = trials_from_environment(2000);
    std::mt19937_64 rng(20261202);
    int compared = 0;
    for (int trial = 0; trial < trials; ++trial) {
        const int32_t vocab = vocabs[trial % 8];
        int32_t bs = batches[rng() % 4];
        const int32_t n = tokens[rng() % 4];
        // Keep the CPU side affordable: at most ~4M logits per batch, except every 50th trial.
        while (bs > 1 && static_cast<int64_t>(bs) * n * vocab > (trial % 50 == 0 ? 40'000'000 : 4'000'000))
            bs = bs == 256 ? 64 : bs == 64 ? 7 : 1;
        const random_step step(rng, vocab, bs, n);
        const step_kind kind = n == 1 && rng() % 2 ? step_kind::sample : step_kind::verify;
        expect_backends_agree(step, kind, "trial " + std::to_string(trial));
        if (HasFatalFailure()) return;
        ++compared;
    }
    EXPECT_EQ(compared, trials);
}

// Random steps over `vocabs` made plain by `make_plain` (one of random_step's), half of them
// sampled when N = 1, against the CPU backend.
void expect_plain_steps_agree(uint64_t seed, const std::vector<int32_t>& vocabs,
                              void (random_step::*make_plain)(std::mt19937_64&), const std::string& what) {
    const int trials = trials_from_environment(300) / 2 + 1;
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < trials; ++trial) {
        const int32_t vocab = vocabs[static_cast<size_t>(trial) % vocabs.size()];
        const int32_t n = 1 + static_cast<int32_t>(rng() % 4);
        int32_t bs = 1 + static_cast<int32_t>(rng() % 64);
        while (static_cast<int64_t>(bs) * n * vocab > 8'000'000) bs = (bs + 1) / 2;
        random_step step(rng, vocab, bs, n);
        (step.*make_plain)(rng);
        const step_kind kind = n == 1 && rng() % 2 ? step_kind::sample : step_kind::verify;
        expect_backends_agree(step, kind, what + " trial " + std::to_string(trial));
        if (::testing::Test::HasFatalFailure()) return;
    }
}

// The streaming greedy kernel (every request plain greedy): vocabularies that end mid-chunk and
// mid-vector, 16-bit logits, odd row strides, bitmasks (a row with nothing allowed), NaN, ties,
// accepted chains and logprobs, against the CPU backend.
TEST_F(CudaBackend, PlainGreedyStepsMatchCpu) {
    expect_plain_steps_agree(4096, {16, 4097, 8190, 32000, 128256, 151936}, &random_step::make_plain_greedy,
                             "plain greedy");
}

// Temperature sampling with nothing to filter (the chain kernel's rows without a cut, whose draw
// walks one warp region): vocabularies that end mid-chunk and mid-vector, 16-bit logits, odd row
// strides, NaN, -inf, infinite maxima, ties, greedy rows among sampled ones, accepted chains and
// logprobs, against the CPU backend.
TEST_F(CudaBackend, PlainSampledStepsMatchCpu) {
    expect_plain_steps_agree(8192, {16, 4097, 8190, 8193, 32000, 128256, 151936, 262144},
                             &random_step::make_plain_sampled, "plain sampled");
}

TEST_F(CudaBackend, DeviceLogitsAndGraphReplayMatchCpu) {
    std::mt19937_64 rng(77);
    random_step step(rng, 32000, 64, 4);
    step.dtype = logits_dtype::f32;
    step.bitmask.clear();
    std::unique_ptr<sampling_backend> cpu_backend;
    ASSERT_TRUE(make_backend(backend_kind::cpu, step.config(), cpu_backend).is_ok());
    std::unique_ptr<cuda::cuda_backend> gpu;
    ASSERT_TRUE(cuda::cuda_backend::create(step.config(), gpu).is_ok());
    step.register_all(*cpu_backend);
    step.register_all(*gpu);
    std::shared_ptr<void> device_logits;
    ASSERT_TRUE(cuda::upload_to_device(step.f32.data(), step.f32.size() * sizeof(float), device_logits).is_ok());
    for (step_kind kind : {step_kind::verify, step_kind::sample}) {
        random_step shaped = step;
        if (kind == step_kind::sample) shaped.n = 1;
        step_input host_in = shaped.input(kind);
        if (kind == step_kind::sample) host_in.logits.rows = shaped.bs, host_in.tokens_per_req = 1;
        step_input device_in = host_in;
        device_in.logits.data = device_logits.get();
        device_in.logits.on_device = true;
        outputs expected(shaped.bs, host_in.tokens_per_req), direct(shaped.bs, host_in.tokens_per_req),
            replayed(shaped.bs, host_in.tokens_per_req);
        auto run = [&](sampling_backend& b, const step_input& in, outputs& o) {
            return kind == step_kind::sample ? b.sample(in, o.view()) : b.verify(in, o.view());
        };
        ASSERT_TRUE(run(*cpu_backend, host_in, expected).is_ok());
        ASSERT_TRUE(run(*gpu, device_in, direct).is_ok());
        expect_same(expected, direct, "device logits");
        ASSERT_TRUE(gpu->capture_graph(device_in, kind).is_ok());
        ASSERT_TRUE(gpu->replay_graph(device_in, replayed.view()).is_ok());
        expect_same(expected, replayed, "graph replay");
        // New positions: the replay reads the restaged inputs.
        for (int64_t& p : shaped.positions) p += 1000;
        host_in.positions = device_in.positions = shaped.positions.data();
        outputs expected2(shaped.bs, host_in.tokens_per_req), replayed2(shaped.bs, host_in.tokens_per_req);
        ASSERT_TRUE(run(*cpu_backend, host_in, expected2).is_ok());
        ASSERT_TRUE(gpu->replay_graph(device_in, replayed2.view()).is_ok());
        expect_same(expected2, replayed2, "graph replay with new positions");
        EXPECT_NE(expected.packed, expected2.packed);
        // A different shape is refused.
        step_input smaller = device_in;
        smaller.batch_size = shaped.bs - 1;
        smaller.logits.rows = static_cast<int64_t>(smaller.batch_size) * smaller.tokens_per_req;
        outputs unused(shaped.bs, host_in.tokens_per_req);
        EXPECT_EQ(gpu->replay_graph(smaller, unused.view()).code, status_code::invalid_argument);
    }
}

// A vocabulary whose rows the sampling kernel's resident blocks cannot hold is refused when the
// backend is made (the CPU backend has no such bound).
TEST_F(CudaBackend, RefusesAVocabularyItsResidentBlocksCannotHold) {
    kernel_config config;
    config.vocab_size = kMaxVocabSize;
    config.max_batch = 1;
    std::unique_ptr<sampling_backend> gpu;
    const status s = make_backend(backend_kind::cuda, config, gpu);
    EXPECT_EQ(s.code, status_code::invalid_argument) << s.message;
    EXPECT_NE(s.message.find("vocab_size = 16777215: expected at most "), std::string::npos) << s.message;
}

TEST_F(CudaBackend, ValidatesLikeTheCpuBackend) {
    std::mt19937_64 rng(3);
    random_step step(rng, 64, 4, 2);
    std::unique_ptr<sampling_backend> gpu;
    ASSERT_TRUE(make_backend(backend_kind::cuda, step.config(), gpu).is_ok());
    step_input in = step.input(step_kind::verify);
    in.thresholds.acc = 0.0f;
    outputs out(4, 2);
    const status s = gpu->verify(in, out.view());
    EXPECT_EQ(s.code, status_code::invalid_argument);
    EXPECT_NE(s.message.find("threshold_acc"), std::string::npos);
}
