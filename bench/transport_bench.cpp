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
#include <string>
#include <thread>
#include <vector>

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

// Rank `rank`'s part of the run; rank 0 prints. Returns the process exit code.
int run_rank(const options& o, int32_t rank, uint16_t port) {
    const int32_t shard_vocab = o.vocab / o.tp;
    const int32_t reqs_per_rank = o.pad_bs / o.tp;
    const int64_t rows = int64_t{o.pad_bs} * o.n;
    const int64_t my_rows = int64_t{reqs_per_rank} * o.n;
    const int32_t block_ints = reqs_per_rank * (2 * o.n + 1);

    ds::transport_config config;
    config.world_size = o.tp;
    config.vocab_size = o.vocab;
    config.max_swap_rows = my_rows;
    config.max_collective_bytes = static_cast<size_t>(block_ints) * sizeof(int32_t);
    config.timeout = std::chrono::milliseconds(30000);
    ds::tcp_bootstrap boot("127.0.0.1", port, rank, o.tp, config.timeout);
    std::unique_ptr<ds::ucx_endpoint> endpoint;
    const bool on_device = o.memory != ds::ucx_memory_path::host;
    ds::ucx_endpoint_options ucx;
    ucx.peer_error_handling = o.peer_error_handling;
    ucx.backend_on_device = on_device;
    ucx.device_memory =
        o.memory == ds::ucx_memory_path::direct ? ds::ucx_memory_mode::direct : ds::ucx_memory_mode::staged;
    if (ds::status s = ds::ucx_endpoint::create(config, ucx, boot, endpoint); !s.is_ok()) {
        fmt::print(stderr, "{}\n", s.message);  // it names the rank
        return 1;
    }

    std::vector<float> shard(static_cast<size_t>(rows) * shard_vocab);
    for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<float>((i * 2654435761u) % 1000) * 0.01f;
    const std::size_t shard_bytes = shard.size() * sizeof(float);
    const std::size_t slice_bytes = static_cast<std::size_t>(shard_vocab) * sizeof(float);
    const std::size_t received_row_bytes = static_cast<std::size_t>(o.vocab) * sizeof(float);
    // What this rank receives in the swap, copied in the same layout: the same bytes.
    const std::size_t copy_dst_bytes = static_cast<std::size_t>(my_rows) * received_row_bytes;
    std::vector<float> copy_dst(on_device ? 0 : copy_dst_bytes / sizeof(float));
    ds::cuda_allocation device_shard, pinned_shard, device_copy_dst;
    if (on_device) {
        ds::status s = ds::cuda_allocation::allocate(ds::cuda_memory_kind::device, shard_bytes, device_shard);
        if (s.is_ok()) s = ds::copy_rows(device_shard.data(), shard_bytes, shard.data(), shard_bytes, shard_bytes, 1);
        if (s.is_ok()) s = ds::cuda_allocation::allocate(ds::cuda_memory_kind::pinned_host, shard_bytes, pinned_shard);
        if (s.is_ok()) s = ds::cuda_allocation::allocate(ds::cuda_memory_kind::device, copy_dst_bytes, device_copy_dst);
        if (!s.is_ok()) {
            fmt::print(stderr, "rank {}: --memory {}: {}\n", rank, ds::ucx_memory_path_name(o.memory), s.message);
            return 1;
        }
    }
    const void* const swapped_shard = o.memory == ds::ucx_memory_path::host ? static_cast<const void*>(shard.data())
                                      : o.memory == ds::ucx_memory_path::direct
                                          ? static_cast<const void*>(device_shard.data())
                                          : static_cast<const void*>(pinned_shard.data());
    const ds::logits_view view{swapped_shard, ds::logits_dtype::f32, rows,
                               shard_vocab,   shard_vocab,           o.memory == ds::ucx_memory_path::direct};
    // The baseline: this rank's received slices copied once, by memcpy or device to device.
    auto copy_swap_bytes = [&]() -> ds::status {
        for (int32_t peer = 0; peer < o.tp; ++peer) {
            if (peer == rank) continue;
            const std::size_t first_row = static_cast<std::size_t>(rank * my_rows);
            if (on_device) {
                if (ds::status s = ds::copy_rows(device_copy_dst.data() + peer * slice_bytes, received_row_bytes,
                                                 device_shard.data() + first_row * slice_bytes, slice_bytes,
                                                 slice_bytes, static_cast<std::size_t>(my_rows));
                    !s.is_ok()) {
                    return s;
                }
                continue;
            }
            for (int64_t i = 0; i < my_rows; ++i) {
                std::memcpy(copy_dst.data() + i * o.vocab + int64_t{peer} * shard_vocab,
                            shard.data() + (first_row + i) * shard_vocab, slice_bytes);
            }
        }
        return ds::status::success();
    };
    std::vector<int32_t> block(static_cast<size_t>(block_ints), rank), gathered(static_cast<size_t>(block_ints) * o.tp);
    std::vector<double> swap_ms, gather_us, baseline_ms;

    for (int32_t step = -3; step < o.steps; ++step) {  // three warm-up steps
        if (ds::status s = endpoint->barrier(); !s.is_ok()) {
            fmt::print(stderr, "rank {}: {}\n", rank, s.message);
            return 1;
        }
        const auto start = clock_type::now();
        ds::logits_view full;
        ds::status s =
            o.memory == ds::ucx_memory_path::staged
                ? ds::copy_rows(pinned_shard.data(), shard_bytes, device_shard.data(), shard_bytes, shard_bytes, 1)
                : ds::status::success();
        if (s.is_ok()) s = endpoint->swap_batch_vocab(view, rank * my_rows, my_rows, full);
        const auto swapped = clock_type::now();
        if (s.is_ok()) s = endpoint->gather_verify_outputs(block.data(), block.size(), gathered.data());
        const auto done = clock_type::now();
        if (!s.is_ok()) {
            fmt::print(stderr, "rank {}: {}\n", rank, s.message);
            return 1;
        }
        const auto copy_start = clock_type::now();
        if (ds::status c = copy_swap_bytes(); !c.is_ok()) {
            fmt::print(stderr, "rank {}: {}\n", rank, c.message);
            return 1;
        }
        const auto copy_done = clock_type::now();
        if (step < 0) continue;
        swap_ms.push_back(std::chrono::duration<double, std::milli>(swapped - start).count());
        gather_us.push_back(std::chrono::duration<double, std::micro>(done - swapped).count());
        baseline_ms.push_back(std::chrono::duration<double, std::milli>(copy_done - copy_start).count());
    }
    if (ds::status s = endpoint->barrier(); !s.is_ok() || rank != 0) return s.is_ok() ? 0 : 1;

    const double received = static_cast<double>(my_rows) * (o.tp - 1) * static_cast<double>(slice_bytes);
    fmt::print(
        "bench_transport: UCX between {} processes, pad_bs={}, N={}, V={}, fp32, {} steps; peer error handling {}; "
        "memory {}; transports: {}\n",
        o.tp, o.pad_bs, o.n, o.vocab, o.steps, o.peer_error_handling ? "on" : "off", ds::ucx_memory_path_name(o.memory),
        endpoint->transport_summary());
    fmt::print(
        "  bytes per step: swap {:.2f} MB received per rank ({:.2f} MB across the {} ranks), gather {} B per rank\n",
        received / 1e6, received * o.tp / 1e6, o.tp, static_cast<size_t>(block_ints) * sizeof(int32_t) * (o.tp - 1));
    fmt::print("  swap_batch_vocab       p50 {:9.3f} ms  mean {:9.3f} ms  ({:.2f} GB/s received per rank)\n",
               median(swap_ms), mean(swap_ms), received / (median(swap_ms) * 1e-3) / 1e9);
    fmt::print("  gather_verify_outputs  p50 {:9.1f} us  mean {:9.1f} us\n", median(gather_us), mean(gather_us));
    const char* baseline = on_device ? "device copy" : "memcpy";
    fmt::print("  {} of the swap's bytes (one rank, same run)  p50 {:9.3f} ms  ({:.2f} GB/s)\n", baseline,
               median(baseline_ms), received / (median(baseline_ms) * 1e-3) / 1e9);
    fmt::print("  ratio swap / {}: {:.1f}x; swap + gather per step p50: {:.3f} ms\n", baseline,
               median(swap_ms) / median(baseline_ms), median(swap_ms) + median(gather_us) * 1e-3);
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
