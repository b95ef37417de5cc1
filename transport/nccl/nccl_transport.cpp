#include "transport/nccl/nccl_transport.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "transport/remote_swap.h"
#include "transport/transport_log.h"

namespace ds {

namespace {

using clock = std::chrono::steady_clock;

}  // namespace

struct nccl_endpoint::resources {
    int device = 0;
    cudaStream_t stream = nullptr;
    ncclComm_t comm = nullptr;
    bool comm_aborted = false;
    // Device buffers, sized at construction.
    unsigned char* rows = nullptr;        // swap result: max_swap_rows × V × 4 bytes
    unsigned char* send_stage = nullptr;  // per peer: the rows it asked for, packed
    unsigned char* recv_stage = nullptr;  // per peer: its slices of this rank's rows, packed
    unsigned char* collective = nullptr;  // world × max_collective_bytes (in at this rank's slot)
    std::size_t stage_bytes_per_peer = 0;
    std::vector<swap_request> swap_requests;
};

nccl_endpoint::nccl_endpoint(const transport_config& config, int32_t rank)
    : config_(config), rank_(rank), gpu_(std::make_unique<resources>()) {}

status nccl_endpoint::create(const transport_config& config, bootstrap& boot, const nccl_options& options,
                             std::unique_ptr<nccl_endpoint>& out) {
    DS_TRY(config.validate());
    if (boot.world_size() != config.world_size) {
        return status::invalid(fmt::format("bootstrap world_size = {}: expected the transport's {}", boot.world_size(),
                                           config.world_size));
    }
    std::unique_ptr<nccl_endpoint> endpoint(new nccl_endpoint(config, boot.rank()));
    if (status s = endpoint->setup(boot, options); !s.is_ok()) return s;
    out = std::move(endpoint);
    return status::success();
}

status nccl_endpoint::check_cuda(int error, const char* what) {
    if (error == cudaSuccess) return status::success();
    cudaGetLastError();  // clear the sticky error, so later calls start clean
    return fail(status_code::internal,
                fmt::format("rank {}: {}: {}", rank_, what, cudaGetErrorString(static_cast<cudaError_t>(error))));
}

status nccl_endpoint::setup(bootstrap& boot, const nccl_options& options) {
    resources& g = *gpu_;
    int devices = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
        cudaGetLastError();
        return {status_code::unsupported, fmt::format("rank {}: the nccl transport needs a GPU: {}", rank_,
                                                      e != cudaSuccess ? cudaGetErrorString(e) : "there is none")};
    }
    g.device = options.device >= 0 ? options.device : rank_ % devices;
    if (status s = check_cuda(cudaSetDevice(g.device), "cudaSetDevice"); !s.is_ok()) return s;
    if (status s = check_cuda(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "cudaStreamCreate");
        !s.is_ok())
        return s;

    const int32_t world = config_.world_size;
    const std::size_t shard_bytes = static_cast<std::size_t>(config_.vocab_size / world) * 4;
    g.stage_bytes_per_peer = static_cast<std::size_t>(config_.max_swap_rows) * shard_bytes;
    const std::size_t stage_bytes = g.stage_bytes_per_peer * static_cast<std::size_t>(world);
    const std::size_t collective_bytes = config_.max_collective_bytes * static_cast<std::size_t>(world);
    for (auto [buffer, bytes] : {std::pair{&g.rows, stage_bytes}, std::pair{&g.send_stage, stage_bytes},
                                 std::pair{&g.recv_stage, stage_bytes}, std::pair{&g.collective, collective_bytes}}) {
        void* memory = nullptr;
        if (status s = check_cuda(cudaMalloc(&memory, std::max<std::size_t>(bytes, 1)), "cudaMalloc"); !s.is_ok())
            return s;
        *buffer = static_cast<unsigned char*>(memory);
    }
    g.swap_requests.assign(static_cast<size_t>(world), swap_request{});

    ncclUniqueId id{};
    std::string mine;
    if (rank_ == 0) {
        if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
            return fail(status_code::internal, fmt::format("rank 0: ncclGetUniqueId: {}", ncclGetErrorString(r)));
        }
        mine.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    std::vector<std::string> blobs;
    if (status s = boot.exchange(mine, blobs); !s.is_ok()) return s;
    if (blobs[0].size() != sizeof id)
        return status::invalid(fmt::format("rank {}: rank 0 sent no NCCL unique id", rank_));
    std::memcpy(&id, blobs[0].data(), sizeof id);

    ncclConfig_t comm_config = NCCL_CONFIG_INITIALIZER;
    comm_config.blocking = 0;  // every call returns at once; waits are ours, and bounded
    const ncclResult_t init = ncclCommInitRankConfig(&g.comm, world, id, rank_, &comm_config);
    if (status s = settle(init, "ncclCommInitRankConfig"); !s.is_ok()) return s;
    if (status s = barrier(); !s.is_ok()) return s;
    int version = 0;
    ncclGetVersion(&version);
    transport_log().info("rank {}: nccl transport ready, {} ranks, device {}, NCCL {}", rank_, world, g.device,
                         version);
    return status::success();
}

nccl_endpoint::~nccl_endpoint() {
    resources& g = *gpu_;
    cudaSetDevice(g.device);
    if (g.comm) {
        // A healthy communicator is finalised (bounded); a failed or stuck one is aborted.
        bool finalised = false;
        if (!failure_.failed()) {
            ncclResult_t state = ncclCommFinalize(g.comm);
            const auto deadline = clock::now() + config_.timeout;
            while (state == ncclInProgress && clock::now() < deadline) {
                std::this_thread::yield();
                ncclCommGetAsyncError(g.comm, &state);
            }
            finalised = state == ncclSuccess;
        }
        if (finalised) {
            ncclCommDestroy(g.comm);
        } else if (!g.comm_aborted) {
            ncclCommAbort(g.comm);
        }
    }
    for (unsigned char* buffer : {g.rows, g.send_stage, g.recv_stage, g.collective}) {
        if (buffer) cudaFree(buffer);
    }
    if (g.stream) cudaStreamDestroy(g.stream);
}

status nccl_endpoint::fail(status_code code, std::string reason) {
    (void)failure_.fail(code, std::move(reason));
    return failed();
}

status nccl_endpoint::failed() {
    resources& g = *gpu_;
    if (g.comm && !g.comm_aborted) {  // only this rank's thread uses the communicator
        ncclCommAbort(g.comm);
        g.comm_aborted = true;
    }
    return failure_.get();
}

void nccl_endpoint::abort(const char* reason) {
    // Any thread: record the reason; the rank's own thread aborts the communicator when it sees it.
    (void)failure_.fail(status_code::aborted, fmt::format("rank {}: transport aborted: {}", rank_, reason));
}

status nccl_endpoint::enter(const char* what) {
    if (failure_.failed()) return failed();
    return check_cuda(cudaSetDevice(gpu_->device), what);
}

status nccl_endpoint::settle(int result, const char* what) {
    resources& g = *gpu_;
    auto state = static_cast<ncclResult_t>(result);
    const auto deadline = clock::now() + config_.timeout;
    while (state == ncclInProgress) {
        if (failure_.failed()) return failed();
        if (clock::now() > deadline) {
            return fail(status_code::timeout,
                        fmt::format("rank {} waited {} ms for NCCL to take {}", rank_, config_.timeout.count(), what));
        }
        std::this_thread::yield();
        if (g.comm) ncclCommGetAsyncError(g.comm, &state);
    }
    if (state == ncclSuccess) return status::success();
    const char* detail = g.comm ? ncclGetLastError(g.comm) : "";
    return fail(status_code::aborted,
                fmt::format("rank {}: {}: {} {}", rank_, what, ncclGetErrorString(state), detail));
}

status nccl_endpoint::wait(const char* what) {
    resources& g = *gpu_;
    const auto deadline = clock::now() + config_.timeout;
    for (;;) {
        const cudaError_t done = cudaStreamQuery(g.stream);
        if (done == cudaSuccess) return status::success();
        if (done != cudaErrorNotReady) return check_cuda(done, what);
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(g.comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            return fail(status_code::aborted, fmt::format("rank {}: {}: {} (a peer failed?) {}", rank_, what,
                                                          ncclGetErrorString(async), ncclGetLastError(g.comm)));
        }
        if (failure_.failed()) return failed();
        if (clock::now() > deadline) {
            return fail(status_code::timeout,
                        fmt::format("rank {} waited {} ms in {} (NCCL does not say which rank is missing)", rank_,
                                    config_.timeout.count(), what));
        }
        std::this_thread::yield();
    }
}

status nccl_endpoint::all_gather(const void* in, std::size_t bytes, void* out) {
    if (status s = check_collective_size(config_, bytes, "all_gather"); !s.is_ok()) return s;
    if (status s = enter("all_gather"); !s.is_ok()) return s;
    resources& g = *gpu_;
    unsigned char* mine = g.collective + static_cast<std::size_t>(rank_) * bytes;  // in place: this rank's slot
    if (status s = check_cuda(cudaMemcpyAsync(mine, in, bytes, cudaMemcpyHostToDevice, g.stream), "all_gather");
        !s.is_ok())
        return s;
    if (status s = settle(ncclAllGather(mine, g.collective, bytes, ncclUint8, g.comm, g.stream), "ncclAllGather");
        !s.is_ok())
        return s;
    const std::size_t total = bytes * static_cast<std::size_t>(config_.world_size);
    if (status s =
            check_cuda(cudaMemcpyAsync(out, g.collective, total, cudaMemcpyDeviceToHost, g.stream), "all_gather");
        !s.is_ok())
        return s;
    return wait("all_gather");
}

status nccl_endpoint::gather_verify_outputs(const int32_t* block, std::size_t block_ints, int32_t* out) {
    return all_gather(block, block_ints * sizeof(int32_t), out);
}

template <class T>
status nccl_endpoint::reduce_impl(T* data, std::size_t count, reduce_op op) {
    const std::size_t bytes = count * sizeof(T);
    if (status s = check_collective_size(config_, bytes, "all_reduce"); !s.is_ok()) return s;
    if (status s = enter("all_reduce"); !s.is_ok()) return s;
    resources& g = *gpu_;
    const ncclDataType_t type = std::is_signed<T>::value ? ncclInt64 : ncclUint64;
    if (status s =
            check_cuda(cudaMemcpyAsync(g.collective, data, bytes, cudaMemcpyHostToDevice, g.stream), "all_reduce");
        !s.is_ok())
        return s;
    const ncclResult_t r = ncclAllReduce(g.collective, g.collective, count, type,
                                         op == reduce_op::sum ? ncclSum : ncclMax, g.comm, g.stream);
    if (status s = settle(r, "ncclAllReduce"); !s.is_ok()) return s;
    if (status s =
            check_cuda(cudaMemcpyAsync(data, g.collective, bytes, cudaMemcpyDeviceToHost, g.stream), "all_reduce");
        !s.is_ok())
        return s;
    return wait("all_reduce");
}

status nccl_endpoint::all_reduce(uint64_t* data, std::size_t count, reduce_op op) {
    return reduce_impl(data, count, op);
}
status nccl_endpoint::all_reduce(int64_t* data, std::size_t count, reduce_op op) {
    return reduce_impl(data, count, op);
}

status nccl_endpoint::broadcast(void* data, std::size_t bytes, int32_t root) {
    if (root < 0 || root >= config_.world_size) {
        return status::invalid(
            fmt::format("broadcast root = {}: expected a rank in [0, {})", root, config_.world_size));
    }
    if (status s = check_collective_size(config_, bytes, "broadcast"); !s.is_ok()) return s;
    if (status s = enter("broadcast"); !s.is_ok()) return s;
    resources& g = *gpu_;
    if (rank_ == root) {
        if (status s =
                check_cuda(cudaMemcpyAsync(g.collective, data, bytes, cudaMemcpyHostToDevice, g.stream), "broadcast");
            !s.is_ok())
            return s;
    }
    if (status s = settle(ncclBroadcast(g.collective, g.collective, bytes, ncclUint8, root, g.comm, g.stream),
                          "ncclBroadcast");
        !s.is_ok()) {
        return s;
    }
    if (rank_ != root) {
        if (status s =
                check_cuda(cudaMemcpyAsync(data, g.collective, bytes, cudaMemcpyDeviceToHost, g.stream), "broadcast");
            !s.is_ok())
            return s;
    }
    return wait("broadcast");
}

status nccl_endpoint::barrier() {
    uint64_t one = 1;
    return all_reduce(&one, 1, reduce_op::sum);
}

status nccl_endpoint::swap_batch_vocab(const logits_view& shard, int64_t first_row, int64_t row_count,
                                       logits_view& full_rows) {
    const int32_t world = config_.world_size;
    const int32_t vocab = config_.vocab_size;
    const int32_t shard_vocab = vocab / world;
    if (status s = check_swap_shape(config_, shard, first_row, row_count); !s.is_ok()) return s;
    if (!shard.on_device)
        return {status_code::unsupported, "nccl transport: the logits shard must be GPU memory (on_device)"};
    resources& g = *gpu_;
    const swap_request mine = swap_request::of(shard, first_row, row_count);
    if (status s = all_gather(&mine, sizeof mine, g.swap_requests.data()); !s.is_ok()) return s;
    if (status s = check_swap_requests(g.swap_requests, mine, rank_); !s.is_ok()) return s;
    const std::size_t element = dtype_size(shard.dtype);
    const std::size_t slice_bytes = static_cast<std::size_t>(shard_vocab) * element;
    const std::size_t source_pitch = static_cast<std::size_t>(shard.row_stride) * element;
    const std::size_t row_bytes = static_cast<std::size_t>(vocab) * element;
    const auto* source = static_cast<const unsigned char*>(shard.data);
    const int64_t my_real_rows = mine.real_requested_rows();
    auto copy_2d = [&](void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch, int64_t rows) {
        if (rows == 0) return status::success();
        return check_cuda(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, slice_bytes, static_cast<std::size_t>(rows),
                                            cudaMemcpyDeviceToDevice, g.stream),
                          "swap_batch_vocab");
    };
    // Pack what every peer asked for: its rows of this rank's slice, contiguous.
    for (int32_t peer = 0; peer < world; ++peer) {
        const swap_request& theirs = g.swap_requests[static_cast<size_t>(peer)];
        if (peer == rank_) continue;
        status s = copy_2d(g.send_stage + static_cast<std::size_t>(peer) * g.stage_bytes_per_peer, slice_bytes,
                           source + static_cast<std::size_t>(theirs.first_row) * source_pitch, source_pitch,
                           theirs.real_requested_rows());
        if (!s.is_ok()) return s;
    }
    if (status s = settle(ncclGroupStart(), "ncclGroupStart"); !s.is_ok()) return s;
    for (int32_t peer = 0; peer < world; ++peer) {
        if (peer == rank_) continue;
        const std::size_t offset = static_cast<std::size_t>(peer) * g.stage_bytes_per_peer;
        const std::size_t send_bytes =
            static_cast<std::size_t>(g.swap_requests[static_cast<size_t>(peer)].real_requested_rows()) * slice_bytes;
        const std::size_t recv_bytes = static_cast<std::size_t>(my_real_rows) * slice_bytes;
        if (send_bytes > 0) {
            if (status s =
                    settle(ncclSend(g.send_stage + offset, send_bytes, ncclUint8, peer, g.comm, g.stream), "ncclSend");
                !s.is_ok())
                return s;
        }
        if (recv_bytes > 0) {
            if (status s =
                    settle(ncclRecv(g.recv_stage + offset, recv_bytes, ncclUint8, peer, g.comm, g.stream), "ncclRecv");
                !s.is_ok())
                return s;
        }
    }
    if (status s = settle(ncclGroupEnd(), "ncclGroupEnd (vocab swap)"); !s.is_ok()) return s;
    // Unpack every peer's slices (and this rank's own) into full-vocab rows; zero the phantom rows.
    for (int32_t peer = 0; peer < world; ++peer) {
        unsigned char* dst = g.rows + static_cast<std::size_t>(peer) * slice_bytes;
        status s = peer == rank_
                       ? copy_2d(dst, row_bytes, source + static_cast<std::size_t>(first_row) * source_pitch,
                                 source_pitch, my_real_rows)
                       : copy_2d(dst, row_bytes, g.recv_stage + static_cast<std::size_t>(peer) * g.stage_bytes_per_peer,
                                 slice_bytes, my_real_rows);
        if (!s.is_ok()) return s;
    }
    if (row_count > my_real_rows) {
        const std::size_t phantom_bytes = static_cast<std::size_t>(row_count - my_real_rows) * row_bytes;
        status s = check_cuda(
            cudaMemsetAsync(g.rows + static_cast<std::size_t>(my_real_rows) * row_bytes, 0, phantom_bytes, g.stream),
            "swap_batch_vocab");
        if (!s.is_ok()) return s;
    }
    if (status s = wait("swap_batch_vocab"); !s.is_ok()) return s;
    full_rows = logits_view{g.rows, shard.dtype, row_count, vocab, vocab, true};
    return status::success();
}

}  // namespace ds
