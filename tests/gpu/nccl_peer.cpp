// One rank process of the NCCL transport test (test_nccl_transport.cpp starts them, one per GPU):
//   nccl_peer RANK WORLD HOST:PORT OUT_FILE TIMEOUT_MS
// joins the group through the rendezvous at HOST:PORT (rank 0's NCCL unique id travels there),
// uses GPU RANK % device count, runs the collective script with its shards in device memory and
// writes the transcript to OUT_FILE. Exits 0 when the script ran, 1 otherwise (why on stderr).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "collective_script.h"
#include "kernels/cuda/cuda_backend.h"
#include "transport/tcp_bootstrap.h"
#include "transport/transport_factory.h"

int main(int argc, char** argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: nccl_peer RANK WORLD HOST:PORT OUT_FILE TIMEOUT_MS\n");
        return 1;
    }
    const int32_t rank = std::stoi(argv[1]);
    const int32_t world = std::stoi(argv[2]);
    const ds::result<ds::host_port> address = ds::parse_host_port(argv[3]);
    if (!address.is_ok()) {
        std::fprintf(stderr, "nccl_peer: %s\n", address.error().message.c_str());
        return 1;
    }
    const auto& [host, port] = *address;
    ds::transport_config config = ds::script_transport_config(world);
    config.timeout = std::chrono::milliseconds(std::stoi(argv[5]));
    ds::tcp_bootstrap boot(host, port, rank, world, config.timeout);
    std::unique_ptr<ds::transport> endpoint;
    ds::status s = ds::make_rank_transport(ds::transport_kind::nccl, config, {}, boot, endpoint);
    std::vector<unsigned char> transcript;
    const ds::script_device_memory device{ds::cuda::upload_to_device, ds::cuda::copy_rows_to_host};
    if (s.is_ok()) s = ds::run_collective_script(*endpoint, transcript, &device);
    if (!s.is_ok()) {
        std::fprintf(stderr, "nccl_peer rank %d: %s\n", rank, s.message.c_str());
        return 1;
    }
    std::ofstream out(argv[4], std::ios::binary);
    out.write(reinterpret_cast<const char*>(transcript.data()), static_cast<std::streamsize>(transcript.size()));
    return out ? 0 : 1;
}
