// The "topology" section: file, DISTSAMPLE_TOPOLOGY_* environment, overrides, lists, and errors
// naming the key and the allowed range.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "config/config_file.h"
#include "config/topology_config.h"
#include "support/temp_config.h"

using namespace ds;

namespace {

using test_support::write_config;

TEST(TopologyConfig, LaterSourcesWinAndListsComeAsArraysOrCommaText) {
    const std::string path = write_config("ds_topology.json", R"({"tp": 2, "topology": {
        "coordinator": "10.0.0.9:7800", "hosts": ["10.0.0.1", "10.0.0.2"], "devices": [0, 1],
        "ucx_tls": "tcp", "heartbeat_ms": 100}})");
    setenv("DISTSAMPLE_TOPOLOGY_DEVICES", "3,2", 1);
    topology_config topology;
    const std::string e = load_topology_config(path, {"topology.join_timeout_ms=1500", "tp=2"}, topology).message;
    unsetenv("DISTSAMPLE_TOPOLOGY_DEVICES");
    ASSERT_EQ(e, "");
    EXPECT_EQ(topology.coordinator, "10.0.0.9:7800");
    EXPECT_EQ(topology.hosts, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
    EXPECT_EQ(topology.devices, (std::vector<int32_t>{3, 2}));  // environment over file
    EXPECT_EQ(topology.ucx_tls, "tcp");
    EXPECT_EQ(topology.heartbeat.count(), 100);
    EXPECT_EQ(topology.join_timeout.count(), 1500);
    EXPECT_EQ(topology.connection_timeout.count(), topology_config{}.connection_timeout.count());
    EXPECT_EQ(validate_topology_config(topology, 2).message, "");
    const nlohmann::json out = topology_config_to_json(topology);
    EXPECT_EQ(out["devices"], nlohmann::json::array({3, 2}));
    EXPECT_EQ(out["coordinator"], "10.0.0.9:7800");

    // The group's own keys still load from the same file, the section left to its table.
    group_config group;
    EXPECT_EQ(load_group_config(path, {}, group).message, "");
    EXPECT_EQ(group.distribution.tp, 2);
}

TEST(TopologyConfig, ErrorsNameTheKeyAndTheAllowedRange) {
    topology_config topology;
    std::string e = load_topology_config("", {"topology.devices=0,1024"}, topology).message;
    EXPECT_NE(e.find("topology.devices[1]"), std::string::npos) << e;
    EXPECT_NE(e.find("[0, 1023]"), std::string::npos) << e;
    e = load_topology_config("", {"topology.rendezvous_port=70000"}, topology).message;
    EXPECT_NE(e.find("topology.rendezvous_port"), std::string::npos) << e;
    EXPECT_NE(e.find("[0, 65535]"), std::string::npos) << e;
    e = load_topology_config("", {"topology.answer_port=-2"}, topology).message;
    EXPECT_NE(e.find("topology.answer_port"), std::string::npos) << e;
    EXPECT_NE(e.find("[-1, 65535]"), std::string::npos) << e;
    EXPECT_TRUE(load_topology_config("", {"topology.answer_port=-1"}, topology).is_ok());
    EXPECT_EQ(topology.answer_port, -1);
    e = load_topology_config("", {"topology.heartbeat_ms=5"}, topology).message;
    EXPECT_NE(e.find("[10, 3600000]"), std::string::npos) << e;
    e = load_topology_config("", {"topology.ports=1"}, topology).message;
    EXPECT_NE(e.find("'topology.ports'"), std::string::npos) << e;
    EXPECT_NE(e.find("topology.coordinator"), std::string::npos) << e;  // the known keys listed

    topology = topology_config{};
    topology.hosts = {"a", "b", "c"};
    e = validate_topology_config(topology, 4).message;
    EXPECT_NE(e.find("topology.hosts has 3 entries"), std::string::npos) << e;
    topology = topology_config{};
    topology.heartbeat = std::chrono::milliseconds(3000);
    e = validate_topology_config(topology, 4).message;
    EXPECT_NE(e.find("topology.heartbeat_ms = 3000"), std::string::npos) << e;
}

}  // namespace
