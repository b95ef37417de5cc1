// Hosts of their own for multi-host tests on one machine: one network namespace per host plus a
// hub namespace (the coordinator's host) holding a bridge, each host joined to it by a veth pair
// (eth0 inside the host), all on SUBNET.0/24: host i has SUBNET.(i+1), the hub SUBNET.254. Only
// these addresses exist inside the namespaces, so a test contacts nothing else.
//
// Namespaces are named PREFIX<pid>_hub and PREFIX<pid>_h<i>. They are deleted on destruction,
// whatever the test did (stop the processes inside them first); namespaces of an earlier run
// with the same PREFIX whose process is gone (a crashed test) are deleted on construction. Tests
// that run in parallel use different prefixes and subnets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::test_support {

class netns_hosts {
   public:
    netns_hosts(std::string prefix, std::string subnet, int32_t hosts);
    ~netns_hosts();
    netns_hosts(const netns_hosts&) = delete;
    netns_hosts& operator=(const netns_hosts&) = delete;

    // Empty when the hosts exist; otherwise why not (not root, no `ip`, a command that failed):
    // the test skips with it.
    const std::string& unavailable() const { return unavailable_; }

    std::string hub() const { return name_ + "hub"; }
    std::string host(int32_t i) const { return name_ + "h" + std::to_string(i); }
    std::string hub_address() const { return subnet_ + ".254"; }
    std::string host_address(int32_t i) const { return subnet_ + "." + std::to_string(i + 1); }
    // The interface of every host (not the hub), for UCX_NET_DEVICES.
    static const char* interface() { return "eth0"; }

    // The argv prefix that runs a command inside namespace `ns`.
    static std::vector<std::string> exec_in(const std::string& ns) { return {"ip", "netns", "exec", ns}; }

   private:
    bool run(const std::string& command);
    void delete_stale_namespaces() const;

    std::string prefix_;
    std::string subnet_;
    std::string name_;  // prefix_ + pid + "_"
    std::vector<std::string> created_;
    std::string unavailable_;
};

}  // namespace ds::test_support
