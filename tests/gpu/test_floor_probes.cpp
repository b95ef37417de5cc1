// The floor probes of bench_cuda_sampling: bad arguments are refused with the field named (no GPU
// needed), and on a GPU each probe measures something. Their figures are checked by reading them
// (bench/RESULTS.md), not here.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#include "kernels/cuda/floor_probes.h"

namespace {

void expect_invalid(const ds::status& s, const std::string& field) {
    EXPECT_EQ(s.code, ds::status_code::invalid_argument) << s.message;
    EXPECT_NE(s.message.find(field), std::string::npos) << s.message;
}

TEST(FloorProbes, RefuseBadArgumentsNamingTheField) {
    alignas(16) static float logits[8] = {};
    ds::cuda::read_probe_result read;
    expect_invalid(ds::cuda::probe_read_floor(logits, 0, 4, 5, read), "rows = 0");
    expect_invalid(ds::cuda::probe_read_floor(logits, 1, 0, 5, read), "vocab = 0");
    expect_invalid(ds::cuda::probe_read_floor(logits, 1, 4, 0, read), "iterations = 0");
    expect_invalid(ds::cuda::probe_read_floor(nullptr, 1, 4, 5, read), "logits");
    expect_invalid(ds::cuda::probe_read_floor(logits + 1, 1, 4, 5, read), "aligned to 16 bytes");
    expect_invalid(ds::cuda::probe_read_floor(logits, 1, 6, 5, read), "rows * vocab = 6");

    ds::cuda::graph_shape shape{256, 512, 0};
    double microseconds = 0.0;
    expect_invalid(ds::cuda::probe_step_overhead(shape, 5, microseconds), "shape.kernel_blocks = 0");
    shape.kernel_blocks = 8;
    expect_invalid(ds::cuda::probe_step_overhead(shape, -1, microseconds), "iterations = -1");

    ds::cuda::arithmetic_probe_result arithmetic;
    expect_invalid(ds::cuda::probe_exact_arithmetic(0, 128, 0.8f, 5, arithmetic), "rows = 0");
    expect_invalid(ds::cuda::probe_exact_arithmetic(1, 128, 0.0f, 5, arithmetic), "temperature = 0");
    expect_invalid(ds::cuda::probe_exact_arithmetic(1, 128, NAN, 5, arithmetic), "temperature = nan");
    expect_invalid(ds::cuda::probe_exact_arithmetic(1, 128, 0.8f, 0, arithmetic), "iterations = 0");
}

TEST(FloorProbes, EachProbeMeasuresOnTheGpu) {
    if (ds::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    constexpr int64_t kRows = 32;
    constexpr int32_t kVocab = 32000;  // two chunks per row, the last one short
    std::vector<float> logits(static_cast<size_t>(kRows) * kVocab);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 977) * 0.01f;
    std::shared_ptr<void> device_logits;
    ds::status s = ds::cuda::upload_to_device(logits.data(), logits.size() * sizeof(float), device_logits);
    ASSERT_TRUE(s.is_ok()) << s.message;

    ds::cuda::read_probe_result read;
    s = ds::cuda::probe_read_floor(device_logits.get(), kRows, kVocab, 5, read);
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_GT(read.microseconds, 0.0);
    EXPECT_TRUE(std::isfinite(read.terabytes_per_second) && read.terabytes_per_second > 0.0);
    EXPECT_TRUE(read.loads_in_flight == 4 || read.loads_in_flight == 8 || read.loads_in_flight == 16)
        << read.loads_in_flight;
    EXPECT_GT(read.blocks, 0u);

    double step_us = 0.0;
    s = ds::cuda::probe_step_overhead(ds::cuda::graph_shape{4096, 2048, 64}, 5, step_us);
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_GT(step_us, 0.0);

    ds::cuda::arithmetic_probe_result arithmetic;
    s = ds::cuda::probe_exact_arithmetic(kRows, kVocab, 0.8f, 5, arithmetic);
    ASSERT_TRUE(s.is_ok()) << s.message;
    EXPECT_GT(arithmetic.mass_pass_us, 0.0);
    EXPECT_GT(arithmetic.argmax_pass_us, 0.0);
}

}  // namespace
