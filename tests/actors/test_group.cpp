// The coordinator path end to end through the embedding API: every TP degree and mode gives the
// CPU backend's outputs on the full rows; the rank-0 policy with a desyncing rank; a rank that
// never answers; submission order and exactly-once replies; invalid steps.
#include <distsample/group.h>
#include <distsample/testing.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

#include "support/backend_harness.h"
#if defined(DISTSAMPLE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/det_math_probe.h"
#endif

namespace ds {
namespace {

constexpr int32_t kVocab = 240;  // divisible by 1, 2, 3, 4 and 8
constexpr int32_t kMaxBatch = 8;
constexpr int32_t kMaxN = 4;

group_config test_config(int32_t tp, dist_mode mode, rank0_policy policy = rank0_policy::on_mismatch) {
    group_config c;
    c.distribution.tp = tp;
    c.limits.vocab_size = kVocab;
    c.limits.max_batch = kMaxBatch;
    c.limits.max_tokens_per_req = kMaxN;
    c.limits.max_slots = kMaxBatch + 1;
    c.limits.max_penalty_tokens = 64;
    c.limits.max_logit_bias = 16;
    c.distribution.mode = mode;
    c.distribution.policy = policy;
    c.distribution.step_timeout = std::chrono::milliseconds(3000);
    c.transport.timeout = std::chrono::milliseconds(3000);
    return c;
}

struct random_request {
    sampling_params params;
    std::vector<int32_t> history;
};

// A random step: requests with every kind of parameter, logits with ties, -inf and NaN.
struct random_step {
    step_kind kind = step_kind::sample;
    int32_t n = 1;
    std::vector<random_request> requests;
    std::vector<float> logits;
    std::vector<int32_t> slots;
    std::vector<int64_t> positions;
    std::vector<int32_t> candidates;
    std::vector<uint32_t> bitmask;

    int32_t bs() const { return static_cast<int32_t>(requests.size()); }
    logits_view full_view() const {
        return logits_view{logits.data(), logits_dtype::f32, int64_t{bs()} * n, kVocab, kVocab};
    }

    step_request request(int32_t tp) const {
        step_request r;
        r.kind = kind;
        r.tokens_per_req = n;
        r.slots = slots;
        r.positions = positions;
        r.candidates = candidates;
        r.bitmask = bitmask;
        r.shards = split_vocab(full_view(), tp);
        return r;
    }
};

random_step make_random_step(std::mt19937_64& rng) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    random_step s;
    s.kind = uniform(0, 2) == 0 ? step_kind::sample : step_kind::verify;
    s.n = s.kind == step_kind::sample ? 1 : uniform(1, kMaxN);
    const int32_t bs = uniform(1, kMaxBatch);
    std::normal_distribution<float> gauss(0.0f, 2.0f);
    for (int32_t b = 0; b < bs; ++b) {
        random_request r;
        const float temperatures[] = {0.0f, 0.6f, 1.0f, 1.5f};
        r.params.temperature = temperatures[uniform(0, 3)];
        const int32_t top_ks[] = {-1, -1, 1, 3, 17};
        r.params.top_k = top_ks[uniform(0, 4)];
        const float top_ps[] = {1.0f, 0.95f, 0.6f, 0.2f};
        r.params.top_p = top_ps[uniform(0, 3)];
        r.params.min_p = uniform(0, 3) == 0 ? 0.05f : 0.0f;
        r.params.seed = rng();
        if (uniform(0, 3) == 0) {
            r.params.repetition_penalty = 1.3f;
            r.params.frequency_penalty = 0.2f;
            for (int i = 0; i < 4; ++i) r.history.push_back(uniform(0, kVocab - 1));
        }
        if (uniform(0, 3) == 0)
            r.params.logit_bias = {{uniform(0, kVocab - 1), 4.0f}, {uniform(0, kVocab - 1), -100.0f}};
        s.requests.push_back(r);
        s.slots.push_back(b + 1);
        s.positions.push_back(uniform(0, 5000));
    }
    const int32_t rows = bs * s.n;
    for (int32_t i = 0; i < rows * kVocab; ++i) {
        // Coarse values make ties; a few -inf and NaN.
        const int kind = uniform(0, 199);
        s.logits.push_back(kind == 0 ? -INFINITY : kind == 1 ? NAN : std::round(gauss(rng) * 4.0f) / 4.0f);
    }
    if (s.kind == step_kind::verify) {
        for (int32_t b = 0; b < bs; ++b) {
            for (int32_t j = 0; j < s.n; ++j) {
                // Half the drafts are the previous row's argmax, so chains get accepted.
                int32_t token = uniform(0, kVocab - 1);
                if (j > 0 && uniform(0, 1) == 0) {
                    const float* row = s.logits.data() + static_cast<size_t>(b * s.n + j - 1) * kVocab;
                    for (int32_t i = 0; i < kVocab; ++i) {
                        if (row[i] > row[token] || std::isnan(row[token])) token = i;
                    }
                }
                s.candidates.push_back(token);
            }
        }
    }
    if (uniform(0, 3) == 0) {
        const int32_t words = bitmask_words(kVocab);
        for (int32_t i = 0; i < rows * words; ++i) s.bitmask.push_back(static_cast<uint32_t>(rng()) | 0x11111111u);
    }
    return s;
}

step_outputs reference_outputs(const random_step& s) {
    kernel_config c = testing::small_config(kVocab, kMaxBatch, kMaxN, kMaxBatch + 1);
    testing::backend_harness h(c);
    for (int32_t b = 0; b < s.bs(); ++b) {
        const random_request& r = s.requests[static_cast<size_t>(b)];
        status st = h.backend->pool().register_request(b + 1, r.params, r.history.data(),
                                                       static_cast<int32_t>(r.history.size()));
        EXPECT_TRUE(st.is_ok()) << st.message;
    }
    step_input in = testing::make_step(s.logits, kVocab, s.slots, s.positions, s.n,
                                       s.kind == step_kind::verify ? &s.candidates : nullptr);
    in.bitmask = s.bitmask.empty() ? nullptr : s.bitmask.data();
    status st = h.run(s.kind, in);
    EXPECT_TRUE(st.is_ok()) << st.message;
    step_outputs out;
    out.packed = h.packed;
    out.accept_index = h.accept_index;
    out.logprobs = h.logprobs;
    out.row_error = h.row_error;
    return out;
}

void register_all(group& g, const random_step& s) {
    for (int32_t b = 0; b < s.bs(); ++b) {
        const random_request& r = s.requests[static_cast<size_t>(b)];
        status st = g.register_request(b + 1, r.params, r.history);
        ASSERT_TRUE(st.is_ok()) << st.message;
    }
}

void expect_same(const step_outputs& expected, const step_outputs& got, bool exact_logprobs, const std::string& what) {
    EXPECT_EQ(expected.packed, got.packed) << what;
    EXPECT_EQ(expected.accept_index, got.accept_index) << what;
    EXPECT_EQ(expected.row_error, got.row_error) << what;
    ASSERT_EQ(expected.logprobs.size(), got.logprobs.size()) << what;
    for (size_t i = 0; i < got.logprobs.size(); ++i) {
        const float a = expected.logprobs[i];
        const float b = got.logprobs[i];
        if (std::isnan(a) || exact_logprobs) {
            EXPECT_EQ(std::isnan(a), std::isnan(b)) << what << " logprob " << i;
            if (!std::isnan(a)) {
                EXPECT_EQ(a, b) << what << " logprob " << i;
            }
        } else {
            EXPECT_NEAR(a, b, 1e-5) << what << " logprob " << i;
        }
    }
}

// Random steps through `g` give the CPU backend's outputs on the full rows (logprobs bit for bit
// when `exact_logprobs`, else within 1e-5).
// With `logits_on_device` the shards are handed over in GPU memory, as a model runtime would.
void expect_random_steps_match_cpu(group& g, int32_t tp, dist_mode mode, bool exact_logprobs,
                                   bool logits_on_device = false) {
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(tp) * 10 + static_cast<uint64_t>(mode));
    for (int i = 0; i < 12; ++i) {
        const random_step s = make_random_step(rng);
        register_all(g, s);
        step_request request = s.request(tp);
        std::shared_ptr<void> device_logits;
#if defined(DISTSAMPLE_HAVE_CUDA)
        if (logits_on_device) {
            const status up = cuda::upload_to_device(s.logits.data(), s.logits.size() * sizeof(float), device_logits);
            ASSERT_TRUE(up.is_ok()) << up.message;
            logits_view full = s.full_view();
            full.data = device_logits.get();
            full.on_device = true;
            request.shards = split_vocab(full, tp);
        }
#else
        ASSERT_FALSE(logits_on_device) << "device logits need a CUDA build";
#endif
        const step_reply reply = g.step(request);
        ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
        EXPECT_TRUE(reply.desyncs.empty());
        expect_same(reference_outputs(s), reply.outputs, exact_logprobs,
                    std::string(mode_name(mode)) + " tp=" + std::to_string(tp) + " step " + std::to_string(i));
    }
}

// (tp, mode, transport)
class EveryTpAndMode : public ::testing::TestWithParam<std::tuple<int32_t, dist_mode, const char*>> {};

TEST_P(EveryTpAndMode, RandomStepsEqualTheBackendOnFullRows) {
    const auto [tp, mode, transport] = GetParam();
    group_config config = test_config(tp, mode);
    config.transport.kind = *parse_transport_kind(transport);
    std::unique_ptr<group> g;
    status st = group::create(config, g);
    ASSERT_TRUE(st.is_ok()) << st.message;
    expect_random_steps_match_cpu(*g, tp, mode, mode != dist_mode::sharded);
}

// Polling instead of sleeping (config/group_config.h) changes when threads wake, not what they do.
TEST(Group, SpinningSchedulerCallerAndRanksGiveTheSameTokens) {
    group_config config = test_config(2, dist_mode::swap);
    config.tuning.scheduler_threads = 2;
    config.tuning.scheduler_spin_us = 200;
    config.tuning.reply_spin_us = 200;
    config.tuning.rank_spin_us = 200;
    std::unique_ptr<group> g;
    status st = group::create(config, g);
    ASSERT_TRUE(st.is_ok()) << st.message;
    expect_random_steps_match_cpu(*g, 2, dist_mode::swap, true);
}

// The rank actors on the CUDA backend (one GPU shared by the ranks; sharded mode on the CUDA shard
// primitives): the same tokens as the CPU backend. Skipped where CUDA is not built or there is no GPU.
class CudaRanks : public ::testing::TestWithParam<std::tuple<int32_t, dist_mode>> {};

TEST_P(CudaRanks, RandomStepsEqualTheCpuBackend) {
    const auto [tp, mode] = GetParam();
    group_config config = test_config(tp, mode);
    config.backend = backend_kind::cuda;
    std::unique_ptr<group> g;
    status st = group::create(config, g);
    if (st.code == status_code::unsupported) GTEST_SKIP() << st.message;
    ASSERT_TRUE(st.is_ok()) << st.message;
    expect_random_steps_match_cpu(*g, tp, mode, false);
}

#if defined(DISTSAMPLE_HAVE_CUDA)
// Shards in device memory (a model runtime's output) are staged by each rank and give the CPU
// backend's outputs in every mode, on either backend.
TEST(DeviceLogits, EveryModeEqualsTheCpuBackend) {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (const dist_mode mode : {dist_mode::gathered, dist_mode::swap, dist_mode::sharded}) {
        for (const char* backend : {"cpu", "cuda"}) {
            group_config config = test_config(2, mode);
            config.backend = *parse_backend_kind(backend);
            std::unique_ptr<group> g;
            status st = group::create(config, g);
            ASSERT_TRUE(st.is_ok()) << st.message;
            SCOPED_TRACE(std::string(mode_name(mode)) + " on " + backend);
            const bool exact = mode != dist_mode::sharded && std::string(backend) == "cpu";
            expect_random_steps_match_cpu(*g, 2, mode, exact, true);
        }
    }
}
#else
TEST(DeviceLogits, AreRefusedWithoutCuda) {
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(test_config(2, dist_mode::swap), g).is_ok());
    std::mt19937_64 rng(7);
    const random_step s = make_random_step(rng);
    register_all(*g, s);
    step_request request = s.request(2);
    for (logits_view& shard : request.shards) shard.on_device = true;
    const step_reply reply = g->step(request);
    EXPECT_EQ(reply.result.code, status_code::unsupported);
    EXPECT_NE(reply.result.message.find("logits.on_device"), std::string::npos) << reply.result.message;
}
#endif

INSTANTIATE_TEST_SUITE_P(Group, CudaRanks,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(dist_mode::gathered, dist_mode::swap,
                                                              dist_mode::sharded)),
                         [](const auto& param_info) {
                             return std::string(mode_name(std::get<1>(param_info.param))) + "_tp" +
                                    std::to_string(std::get<0>(param_info.param));
                         });

std::string tp_mode_transport_name(const ::testing::TestParamInfo<EveryTpAndMode::ParamType>& info) {
    return std::string(mode_name(std::get<1>(info.param))) + "_tp" + std::to_string(std::get<0>(info.param)) + "_" +
           std::get<2>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Group, EveryTpAndMode,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(dist_mode::gathered, dist_mode::swap, dist_mode::sharded),
                                            ::testing::Values("local")),
                         tp_mode_transport_name);

#ifdef DISTSAMPLE_HAVE_UCX
// The same steps with every rank's collectives going over UCX (ranks as threads, one UCX worker each).
INSTANTIATE_TEST_SUITE_P(GroupOverUcx, EveryTpAndMode,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Values(dist_mode::gathered, dist_mode::swap, dist_mode::sharded),
                                            ::testing::Values("ucx")),
                         tp_mode_transport_name);
#endif

random_step fixed_step(uint64_t seed) {
    std::mt19937_64 rng(seed);
    random_step s;
    do {
        s = make_random_step(rng);
    } while (s.bs() < 2);
    return s;
}

class RankZeroPolicy : public ::testing::TestWithParam<rank0_policy> {};

TEST_P(RankZeroPolicy, AlteredTokenIsCaughtByDigest) {
    const rank0_policy policy = GetParam();
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(test_config(4, dist_mode::swap, policy), g).is_ok());
    const random_step s = fixed_step(7);
    register_all(*g, s);
    ASSERT_TRUE(g->step(s.request(4)).result.is_ok());  // step 1: clean
    ASSERT_TRUE(testing::inject_fault(*g, 2, rank_fault::alter_token).is_ok());
    register_all(*g, s);
    const step_reply reply = g->step(s.request(4));  // step 2: rank 2 alters its first token
    const std::vector<desync_event> events = g->desync_events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].step, 2u);
    EXPECT_EQ(events[0].rank, 2);
    EXPECT_EQ(events[0].first_row, 0);
    if (policy == rank0_policy::never) {
        EXPECT_EQ(reply.result.code, status_code::mismatch);
        EXPECT_NE(reply.result.message.find("rank 2"), std::string::npos) << reply.result.message;
        EXPECT_NE(reply.result.message.find("step 2"), std::string::npos) << reply.result.message;
    } else {
        ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
        ASSERT_EQ(reply.desyncs.size(), 1u);
        expect_same(reference_outputs(s), reply.outputs, true, "rank 0's outputs");
    }
    register_all(*g, s);
    const step_reply after = g->step(s.request(4));  // the hook fired once; the group is healthy
    ASSERT_TRUE(after.result.is_ok()) << after.result.message;
    EXPECT_TRUE(after.desyncs.empty());
}

INSTANTIATE_TEST_SUITE_P(Group, RankZeroPolicy,
                         ::testing::Values(rank0_policy::always, rank0_policy::never, rank0_policy::on_mismatch),
                         [](const auto& param_info) { return std::string(policy_name(param_info.param)); });

std::vector<const char*> built_transports_for_tests() {
#ifdef DISTSAMPLE_HAVE_UCX
    return {"local", "ucx"};
#else
    return {"local"};
#endif
}

TEST(Group, RankThatNeverAnswersFailsTheStepByNameInTime) {
    for (const char* transport : built_transports_for_tests()) {
        for (dist_mode mode : {dist_mode::swap, dist_mode::sharded}) {
            SCOPED_TRACE(std::string(transport) + " " + mode_name(mode));
            group_config c = test_config(4, mode);
            c.transport.kind = *parse_transport_kind(transport);
            c.distribution.step_timeout = std::chrono::milliseconds(300);
            c.transport.timeout = std::chrono::milliseconds(5000);
            std::unique_ptr<group> g;
            ASSERT_TRUE(group::create(c, g).is_ok());
            const random_step s = fixed_step(11);
            register_all(*g, s);
            ASSERT_TRUE(testing::inject_fault(*g, 1, rank_fault::stall).is_ok());
            const auto start = std::chrono::steady_clock::now();
            const step_reply failed = g->step(s.request(4));
            const auto elapsed = std::chrono::steady_clock::now() - start;
            EXPECT_EQ(failed.result.code, status_code::timeout) << failed.result.message;
            EXPECT_NE(failed.result.message.find("rank 1"), std::string::npos) << failed.result.message;
            EXPECT_LT(elapsed, std::chrono::milliseconds(1500));
            register_all(*g, s);
            const step_reply next = g->step(s.request(4));
            ASSERT_TRUE(next.result.is_ok()) << next.result.message;
            expect_same(reference_outputs(s), next.outputs, mode != dist_mode::sharded, "after the timeout");
        }
    }
}

TEST(Group, RepliesComeOnceInSubmissionOrder) {
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(test_config(2, dist_mode::swap), g).is_ok());
    std::mt19937_64 rng(5);
    std::vector<random_step> steps;
    for (int i = 0; i < 8; ++i) steps.push_back(make_random_step(rng));
    // Greedy everywhere so penalties and registration order do not matter.
    for (random_step& s : steps) {
        for (random_request& r : s.requests) {
            r.params = sampling_params{};
            r.params.temperature = 0.0f;
            r.history.clear();
        }
    }
    for (int32_t slot = 1; slot <= kMaxBatch; ++slot) {
        sampling_params greedy;
        greedy.temperature = 0.0f;
        ASSERT_TRUE(g->register_request(slot, greedy).is_ok());
    }
    std::vector<std::future<step_reply>> futures;
    for (size_t i = 0; i < steps.size(); ++i) {
        step_request r = steps[i].request(2);
        if (i == 3) r.positions.pop_back();  // an invalid step in the middle: answered in its turn
        futures.push_back(g->submit(std::move(r)));
    }
    uint64_t last_id = 0;
    for (size_t i = 0; i < futures.size(); ++i) {
        ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(10)), std::future_status::ready);
        const step_reply reply = futures[i].get();
        if (i == 3) {
            EXPECT_EQ(reply.result.code, status_code::invalid_argument);
            EXPECT_NE(reply.result.message.find("positions"), std::string::npos) << reply.result.message;
            continue;
        }
        ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
        EXPECT_GT(reply.step_id, last_id);
        last_id = reply.step_id;
        expect_same(reference_outputs(steps[i]), reply.outputs, true, "step " + std::to_string(i));
    }
}

// The coordinator fulfils library callers' futures itself: when the group goes away with a step
// running (a rank that never answers, long before the timeout) and two queued, each future still
// gets one reply, an error, rather than a broken promise or a wait for ever.
TEST(Group, StepsPendingWhenTheGroupGoesAreAnsweredWithAnError) {
    group_config c = test_config(2, dist_mode::swap);
    c.distribution.step_timeout = std::chrono::milliseconds(60000);
    std::unique_ptr<group> g;
    ASSERT_TRUE(group::create(c, g).is_ok());
    const random_step s = fixed_step(13);
    register_all(*g, s);
    ASSERT_TRUE(testing::inject_fault(*g, 1, rank_fault::stall).is_ok());
    std::vector<std::future<step_reply>> futures;
    for (int i = 0; i < 3; ++i) futures.push_back(g->submit(s.request(2)));
    g.reset();
    for (std::future<step_reply>& f : futures) {
        ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
        const step_reply reply = f.get();
        EXPECT_FALSE(reply.result.is_ok());
        EXPECT_NE(reply.result.message.find("coordinator stopped"), std::string::npos) << reply.result.message;
    }
}

TEST(Group, InvalidInputsNameTheField) {
    std::unique_ptr<group> g;
    group_config bad = test_config(7, dist_mode::swap);
    status st = group::create(bad, g);
    EXPECT_EQ(st.code, status_code::invalid_argument);
    EXPECT_NE(st.message.find("vocab_size = 240: expected a multiple of tp = 7"), std::string::npos) << st.message;

    ASSERT_TRUE(group::create(test_config(4, dist_mode::swap), g).is_ok());
    sampling_params p;
    p.top_p = 1.5f;
    st = g->register_request(1, p);
    EXPECT_EQ(st.code, status_code::invalid_argument);
    EXPECT_NE(st.message.find("top_p"), std::string::npos) << st.message;

    random_step s = fixed_step(3);
    step_request r = s.request(4);
    r.shards.pop_back();
    EXPECT_NE(g->step(r).result.message.find("shards"), std::string::npos);
    r = s.request(4);
    r.slots[0] = 99;
    EXPECT_NE(g->step(r).result.message.find("slots[0] = 99"), std::string::npos);
    r = s.request(4);
    r.slots.clear();
    r.positions.clear();
    EXPECT_NE(g->step(r).result.message.find("batch_size = 0"), std::string::npos);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// Penalty counts follow the committed tokens: several steps in a row, with penalties, give the
// tokens of one backend that commits each step's outputs.
TEST(Group, PenaltiesFollowCommittedTokensAcrossSteps) {
    for (dist_mode mode : {dist_mode::swap, dist_mode::sharded}) {
        std::unique_ptr<group> g;
        ASSERT_TRUE(group::create(test_config(4, mode), g).is_ok());
        testing::backend_harness reference(testing::small_config(kVocab, kMaxBatch, kMaxN, kMaxBatch + 1));
        std::mt19937_64 rng(99);
        random_step s;
        do {
            s = make_random_step(rng);
        } while (s.kind != step_kind::verify || s.n < 2);
        s.bitmask.clear();
        for (int32_t b = 0; b < s.bs(); ++b) {
            random_request& r = s.requests[static_cast<size_t>(b)];
            r.params.temperature = b % 2 == 0 ? 0.0f : 0.9f;
            r.params.repetition_penalty = 1.5f;
            r.params.presence_penalty = 1.0f;
            r.params.frequency_penalty = 0.5f;
            ASSERT_TRUE(g->register_request(b + 1, r.params, r.history).is_ok());
            ASSERT_TRUE(reference.backend->pool()
                            .register_request(b + 1, r.params, r.history.data(), static_cast<int32_t>(r.history.size()))
                            .is_ok());
        }
        for (int step = 0; step < 5; ++step) {
            for (int64_t& position : s.positions) position += 3;
            const step_reply reply = g->step(s.request(4));
            ASSERT_TRUE(reply.result.is_ok()) << reply.result.message;
            step_input in = testing::make_step(s.logits, kVocab, s.slots, s.positions, s.n, &s.candidates);
            ASSERT_TRUE(reference.run(step_kind::verify, in).is_ok());
            const step_output out{reference.packed.data(), reference.accept_index.data(), reference.logprobs.data(),
                                  reference.row_error.data()};
            ASSERT_TRUE(reference.backend->commit_tokens(in, out).is_ok());
            EXPECT_EQ(reply.outputs.packed, reference.packed) << mode_name(mode) << " step " << step;
        }
    }
}

}  // namespace
}  // namespace ds
