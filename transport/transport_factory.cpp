#include "transport/transport_factory.h"

#include <fmt/format.h>

#include "transport/local_transport.h"
#include "transport/transport_log.h"
#ifdef DISTSAMPLE_HAVE_UCX
#include "transport/ucx/ucx_group.h"
#include "transport/ucx/ucx_transport.h"
#endif
#ifdef DISTSAMPLE_HAVE_NCCL
#include "transport/nccl/nccl_transport.h"
#endif

namespace ds {

namespace {

// `advice` says what to do instead.
status unavailable(const std::string& name, const std::string& why, const std::string& advice) {
    return {status_code::unsupported, fmt::format("transport '{}' is not available: {}; {}", name, why, advice)};
}

std::string set_instead(const char* choices) {
    return fmt::format("set transport = {} (config key transport, DISTSAMPLE_TRANSPORT or --transport)", choices);
}

constexpr const char* kNoUcx =
    "distsample was built without UCX (install libucx-dev and configure with -DDISTSAMPLE_WITH_UCX=ON)";
#ifdef DISTSAMPLE_HAVE_NCCL
constexpr const char* kNcclInProcess = "NCCL runs one rank process per GPU, not ranks as threads of one process";
#else
constexpr const char* kNoNccl =
    "distsample was built without NCCL (configure with -DDISTSAMPLE_WITH_CUDA=ON -DDISTSAMPLE_WITH_NCCL=ON; needs nvcc "
    "and NCCL)";
#endif

status unknown(const std::string& name) {
    return status::invalid(fmt::format("transport = '{}': expected one of 'auto' 'local' 'ucx' 'nccl'", name));
}

}  // namespace

std::vector<std::string> built_transports() {
    std::vector<std::string> built = {"local"};
#ifdef DISTSAMPLE_HAVE_UCX
    built.emplace_back("ucx");
#endif
#ifdef DISTSAMPLE_HAVE_NCCL
    built.emplace_back("nccl");
#endif
    return built;
}

status make_transport_group(const std::string& name, const transport_config& config,
                            std::unique_ptr<transport_group>& out) {
    if (std::string e = config.validate(); !e.empty()) return status::invalid(e);
    if (name == "auto" || name == "local") {
        out = std::make_unique<local_group>(config);
    } else if (name == "ucx") {
#ifdef DISTSAMPLE_HAVE_UCX
        std::unique_ptr<ucx_group> group;
        if (status s = ucx_group::create(config, group); !s.is_ok()) return s;
        out = std::move(group);
#else
        return unavailable(name, kNoUcx, set_instead("auto or local"));
#endif
    } else if (name == "nccl") {
#ifdef DISTSAMPLE_HAVE_NCCL
        return unavailable(name, kNcclInProcess, set_instead("auto, local or ucx"));
#else
        return unavailable(name, kNoNccl, set_instead("auto, local or ucx"));
#endif
    } else {
        return unknown(name);
    }
    transport_log().info("transport '{}': {} ranks as threads of this process over {}", name, config.world_size,
                         out->backend_name());
    return status::success();
}

// The parameters go unused in a build without UCX and NCCL.
status make_rank_transport(const std::string& name, [[maybe_unused]] const transport_config& config,
                           [[maybe_unused]] bootstrap& boot, [[maybe_unused]] std::unique_ptr<transport>& out) {
    if (name == "local") {
        return unavailable(name, "it connects ranks that are threads of one process, not rank processes",
                           set_instead("ucx or auto"));
    }
    if (name == "nccl") {
#ifdef DISTSAMPLE_HAVE_NCCL
        std::unique_ptr<nccl_endpoint> endpoint;
        if (status s = nccl_endpoint::create(config, boot, {}, endpoint); !s.is_ok()) return s;
        out = std::move(endpoint);
        return status::success();
#else
        return unavailable(name, kNoNccl, set_instead("ucx or auto"));
#endif
    }
    if (name != "auto" && name != "ucx") return unknown(name);
#ifdef DISTSAMPLE_HAVE_UCX
    std::unique_ptr<ucx_endpoint> endpoint;
    if (status s = ucx_endpoint::create(config, boot, endpoint); !s.is_ok()) return s;
    out = std::move(endpoint);
    return status::success();
#else
    return unavailable(name, kNoUcx, "rank processes have no other transport yet");
#endif
}

}  // namespace ds
