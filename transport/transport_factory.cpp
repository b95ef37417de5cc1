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
status unavailable(transport_kind kind, const std::string& why, const std::string& advice) {
    return {status_code::unsupported,
            fmt::format("transport '{}' is not available: {}; {}", transport_name(kind), why, advice)};
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

// `ucx` goes unused in a build without UCX.
status make_transport_group(transport_kind kind, const transport_config& config,
                            [[maybe_unused]] const ucx_endpoint_options& ucx, std::unique_ptr<transport_group>& out) {
    DS_TRY(config.validate());
    switch (kind) {
        case transport_kind::automatic:
        case transport_kind::local: out = std::make_unique<local_group>(config); break;
        case transport_kind::ucx: {
#ifdef DISTSAMPLE_HAVE_UCX
            std::unique_ptr<ucx_group> group;
            if (status s = ucx_group::create(config, ucx, group); !s.is_ok()) return s;
            out = std::move(group);
            break;
#else
            return unavailable(kind, kNoUcx, set_instead("auto or local"));
#endif
        }
        case transport_kind::nccl:
#ifdef DISTSAMPLE_HAVE_NCCL
            return unavailable(kind, kNcclInProcess, set_instead("auto, local or ucx"));
#else
            return unavailable(kind, kNoNccl, set_instead("auto, local or ucx"));
#endif
    }
    transport_log().info("transport '{}': {} ranks as threads of this process over {}", transport_name(kind),
                         config.world_size, out->backend_name());
    return status::success();
}

// The parameters go unused in a build without UCX and NCCL.
status make_rank_transport(transport_kind kind, [[maybe_unused]] const transport_config& config,
                           [[maybe_unused]] const ucx_endpoint_options& ucx, [[maybe_unused]] bootstrap& boot,
                           [[maybe_unused]] std::unique_ptr<transport>& out) {
    if (kind == transport_kind::local) {
        return unavailable(kind, "it connects ranks that are threads of one process, not rank processes",
                           set_instead("ucx or auto"));
    }
    if (kind == transport_kind::nccl) {
#ifdef DISTSAMPLE_HAVE_NCCL
        std::unique_ptr<nccl_endpoint> endpoint;
        if (status s = nccl_endpoint::create(config, boot, {}, endpoint); !s.is_ok()) return s;
        out = std::move(endpoint);
        return status::success();
#else
        return unavailable(kind, kNoNccl, set_instead("ucx or auto"));
#endif
    }
#ifdef DISTSAMPLE_HAVE_UCX
    std::unique_ptr<ucx_endpoint> endpoint;
    if (status s = ucx_endpoint::create(config, ucx, boot, endpoint); !s.is_ok()) return s;
    out = std::move(endpoint);
    return status::success();
#else
    return unavailable(kind, kNoUcx, "rank processes have no other transport yet");
#endif
}

}  // namespace ds
