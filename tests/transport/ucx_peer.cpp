// The processes of the multi-process UCX tests (test_ucx_transport.cpp starts them):
//   ucx_peer rendezvous HOST:PORT WORLD TIMEOUT_MS
// serves the bootstrap rendezvous for WORLD ranks (a "coordinator host" of its own), and
//   ucx_peer RANK WORLD HOST:PORT SCENARIO OUT_FILE TIMEOUT_MS
// is one rank: it
// joins the group through the rendezvous at HOST:PORT and runs SCENARIO:
//   script        the collective script (collective_script.h); OUT_FILE gets its transcript
//   kill:R        20 all-reduces; rank R kills itself (SIGKILL) before the 11th, and the others'
//                 OUT_FILE gets "<milliseconds> <message>" of the call that failed; they then
//                 stay connected for TIMEOUT_MS, so that no survivor sees another one leave
//   kill:R:HOST2:PORT2  the same, then the survivors re-form the group with a restarted rank R
//                 through the rendezvous at HOST2:PORT2 (keeping the old endpoint open) and run
//                 the script there; OUT_FILE.reformed gets its transcript
// Exits 0 when the scenario ran (a failure it was meant to see included), 1 otherwise.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "collective_script.h"
#include "transport/tcp_bootstrap.h"
#include "transport/transport_factory.h"

namespace {

// Runs the collective script and writes its transcript to `path`; false (and why on stderr) if not.
bool run_script_to(ds::transport& endpoint, const std::string& path) {
    std::vector<unsigned char> transcript;
    ds::status s = ds::run_collective_script(endpoint, transcript);
    if (s.is_ok()) s = endpoint.barrier();  // nobody leaves while a peer still waits for it
    if (!s.is_ok()) {
        std::fprintf(stderr, "ucx_peer rank %d: %s\n", endpoint.rank(), s.message.c_str());
        return false;
    }
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(transcript.data()), static_cast<std::streamsize>(transcript.size()));
    return static_cast<bool>(out);
}

// Joins the group at "HOST:PORT" as `rank` over ucx.
ds::status join(const std::string& rendezvous, int32_t rank, const ds::transport_config& config,
                std::unique_ptr<ds::transport>& out) {
    DS_TRY_ASSIGN(const ds::host_port address, ds::parse_host_port(rendezvous));
    ds::tcp_bootstrap boot(address.host, address.port, rank, config.world_size, config.timeout);
    return ds::make_rank_transport(ds::transport_kind::ucx, config, {}, boot, out);
}

int serve_rendezvous(int argc, char** argv) {
    const ds::result<ds::host_port> address =
        argc == 5 ? ds::parse_host_port(argv[2]) : ds::status::invalid("expected 4 arguments");
    if (!address.is_ok()) {
        std::fprintf(stderr, "usage: ucx_peer rendezvous HOST:PORT WORLD TIMEOUT_MS %s\n",
                     address.error().message.c_str());
        return 1;
    }
    ds::tcp_rendezvous rendezvous;
    ds::status s = rendezvous.listen(address->host, address->port);
    if (s.is_ok()) s = rendezvous.serve(std::stoi(argv[3]), std::chrono::milliseconds(std::stoi(argv[4])));
    if (!s.is_ok()) std::fprintf(stderr, "ucx_peer rendezvous: %s\n", s.message.c_str());
    return s.is_ok() ? 0 : 1;
}

int run(int argc, char** argv) {
    if (argc > 1 && std::string(argv[1]) == "rendezvous") return serve_rendezvous(argc, argv);
    if (argc != 7) {
        std::fprintf(stderr, "usage: ucx_peer RANK WORLD HOST:PORT SCENARIO OUT_FILE TIMEOUT_MS\n");
        return 1;
    }
    const int32_t rank = std::stoi(argv[1]);
    const std::string scenario = argv[4];
    const std::string out_file = argv[5];
    ds::transport_config config = ds::script_transport_config();
    config.world_size = std::stoi(argv[2]);
    config.timeout = std::chrono::milliseconds(std::stoi(argv[6]));
    std::unique_ptr<ds::transport> endpoint;
    if (ds::status s = join(argv[3], rank, config, endpoint); !s.is_ok()) {
        std::fprintf(stderr, "ucx_peer rank %d: %s\n", rank, s.message.c_str());
        return 1;
    }
    if (scenario == "script") return run_script_to(*endpoint, out_file) ? 0 : 1;
    if (scenario.rfind("kill:", 0) == 0) {
        const size_t victim_end = scenario.find(':', 5);
        const int32_t victim = std::stoi(scenario.substr(5, victim_end - 5));
        const std::string reform_at = victim_end == std::string::npos ? "" : scenario.substr(victim_end + 1);
        ds::status s;
        auto call_start = std::chrono::steady_clock::now();
        for (int i = 0; s.is_ok() && i < 20; ++i) {
            if (rank == victim && i == 10) std::raise(SIGKILL);
            uint64_t value = 1;
            call_start = std::chrono::steady_clock::now();
            s = endpoint->all_reduce(&value, 1, ds::reduce_op::sum);
        }
        const auto failed_after = std::chrono::steady_clock::now() - call_start;
        std::ofstream(out_file) << std::chrono::duration_cast<std::chrono::milliseconds>(failed_after).count() << ' '
                                << s.message;
        if (s.is_ok()) return 1;
        if (reform_at.empty()) {
            std::this_thread::sleep_for(config.timeout);
            return 0;
        }
        std::unique_ptr<ds::transport> reformed;
        if (ds::status r = join(reform_at, rank, config, reformed); !r.is_ok()) {
            std::fprintf(stderr, "ucx_peer rank %d: re-forming: %s\n", rank, r.message.c_str());
            return 1;
        }
        return run_script_to(*reformed, out_file + ".reformed") ? 0 : 1;
    }
    std::fprintf(stderr, "ucx_peer: unknown scenario '%s'\n", scenario.c_str());
    return 1;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
