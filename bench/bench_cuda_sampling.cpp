// Sampling kernels on the GPU against the memory floor, measured in one run (issue 3):
//   floor = bytes of logits read once / device copy bandwidth (read + write) measured here.
// Each case captures one step (staging copy, kernel, packed output copy) in a CUDA graph and
// times replays. Prints a table; with --json FILE also writes the figures for bench/peers_torch.py.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#include "sources/synthetic_logits.h"

namespace {

struct bench_case {
    std::string name;
    int32_t batch;
    int32_t tokens_per_req;
    ds::sampling_params params;
};

ds::sampling_params make_params(float temperature, int32_t top_k, float top_p) {
    ds::sampling_params p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    return p;
}

// The same tokens through the chain kernel: a bias of zero makes a request not plain, so the
// streaming kernel (plain greedy steps) and the chain kernel are compared in one run.
ds::sampling_params with_zero_bias(ds::sampling_params p) {
    p.logit_bias.push_back({0, 0.0f});
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path;
    int only_case = -1;  // --case K runs one case (for profilers)
    for (int i = 1; i + 1 < argc; ++i) {
        if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
        if (std::string(argv[i]) == "--case") only_case = std::atoi(argv[i + 1]);
    }
    if (ds::cuda::device_count() == 0) {
        std::fprintf(stderr, "bench_cuda_sampling: no CUDA device\n");
        return 1;
    }
    constexpr int32_t kVocab = 128256;
    constexpr int kIterations = 50;
    double bandwidth = 0.0;
    if (ds::status s = ds::cuda::measure_copy_bandwidth(size_t{1} << 30, 20, bandwidth); !s.is_ok()) {
        std::fprintf(stderr, "%s\n", s.message.c_str());
        return 1;
    }
    const std::vector<bench_case> cases = {
        {"greedy argmax", 256, 1, make_params(0.0f, -1, 1.0f)},
        {"greedy argmax, chain kernel (zero bias)", 256, 1, with_zero_bias(make_params(0.0f, -1, 1.0f))},
        {"sample temperature", 256, 1, make_params(0.8f, -1, 1.0f)},
        {"sample top-k 50 top-p 0.9", 1, 1, make_params(1.0f, 50, 0.9f)},
        {"sample top-k 50 top-p 0.9", 32, 1, make_params(1.0f, 50, 0.9f)},
        {"sample top-k 50 top-p 0.9", 256, 1, make_params(1.0f, 50, 0.9f)},
        {"verify target-only top-k 50 top-p 0.9", 64, 4, make_params(1.0f, 50, 0.9f)},
    };
    // LLM-like rows from the synthetic model: 256 rows cover every case.
    ds::synthetic_lm_config lm_config;
    lm_config.vocab_size = kVocab;
    const ds::synthetic_lm lm(lm_config);
    std::vector<float> logits(size_t{256} * kVocab);
    for (int r = 0; r < 256; ++r) lm.logits(static_cast<uint64_t>(r) * 7919, logits.data() + static_cast<size_t>(r) * kVocab);
    std::shared_ptr<void> device_logits;
    if (ds::status s = ds::cuda::upload_to_device(logits.data(), logits.size() * sizeof(float), device_logits); !s.is_ok()) {
        std::fprintf(stderr, "%s\n", s.message.c_str());
        return 1;
    }

    std::printf("device copy bandwidth (read+write): %.2f TB/s; V = %d, fp32 logits, CUDA graph replays\n\n", bandwidth, kVocab);
    std::printf("%-40s %5s %3s %10s %10s %8s\n", "case", "bs", "N", "ours (us)", "floor (us)", "ratio");
    std::ofstream json;
    if (!json_path.empty()) json.open(json_path);
    if (json) json << "{\"bandwidth_tbps\": " << bandwidth << ", \"vocab\": " << kVocab << ", \"cases\": [";
    bool first = true;
    for (size_t index = 0; index < cases.size(); ++index) {
        const bench_case& c = cases[index];
        if (only_case >= 0 && static_cast<size_t>(only_case) != index) continue;
        ds::kernel_config config;
        config.vocab_size = kVocab;
        config.max_batch = c.batch;
        config.max_slots = c.batch + 1;
        config.max_tokens_per_req = c.tokens_per_req;
        std::unique_ptr<ds::cuda::cuda_backend> backend;
        if (ds::status s = ds::cuda::cuda_backend::create(config, backend); !s.is_ok()) {
            std::fprintf(stderr, "%s\n", s.message.c_str());
            return 1;
        }
        std::vector<int32_t> slots, candidates;
        std::vector<int64_t> positions;
        for (int32_t b = 0; b < c.batch; ++b) {
            ds::sampling_params p = c.params;
            p.seed = static_cast<uint64_t>(b);
            if (ds::status s = backend->pool().register_request(b + 1, p); !s.is_ok()) {
                std::fprintf(stderr, "%s\n", s.message.c_str());
                return 1;
            }
            slots.push_back(b + 1);
            positions.push_back(100 + b);
            for (int32_t j = 0; j < c.tokens_per_req; ++j) candidates.push_back(j);  // frequent tokens: many accepted
        }
        const int64_t rows = int64_t{c.batch} * c.tokens_per_req;
        ds::step_input step;
        step.logits = ds::logits_view{device_logits.get(), ds::logits_dtype::f32, rows, kVocab, kVocab, true};
        step.slots = slots.data();
        step.positions = positions.data();
        step.batch_size = c.batch;
        step.tokens_per_req = c.tokens_per_req;
        const ds::step_kind kind = c.tokens_per_req > 1 ? ds::step_kind::verify : ds::step_kind::sample;
        step.candidates = kind == ds::step_kind::verify ? candidates.data() : nullptr;
        double micros = 0.0;
        ds::status s = backend->capture_graph(step, kind, /*with_logprobs=*/false);
        if (s.is_ok()) s = backend->time_graph(kIterations, micros);
        if (!s.is_ok()) {
            std::fprintf(stderr, "%s: %s\n", c.name.c_str(), s.message.c_str());
            return 1;
        }
        const double floor_us = static_cast<double>(rows) * kVocab * sizeof(float) / (bandwidth * 1e12) * 1e6;
        std::printf("%-40s %5d %3d %10.1f %10.1f %8.2f\n", c.name.c_str(), c.batch, c.tokens_per_req, micros, floor_us,
                    micros / floor_us);
        if (json) {
            json << (first ? "" : ",") << "{\"name\": \"" << c.name << "\", \"batch\": " << c.batch
                 << ", \"tokens_per_req\": " << c.tokens_per_req << ", \"temperature\": " << c.params.temperature
                 << ", \"top_k\": " << c.params.top_k << ", \"top_p\": " << c.params.top_p << ", \"ours_us\": " << micros
                 << ", \"floor_us\": " << floor_us << "}";
            first = false;
        }
    }
    if (json) json << "]}\n";
    return 0;
}
