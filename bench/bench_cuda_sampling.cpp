// Sampling kernels on the GPU against the memory floor, measured in one run:
//   floor = bytes of logits read once / device copy bandwidth (read + write) measured here.
// Each case captures one step (the kernels, reading their parameters from and writing their
// outputs to mapped host memory) in a CUDA graph and times replays. Then the floor probes
// (kernels/cuda/floor_probes.h), in the same run and at each case's rows: the best plain read of
// the logits, an empty step of the case's graph shape, and the exact per-token arithmetic with
// logits made in registers; from them a lower bound per case, max(read, arithmetic) + step
// overhead. Prints both tables; with --json FILE also writes the figures for bench/peers_torch.py.
//
//   bench_cuda_sampling [--vocab V] [--dtype f32|bf16] [--no-probes] [--json FILE] [--case K]
//                       [--two-pass-probe]
//
// V defaults to 128256 and the logits to fp32; bf16 logits are the fp32 rows rounded, and their
// floor counts two bytes a token. --no-probes times the cases alone (for V and dtype sweeps).
// --two-pass-probe (fp32) also times a design probe for temperature-only rows at bs 256
// (floor_probes.h, probe_two_pass_rows) against the floor and this run's temperature step.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#include "kernels/cuda/floor_probes.h"
#include "sources/synthetic_logits.h"

namespace {

struct bench_case {
    std::string name;
    int32_t batch;
    int32_t tokens_per_req;
    ds::sampling_params params;
};

ds::sampling_params make_params(float temperature, int32_t top_k, float top_p, float min_p = 0.0f) {
    ds::sampling_params p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
}

// The same tokens through the chain kernel: a bias of zero makes a request not plain, so the
// streaming kernel (plain greedy steps) and the chain kernel are compared in one run.
ds::sampling_params with_zero_bias(ds::sampling_params p) {
    p.logit_bias.push_back({0, 0.0f});
    return p;
}

// What one run measures: the logits' shape and type, and whether the floor probes run.
struct bench_options {
    std::string json_path;
    int only_case = -1;  // --case K runs one case, without the floor probes (for profilers)
    int32_t vocab = 128256;
    ds::logits_dtype dtype = ds::logits_dtype::f32;
    bool probes = true;
    bool two_pass_probe = false;
};

size_t token_bytes(ds::logits_dtype dtype) { return dtype == ds::logits_dtype::f32 ? 4 : 2; }

// What the probes measured for one case, at its rows and graph shape.
struct case_floors {
    ds::cuda::read_probe_result read;
    ds::cuda::arithmetic_probe_result arithmetic;
    double step_overhead_us = 0.0;
    double arithmetic_us = 0.0;  // the passes the case needs
    double bound_us = 0.0;       // max(read, arithmetic) + step overhead
};

struct case_result {
    const bench_case* c = nullptr;
    int64_t rows = 0;
    double ours_us = 0.0;
    double floor_us = 0.0;
    case_floors floors;
};

// The mass pass's time does not depend on the temperature (no branch per token).
constexpr float kProbeTemperature = 0.8f;

ds::status probe_floors(const bench_case& c, int64_t rows, int32_t vocab, size_t token_bytes, const void* device_logits,
                        const ds::cuda::cuda_backend& backend, int iterations, case_floors& out) {
    // The read probe reads floats: a row of 16-bit logits is read as half as many.
    const auto read_vocab = static_cast<int32_t>(static_cast<size_t>(vocab) * token_bytes / sizeof(float));
    ds::cuda::graph_shape shape;
    ds::status s = backend.captured_shape(shape);
    if (s.is_ok()) s = ds::cuda::probe_step_overhead(shape, iterations, out.step_overhead_us);
    if (s.is_ok()) s = ds::cuda::probe_read_floor(device_logits, rows, read_vocab, iterations, out.read);
    if (s.is_ok()) s = ds::cuda::probe_exact_arithmetic(rows, vocab, kProbeTemperature, iterations, out.arithmetic);
    if (!s.is_ok()) return s;
    // Greedy rows need only the argmax; sampled rows need the row maximum before their masses.
    out.arithmetic_us = out.arithmetic.argmax_pass_us + (ds::is_greedy(c.params) ? 0.0 : out.arithmetic.mass_pass_us);
    out.bound_us = std::max(out.read.microseconds, out.arithmetic_us) + out.step_overhead_us;
    return s;
}

void print_floors(const std::vector<case_result>& results, double bandwidth) {
    const case_result& full = results.front();  // the first case: the greedy bs 256 step (streaming kernel)
    const case_floors& f = full.floors;
    std::printf("\nfloors measured in this run (rows = %lld, the greedy step's graph shape):\n",
                static_cast<long long>(full.rows));
    std::printf("  %-66s %8.1f us\n", "copy floor: logits bytes / copy bandwidth", full.floor_us);
    std::printf("  %-66s %8.1f us  %.2f x copy floor, %.2f TB/s read (%d float4 loads/thread, %u blocks)\n",
                "read probe: best plain read of the logits", f.read.microseconds, f.read.microseconds / full.floor_us,
                f.read.terabytes_per_second, f.read.loads_in_flight, f.read.blocks);
    std::printf("  %-66s %8.1f us\n", "step overhead: the step's copy (if any) + empty kernel writing host memory",
                f.step_overhead_us);
    std::printf("  %-66s %8.1f us\n", "arithmetic, argmax pass: compare/select per token, no memory",
                f.arithmetic.argmax_pass_us);
    std::printf("  %-66s %8.1f us\n", "arithmetic, mass pass: exact::token_mass, 3 sums", f.arithmetic.mass_pass_us);
    std::printf(
        "\nlower bound = max(read probe, arithmetic) + step overhead, probed at each case's rows and graph shape;\n"
        "arithmetic = argmax pass (greedy) or argmax + mass passes (sampled); ratios to the floor (copy bandwidth %.2f "
        "TB/s)\n",
        bandwidth);
    std::printf("%-40s %5s %3s %8s %8s %8s %8s %8s %8s %8s %8s\n", "case", "bs", "N", "read", "arith", "step", "bound",
                "ours", "bound/fl", "ours/fl", "ours/bnd");
    for (const case_result& r : results) {
        const case_floors& g = r.floors;
        std::printf("%-40s %5d %3d %8.1f %8.1f %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f\n", r.c->name.c_str(), r.c->batch,
                    r.c->tokens_per_req, g.read.microseconds, g.arithmetic_us, g.step_overhead_us, g.bound_us,
                    r.ours_us, g.bound_us / r.floor_us, r.ours_us / r.floor_us, r.ours_us / g.bound_us);
    }
}

// bench/peers_torch.py reads "bandwidth_tbps", "vocab", "dtype" and "cases"; the probes' figures are the
// top-level "floor_probes" (rows of the first case) and "case_bounds" (one per case, in order).
// False when the file cannot be written.
bool write_json(const std::string& path, const std::vector<case_result>& results, double bandwidth,
                const bench_options& o, bool probed) {
    std::ofstream json(path);
    if (!json) return false;
    json << "{\"bandwidth_tbps\": " << bandwidth << ", \"vocab\": " << o.vocab << ", \"dtype\": \""
         << (o.dtype == ds::logits_dtype::f32 ? "f32" : "bf16") << "\", \"cases\": [";
    for (size_t i = 0; i < results.size(); ++i) {
        const case_result& r = results[i];
        const bench_case& c = *r.c;
        json << (i == 0 ? "" : ",") << "{\"name\": \"" << c.name << "\", \"batch\": " << c.batch
             << ", \"tokens_per_req\": " << c.tokens_per_req << ", \"temperature\": " << c.params.temperature
             << ", \"top_k\": " << c.params.top_k << ", \"top_p\": " << c.params.top_p
             << ", \"min_p\": " << c.params.min_p << ", \"ours_us\": " << r.ours_us << ", \"floor_us\": " << r.floor_us
             << "}";
    }
    json << "]";
    if (probed) {
        const case_result& full = results.front();
        const case_floors& f = full.floors;
        json << ", \"floor_probes\": {\"rows\": " << full.rows << ", \"copy_floor_us\": " << full.floor_us
             << ", \"read_probe_us\": " << f.read.microseconds
             << ", \"read_probe_tbps\": " << f.read.terabytes_per_second
             << ", \"read_loads_in_flight\": " << f.read.loads_in_flight << ", \"read_blocks\": " << f.read.blocks
             << ", \"step_overhead_us\": " << f.step_overhead_us
             << ", \"argmax_pass_us\": " << f.arithmetic.argmax_pass_us
             << ", \"mass_pass_us\": " << f.arithmetic.mass_pass_us << "}, \"case_bounds\": [";
        for (size_t i = 0; i < results.size(); ++i) {
            const case_result& r = results[i];
            const case_floors& g = r.floors;
            json << (i == 0 ? "" : ",") << "{\"name\": \"" << r.c->name << "\", \"batch\": " << r.c->batch
                 << ", \"tokens_per_req\": " << r.c->tokens_per_req << ", \"read_probe_us\": " << g.read.microseconds
                 << ", \"arithmetic_us\": " << g.arithmetic_us << ", \"step_overhead_us\": " << g.step_overhead_us
                 << ", \"bound_us\": " << g.bound_us << "}";
        }
        json << "]";
    }
    json << "}\n";
    return static_cast<bool>(json.flush());
}

// fp32 to bf16, rounding to nearest even (the rows hold no NaN).
uint16_t round_to_bf16(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// LLM-like rows from the synthetic model, on the device: 256 rows cover every case.
ds::status upload_logits(int32_t vocab, ds::logits_dtype dtype, std::shared_ptr<void>& device_logits) {
    ds::synthetic_lm_config lm_config;
    lm_config.vocab_size = vocab;
    const ds::synthetic_lm lm(lm_config);
    std::vector<float> logits(size_t{256} * static_cast<size_t>(vocab));
    for (int r = 0; r < 256; ++r)
        lm.logits(static_cast<uint64_t>(r) * 7919, logits.data() + static_cast<size_t>(r) * static_cast<size_t>(vocab));
    if (dtype == ds::logits_dtype::f32)
        return ds::cuda::upload_to_device(logits.data(), logits.size() * sizeof(float), device_logits);
    std::vector<uint16_t> halves(logits.size());
    std::transform(logits.begin(), logits.end(), halves.begin(), round_to_bf16);
    return ds::cuda::upload_to_device(halves.data(), halves.size() * sizeof(uint16_t), device_logits);
}

// One case: a backend with the case's requests, its step captured in a CUDA graph and timed over
// `iterations` replays; the floor probes too when `probed`.
ds::status run_case(const bench_case& c, const bench_options& o, const void* device_logits, double bandwidth,
                    int iterations, bool probed, case_result& result) {
    const int32_t vocab = o.vocab;
    ds::kernel_config config;
    config.vocab_size = vocab;
    config.max_batch = c.batch;
    config.max_slots = c.batch + 1;
    config.max_tokens_per_req = c.tokens_per_req;
    std::unique_ptr<ds::cuda::cuda_backend> backend;
    DS_TRY(ds::cuda::cuda_backend::create(config, backend));
    std::vector<int32_t> slots, candidates;
    std::vector<int64_t> positions;
    for (int32_t b = 0; b < c.batch; ++b) {
        ds::sampling_params p = c.params;
        p.seed = static_cast<uint64_t>(b);
        DS_TRY(backend->pool().register_request(b + 1, p));
        slots.push_back(b + 1);
        positions.push_back(100 + b);
        for (int32_t j = 0; j < c.tokens_per_req; ++j) candidates.push_back(j);  // frequent tokens: many accepted
    }
    const int64_t rows = int64_t{c.batch} * c.tokens_per_req;
    ds::step_input step;
    step.logits = ds::logits_view{device_logits, o.dtype, rows, vocab, vocab, true};
    step.slots = slots.data();
    step.positions = positions.data();
    step.batch_size = c.batch;
    step.tokens_per_req = c.tokens_per_req;
    const ds::step_kind kind = c.tokens_per_req > 1 ? ds::step_kind::verify : ds::step_kind::sample;
    step.candidates = kind == ds::step_kind::verify ? candidates.data() : nullptr;
    double micros = 0.0;
    DS_TRY(backend->capture_graph(step, kind, /*with_logprobs=*/false));
    DS_TRY(backend->time_graph(iterations, micros));
    const double floor_us =
        static_cast<double>(rows) * vocab * static_cast<double>(token_bytes(o.dtype)) / (bandwidth * 1e12) * 1e6;
    std::printf("%-40s %5d %3d %10.1f %10.1f %8.2f\n", c.name.c_str(), c.batch, c.tokens_per_req, micros, floor_us,
                micros / floor_us);
    result = case_result{&c, rows, micros, floor_us, {}};
    if (!probed) return ds::status::success();
    const ds::status s =
        probe_floors(c, rows, vocab, token_bytes(o.dtype), device_logits, *backend, iterations, result.floors);
    return s.is_ok() ? s : ds::status{s.code, "floor probes: " + s.message};
}

// False (with a message) on an unknown flag or a value out of range.
bool parse_options(int argc, char** argv, bench_options& o) {
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--no-probes") {
            o.probes = false;
            continue;
        }
        if (flag == "--two-pass-probe") {
            o.two_pass_probe = true;
            continue;
        }
        if (i + 1 >= argc) break;
        const std::string value = argv[++i];
        if (flag == "--json") {
            o.json_path = value;
        } else if (flag == "--case") {
            o.only_case = std::atoi(value.c_str());
        } else if (flag == "--vocab") {
            o.vocab = std::atoi(value.c_str());
        } else if (flag == "--dtype" && (value == "f32" || value == "bf16")) {
            o.dtype = value == "f32" ? ds::logits_dtype::f32 : ds::logits_dtype::bf16;
        } else {
            std::fprintf(stderr, "bench_cuda_sampling: unknown flag or value: %s %s\n", flag.c_str(), value.c_str());
            return false;
        }
    }
    if (o.vocab < 16 || o.vocab > (1 << 20)) {
        std::fprintf(stderr, "bench_cuda_sampling: --vocab must be in [16, 1048576], got %d\n", o.vocab);
        return false;
    }
    if (o.two_pass_probe && o.dtype != ds::logits_dtype::f32) {
        std::fprintf(stderr, "bench_cuda_sampling: --two-pass-probe reads fp32 logits\n");
        return false;
    }
    return true;
}

// The design probe at the temperature case's 256 rows, against the floor and that case's step.
ds::status print_two_pass_probe(const bench_options& o, const void* device_logits, double bandwidth,
                                const std::vector<case_result>& results, int iterations) {
    constexpr int64_t kRows = 256;
    ds::cuda::two_pass_probe_result r;
    DS_TRY(ds::cuda::probe_two_pass_rows(static_cast<const float*>(device_logits), kRows, o.vocab, kProbeTemperature,
                                         iterations, r));
    const double floor_us = static_cast<double>(kRows) * o.vocab * sizeof(float) / (bandwidth * 1e12) * 1e6;
    double temperature_us = 0.0;
    for (const case_result& c : results) {
        if (c.c->name == "sample temperature") temperature_us = c.ours_us;
    }
    std::printf(
        "\ndesign probe: temperature-only rows, no chunk held across the row barrier (%lld rows, floor %.1f "
        "us; the kernel alone, no draw)\n",
        static_cast<long long>(kRows), floor_us);
    std::printf("%-58s %8s %8s %10s\n", "variant", "us", "x floor", "x temp step");
    const std::pair<const char*, double> rows[] = {
        {"max pass, barrier, masses read again, 2048-token chunks", r.reread_2048_us},
        {"max pass, barrier, masses read again, 4096-token chunks", r.reread_4096_us},
        {"max pass, barrier, masses read again, 8192-token chunks", r.reread_8192_us},
        {"max pass, barrier, masses from registers, 8192 tokens", r.registers_8192_us},
        {"max pass, no barrier, masses read again, 4096 tokens", r.no_barrier_4096_us},
    };
    for (const auto& [name, us] : rows)
        std::printf("%-58s %8.1f %8.2f %10.2f\n", name, us, us / floor_us,
                    temperature_us > 0.0 ? us / temperature_us : 0.0);
    return ds::status::success();
}

}  // namespace

int main(int argc, char** argv) {
    bench_options o;
    if (!parse_options(argc, argv, o)) return 2;
    if (ds::cuda::device_count() == 0) {
        std::fprintf(stderr, "bench_cuda_sampling: no CUDA device\n");
        return 1;
    }
    constexpr int kIterations = 50;
    double bandwidth = 0.0;
    std::shared_ptr<void> device_logits;
    ds::status s = ds::cuda::measure_copy_bandwidth(size_t{1} << 30, 20, bandwidth);
    if (s.is_ok()) s = upload_logits(o.vocab, o.dtype, device_logits);
    if (!s.is_ok()) {
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
        {"sample top-k 50", 256, 1, make_params(1.0f, 50, 1.0f)},
        {"sample top-p 0.9", 256, 1, make_params(1.0f, -1, 0.9f)},
        {"sample min-p 0.05", 256, 1, make_params(1.0f, -1, 1.0f, 0.05f)},
        {"verify target-only top-k 50 top-p 0.9", 64, 4, make_params(1.0f, 50, 0.9f)},
    };
    std::printf("device copy bandwidth (read+write): %.2f TB/s; V = %d, %s logits, CUDA graph replays\n\n", bandwidth,
                o.vocab, o.dtype == ds::logits_dtype::f32 ? "fp32" : "bf16");
    std::printf("%-40s %5s %3s %10s %10s %8s\n", "case", "bs", "N", "ours (us)", "floor (us)", "ratio");
    const bool probed = o.only_case < 0 && o.probes;
    std::vector<case_result> results;
    for (size_t index = 0; index < cases.size(); ++index) {
        if (o.only_case >= 0 && static_cast<size_t>(o.only_case) != index) continue;
        case_result result;
        s = run_case(cases[index], o, device_logits.get(), bandwidth, kIterations, probed, result);
        if (!s.is_ok()) {
            std::fprintf(stderr, "%s: %s\n", cases[index].name.c_str(), s.message.c_str());
            return 1;
        }
        results.push_back(result);
    }
    if (probed) print_floors(results, bandwidth);
    if (o.two_pass_probe) s = print_two_pass_probe(o, device_logits.get(), bandwidth, results, kIterations);
    if (!s.is_ok()) {
        std::fprintf(stderr, "two-pass probe: %s\n", s.message.c_str());
        return 1;
    }
    if (!o.json_path.empty() && !write_json(o.json_path, results, bandwidth, o, probed)) {
        std::fprintf(stderr, "bench_cuda_sampling: cannot write --json %s\n", o.json_path.c_str());
        return 1;
    }
    return 0;
}
