// The batch-DP data movement of one step over UCX between rank processes on this machine: the
// vocab swap (swap_batch_vocab) and the packed output gather (gather_verify_outputs), against a
// memcpy of the same bytes in the same run (what the local transport does for one rank).
//
//   bench_transport [--tp 4] [--pad-bs 64] [--n 4] [--vocab 128256] [--steps 30]
//                   [--peer-error-handling on|off] [--memory host|direct|staged]
//
// --memory: where each rank's shard lives and how UCX gets it (ucx_device_memory): host memory (the
// cpu backend's case); device memory put GPU to GPU (direct); device memory copied to pinned host
// memory every step, inside the swap's time, as the rank engine stages it (staged). With device
// memory the baseline is a device-to-device copy of the same bytes (cudaMemcpy2D) instead of memcpy.
//
// The process forks TP-1 ranks; they meet through a TCP rendezvous on 127.0.0.1. Rank 0 prints
// the figures. With peer error handling on (the default of the transport), Debian's UCX 1.13 uses
// tcp even between processes of one machine (docs/deployment.md, UCX settings); off lets it pick shared memory.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "kernels/device_memory.h"
#include "transport/tcp_bootstrap.h"
#include "transport/ucx/ucx_transport.h"
#include "transport/ucx_memory_path.h"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
    int32_t tp = 4;
    int32_t pad_bs = 64;
    int32_t n = 4;
    int32_t vocab = 128256;
    int32_t steps = 30;
    bool peer_error_handling = true;
    ds::ucx_memory_path memory = ds::ucx_memory_path::host;
};

// --memory names the transport's memory paths (ucx_memory_path_name).
bool parse_memory(const std::string& name, ds::ucx_memory_path& out) {
    for (const ds::ucx_memory_path path :
         {ds::ucx_memory_path::host, ds::ucx_memory_path::direct, ds::ucx_memory_path::staged}) {
        if (name == ds::ucx_memory_path_name(path)) {
            out = path;
            return true;
        }
    }
    return false;
}

bool parse(int argc, char** argv, options& o) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        const std::string value = argv[i + 1];
        if (key == "--tp")
            o.tp = std::stoi(value);
        else if (key == "--pad-bs")
            o.pad_bs = std::stoi(value);
        else if (key == "--n")
            o.n = std::stoi(value);
        else if (key == "--vocab")
            o.vocab = std::stoi(value);
        else if (key == "--steps")
            o.steps = std::stoi(value);
        else if (key == "--peer-error-handling")
            o.peer_error_handling = value == "on";
        else if (key != "--memory" || !parse_memory(value, o.memory))
            return false;
    }
    return argc % 2 == 1 && o.tp >= 1 && o.pad_bs % o.tp == 0 && o.vocab % o.tp == 0 && o.steps >= 1;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double mean(const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
}

// The sizes of one rank's part of a step.
struct rank_shape {
    int32_t shard_vocab = 0;
    int64_t rows = 0;     // pad_bs * N: every row of this rank's shard
    int64_t my_rows = 0;  // the rows this rank samples after the swap
    int32_t block_ints = 0;
    std::size_t slice_bytes = 0;         // one row of a shard
    std::size_t received_row_bytes = 0;  // one full row

    rank_shape(const options& o)
        : shard_vocab(o.vocab / o.tp),
          rows(int64_t{o.pad_bs} * o.n),
          my_rows(int64_t{o.pad_bs / o.tp} * o.n),
          block_ints(o.pad_bs / o.tp * (2 * o.n + 1)),
          slice_bytes(static_cast<std::size_t>(o.vocab / o.tp) * sizeof(float)),
          received_row_bytes(static_cast<std::size_t>(o.vocab) * sizeof(float)) {}
};

ds::status make_endpoint(const options& o, const rank_shape& shape, int32_t rank, uint16_t port,
                         std::unique_ptr<ds::ucx_endpoint>& endpoint) {
    ds::transport_config config;
    config.world_size = o.tp;
    config.vocab_size = o.vocab;
    config.max_swap_rows = shape.my_rows;
    config.max_collective_bytes = static_cast<size_t>(shape.block_ints) * sizeof(int32_t);
    config.timeout = std::chrono::milliseconds(30000);
    ds::tcp_bootstrap boot("127.0.0.1", port, rank, o.tp, config.timeout);
    ds::ucx_endpoint_options ucx;
    ucx.peer_error_handling = o.peer_error_handling;
    ucx.backend_on_device = o.memory != ds::ucx_memory_path::host;
    ucx.device_memory =
        o.memory == ds::ucx_memory_path::direct ? ds::ucx_memory_mode::direct : ds::ucx_memory_mode::staged;
    return ds::ucx_endpoint::create(config, ucx, boot, endpoint);
}

// The rank's shard where --memory puts it, and the baseline's destination.
struct rank_buffers {
    std::vector<float> shard;
    std::vector<float> copy_dst;  // host memory only
    ds::cuda_allocation device_shard, pinned_shard, device_copy_dst;
    ds::logits_view view;  // what the swap reads

    ds::status allocate(const options& o, const rank_shape& shape) {
        shard.resize(static_cast<size_t>(shape.rows) * static_cast<size_t>(shape.shard_vocab));
        for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<float>((i * 2654435761u) % 1000) * 0.01f;
        const std::size_t shard_bytes = shard.size() * sizeof(float);
        // What this rank receives in the swap, copied in the same layout: the same bytes.
        const std::size_t copy_dst_bytes = static_cast<std::size_t>(shape.my_rows) * shape.received_row_bytes;
        const void* swapped = shard.data();
        if (o.memory == ds::ucx_memory_path::host) {
            copy_dst.resize(copy_dst_bytes / sizeof(float));
        } else {
            DS_TRY(ds::cuda_allocation::allocate(ds::cuda_memory_kind::device, shard_bytes, device_shard));
            DS_TRY(ds::copy_rows(device_shard.data(), shard_bytes, shard.data(), shard_bytes, shard_bytes, 1));
            DS_TRY(ds::cuda_allocation::allocate(ds::cuda_memory_kind::pinned_host, shard_bytes, pinned_shard));
            DS_TRY(ds::cuda_allocation::allocate(ds::cuda_memory_kind::device, copy_dst_bytes, device_copy_dst));
            swapped = o.memory == ds::ucx_memory_path::direct ? static_cast<const void*>(device_shard.data())
                                                              : static_cast<const void*>(pinned_shard.data());
        }
        view = ds::logits_view{swapped,           ds::logits_dtype::f32, shape.rows,
                               shape.shard_vocab, shape.shard_vocab,     o.memory == ds::ucx_memory_path::direct};
        return ds::status::success();
    }

    // The baseline: this rank's received slices copied once, by memcpy or device to device.
    ds::status copy_swap_bytes(const options& o, const rank_shape& shape, int32_t rank) {
        const std::size_t first_row = static_cast<std::size_t>(rank * shape.my_rows);
        for (int32_t peer = 0; peer < o.tp; ++peer) {
            if (peer == rank) continue;
            if (o.memory != ds::ucx_memory_path::host) {
                DS_TRY(ds::copy_rows(device_copy_dst.data() + peer * shape.slice_bytes, shape.received_row_bytes,
                                     device_shard.data() + first_row * shape.slice_bytes, shape.slice_bytes,
                                     shape.slice_bytes, static_cast<std::size_t>(shape.my_rows)));
                continue;
            }
            for (int64_t i = 0; i < shape.my_rows; ++i) {
                std::memcpy(copy_dst.data() + i * o.vocab + int64_t{peer} * shape.shard_vocab,
                            shard.data() + (first_row + i) * static_cast<std::size_t>(shape.shard_vocab),
                            shape.slice_bytes);
            }
        }
        return ds::status::success();
    }
};

struct step_times {
    std::vector<double> swap_ms, gather_us, baseline_ms;
};

// Three warm-up steps, then o.steps measured ones: the swap (staging included), the gather, and
// the baseline copy.
ds::status measure(const options& o, const rank_shape& shape, int32_t rank, ds::ucx_endpoint& endpoint,
                   rank_buffers& buffers, step_times& times) {
    const std::size_t shard_bytes = buffers.shard.size() * sizeof(float);
    std::vector<int32_t> block(static_cast<size_t>(shape.block_ints), rank);
    std::vector<int32_t> gathered(static_cast<size_t>(shape.block_ints) * static_cast<size_t>(o.tp));
    for (int32_t step = -3; step < o.steps; ++step) {
        DS_TRY(endpoint.barrier());
        const auto start = clock_type::now();
        if (o.memory == ds::ucx_memory_path::staged) {
            DS_TRY(ds::copy_rows(buffers.pinned_shard.data(), shard_bytes, buffers.device_shard.data(), shard_bytes,
                                 shard_bytes, 1));
        }
        ds::logits_view full;
        DS_TRY(endpoint.swap_batch_vocab(buffers.view, rank * shape.my_rows, shape.my_rows, full));
        const auto swapped = clock_type::now();
        DS_TRY(endpoint.gather_verify_outputs(block.data(), block.size(), gathered.data()));
        const auto done = clock_type::now();
        DS_TRY(buffers.copy_swap_bytes(o, shape, rank));
        const auto copy_done = clock_type::now();
        if (step < 0) continue;
        times.swap_ms.push_back(std::chrono::duration<double, std::milli>(swapped - start).count());
        times.gather_us.push_back(std::chrono::duration<double, std::micro>(done - swapped).count());
        times.baseline_ms.push_back(std::chrono::duration<double, std::milli>(copy_done - done).count());
    }
    return ds::status::success();
}

void print_figures(const options& o, const rank_shape& shape, const ds::ucx_endpoint& endpoint, const step_times& t) {
    const double received = static_cast<double>(shape.my_rows) * (o.tp - 1) * static_cast<double>(shape.slice_bytes);
    fmt::print(
        "bench_transport: UCX between {} processes, pad_bs={}, N={}, V={}, fp32, {} steps; peer error handling {}; "
        "memory {}; transports: {}\n",
        o.tp, o.pad_bs, o.n, o.vocab, o.steps, o.peer_error_handling ? "on" : "off", ds::ucx_memory_path_name(o.memory),
        endpoint.transport_summary());
    fmt::print(
        "  bytes per step: swap {:.2f} MB received per rank ({:.2f} MB across the {} ranks), gather {} B per rank\n",
        received / 1e6, received * o.tp / 1e6, o.tp,
        static_cast<size_t>(shape.block_ints) * sizeof(int32_t) * static_cast<size_t>(o.tp - 1));
    fmt::print("  swap_batch_vocab       p50 {:9.3f} ms  mean {:9.3f} ms  ({:.2f} GB/s received per rank)\n",
               median(t.swap_ms), mean(t.swap_ms), received / (median(t.swap_ms) * 1e-3) / 1e9);
    fmt::print("  gather_verify_outputs  p50 {:9.1f} us  mean {:9.1f} us\n", median(t.gather_us), mean(t.gather_us));
    const char* baseline = o.memory != ds::ucx_memory_path::host ? "device copy" : "memcpy";
    fmt::print("  {} of the swap's bytes (one rank, same run)  p50 {:9.3f} ms  ({:.2f} GB/s)\n", baseline,
               median(t.baseline_ms), received / (median(t.baseline_ms) * 1e-3) / 1e9);
    fmt::print("  ratio swap / {}: {:.1f}x; swap + gather per step p50: {:.3f} ms\n", baseline,
               median(t.swap_ms) / median(t.baseline_ms), median(t.swap_ms) + median(t.gather_us) * 1e-3);
}

// Rank `rank`'s part of the run; rank 0 prints. Returns the process exit code.
int run_rank(const options& o, int32_t rank, uint16_t port) {
    const rank_shape shape(o);
    std::unique_ptr<ds::ucx_endpoint> endpoint;
    if (ds::status s = make_endpoint(o, shape, rank, port, endpoint); !s.is_ok()) {
        fmt::print(stderr, "{}\n", s.message);  // it names the rank
        return 1;
    }
    rank_buffers buffers;
    if (ds::status s = buffers.allocate(o, shape); !s.is_ok()) {
        fmt::print(stderr, "rank {}: --memory {}: {}\n", rank, ds::ucx_memory_path_name(o.memory), s.message);
        return 1;
    }
    step_times times;
    if (ds::status s = measure(o, shape, rank, *endpoint, buffers, times); !s.is_ok()) {
        fmt::print(stderr, "rank {}: {}\n", rank, s.message);
        return 1;
    }
    if (ds::status s = endpoint->barrier(); !s.is_ok() || rank != 0) return s.is_ok() ? 0 : 1;
    print_figures(o, shape, *endpoint, times);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    if (!parse(argc, argv, o)) {
        fmt::print(stderr,
                   "usage: bench_transport [--tp T] [--pad-bs B] [--n N] [--vocab V] [--steps S] "
                   "[--peer-error-handling on|off] "
                   "[--memory host|direct|staged]\n(pad-bs and vocab multiples of tp)\n");
        return 2;
    }
    ds::tcp_rendezvous rendezvous;
    if (ds::status s = rendezvous.listen("127.0.0.1", 0); !s.is_ok()) {
        fmt::print(stderr, "{}\n", s.message);
        return 1;
    }
    // Fork before any thread exists; the ranks create their UCX contexts after the fork.
    std::vector<pid_t> children;
    for (int32_t rank = 1; rank < o.tp; ++rank) {
        const pid_t pid = ::fork();
        if (pid == 0) ::_exit(run_rank(o, rank, rendezvous.port()));
        children.push_back(pid);
    }
    ds::status served;
    std::thread server([&] { served = rendezvous.serve(o.tp, std::chrono::milliseconds(30000)); });
    int code = run_rank(o, 0, rendezvous.port());
    server.join();
    for (pid_t pid : children) {
        int wstatus = 0;
        ::waitpid(pid, &wstatus, 0);
        if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) code = 1;
    }
    if (!served.is_ok()) fmt::print(stderr, "{}\n", served.message);
    return code;
}
