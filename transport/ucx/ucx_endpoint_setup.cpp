// The ucx endpoint's life outside its collectives (ucx_transport.h): the UCX context and worker,
// the registered regions and their layout, the bootstrap blob, the connections to the peers, and
// the teardown.
#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "transport/transport_log.h"
#include "transport/ucx/ucx_resources.h"
#include "transport/ucx/ucx_transport.h"

namespace ds {

namespace {

using clock = std::chrono::steady_clock;

constexpr std::size_t kAlign = 64;
constexpr std::chrono::seconds kCloseTimeout{2};

std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// What a rank publishes at start-up: header, then the packed rkeys of the control region and
// of the swap region, then the worker address.
struct blob_header {
    uint64_t control_base;
    uint64_t control_bytes;
    uint64_t swap_base;
    uint64_t swap_bytes;
    uint64_t control_rkey_bytes;
    uint64_t swap_rkey_bytes;
    uint64_t address_bytes;

    uint64_t total_bytes() const { return sizeof(blob_header) + control_rkey_bytes + swap_rkey_bytes + address_bytes; }
};

// The transports of ucp_ep_print_info's lane lines ("lane[0]:  2:tcp/lo.0 md[1] -> ... am
// keepalive wireup"): "tcp/lo.0", and whether any lane does RMA natively.
std::string summarize_lanes(const std::string& info) {
    std::vector<std::string> found;
    bool native_rma = false;
    size_t line_start = 0;
    while (line_start < info.size()) {
        size_t line_end = info.find('\n', line_start);
        if (line_end == std::string::npos) line_end = info.size();
        const std::string line = info.substr(line_start, line_end - line_start);
        line_start = line_end + 1;
        const size_t lane = line.find("lane[");
        if (lane == std::string::npos) continue;
        native_rma = native_rma || line.find(" rma", lane) != std::string::npos;
        const size_t begin = line.find_first_not_of(" \t", line.find(':', lane) + 1);
        if (begin == std::string::npos) continue;
        std::string resource = line.substr(begin, line.find_first_of(" \t", begin) - begin);  // "2:tcp/lo.0"
        resource = resource.substr(resource.find(':') + 1);
        if (std::find(found.begin(), found.end(), resource) == found.end()) found.push_back(resource);
    }
    std::string summary;
    for (const std::string& resource : found) summary += (summary.empty() ? "" : ", ") + resource;
    if (!summary.empty() && !native_rma) summary += " (puts emulated over active messages)";
    return summary;
}

// What one of UCX's print functions writes, as text.
template <class Print>
std::string printed(Print print) {
    char* text = nullptr;
    size_t text_bytes = 0;
    FILE* stream = open_memstream(&text, &text_bytes);
    if (stream == nullptr) return {};
    print(stream);
    std::fclose(stream);
    std::string out(text, text_bytes);
    std::free(text);
    return out;
}

status ucx_failure(int32_t rank, const char* call, ucs_status_t st) {
    return {status_code::internal, fmt::format("rank {}: {} failed: {}", rank, call, ucs_status_string(st))};
}
}  // namespace

ucx_endpoint::ucx_endpoint(const transport_config& config, const ucx_endpoint_options& options, int32_t rank)
    : config_(config), options_(options), rank_(rank), ucx_(std::make_unique<resources>()) {}

status ucx_endpoint::create(const transport_config& config, const ucx_endpoint_options& options, bootstrap& boot,
                            std::unique_ptr<ucx_endpoint>& out) {
    DS_TRY(config.validate());
    if (boot.world_size() != config.world_size) {
        return status::invalid(fmt::format("bootstrap world_size = {}: expected the transport's {}", boot.world_size(),
                                           config.world_size));
    }
    std::unique_ptr<ucx_endpoint> endpoint(new ucx_endpoint(config, options, boot.rank()));
    if (status s = endpoint->setup(boot); !s.is_ok()) return s;
    out = std::move(endpoint);
    return status::success();
}

status ucx_endpoint::setup(bootstrap& boot) {
    std::string mine;
    const status prepared = prepare(mine);
    // A rank that cannot start still takes part in the exchange, with an empty blob, so that its
    // peers fail at once naming it instead of waiting for it until the timeout.
    std::vector<std::string> blobs;
    const status exchanged = boot.exchange(prepared.is_ok() ? mine : std::string(), blobs);
    if (!prepared.is_ok()) return prepared;
    if (!exchanged.is_ok()) return exchanged;
    return connect(blobs);
}

status ucx_endpoint::prepare(std::string& mine) {
    DS_TRY(init_context());
    DS_TRY(allocate_regions());
    std::string rkeys[2];
    DS_TRY(register_regions(rkeys));
    return pack_blob(rkeys, mine);
}

status ucx_endpoint::init_context() {
    resources& u = *ucx_;
    ucp_config_t* ucp_config = nullptr;  // UCX_* environment variables (UCX_TLS, UCX_NET_DEVICES) apply
    if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &ucp_config); st != UCS_OK)
        return ucx_failure(rank_, "ucp_config_read", st);
    // UCX's memory-type cache misses CUDA allocations it did not see through its driver hooks (our
    // statically linked CUDA runtime's), and then takes device pointers for host memory
    // (ucx_memory_path.h): a cuda-backend rank has UCX ask the driver instead, unless told otherwise.
    // Without peer error handling a failed cma put (process_vm_writev refused by the kernel) is
    // dropped silently: between rank processes on the H200 host (UCX 1.22) the barrier's flags never
    // arrived. Shared memory and cuda_ipc carry everything without it, unless UCX_TLS says otherwise.
    const std::pair<const char*, const char*> overrides[] = {
        {"MEMTYPE_CACHE", options_.backend_on_device ? "n" : nullptr},
        {"TLS", options_.peer_error_handling ? nullptr : "^cma"},
    };
    for (const auto& [name, value] : overrides) {
        if (value == nullptr || std::getenv(fmt::format("UCX_{}", name).c_str()) != nullptr) continue;
        if (ucs_status_t st = ucp_config_modify(ucp_config, name, value); st != UCS_OK) {
            ucp_config_release(ucp_config);
            return ucx_failure(rank_, fmt::format("ucp_config_modify({}={})", name, value).c_str(), st);
        }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    const ucs_status_t init_status = ucp_init(&params, ucp_config, &u.context);
    ucp_config_release(ucp_config);
    if (init_status != UCS_OK) return ucx_failure(rank_, "ucp_init", init_status);
    if (status s = choose_memory_path(); !s.is_ok()) return s;

    // One thread drives the worker (the rank's); abort() only touches an atomic.
    ucp_worker_params_t worker_params{};
    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucs_status_t st = ucp_worker_create(u.context, &worker_params, &u.worker); st != UCS_OK)
        return ucx_failure(rank_, "ucp_worker_create", st);
    if (ucs_status_t st = ucp_worker_get_efd(u.worker, &u.event_fd); st != UCS_OK)
        return ucx_failure(rank_, "ucp_worker_get_efd", st);
    return status::success();
}

status ucx_endpoint::allocate_regions() {
    const int32_t world = config_.world_size;
    // The control region (host memory): a flag word per peer, then the collective areas of
    // parity 0 and 1. The swap region: the swap receive areas of parity 0 and 1, where the
    // memory path puts them.
    collective_area_bytes_ = align_up(static_cast<std::size_t>(world) * config_.max_collective_bytes);
    control_.assign(align_up(static_cast<std::size_t>(world) * sizeof(uint64_t)) + 2 * collective_area_bytes_, 0);
    swap_area_bytes_ =
        align_up(static_cast<std::size_t>(config_.max_swap_rows) * static_cast<std::size_t>(config_.vocab_size) * 4);
    const std::size_t swap_bytes = swap_region_bytes();
    if (memory_path_ == ucx_memory_path::host) {
        host_swap_.assign(swap_bytes, 0);
        swap_base_ = host_swap_.data();
    } else {
        const cuda_memory_kind kind =
            memory_path_ == ucx_memory_path::direct ? cuda_memory_kind::device : cuda_memory_kind::pinned_host;
        if (status s = cuda_allocation::allocate(kind, swap_bytes, cuda_swap_); !s.is_ok()) {
            return {s.code, fmt::format("rank {}: the ucx swap buffers ({} bytes, {}): {}", rank_, swap_bytes,
                                        ucx_memory_path_name(memory_path_), s.message)};
        }
        swap_base_ = cuda_swap_.data();
    }
    return status::success();
}

status ucx_endpoint::register_regions(std::string (&rkeys)[2]) {
    resources& u = *ucx_;
    const std::size_t swap_bytes = swap_region_bytes();
    for (const region r : {region::control, region::swap}) {
        const auto i = static_cast<size_t>(r);
        ucp_mem_map_params_t map{};
        map.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        map.address = r == region::control ? control_.data() : swap_base_;
        map.length = r == region::control ? control_.size() : swap_bytes;
        if (r == region::swap && memory_path_ == ucx_memory_path::direct) {
            map.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
            map.memory_type = UCS_MEMORY_TYPE_CUDA;
        }
        if (ucs_status_t st = ucp_mem_map(u.context, &map, &u.memory[i]); st != UCS_OK)
            return ucx_failure(rank_, "ucp_mem_map", st);
        void* rkey = nullptr;
        size_t rkey_bytes = 0;
        if (ucs_status_t st = ucp_rkey_pack(u.context, u.memory[i], &rkey, &rkey_bytes); st != UCS_OK)
            return ucx_failure(rank_, "ucp_rkey_pack", st);
        rkeys[i].assign(static_cast<const char*>(rkey), rkey_bytes);
        ucp_rkey_buffer_release(rkey);
    }
    return status::success();
}

status ucx_endpoint::pack_blob(const std::string (&rkeys)[2], std::string& mine) {
    resources& u = *ucx_;
    ucp_address_t* address = nullptr;
    size_t address_bytes = 0;
    if (ucs_status_t st = ucp_worker_get_address(u.worker, &address, &address_bytes); st != UCS_OK) {
        return ucx_failure(rank_, "ucp_worker_get_address", st);
    }
    const blob_header header{reinterpret_cast<uint64_t>(control_.data()),
                             control_.size(),
                             reinterpret_cast<uint64_t>(swap_base_),
                             swap_region_bytes(),
                             rkeys[0].size(),
                             rkeys[1].size(),
                             address_bytes};
    mine.assign(reinterpret_cast<const char*>(&header), sizeof header);
    mine += rkeys[0];
    mine += rkeys[1];
    mine.append(reinterpret_cast<const char*>(address), address_bytes);
    ucp_worker_release_address(u.worker, address);
    return status::success();
}

status ucx_endpoint::connect(const std::vector<std::string>& blobs) {
    reset_peers();
    for (int32_t peer = 0; peer < config_.world_size; ++peer) {
        if (peer != rank_) DS_TRY(connect_peer(peer, blobs[static_cast<size_t>(peer)]));
    }
    // Meet every peer once: wires the endpoints up and proves each peer is there.
    DS_TRY(barrier());
    return check_lanes();
}

void ucx_endpoint::reset_peers() {
    const int32_t world = config_.world_size;
    resources& u = *ucx_;
    u.eps.assign(static_cast<size_t>(world), nullptr);
    for (const region r : {region::control, region::swap}) {
        u.rkeys[static_cast<size_t>(r)].assign(static_cast<size_t>(world), nullptr);
        u.remote_base[static_cast<size_t>(r)].assign(static_cast<size_t>(world), 0);
    }
    u.peer_status.assign(static_cast<size_t>(world), UCS_OK);
    u.swap_requests.assign(static_cast<size_t>(world), swap_request{});
    u.flush_requests.assign(static_cast<size_t>(world), nullptr);
    u.failure_contexts.reserve(static_cast<size_t>(world));  // stable addresses for the handlers
    for (int32_t peer = 0; peer < world; ++peer) u.failure_contexts.push_back({this, peer});
}

status ucx_endpoint::connect_peer(int32_t peer, const std::string& blob) {
    const std::size_t swap_bytes = swap_region_bytes();
    resources& u = *ucx_;
    if (blob.empty()) {
        return {status_code::aborted,
                fmt::format("rank {}: rank {} could not start its ucx endpoint (its log says why)", rank_, peer)};
    }
    blob_header theirs{};
    if (blob.size() >= sizeof theirs) std::memcpy(&theirs, blob.data(), sizeof theirs);
    if (blob.size() < sizeof theirs || blob.size() != theirs.total_bytes()) {
        return status::invalid(fmt::format("rank {}: malformed bootstrap blob from rank {}", rank_, peer));
    }
    if (theirs.control_bytes != control_.size() || theirs.swap_bytes != swap_bytes) {
        return status::invalid(
            fmt::format("rank {}: rank {} registered {} + {} bytes, this rank {} + {}: the ranks' transport "
                        "configurations differ",
                        rank_, peer, theirs.control_bytes, theirs.swap_bytes, control_.size(), swap_bytes));
    }
    const char* control_rkey = blob.data() + sizeof theirs;
    const char* swap_rkey = control_rkey + theirs.control_rkey_bytes;
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(swap_rkey + theirs.swap_rkey_bytes);
    if (options_.peer_error_handling) {
        ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        ep_params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t st) {
            const auto* context = static_cast<peer_failure_context*>(arg);
            context->self->ucx_->peer_status[static_cast<size_t>(context->peer)] = st;
        };
        ep_params.err_handler.arg = &u.failure_contexts[static_cast<size_t>(peer)];
    }
    if (ucs_status_t st = ucp_ep_create(u.worker, &ep_params, &u.eps[static_cast<size_t>(peer)]); st != UCS_OK) {
        return ucx_failure(rank_, "ucp_ep_create", st);
    }
    for (const region r : {region::control, region::swap}) {
        const auto i = static_cast<size_t>(r);
        if (ucs_status_t st =
                ucp_ep_rkey_unpack(u.eps[static_cast<size_t>(peer)], r == region::control ? control_rkey : swap_rkey,
                                   &u.rkeys[i][static_cast<size_t>(peer)]);
            st != UCS_OK) {
            return ucx_failure(rank_, "ucp_ep_rkey_unpack", st);
        }
        u.remote_base[i][static_cast<size_t>(peer)] = r == region::control ? theirs.control_base : theirs.swap_base;
    }
    return status::success();
}

status ucx_endpoint::check_lanes() {
    const int32_t world = config_.world_size;
    resources& u = *ucx_;
    if (world > 1) {
        const int32_t next = (rank_ + 1) % world;
        transport_summary_ = summarize_lanes(
            printed([&](FILE* stream) { ucp_ep_print_info(u.eps[static_cast<size_t>(next)], stream); }));
        // The context offered a GPU transport, but this peer is reached another way.
        if (memory_path_ == ucx_memory_path::direct && !carries_gpu_memory(transport_summary_)) {
            return {status_code::unsupported,
                    fmt::format("rank {}: ucx_device_memory resolved to 'direct', but UCX reaches rank {} over {}, "
                                "which cannot put GPU "
                                "memory; set ucx_device_memory = staged (config key ucx_device_memory, "
                                "DISTSAMPLE_UCX_DEVICE_MEMORY or "
                                "--set ucx_device_memory=staged)",
                                rank_, next, transport_summary_.empty() ? "(none)" : transport_summary_)};
        }
    }
    transport_log().info(
        "rank {}: ucx transport ready, {} ranks, {} KiB registered ({} swap buffers), peer error handling {}, to rank "
        "{} "
        "over {}",
        rank_, world, (control_.size() + swap_region_bytes()) >> 10, ucx_memory_path_name(memory_path_),
        options_.peer_error_handling ? "on" : "off", (rank_ + 1) % world,
        transport_summary_.empty() ? "(none)" : transport_summary_);
    return status::success();
}

status ucx_endpoint::choose_memory_path() {
    ucp_context_attr_t attributes{};
    attributes.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucs_status_t st = ucp_context_query(ucx_->context, &attributes); st != UCS_OK)
        return ucx_failure(rank_, "ucp_context_query", st);
    ucx_memory_facts facts;
    facts.backend_on_device = options_.backend_on_device;
    facts.cuda_built = cuda_built();
    facts.ucx_has_cuda = (attributes.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    // The context's transports matter only where GPU memory could be put at all.
    facts.gpu_transport =
        facts.backend_on_device && facts.ucx_has_cuda &&
        carries_gpu_memory(printed([&](FILE* stream) { ucp_context_print_info(ucx_->context, stream); }));
    facts.ucx_version = ucp_get_version_string();
    ucx_memory_choice choice;
    if (status s = choose_ucx_memory_path(options_.device_memory, facts, choice); !s.is_ok()) {
        return {s.code, fmt::format("rank {}: {}", rank_, s.message)};
    }
    memory_path_ = choice.path;
    transport_log().info("rank {}: ucx swaps {} memory: {}", rank_, ucx_memory_path_name(memory_path_), choice.reason);
    return status::success();
}

ucx_endpoint::~ucx_endpoint() {
    resources& u = *ucx_;
    for (const std::vector<ucp_rkey_h>& rkeys : u.rkeys) {
        for (ucp_rkey_h rkey : rkeys) {
            if (rkey) ucp_rkey_destroy(rkey);
        }
    }
    for (ucp_ep_h ep : u.eps) {
        if (!ep) continue;
        // Force-closing (no goodbye to the peer) needs peer error handling on both sides.
        ucp_request_param_t close{};
        close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        close.flags = options_.peer_error_handling ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        void* request = ucp_ep_close_nbx(ep, &close);
        if (!UCS_PTR_IS_PTR(request)) continue;
        const auto deadline = clock::now() + kCloseTimeout;
        while (ucp_request_check_status(request) == UCS_INPROGRESS && clock::now() < deadline)
            ucp_worker_progress(u.worker);
        ucp_request_free(request);
    }
    // Closing cancels what a failed call left behind (a flush towards a dead peer): let those
    // requests complete, so that they go back to UCX's pool before the worker is destroyed.
    const auto deadline = clock::now() + kCloseTimeout;
    while (u.worker && ucp_worker_progress(u.worker) != 0 && clock::now() < deadline) {
    }
    for (ucp_mem_h memory : u.memory) {
        if (memory) ucp_mem_unmap(u.context, memory);
    }
    if (u.worker) ucp_worker_destroy(u.worker);
    if (u.context) ucp_cleanup(u.context);
}

std::size_t ucx_endpoint::flag_offset(int32_t source) const {
    return static_cast<std::size_t>(source) * sizeof(uint64_t);
}

std::size_t ucx_endpoint::swap_offset(uint64_t parity) const { return parity * swap_area_bytes_; }

// At least kAlign bytes: UCX maps no empty region.
std::size_t ucx_endpoint::swap_region_bytes() const { return std::max(kAlign, 2 * swap_area_bytes_); }

std::size_t ucx_endpoint::collective_offset(uint64_t parity, int32_t source) const {
    return align_up(static_cast<std::size_t>(config_.world_size) * sizeof(uint64_t)) + parity * collective_area_bytes_ +
           static_cast<std::size_t>(source) * config_.max_collective_bytes;
}

}  // namespace ds
