// `distsample kernel ...` driven from outside: JSON on stdin, JSON on stdout, exit codes.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "support/cli_runner.h"

using nlohmann::json;

namespace {

using run_result = ds::cli_run;
using ds::run_cli;

json one_hot_rows(int rows, int vocab, const std::vector<int>& peaks) {
    json logits = json::array();
    for (int r = 0; r < rows; ++r) {
        json row = json::array();
        for (int i = 0; i < vocab; ++i) row.push_back(i == peaks[static_cast<size_t>(r)] ? 1.0 : 0.0);
        logits.push_back(row);
    }
    return logits;
}

}  // namespace

TEST(Cli, HelpDescribesCommands) {
    const run_result r = run_cli("--help", "");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("kernel"), std::string::npos);
    EXPECT_NE(r.out.find("demo"), std::string::npos);
    const run_result v = run_cli("kernel verify --help", "");
    EXPECT_EQ(v.exit_code, 0);
    EXPECT_NE(v.out.find("--backend"), std::string::npos);
}

TEST(Cli, SampleGreedyAndStochastic) {
    json in;
    in["vocab_size"] = 8;
    in["logits"] = json::array({json::array({0, 1, 5, 2, -1e30, 0, 0, 0}), json::array({0, 0, 0, 0, 0, 0, 0, 3})});
    in["requests"] = json::array({json{{"temperature", 0.0}}, json{{"seed", 5}, {"position", 3}, {"top_k", 2}}});
    const run_result r = run_cli("kernel sample --backend cpu", in.dump());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["tokens"][0], 2);
    const int second = out["tokens"][1];
    EXPECT_TRUE(second == 7 || second == 0) << second;  // top-2 keeps 7 and the first of the ties
    ASSERT_EQ(out["logprobs"].size(), 2u);
    EXPECT_LT(out["logprobs"][0].get<double>(), 0.0);
    // The same input gives the same output.
    EXPECT_EQ(run_cli("kernel sample", in.dump()).out, r.out);
}

TEST(Cli, CudaBackendMatchesCpuOrSaysWhyNot) {
    json in;
    in["vocab_size"] = 64;
    json row = json::array();
    for (int i = 0; i < 64; ++i) row.push_back(std::sin(i * 0.7) * 3.0);
    in["logits"] = json::array({row, row, row});
    in["requests"] =
        json::array({json{{"seed", 1}, {"top_p", 0.8}}, json{{"seed", 2}, {"top_k", 5}}, json{{"temperature", 0}}});
    const run_result cpu = run_cli("kernel sample --backend cpu", in.dump());
    const run_result cuda = run_cli("kernel sample --backend cuda", in.dump());
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    if (cuda.exit_code == 0) {
        const json a = json::parse(cpu.out);
        const json b = json::parse(cuda.out);
        EXPECT_EQ(a["tokens"], b["tokens"]);
    } else {
        // No GPU here (or a build without CUDA): a clear one-line refusal.
        EXPECT_EQ(cuda.exit_code, 1);
        EXPECT_NE(cuda.err.find("--backend cpu"), std::string::npos) << cuda.err;
    }
}

TEST(Cli, VerifyGreedyChainSeedCase) {
    json in;
    in["vocab_size"] = 61750;
    in["logits"] = one_hot_rows(4, 61750, {1266, 9400, 61749, 6620});
    in["requests"] = json::array({json{{"temperature", 0}}});
    in["candidates"] = json::array({json::array({23958, 1266, 9400, 61749})});
    const run_result r = run_cli("kernel verify", in.dump());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["predict"], json::array({1266, 9400, 61749, 6620}));
    EXPECT_EQ(out["accept_index"], json::array({json::array({0, 1, 2, 3})}));
    EXPECT_EQ(out["accept_length"], json::array({4}));
}

TEST(Cli, VerifyTargetOnlyWithReplayedCoins) {
    json in;
    in["vocab_size"] = 16;
    json logits = json::array();
    for (int r = 0; r < 4; ++r) {
        json row = json::array();
        for (int i = 0; i < 16; ++i) {
            double l = r >= 2 ? 0.0 : -1e30;
            if (r == 0 && i == 11) l = std::log(0.95);
            if (r == 0 && i == 3) l = std::log(0.05);
            if (r == 1 && i == 12) l = std::log(0.1);
            if (r == 1 && i == 5) l = 0.0;
            row.push_back(l);
        }
        logits.push_back(row);
    }
    in["logits"] = logits;
    in["requests"] = json::array({json{{"seed", 1}}});
    in["candidates"] = json::array({json::array({10, 11, 12, 13})});
    in["threshold_single"] = 0.9;
    in["threshold_acc"] = 1.0;
    in["coins"] = json::array({json::array({0.5, 0.9, 0.5})});
    in["final_coins"] = json::array({0.1});
    const run_result r = run_cli("kernel verify --backend cpu", in.dump());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["accept_length"], json::array({2}));
    EXPECT_EQ(out["predict"][0], 11);
    EXPECT_EQ(out["predict"][1], 5);
    EXPECT_EQ(out["predict"][2], -1);
}

TEST(Cli, RowWithNothingAllowedIsReportedNotFatal) {
    json in;
    in["vocab_size"] = 4;
    in["logits"] = json::array({json::array({1, 2, 3, 4}), json::array({1, 2, 3, 4})});
    in["requests"] = json::array({json::object(), json{{"temperature", 0}}});
    in["bitmask"] = json::array({json::array({15}), json::array({0})});
    const run_result r = run_cli("kernel sample", in.dump());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["tokens"][1], -1);
    EXPECT_TRUE(out["logprobs"][1].is_null());
    EXPECT_EQ(out["row_errors"], json::array({1}));
}

TEST(Cli, BadInputExitsTwoWithOneLineNamingTheField) {
    json good;
    good["vocab_size"] = 4;
    good["logits"] = json::array({json::array({1, 2, 3, 4})});
    good["requests"] = json::array({json::object()});
    struct bad_case {
        std::string input;
        std::string args;
        std::string expect;
    };
    json bad_top_p = good;
    bad_top_p["requests"][0]["top_p"] = 1.5;
    json short_row = good;
    short_row["logits"][0] = json::array({1, 2, 3});
    json no_vocab = good;
    no_vocab.erase("vocab_size");
    json bad_bias = good;
    bad_bias["requests"][0]["logit_bias"] = json{{"9", 1.0}};
    json bad_candidates = good;
    bad_candidates["candidates"] = json::array({json::array({0, 7})});
    bad_candidates["logits"] = json::array({json::array({1, 2, 3, 4}), json::array({1, 2, 3, 4})});
    json ragged = bad_candidates;
    ragged["requests"].push_back(json::object());
    ragged["candidates"].push_back(json::array({1}));
    ragged["logits"].push_back(json::array({1, 2, 3, 4}));
    ragged["logits"].push_back(json::array({1, 2, 3, 4}));
    json bad_coin = bad_candidates;
    bad_coin["candidates"][0][1] = 2;
    bad_coin["coins"] = json::array({json::array({1.5})});
    json bad_history = good;
    bad_history["requests"][0]["history"] = json::array({1, 99});
    bad_history["requests"][0]["presence_penalty"] = 0.5;
    const bad_case cases[] = {
        {bad_top_p.dump(), "kernel sample", "requests[0].top_p = 1.5: expected a number in (0, 1]"},
        {short_row.dump(), "kernel sample", "logits[0]: expected an array of 4 numbers"},
        {no_vocab.dump(), "kernel sample", "vocab_size: expected a value"},
        {bad_bias.dump(), "kernel sample", "requests[0].logit_bias[9]"},
        {bad_candidates.dump(), "kernel verify", "candidates[0][1] = 7: expected an integer in [0, 3]"},
        {ragged.dump(), "kernel verify", "candidates[1]: expected an array of 2 ids"},
        {bad_coin.dump(), "kernel verify", "coins[0][0] = 1.5"},
        {bad_history.dump(), "kernel sample", "requests[0].history[1] = 99"},
        {"{not json", "kernel sample", "input: expected one JSON object"},
        {"[]", "kernel sample", "input: expected one JSON object"},
        {good.dump(), "kernel sample --backend tpu", "backend = 'tpu'"},
    };
    for (const bad_case& c : cases) {
        const run_result r = run_cli(c.args, c.input);
        EXPECT_EQ(r.exit_code, 2) << c.expect << "\nstderr: " << r.err;
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << "stderr: " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
}

TEST(Cli, DemoRunsAndSummarises) {
    const run_result r = run_cli("demo --steps 3 --batch 4 --vocab 2048", "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("step 3 (verify)"), std::string::npos);
    EXPECT_NE(r.out.find("acceptance"), std::string::npos);
}

namespace {

// A verify step with mixed sampling settings, ties, penalties, bias and accepted drafts.
json random_verify_step(uint64_t seed, int vocab, int bs, int n) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> gauss(0.0, 2.0);
    json doc;
    doc["vocab_size"] = vocab;
    json requests = json::array();
    const double temperatures[] = {0.0, 0.7, 1.0, 1.4};
    const int top_ks[] = {-1, 3, 10, -1};
    const double top_ps[] = {1.0, 0.9, 0.5, 0.95};
    for (int b = 0; b < bs; ++b) {
        json r = {{"seed", rng() >> 1},
                  {"position", static_cast<int>(rng() % 1000)},
                  {"temperature", temperatures[b % 4]},
                  {"top_k", top_ks[(b / 2) % 4]},
                  {"top_p", top_ps[(b + 1) % 4]}};
        if (b % 3 == 1) {
            r["repetition_penalty"] = 1.3;
            r["history"] = {1, 2, static_cast<int>(rng() % static_cast<uint64_t>(vocab))};
        }
        if (b % 4 == 2) r["logit_bias"] = {{std::to_string(rng() % static_cast<uint64_t>(vocab)), 3.5}};
        requests.push_back(r);
    }
    doc["requests"] = requests;
    json logits = json::array();
    std::vector<std::vector<double>> rows;
    for (int r = 0; r < bs * n; ++r) {
        std::vector<double> row;
        for (int i = 0; i < vocab; ++i) row.push_back(std::round(gauss(rng) * 4.0) / 4.0);
        rows.push_back(row);
        logits.push_back(row);
    }
    doc["logits"] = logits;
    json candidates = json::array();
    for (int b = 0; b < bs; ++b) {
        json chain = json::array();
        for (int j = 0; j < n; ++j) {
            int token = static_cast<int>(rng() % static_cast<uint64_t>(vocab));
            if (j > 0 && rng() % 2 == 0) {
                const auto& prev = rows[static_cast<size_t>(b * n + j - 1)];
                token = static_cast<int>(std::max_element(prev.begin(), prev.end()) - prev.begin());
            }
            chain.push_back(token);
        }
        candidates.push_back(chain);
    }
    doc["candidates"] = candidates;
    return doc;
}

void expect_same_outputs(const json& expected, const json& got, bool exact_logprobs, const std::string& what) {
    for (const char* key : {"predict", "accept_index", "accept_length", "tokens"}) {
        if (expected.contains(key)) {
            EXPECT_EQ(expected[key], got[key]) << what << " " << key;
        }
    }
    EXPECT_EQ(expected.contains("row_errors"), got.contains("row_errors")) << what;
    ASSERT_EQ(expected["logprobs"].size(), got["logprobs"].size()) << what;
    for (size_t i = 0; i < expected["logprobs"].size(); ++i) {
        const json& a = expected["logprobs"][i];
        const json& b = got["logprobs"][i];
        if (a.is_null() || exact_logprobs) {
            EXPECT_EQ(a, b) << what << " logprob " << i;
        } else {
            EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-5) << what << " logprob " << i;
        }
    }
}

}  // namespace

TEST(Cli, StepEqualsKernelForEveryTpAndMode) {
    const json doc = random_verify_step(77, 48, 5, 3);
    const run_result kernel = run_cli("kernel verify", doc.dump());
    ASSERT_EQ(kernel.exit_code, 0) << kernel.err;
    const json expected = json::parse(kernel.out);
    for (const char* mode : {"gathered", "swap", "sharded"}) {
        for (int tp : {1, 2, 3, 4, 8}) {
            const std::string what = std::string(mode) + " tp=" + std::to_string(tp);
            const run_result r = run_cli("step verify --tp " + std::to_string(tp) + " --mode " + mode, doc.dump());
            ASSERT_EQ(r.exit_code, 0) << what << ": " << r.err;
            expect_same_outputs(expected, json::parse(r.out), std::string(mode) != "sharded", what);
        }
    }
}

TEST(Cli, StepOverEveryBuiltTransportEqualsKernel) {
    const json doc = random_verify_step(80, 48, 5, 3);
    const run_result kernel = run_cli("kernel verify", doc.dump());
    ASSERT_EQ(kernel.exit_code, 0) << kernel.err;
    const json expected = json::parse(kernel.out);
#ifdef DISTSAMPLE_HAVE_UCX
    const char* transports[] = {"auto", "local", "ucx"};
#else
    const char* transports[] = {"auto", "local"};
#endif
    for (const char* transport : transports) {
        for (const char* mode : {"swap", "sharded"}) {
            const std::string what = std::string(transport) + " " + mode;
            const run_result r =
                run_cli(std::string("step verify --tp 4 --transport ") + transport + " --mode " + mode, doc.dump());
            ASSERT_EQ(r.exit_code, 0) << what << ": " << r.err;
            expect_same_outputs(expected, json::parse(r.out), std::string(mode) != "sharded", what);
        }
    }
}

TEST(Cli, AnUnavailableTransportFailsAtStartUpSayingWhatToSet) {
    const json doc = random_verify_step(81, 48, 2, 2);
    setenv("DISTSAMPLE_TRANSPORT", "nccl", 1);  // the environment override reaches the factory
    const run_result r = run_cli("step verify --tp 2", doc.dump());
    unsetenv("DISTSAMPLE_TRANSPORT");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("transport 'nccl' is not available"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("set transport ="), std::string::npos) << r.err;
}

TEST(Cli, StepSampleEqualsKernelSample) {
    json doc = random_verify_step(78, 48, 6, 1);
    doc.erase("candidates");
    const run_result kernel = run_cli("kernel sample", doc.dump());
    ASSERT_EQ(kernel.exit_code, 0) << kernel.err;
    const run_result r = run_cli("step sample --tp 4 --mode sharded", doc.dump());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_outputs(json::parse(kernel.out), json::parse(r.out), false, "sample");
}

TEST(Cli, StepBadInputNamesTheField) {
    const json doc = random_verify_step(79, 48, 2, 2);
    struct bad_case {
        std::string args;
        std::string expect;
    };
    for (const bad_case& c :
         {bad_case{"step verify --tp 5", "vocab_size = 48: expected a multiple of tp = 5"},
          bad_case{"step verify --mode scatter", "config key 'mode' = 'scatter' (from the command line)"},
          bad_case{"step verify --transport tcp", "config key 'transport' = 'tcp'"},
          bad_case{"step verify --tp 0", "config key 'tp' = '0'"}}) {
        const run_result r = run_cli(c.args, doc.dump());
        EXPECT_EQ(r.exit_code, 2) << c.args << "\nstderr: " << r.err;
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << "stderr: " << r.err;
    }
}

TEST(Cli, ConfigCheckPrintsTheEffectiveConfigurationOrNamesTheKey) {
    const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_ds_cli_config.json";
    std::ofstream(path) << R"({"tp": 2, "mode": "sharded", "step_timeout_ms": 500})";
    const run_result r = run_cli("config check " + path + " --set rank0_policy=never", "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = json::parse(r.out);
    EXPECT_EQ(out["tp"], 2);
    EXPECT_EQ(out["mode"], "sharded");
    EXPECT_EQ(out["rank0_policy"], "never");
    EXPECT_EQ(out["step_timeout_ms"], 500);
    EXPECT_EQ(out["vocab_size"], 32000);  // a default

    // DISTSAMPLE_* variables beat the file; --set beats them.
    setenv("DISTSAMPLE_MODE", "swap", 1);
    const run_result with_env = run_cli("config check " + path, "");
    const run_result with_set = run_cli("config check " + path + " --set mode=gathered", "");
    unsetenv("DISTSAMPLE_MODE");
    EXPECT_EQ(json::parse(with_env.out)["mode"], "swap") << with_env.err;
    EXPECT_EQ(json::parse(with_set.out)["mode"], "gathered") << with_set.err;

    std::ofstream(path) << R"({"tp": 2, "mode": "fast"})";
    const run_result bad = run_cli("config check " + path, "");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("config key 'mode' = \"fast\""), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("'swap'"), std::string::npos) << bad.err;

    std::ofstream(path) << R"({"tensor_parallel": 2})";
    const run_result unknown = run_cli("config check " + path, "");
    EXPECT_EQ(unknown.exit_code, 2);
    EXPECT_NE(unknown.err.find("config key 'tensor_parallel'"), std::string::npos) << unknown.err;
}

TEST(Cli, StepAndDemoReadTheConfigFile) {
    const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_ds_cli_step_config.json";
    std::ofstream(path) << R"({"tp": 3, "mode": "gathered"})";
    const run_result demo = run_cli("demo --steps 1 --batch 2 --vocab 96 --config " + path, "");
    ASSERT_EQ(demo.exit_code, 0) << demo.err;
    EXPECT_NE(demo.out.find("TP=3, gathered mode"), std::string::npos) << demo.out;
    const run_result flag_wins = run_cli("demo --steps 1 --batch 2 --vocab 96 --config " + path + " --tp 2", "");
    ASSERT_EQ(flag_wins.exit_code, 0) << flag_wins.err;
    EXPECT_NE(flag_wins.out.find("TP=2, gathered mode"), std::string::npos) << flag_wins.out;
}

TEST(Cli, DemoWithTheNgramModelPrintsText) {
    const std::string corpus = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_ds_cli_corpus.txt";
    std::ofstream(corpus) << "the cat sat on the mat . the cat ate the rat . a dog sat on the log .";
    const run_result r = run_cli("demo --model ngram --corpus " + corpus + " --steps 2 --batch 2 --tp 2", "");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("generated text"), std::string::npos) << r.out;
    const run_result bad = run_cli("demo --model unigram", "");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("--model = 'unigram'"), std::string::npos) << bad.err;
}
