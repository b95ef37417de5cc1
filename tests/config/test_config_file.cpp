// The configuration loader: file, DISTSAMPLE_* environment, overrides, and errors naming the key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "config/config_file.h"
#include "config/topology_config.h"
#include "support/temp_config.h"

using namespace ds;

namespace {

using test_support::write_config;

}  // namespace

TEST(ConfigFile, LaterSourcesWin) {
    const std::string path = write_config("ds_config_order.json", R"({"tp": 2, "mode": "sharded", "max_batch": 32})");
    setenv("DISTSAMPLE_MAX_BATCH", "48", 1);
    setenv("DISTSAMPLE_RANK0_POLICY", "always", 1);
    group_config config;
    const std::string e = load_group_config(path, {"rank0_policy=never", "step_timeout_ms=250"}, config).message;
    unsetenv("DISTSAMPLE_MAX_BATCH");
    unsetenv("DISTSAMPLE_RANK0_POLICY");
    ASSERT_EQ(e, "");
    EXPECT_EQ(config.distribution.tp, 2);                                   // file
    EXPECT_EQ(config.distribution.mode, dist_mode::sharded);                // file
    EXPECT_EQ(config.limits.max_batch, 48);                                 // environment over file
    EXPECT_EQ(config.distribution.policy, rank0_policy::never);             // override over environment
    EXPECT_EQ(config.distribution.step_timeout.count(), 250);               // override
    EXPECT_EQ(config.limits.vocab_size, group_config{}.limits.vocab_size);  // default
    const nlohmann::json out = group_config_to_json(config);
    EXPECT_EQ(out["max_batch"], 48);
    EXPECT_EQ(out["rank0_policy"], "never");
}

// ucx_device_memory (transport/ucx_memory_path.h): auto by default, from every source.
TEST(ConfigFile, UcxDeviceMemoryFromFileEnvironmentAndOverrides) {
    group_config config;
    ASSERT_EQ(load_group_config("", {}, config).message, "");
    EXPECT_EQ(config.transport.ucx.device_memory, ucx_memory_mode::automatic);
    EXPECT_EQ(group_config_to_json(config)["ucx_device_memory"], "auto");

    const std::string path = write_config("ds_config_ucx_memory.json", R"({"ucx_device_memory": "direct"})");
    ASSERT_EQ(load_group_config(path, {}, config).message, "");
    EXPECT_EQ(config.transport.ucx.device_memory, ucx_memory_mode::direct);

    setenv("DISTSAMPLE_UCX_DEVICE_MEMORY", "staged", 1);
    group_config from_env;
    const std::string env_error = load_group_config(path, {}, from_env).message;
    group_config overridden;
    const std::string override_error = load_group_config(path, {"ucx_device_memory=auto"}, overridden).message;
    group_config bad;
    setenv("DISTSAMPLE_UCX_DEVICE_MEMORY", "pinned", 1);
    const std::string bad_error = load_group_config("", {}, bad).message;
    unsetenv("DISTSAMPLE_UCX_DEVICE_MEMORY");
    ASSERT_EQ(env_error, "");
    EXPECT_EQ(from_env.transport.ucx.device_memory, ucx_memory_mode::staged);  // environment over file
    ASSERT_EQ(override_error, "");
    EXPECT_EQ(overridden.transport.ucx.device_memory, ucx_memory_mode::automatic);  // command line over environment
    EXPECT_NE(
        bad_error.find(
            "config key 'ucx_device_memory' = 'pinned' (from DISTSAMPLE_UCX_DEVICE_MEMORY): expected one of 'auto' "
            "'direct' 'staged'"),
        std::string::npos)
        << bad_error;
}

TEST(ConfigFile, ErrorsNameTheKeyTheValueAndTheSource) {
    struct bad_case {
        std::string file_text;
        std::vector<std::string> overrides;
        std::string expect;
    };
    const bad_case cases[] = {
        {R"({"tp": "four"})", {}, "config key 'tp' = \"four\" (from "},
        {R"({"tp": 0})", {}, "expected an integer in [1, 1024]"},
        {R"({"mode": "fast"})", {}, "config key 'mode' = \"fast\""},
        {R"({"backend": "tpu"})", {}, "one of 'cpu' 'cuda'"},
        {R"({"transport": "tcp"})", {}, "one of 'auto' 'local' 'ucx' 'nccl'"},
        {R"({"ucx_device_memory": "gpu"})", {}, "config key 'ucx_device_memory' = \"gpu\""},
        {R"({})", {"ucx_device_memory=cuda"}, "one of 'auto' 'direct' 'staged'"},
        {R"({"tensor_parallel": 4})", {}, "config key 'tensor_parallel'"},
        {R"([1, 2])", {}, "expected one JSON object"},
        {R"({"tp": )", {}, "not valid JSON"},
        {R"({})", {"tp"}, "override 'tp': expected key=value"},
        {R"({})", {"tp=2x"}, "config key 'tp' = '2x' (from the command line)"},
        {R"({})", {"colour=blue"}, "config key 'colour' (from the command line) is not known"},
    };
    for (const bad_case& c : cases) {
        const std::string path = write_config("ds_config_bad.json", c.file_text);
        group_config config;
        const std::string e = load_group_config(path, c.overrides, config).message;
        EXPECT_NE(e.find(c.expect), std::string::npos) << "got: " << e;
    }
    group_config config;
    EXPECT_NE(load_group_config("/nonexistent/ds.json", {}, config).message.find("cannot be opened"),
              std::string::npos);
    // Values that are fine alone but not together are left to validate_group_config.
    const std::string path = write_config("ds_config_pair.json", R"({"tp": 3, "vocab_size": 100})");
    ASSERT_EQ(load_group_config(path, {}, config).message, "");
    EXPECT_NE(validate_group_config(config).message.find("vocab_size = 100: expected a multiple of tp = 3"),
              std::string::npos);
    setenv("DISTSAMPLE_TP", "-3", 1);
    const std::string e = load_group_config("", {}, config).message;
    unsetenv("DISTSAMPLE_TP");
    EXPECT_NE(e.find("config key 'tp' = '-3' (from DISTSAMPLE_TP)"), std::string::npos) << e;
}

// The JSON as text, as the rank's C ABI passes it (include/distsample/distsample_rank_c.h): the
// file's keys and sections, errors naming "the config JSON".
TEST(ConfigFile, JsonTextTakesTheFilesKeys) {
    const config_keys::json_source text{{}, R"({"tp": 2, "mode": "sharded", "topology": {"logits_source": "worker"}})"};
    group_config config;
    ASSERT_EQ(load_group_config(text, {"max_batch=32"}, config).message, "");
    EXPECT_EQ(config.distribution.tp, 2);
    EXPECT_EQ(config.distribution.mode, dist_mode::sharded);
    EXPECT_EQ(config.limits.max_batch, 32);
    topology_config topology;
    ASSERT_EQ(load_topology_config(text, {}, topology).message, "");
    EXPECT_EQ(topology.logits_source, "worker");

    EXPECT_NE(load_group_config(config_keys::json_source{{}, R"({"tp": 0})"}, {}, config)
                  .message.find("config key 'tp' = 0 (from the config JSON): expected an integer in [1, "),
              std::string::npos);
    EXPECT_EQ(load_group_config(config_keys::json_source{{}, "[1]"}, {}, config).message,
              "the config JSON: expected one JSON object");
    EXPECT_EQ(
        load_group_config(config_keys::json_source{{}, "{\"tp\": "}, {}, config).message.rfind("the config JSON: ", 0),
        0u);
}
