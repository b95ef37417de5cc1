#include "support/netns_hosts.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace ds::test_support {

namespace {

// stdout of `command`, or empty.
std::string output_of(const std::string& command) {
    std::string out;
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
    if (!pipe) return out;
    char buf[4096];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, pipe.get())) > 0;) out.append(buf, got);
    return out;
}

bool process_exists(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

void delete_namespace(const std::string& ns) {
    if (std::system(("ip netns del " + ns + " >/dev/null 2>&1").c_str()) != 0)
        std::fprintf(stderr, "netns_hosts: cannot delete %s\n", ns.c_str());
}

}  // namespace

netns_hosts::netns_hosts(std::string prefix, std::string subnet, int32_t hosts)
    : prefix_(std::move(prefix)), subnet_(std::move(subnet)), name_(prefix_ + std::to_string(::getpid()) + "_") {
    if (::geteuid() != 0) {
        unavailable_ = "network namespaces need root";
        return;
    }
    if (std::system("command -v ip >/dev/null 2>&1") != 0) {
        unavailable_ = "the `ip` command (iproute2) is not installed";
        return;
    }
    delete_stale_namespaces();
    const std::string hub_ns = hub();
    bool ok = run("ip netns add " + hub_ns) && run("ip -n " + hub_ns + " link set lo up") &&
              run("ip -n " + hub_ns + " link add br0 type bridge") &&
              run("ip -n " + hub_ns + " addr add " + hub_address() + "/24 dev br0") &&
              run("ip -n " + hub_ns + " link set br0 up");
    for (int32_t i = 0; ok && i < hosts; ++i) {
        const std::string ns = host(i);
        const std::string port = "h" + std::to_string(i);  // the host's end of the pair, in the hub
        ok = run("ip netns add " + ns) && run("ip -n " + ns + " link set lo up") &&
             run("ip -n " + hub_ns + " link add " + port + " type veth peer name " + interface() + " netns " + ns) &&
             run("ip -n " + hub_ns + " link set " + port + " master br0") &&
             run("ip -n " + hub_ns + " link set " + port + " up") &&
             run("ip -n " + ns + " addr add " + host_address(i) + "/24 dev " + interface()) &&
             run("ip -n " + ns + " link set " + interface() + " up");
    }
}

netns_hosts::~netns_hosts() {
    for (const std::string& ns : created_) delete_namespace(ns);
}

bool netns_hosts::run(const std::string& command) {
    const std::string out = output_of(command + " 2>&1 && echo __ok");
    const bool done = out.size() >= 5 && out.compare(out.size() - 5, 5, "__ok\n") == 0;
    if (!done) {
        unavailable_ = "`" + command + "` failed: " + out;
    } else if (command.rfind("ip netns add ", 0) == 0) {
        created_.push_back(command.substr(13));
    }
    return done;
}

// PREFIX<pid>_... of a process that is gone: a test that crashed before its destructor ran.
void netns_hosts::delete_stale_namespaces() const {
    const std::string list = output_of("ip netns list 2>/dev/null");
    for (size_t begin = 0; begin < list.size();) {
        const size_t end = std::min(list.find('\n', begin), list.size());
        const std::string line = list.substr(begin, end - begin);
        begin = end + 1;
        const std::string ns = line.substr(0, line.find(' '));  // "NAME (id: 3)"
        if (ns.rfind(prefix_, 0) != 0) continue;
        const size_t underscore = ns.find('_', prefix_.size());
        if (underscore == std::string::npos || underscore == prefix_.size()) continue;
        const std::string digits = ns.substr(prefix_.size(), underscore - prefix_.size());
        if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
        if (!process_exists(std::stol(digits))) delete_namespace(ns);
    }
}

}  // namespace ds::test_support
