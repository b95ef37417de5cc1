#include "transport/ucx/ucx_transport.h"

#include <fmt/format.h>
#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "transport/remote_swap.h"
#include "transport/transport_log.h"

namespace ds {

namespace {

using clock = std::chrono::steady_clock;

constexpr std::size_t kAlign = 64;
// Checking the clock costs more than a progress call that finds nothing: look every so often.
constexpr int kProgressPerClockCheck = 64;
// Idle progress calls before a waiter sleeps on the worker's event descriptor: ranks usually
// answer within microseconds, but spinning ranks starve each other when they outnumber the cores.
constexpr int kBusySpins = 2000;
// The longest such sleep, so that abort() and the deadline are seen promptly.
constexpr int kSleepMs = 1;
constexpr std::chrono::seconds kCloseTimeout{2};

// Every so many spins while busy-polling; every time once the waiter sleeps between polls.
bool time_to_check(int spin) { return spin % kProgressPerClockCheck == 0 || spin > kBusySpins; }

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

struct ucx_endpoint::peer_failure_context {
    ucx_endpoint* self;
    int32_t peer;
};

struct ucx_endpoint::resources {
    ucp_context_h context = nullptr;
    ucp_worker_h worker = nullptr;
    int event_fd = -1;                         // the worker's wake-up descriptor
    ucp_mem_h memory[2] = {nullptr, nullptr};  // per region (ucx_endpoint::region)
    std::vector<ucp_ep_h> eps;                 // per rank; null for this rank
    std::vector<ucp_rkey_h> rkeys[2];          // per region, per rank; null for this rank
    std::vector<uint64_t> remote_base[2];      // per region, per rank: the peer's region address
    std::vector<ucs_status_t> peer_status;     // per rank: set by the error handler
    std::vector<peer_failure_context> failure_contexts;
    std::vector<swap_request> swap_requests;  // per rank, reused by every swap
    std::vector<void*> flush_requests;        // per rank, reused by every flush
};

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

std::size_t ucx_endpoint::swap_region_bytes() const {
    return std::max(kAlign, 2 * swap_area_bytes_);
}  // UCX maps no empty region

std::size_t ucx_endpoint::collective_offset(uint64_t parity, int32_t source) const {
    return align_up(static_cast<std::size_t>(config_.world_size) * sizeof(uint64_t)) + parity * collective_area_bytes_ +
           static_cast<std::size_t>(source) * config_.max_collective_bytes;
}

void ucx_endpoint::abort(const char* reason) {
    (void)failure_.fail(status_code::aborted, fmt::format("rank {}: transport aborted: {}", rank_, reason));
}

status ucx_endpoint::put(int32_t peer, const void* data, std::size_t bytes, region to, std::size_t remote_offset,
                         bool from_device) {
    resources& u = *ucx_;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;  // saves UCX looking the pointer up
    param.memory_type = from_device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    const auto i = static_cast<size_t>(to);
    void* request = ucp_put_nbx(u.eps[static_cast<size_t>(peer)], data, bytes,
                                u.remote_base[i][static_cast<size_t>(peer)] + remote_offset,
                                u.rkeys[i][static_cast<size_t>(peer)], &param);
    if (UCS_PTR_IS_ERR(request)) {
        return failure_.fail(status_code::aborted, fmt::format("rank {}: put to rank {} failed: {}", rank_, peer,
                                                               ucs_status_string(UCS_PTR_STATUS(request))));
    }
    // The flush that follows completes it; the request is released on completion.
    if (request != nullptr) ucp_request_free(request);
    return status::success();
}

void ucx_endpoint::progress(int spins, bool sleep_when_idle) {
    resources& u = *ucx_;
    if (ucp_worker_progress(u.worker) != 0 || spins < kBusySpins) return;
    // Sending (flush) needs this thread as soon as the socket takes more: only yield the core.
    if (!sleep_when_idle) {
        std::this_thread::yield();
        return;
    }
    // Arm the worker (UCS_ERR_BUSY: events are already pending) and sleep until it has work.
    if (ucp_worker_arm(u.worker) == UCS_OK) {
        pollfd wake{u.event_fd, POLLIN, 0};
        ::poll(&wake, 1, kSleepMs);
    }
}

// One flush request per peer rather than the worker's one: when the deadline passes, the peers
// still holding this rank's puts unacknowledged are the ones to name (a peer that stopped
// progressing its worker, e.g. one that never entered the collective).
status ucx_endpoint::flush(const char* what) {
    resources& u = *ucx_;
    const int32_t world = config_.world_size;
    std::vector<void*>& pending = u.flush_requests;
    int32_t outstanding = 0;
    int32_t refused_peer = -1;  // a peer whose flush failed outright
    ucs_status_t refusal = UCS_OK;
    for (int32_t peer = 0; peer < world; ++peer) {
        pending[static_cast<size_t>(peer)] = nullptr;
        if (peer == rank_) continue;
        ucp_request_param_t param{};
        void* request = ucp_ep_flush_nbx(u.eps[static_cast<size_t>(peer)], &param);
        if (UCS_PTR_IS_PTR(request)) {
            pending[static_cast<size_t>(peer)] = request;
            ++outstanding;
        } else if (UCS_PTR_STATUS(request) != UCS_OK && refused_peer < 0) {
            refused_peer = peer;
            refusal = UCS_PTR_STATUS(request);
        }
    }
    const auto deadline = clock::now() + config_.timeout;
    for (int spin = 0; outstanding > 0 && refused_peer < 0; ++spin) {
        progress(spin, false);
        for (int32_t peer = 0; peer < world; ++peer) {
            void*& request = pending[static_cast<size_t>(peer)];
            if (request == nullptr) continue;
            const ucs_status_t result = ucp_request_check_status(request);
            if (result == UCS_INPROGRESS) continue;
            ucp_request_free(request);
            request = nullptr;
            --outstanding;
            if (result != UCS_OK) {
                refused_peer = peer;
                refusal = result;
            }
        }
        // A dead peer never acknowledges: its puts would hold the flush until the deadline.
        if (failure_.failed() || failed_peer() >= 0) break;
        if (time_to_check(spin) && clock::now() > deadline) break;
    }
    std::string unacknowledged;
    for (int32_t peer = 0; peer < world; ++peer) {
        void*& request = pending[static_cast<size_t>(peer)];
        if (request == nullptr) continue;
        unacknowledged += fmt::format("{}rank {}", unacknowledged.empty() ? "" : ", ", peer);
        ucp_request_free(request);  // released when it completes
        request = nullptr;
    }
    if (unacknowledged.empty() && refused_peer < 0) return status::success();
    if (status s = failure_.get(); !s.is_ok()) return s;
    if (const int32_t peer = failed_peer(); peer >= 0) return fail_for_peer(peer, what);
    if (refused_peer >= 0) {
        return failure_.fail(status_code::aborted, fmt::format("rank {}: {}: flushing puts to rank {} failed: {}",
                                                               rank_, what, refused_peer, ucs_status_string(refusal)));
    }
    return failure_.fail(status_code::timeout,
                         fmt::format("rank {}: {}: {} did not acknowledge this rank's puts within {} ms", rank_, what,
                                     unacknowledged, config_.timeout.count()));
}

int32_t ucx_endpoint::failed_peer() const {
    const std::vector<ucs_status_t>& peers = ucx_->peer_status;
    const auto found = std::find_if(peers.begin(), peers.end(), [](ucs_status_t st) { return st != UCS_OK; });
    return found == peers.end() ? -1 : static_cast<int32_t>(found - peers.begin());
}

status ucx_endpoint::fail_for_peer(int32_t peer, const char* what) {
    return failure_.fail(status_code::aborted,
                         fmt::format("rank {}: {}: rank {} failed ({})", rank_, what, peer,
                                     ucs_status_string(ucx_->peer_status[static_cast<size_t>(peer)])));
}

status ucx_endpoint::wait_for_flags(uint64_t sequence, const char* what) {
    resources& u = *ucx_;
    const int32_t world = config_.world_size;
    const auto* flags = reinterpret_cast<const uint64_t*>(control_at(flag_offset(0)));
    auto arrived = [&](int32_t peer) { return __atomic_load_n(&flags[peer], __ATOMIC_ACQUIRE) >= sequence; };
    const auto deadline = clock::now() + config_.timeout;
    for (int spin = 0;; ++spin) {
        bool all = true;
        for (int32_t peer = 0; peer < world && all; ++peer) all = peer == rank_ || arrived(peer);
        if (all) return status::success();
        if (status s = failure_.get(); !s.is_ok()) return s;
        // A failed peer only matters while its flag is missing (a peer that finished may leave).
        for (int32_t peer = 0; peer < world; ++peer) {
            if (peer != rank_ && u.peer_status[static_cast<size_t>(peer)] != UCS_OK && !arrived(peer)) {
                return fail_for_peer(peer, what);
            }
        }
        if (time_to_check(spin) && clock::now() > deadline) {
            std::string missing;
            for (int32_t peer = 0; peer < world; ++peer) {
                if (peer != rank_ && !arrived(peer))
                    missing += fmt::format("{}rank {}", missing.empty() ? "" : ", ", peer);
            }
            return failure_.fail(status_code::timeout, fmt::format("rank {} waited {} ms in {} for {}", rank_,
                                                                   config_.timeout.count(), what, missing));
        }
        progress(spin, true);
    }
}

void ucx_endpoint::set_epoch(uint64_t epoch) {
    if (epoch == epoch_) return;
    epoch_ = epoch;
    sequence_ = epoch << 32;
    if (failed_peer() >= 0) return;
    failure_.clear();
}

template <class IssuePuts>
status ucx_endpoint::collective(const char* what, IssuePuts&& issue_puts) {
    if (status s = failure_.get(); !s.is_ok()) return s;
    in_collective_.store(true, std::memory_order_release);
    struct leave_collective {
        std::atomic<bool>& flag;
        ~leave_collective() { flag.store(false, std::memory_order_release); }
    } leave{in_collective_};
    const uint64_t sequence = ++sequence_;
    const uint64_t parity = sequence & 1;
    if (status s = issue_puts(parity); !s.is_ok()) return s;
    // Remote completion of the data (and of the previous call's flags) before this call's flag.
    if (status s = flush(what); !s.is_ok()) return s;
    flag_source_[parity] = sequence;
    for (int32_t peer = 0; peer < config_.world_size; ++peer) {
        if (peer == rank_) continue;
        if (status s = put(peer, &flag_source_[parity], sizeof(uint64_t), region::control, flag_offset(rank_));
            !s.is_ok())
            return s;
    }
    return wait_for_flags(sequence, what);
}

status ucx_endpoint::all_gather(const void* in, std::size_t bytes, void* out) {
    if (status s = check_collective_size(config_, bytes, "all_gather"); !s.is_ok()) return s;
    status s = collective("all_gather", [&](uint64_t parity) {
        for (int32_t peer = 0; peer < config_.world_size; ++peer) {
            if (peer == rank_) continue;
            if (status p = put(peer, in, bytes, region::control, collective_offset(parity, rank_)); !p.is_ok())
                return p;
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    const uint64_t parity = sequence_ & 1;
    for (int32_t source = 0; source < config_.world_size; ++source) {
        const void* from = source == rank_ ? in : control_at(collective_offset(parity, source));
        std::memcpy(static_cast<unsigned char*>(out) + static_cast<std::size_t>(source) * bytes, from, bytes);
    }
    return status::success();
}

status ucx_endpoint::gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) {
    return all_gather(block, block_ints * sizeof(int32_t), out);
}

template <class T>
status ucx_endpoint::reduce_impl(T* data, std::size_t count, reduce_op op) {
    const std::size_t bytes = count * sizeof(T);
    if (status s = check_collective_size(config_, bytes, "all_reduce"); !s.is_ok()) return s;
    status s = collective("all_reduce", [&](uint64_t parity) {
        for (int32_t peer = 0; peer < config_.world_size; ++peer) {
            if (peer == rank_) continue;
            if (status p = put(peer, data, bytes, region::control, collective_offset(parity, rank_)); !p.is_ok())
                return p;
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    const uint64_t parity = sequence_ & 1;
    // Every rank reduces in rank order, element by element, so all get the same values.
    for (std::size_t i = 0; i < count; ++i) {
        T result{};
        for (int32_t source = 0; source < config_.world_size; ++source) {
            T value;
            if (source == rank_) {
                value = data[i];
            } else {
                std::memcpy(&value, control_at(collective_offset(parity, source) + i * sizeof(T)), sizeof(T));
            }
            result = source == 0            ? value
                     : op == reduce_op::sum ? static_cast<T>(result + value)
                                            : std::max(result, value);
        }
        data[i] = result;
    }
    return status::success();
}

status ucx_endpoint::all_reduce(uint64_t* data, std::size_t count, reduce_op op) {
    return reduce_impl(data, count, op);
}
status ucx_endpoint::all_reduce(int64_t* data, std::size_t count, reduce_op op) { return reduce_impl(data, count, op); }

status ucx_endpoint::broadcast(void* data, std::size_t bytes, int32_t root) {
    if (root < 0 || root >= config_.world_size) {
        return status::invalid(
            fmt::format("broadcast root = {}: expected a rank in [0, {})", root, config_.world_size));
    }
    if (status s = check_collective_size(config_, bytes, "broadcast"); !s.is_ok()) return s;
    status s = collective("broadcast", [&](uint64_t parity) {
        for (int32_t peer = 0; rank_ == root && peer < config_.world_size; ++peer) {
            if (peer == rank_) continue;
            if (status p = put(peer, data, bytes, region::control, collective_offset(parity, root)); !p.is_ok())
                return p;
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    if (rank_ != root) std::memcpy(data, control_at(collective_offset(sequence_ & 1, root)), bytes);
    return status::success();
}

status ucx_endpoint::barrier() {
    return collective("barrier", [](uint64_t) { return status::success(); });
}

status ucx_endpoint::swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                                      logits_view& full_rows) {
    const int32_t world = config_.world_size;
    const int32_t vocab = config_.vocab_size;
    const int32_t shard_vocab = vocab / world;
    if (status s = check_swap_shape(config_, shard, first_row, row_count); !s.is_ok()) return s;
    const bool device = swaps_device_logits();
    if (shard.on_device != device) {
        return {status_code::unsupported,
                fmt::format("ucx transport: logits.on_device = {}: this endpoint swaps {} memory (ucx_device_memory "
                            "resolved to {})",
                            shard.on_device, device ? "device" : "host", ucx_memory_path_name(memory_path_))};
    }
    std::vector<swap_request>& requests = ucx_->swap_requests;
    const swap_request mine = swap_request::of(shard, first_row, row_count);
    if (status s = all_gather(&mine, sizeof mine, requests.data()); !s.is_ok()) return s;
    if (status s = check_swap_requests(requests, mine, rank_); !s.is_ok()) return s;
    const std::size_t element = dtype_size(shard.dtype);
    const std::size_t slice_bytes = static_cast<std::size_t>(shard_vocab) * element;
    auto source_row = [&](int64_t row) {
        return static_cast<const unsigned char*>(shard.data) +
               static_cast<std::size_t>(row * shard.row_stride) * element;
    };
    auto slice_offset = [&](int64_t row_in_block, int32_t slice) {
        return (static_cast<std::size_t>(row_in_block) * static_cast<std::size_t>(vocab) +
                static_cast<std::size_t>(slice) * shard_vocab) *
               element;
    };
    status s = collective("swap_batch_vocab", [&](uint64_t parity) {
        for (int32_t peer = 0; peer < world; ++peer) {
            if (peer == rank_) continue;
            const swap_request& theirs = requests[static_cast<size_t>(peer)];
            // Phantom rows (past the real ones) are not sent: the receiver zeroes them.
            for (int64_t i = 0; i < theirs.real_requested_rows(); ++i) {
                if (status p = put(peer, source_row(theirs.first_row + i), slice_bytes, region::swap,
                                   swap_offset(parity) + slice_offset(i, rank_), device);
                    !p.is_ok()) {
                    return p;
                }
            }
        }
        return status::success();
    });
    if (!s.is_ok()) return s;
    // Local writes only after the wait: a late put of an aborted call can no longer land here.
    // This rank's own slice of its real rows, then zeros for the phantom rows (all past them).
    unsigned char* rows = swap_base_ + swap_offset(sequence_ & 1);
    const int64_t real_rows = std::clamp<int64_t>(shard.rows - first_row, 0, row_count);
    unsigned char* phantom = rows + slice_offset(real_rows, 0);
    const std::size_t phantom_bytes =
        static_cast<std::size_t>(row_count - real_rows) * static_cast<std::size_t>(vocab) * element;
    if (device) {
        s = copy_rows(rows + slice_offset(0, rank_), static_cast<std::size_t>(vocab) * element, source_row(first_row),
                      static_cast<std::size_t>(shard.row_stride) * element, slice_bytes,
                      static_cast<std::size_t>(real_rows));
        if (s.is_ok()) s = zero_device_bytes(phantom, phantom_bytes);
        if (!s.is_ok()) return failure_.fail(s.code, fmt::format("rank {}: swap_batch_vocab: {}", rank_, s.message));
    } else {
        for (int64_t i = 0; i < real_rows; ++i)
            std::memcpy(rows + slice_offset(i, rank_), source_row(first_row + i), slice_bytes);
        std::memset(phantom, 0, phantom_bytes);
    }
    full_rows = logits_view{rows, shard.dtype, row_count, vocab, vocab, device};
    return status::success();
}

}  // namespace ds
