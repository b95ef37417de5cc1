// Hostile input to the command-line tool: every case ends in one short error line naming the field
// and what is allowed (exit code 2), never a crash, a hang, a silent replacement or a huge echo.
// Bounded: every run is killed after 60 s (support/cli_runner.h).
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support/cli_runner.h"

using nlohmann::json;

namespace ds {
namespace {

constexpr std::chrono::seconds kBound{60};

json small_step() {
    json step;
    step["vocab_size"] = 4;
    step["logits"] = json::array({json::array({1, 2, 3, 4})});
    step["requests"] = json::array({json::object()});
    return step;
}

json small_verify_step() {
    json step = small_step();
    step["candidates"] = json::array({json::array({0, 1})});
    step["logits"] = json::array({json::array({1, 2, 3, 4}), json::array({1, 2, 3, 4})});
    return step;
}

// One error line on stderr containing `expect`, exit code 2, nothing on stdout, a short line.
void expect_refused(const cli_run& r, const std::string& expect, const std::string& what) {
    EXPECT_EQ(r.exit_code, 2) << what << "\nstderr: " << r.err.substr(0, 400);
    EXPECT_NE(r.err.find(expect), std::string::npos) << what << "\nstderr: " << r.err.substr(0, 400);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << "\nstderr: " << r.err.substr(0, 400);
    EXPECT_LT(r.err.size(), 600u) << what;
    EXPECT_TRUE(r.out.empty()) << what << "\nstdout: " << r.out.substr(0, 200);
}

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(depth, ']'); }

std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_" + name;
    std::ofstream(path) << text;
    return path;
}

// 10^5 levels segfaulted kernel, step and config check (the JSON printer recursed per level).
TEST(HostileInput, DeepNestingIsRefusedByEveryReader) {
    const std::string deep_step = R"({"vocab_size": 4, "requests": )" + nested(100000) + "}";
    for (const char* args : {"kernel sample", "kernel verify", "step sample", "step verify --tp 1"}) {
        const cli_run r = run_cli(args, deep_step, kBound);
        expect_refused(r, "nested deeper than 64 levels", args);
        EXPECT_NE(r.err.find("requests[0][0]"), std::string::npos) << r.err;
    }
    const std::string config = write_file("deep_config.json", R"({"faults": {"inject": )" + nested(100000) + "}}");
    const cli_run checked = run_cli("config check " + config, "", kBound);
    expect_refused(checked, "nested deeper than 64 levels", "config check");
    EXPECT_NE(checked.err.find("faults.inject[0]"), std::string::npos) << checked.err;
}

// `1e400` ended in a JSON library message naming no field.
TEST(HostileInput, NumbersBeyondADoubleNameTheField) {
    struct text_case {
        std::string input;
        const char* args;
        std::string expect;
    };
    const text_case cases[] = {
        {R"({"vocab_size": 1e400, "logits": [[1]], "requests": [{}]})", "kernel sample",
         "vocab_size: expected an integer in [1, 16777215], got 1e400"},
        {R"({"vocab_size": 2, "logits": [[1, 2]], "requests": [{"top_p": 1e400}]})", "kernel sample",
         "requests[0].top_p = 1e400: expected 0 or a magnitude in"},
        {R"({"vocab_size": 2, "logits": [[1, 2]], "requests": [{"position": 1e400}]})", "kernel sample",
         "requests[0].position: expected an integer in [0, 9223372036854775807], got 1e400"},
        {R"({"vocab_size": 2, "logits": [[1, 1e400]], "requests": [{}]})", "kernel sample",
         "logits[0][1]: expected a number or null, got 1e400"},
        {R"({"vocab_size": 2, "logits": [[1, 2]], "requests": [{"logit_bias": {"1": -1e400}}]})", "step sample --tp 1",
         "requests[0].logit_bias[\"1\"] = -1e400"},
        {R"({"vocab_size": 2, "logits": [[1, 2], [1, 2]], "requests": [{}], "candidates": [[0, 1]],
            "threshold_acc": 1e400})",
         "kernel verify", "threshold_acc = 1e400"},
    };
    for (const text_case& c : cases) expect_refused(run_cli(c.args, c.input, kBound), c.expect, c.expect);
    const std::string config = write_file("big_config.json", R"({"tp": 1e400})");
    expect_refused(run_cli("config check " + config, "", kBound), "config key 'tp' = 1e400", "config file");
}

TEST(HostileInput, DuplicateKeysAreRefused) {
    expect_refused(run_cli("kernel sample", R"({"vocab_size": 4, "vocab_size": 2, "requests": [{}]})", kBound),
                   "duplicate key \"vocab_size\"", "top level");
    const std::string config = write_file("dup_config.json", R"({"tp": 2, "gateway": {"port": 1, "port": 2}})");
    expect_refused(run_cli("config check " + config, "", kBound), "gateway: duplicate key \"port\"", "config");
}

// A 2 MB value was echoed whole into the error line.
TEST(HostileInput, ErrorLinesQuoteAShortPrefix) {
    json step = small_step();
    step["requests"][0]["top_k"] = std::string(2 << 20, '7');
    expect_refused(run_cli("kernel sample", step.dump(), kBound), "requests[0].top_k: expected an integer", "top_k");
    json rows = small_step();
    rows["logits"][0] = json::array();
    for (int i = 0; i < 300000; ++i) rows["logits"][0].push_back(1);
    expect_refused(run_cli("kernel sample", rows.dump(), kBound), "an array of 4 numbers (vocab_size), got 300000",
                   "long row");
}

// top_p = 1e-50 became a float 0 and was reported as "top_p = 0".
TEST(HostileInput, NumbersAreReportedWithTheirDigits) {
    json step = small_step();
    step["requests"][0]["top_p"] = 1e-50;
    expect_refused(run_cli("kernel sample", step.dump(), kBound), "requests[0].top_p = 1e-50", "top_p");
    step["requests"][0]["top_p"] = 1e39;
    expect_refused(run_cli("kernel sample", step.dump(), kBound), "requests[0].top_p = 1e+39", "top_p");
}

TEST(HostileInput, LogitBiasKeysAreCanonicalDecimals) {
    for (const char* key : {" 3", "+3", "03", "3 ", "0x3", "", "-0", "99999999999"}) {
        json step = small_step();
        step["requests"][0]["logit_bias"] = json{{key, 1.0}};
        expect_refused(run_cli("kernel sample", step.dump(), kBound), "a token id in decimal digits as the key", key);
    }
    json step = small_step();
    step["requests"][0]["logit_bias"] = json{{"3", -100.0}};
    EXPECT_EQ(run_cli("kernel sample", step.dump(), kBound).exit_code, 0);
}

// Fields a sample step has no use for, and misspelt fields, were ignored.
TEST(HostileInput, FieldsAStepDoesNotTakeAreRefused) {
    json coins = small_step();
    coins["coins"] = json::array({json::array({0.5})});
    expect_refused(run_cli("kernel sample", coins.dump(), kBound), "coins: expected none in a sample step", "coins");
    expect_refused(run_cli("step sample --tp 1", coins.dump(), kBound), "coins: expected none in a sample step",
                   "step coins");
    json misspelt = small_step();
    misspelt["requests"][0]["temprature"] = 0.5;
    expect_refused(run_cli("kernel sample", misspelt.dump(), kBound),
                   "requests[0].temprature: expected a field of a request (one of: seed,", "misspelt");
    json long_key = small_step();
    long_key["requests"][0][std::string(100000, 'k')] = 1;
    expect_refused(run_cli("kernel sample", long_key.dump(), kBound), "... (100000 characters): expected a field of",
                   "long key");
    json extra = small_verify_step();
    extra["thresholds"] = 0.5;
    expect_refused(run_cli("kernel verify", extra.dump(), kBound), "thresholds: expected a field of a step",
                   "unknown top-level key");
}

// Positions >= 2^63 were clamped to 2^63 - 1.
TEST(HostileInput, PositionsBeyondInt64AreRefusedNotClamped) {
    json step = small_step();
    step["requests"][0]["position"] = uint64_t{1} << 63;
    expect_refused(run_cli("kernel sample", step.dump(), kBound),
                   "requests[0].position: expected an integer in [0, 9223372036854775807], got 9223372036854775808",
                   "position");
    step["requests"][0]["seed"] = -1;
    step["requests"][0]["position"] = 0;
    expect_refused(run_cli("kernel sample", step.dump(), kBound), "requests[0].seed: expected an integer in [0, 2^64)",
                   "seed");
}

// N > 64 named tokens_per_req; more than 65,536 requests named kernel_config.max_batch, and `step`
// grew to 4 GB first.
TEST(HostileInput, SizesNameTheFieldTheyCameFrom) {
    json wide = small_verify_step();
    wide["candidates"][0] = json::array();
    for (int i = 0; i < 65; ++i) wide["candidates"][0].push_back(0);
    expect_refused(run_cli("kernel verify", wide.dump(), kBound), "candidates[0]: expected an array of 1 to 64 ids",
                   "N");
    json many;
    many["vocab_size"] = 2;
    many["requests"] = json::array();
    many["logits"] = json::array();
    for (int b = 0; b < 65537; ++b) {
        many["requests"].push_back(json::object());
        many["logits"].push_back(json::array({1, 2}));
    }
    const auto start = std::chrono::steady_clock::now();
    for (const char* args : {"kernel sample", "step sample --tp 1"}) {
        expect_refused(run_cli(args, many.dump(), kBound), "requests: expected an array of 1 to 65536 request objects",
                       args);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// `step` refused an empty batch that `kernel` answered.
TEST(HostileInput, KernelAndStepAgreeOnAnEmptyBatch) {
    json empty = small_step();
    empty["requests"] = json::array();
    empty["logits"] = json::array();
    for (const char* args : {"kernel sample", "step sample --tp 1"})
        expect_refused(run_cli(args, empty.dump(), kBound), "requests: expected an array of 1 to 65536", args);
}

// Logits >= 1e30 silently became +inf.
TEST(HostileInput, HugeLogitsAreRefusedAtTheBoundary) {
    json step = small_step();
    step["logits"][0][2] = 1e30;
    expect_refused(run_cli("kernel sample", step.dump(), kBound), "logits[0][2]: expected a number below 1e+30",
                   "logit");
    step["logits"][0][2] = -1e30;  // documented: -inf, a token never drawn
    const cli_run r = run_cli("kernel sample", step.dump(), kBound);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(json::parse(r.out)["tokens"][0], 2);
}

TEST(HostileInput, MisspeltEnvironmentVariablesNameTheNearestSetting) {
    setenv("DISTSAMPLE_TPP", "2", 1);
    const cli_run r = run_cli("step sample --tp 1", small_step().dump(), kBound);
    unsetenv("DISTSAMPLE_TPP");
    expect_refused(r, "environment variable 'DISTSAMPLE_TPP' is not a distsample setting; did you mean DISTSAMPLE_TP?",
                   "env");
    setenv("DISTSAMPLE_GATEWAY_PROT", "1", 1);
    const cli_run gateway = run_cli("config check " + write_file("env.json", "{}"), "", kBound);
    unsetenv("DISTSAMPLE_GATEWAY_PROT");
    expect_refused(gateway, "did you mean DISTSAMPLE_GATEWAY_PORT?", "gateway env");
}

TEST(HostileInput, UnknownKeysListTheirSection) {
    const std::string top = write_file("unknown_top.json", R"({"topologyy": {}})");
    expect_refused(run_cli("config check " + top, "", kBound), "or a key of a section: faults.<key> gateway.<key>",
                   "top");
    const std::string section = write_file("unknown_section.json", R"({"topology": {"host": []}})");
    expect_refused(run_cli("config check " + section, "", kBound),
                   "config key 'topology.host' (from " + section +
                       ") is not known; expected one of: "
                       "topology.coordinator",
                   "section");
    expect_refused(run_cli("config check " + write_file("ok.json", "{}") + " --set faults.sed=1", "", kBound),
                   "config key 'faults.sed' (from the command line) is not known; expected one of: faults.seed",
                   "faults override");
}

TEST(HostileInput, AnUnknownSubcommandSaysSo) {
    expect_refused(run_cli("frobnicate", "", kBound), "unknown subcommand 'frobnicate': expected one of kernel, step",
                   "top");
    expect_refused(run_cli("kernel smaple", "", kBound), "unknown subcommand 'smaple': expected one of sample, verify",
                   "nested");
}

// `demo --batch 65536 --vocab 64` aborted on bad_alloc; max_slots up to 2^20 needs about 40 GiB.
TEST(HostileInput, ConfigurationsBeyondTheMemoryBudgetAreRefusedBeforeAllocating) {
    expect_refused(run_cli("demo --steps 1 --batch 65536 --vocab 64 --set memory_budget_mib=2048", "", kBound),
                   "ranks need", "demo");
    const std::string slots = write_file("slots.json", R"({"max_slots": 1048576, "memory_budget_mib": 4096})");
    expect_refused(run_cli("config check " + slots, "", kBound), "max_slots * max_penalty_tokens", "config check");
    expect_refused(run_cli("demo --steps 1 --batch 70000", "", kBound),
                   "--batch 70000: expected an integer in [1, 65536]", "demo flag");
}

// The coordinator's lines go through the same reader: one bad line is answered, and the next
// still works (no rank processes are needed to refuse a line).
TEST(HostileInput, CoordinatorLinesAreAnsweredNotFatal) {
    const std::string lines = "{\"op\": \"sample\", \"vocab_size\": 4, \"requests\": " + nested(100000) + "}\n" +
                              "{\"op\": 7}\n" + "{\"op\": \"sample\", \"register\": \"no\"}\n" + "not json\n";
    const cli_run c = run_cli("coordinator --listen 127.0.0.1:0 --tp 1 --set vocab_size=4", lines, kBound);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    std::vector<json> out;
    for (size_t begin = 0; begin < c.out.size();) {
        const size_t end = c.out.find('\n', begin);
        out.push_back(json::parse(c.out.substr(begin, end - begin)));
        begin = end + 1;
    }
    ASSERT_EQ(out.size(), 5u) << c.out;
    EXPECT_TRUE(out[0].contains("listening"));
    EXPECT_NE(out[1]["error"].get<std::string>().find("nested deeper than 64 levels"), std::string::npos);
    EXPECT_NE(out[2]["error"].get<std::string>().find("op: expected one of sample, verify, health or faults, got 7"),
              std::string::npos);
    EXPECT_NE(out[3]["error"].get<std::string>().find("register: expected true or false, got \"no\""),
              std::string::npos);
    EXPECT_NE(out[4]["error"].get<std::string>().find("expected one JSON object per line"), std::string::npos);
}

}  // namespace
}  // namespace ds
