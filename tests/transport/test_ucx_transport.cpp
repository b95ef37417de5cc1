// The UCX transport against the local transport: the collective script (collective_script.h) gives
// the same bytes on every rank whether the ranks are local threads, UCX endpoints on threads, or
// UCX rank processes (ucx_peer, started by the test on loopback). Failure paths: a killed rank
// process, a rank that never arrives, abort(), a bootstrap that is missing a rank.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective_script.h"
#include "support/child_processes.h"
#include "support/netns_hosts.h"
#include "transport/local_transport.h"
#include "transport/tcp_bootstrap.h"
#include "transport/ucx/ucx_transport.h"

namespace ds {
namespace {

// ucx_peer sits next to this binary (build/bin here, the bundle's bin/ on the GPU machine).
std::string ucx_peer_binary() { return sibling_binary("ucx_peer"); }

using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

// The script's transcript of every rank over the local transport: what every backend must match.
std::vector<std::vector<unsigned char>> local_transcripts() {
    std::vector<std::vector<unsigned char>> transcripts;
    const status s = local_script_transcripts(script_transport_config().world_size, transcripts);
    EXPECT_TRUE(s.is_ok()) << s.message;
    return transcripts;
}

// A rendezvous on an ephemeral loopback port, served on its own thread.
class rendezvous_thread {
   public:
    rendezvous_thread(int32_t world, milliseconds timeout) {
        listening_ = server_.listen("127.0.0.1", 0);
        if (listening_.is_ok())
            thread_ = std::thread([this, world, timeout] { served_ = server_.serve(world, timeout); });
    }
    ~rendezvous_thread() {
        if (thread_.joinable()) thread_.join();
    }
    uint16_t port() const { return server_.port(); }
    const status& listening() const { return listening_; }
    // The serve() result, once it has returned.
    const status& served() {
        if (thread_.joinable()) thread_.join();
        return served_;
    }

   private:
    tcp_rendezvous server_;
    status listening_;
    status served_;
    std::thread thread_;
};

// Creates `world` UCX endpoints on threads of this process and runs body(rank, endpoint) on each.
std::vector<status> on_ucx_threads(const transport_config& config,
                                   const std::function<status(int32_t, ucx_endpoint&)>& body,
                                   const ucx_endpoint_options& options = {}) {
    rendezvous_thread rendezvous(config.world_size, config.timeout);
    EXPECT_TRUE(rendezvous.listening().is_ok()) << rendezvous.listening().message;
    std::vector<status> results(static_cast<size_t>(config.world_size));
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < config.world_size; ++r) {
        threads.emplace_back([&, r] {
            tcp_bootstrap boot("127.0.0.1", rendezvous.port(), r, config.world_size, config.timeout);
            std::unique_ptr<ucx_endpoint> endpoint;
            status s = ucx_endpoint::create(config, options, boot, endpoint);
            if (s.is_ok()) s = body(r, *endpoint);
            results[static_cast<size_t>(r)] = s;
        });
    }
    for (std::thread& t : threads) t.join();
    return results;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string out_path(int32_t rank) {
    return testing::TempDir() + "ucx_peer_" + std::to_string(::getpid()) + "_" + std::to_string(rank) + ".out";
}

// Starts `world` ucx_peer processes running `scenario` and returns their exit codes.
std::vector<int> run_peer_processes(int32_t world, const std::string& scenario, milliseconds timeout,
                                    milliseconds wait) {
    tcp_rendezvous rendezvous;
    EXPECT_TRUE(rendezvous.listen("127.0.0.1", 0).is_ok());
    child_processes peers;
    for (int32_t r = 0; r < world; ++r) {
        peers.start({ucx_peer_binary(), std::to_string(r), std::to_string(world),
                     "127.0.0.1:" + std::to_string(rendezvous.port()), scenario, out_path(r),
                     std::to_string(timeout.count())});
    }
    const status served = rendezvous.serve(world, timeout);
    EXPECT_TRUE(served.is_ok()) << served.message;
    return peers.wait_all(wait);
}

TEST(UcxTransport, ThreadsMatchTheLocalTransport) {
    const auto expected = local_transcripts();
    std::vector<std::vector<unsigned char>> transcripts(expected.size());
    const auto results = on_ucx_threads(script_transport_config(), [&](int32_t r, ucx_endpoint& endpoint) {
        status s = run_collective_script(endpoint, transcripts[static_cast<size_t>(r)]);
        return s.is_ok() ? endpoint.barrier() : s;
    });
    for (size_t r = 0; r < expected.size(); ++r) {
        ASSERT_TRUE(results[r].is_ok()) << results[r].message;
        EXPECT_FALSE(expected[r].empty());
        EXPECT_EQ(transcripts[r], expected[r]) << "rank " << r;
    }
}

TEST(UcxTransport, ProcessesMatchTheLocalTransport) {
    const auto expected = local_transcripts();
    const int32_t world = static_cast<int32_t>(expected.size());
    const auto codes = run_peer_processes(world, "script", milliseconds(5000), milliseconds(20000));
    for (int32_t r = 0; r < world; ++r) {
        EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
        const std::string got = read_file(out_path(r));
        EXPECT_EQ(std::vector<unsigned char>(got.begin(), got.end()), expected[static_cast<size_t>(r)]) << "rank " << r;
        std::remove(out_path(r).c_str());
    }
}

TEST(UcxTransport, AKilledRankProcessIsNamedWithinTheTimeout) {
    const milliseconds timeout(1500);
    const auto codes = run_peer_processes(4, "kill:2", timeout, milliseconds(15000));
    EXPECT_EQ(codes[2], -SIGKILL);
    for (int32_t r : {0, 1, 3}) {
        EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
        // "<milliseconds the failing call took> <its message>"
        std::istringstream failure(read_file(out_path(r)));
        int64_t failed_after_ms = -1;
        std::string message;
        failure >> failed_after_ms;
        std::getline(failure, message);
        EXPECT_NE(message.find("rank 2"), std::string::npos) << "rank " << r << ": " << message;
        EXPECT_GE(failed_after_ms, 0);
        EXPECT_LE(failed_after_ms, timeout.count() + 500) << "rank " << r;
        std::remove(out_path(r).c_str());
    }
    std::remove(out_path(2).c_str());
}

TEST(UcxTransport, AfterAKilledRankTheSurvivorsReFormTheGroupWithARestartedRank) {
    const auto expected = local_transcripts();
    constexpr int32_t kWorld = 4;
    const milliseconds timeout(3000);
    rendezvous_thread second(kWorld, timeout * 4);  // the re-formed group meets here
    ASSERT_TRUE(second.listening().is_ok());
    tcp_rendezvous first;
    ASSERT_TRUE(first.listen("127.0.0.1", 0).is_ok());
    const std::string scenario = "kill:2:127.0.0.1:" + std::to_string(second.port());
    const std::string restarted_out = out_path(2) + ".restarted";
    child_processes peers;
    for (int32_t r = 0; r < kWorld; ++r) {
        peers.start({ucx_peer_binary(), std::to_string(r), std::to_string(kWorld),
                     "127.0.0.1:" + std::to_string(first.port()), scenario, out_path(r),
                     std::to_string(timeout.count())});
    }
    // Rank 2's replacement, waiting at the second rendezvous for the survivors: they may only see
    // the death when their call times out, so it waits longer than that.
    peers.start({ucx_peer_binary(), "2", std::to_string(kWorld), "127.0.0.1:" + std::to_string(second.port()), "script",
                 restarted_out, std::to_string(3 * timeout.count())});
    EXPECT_TRUE(first.serve(kWorld, timeout).is_ok());
    const auto codes = peers.wait_all(milliseconds(20000));
    EXPECT_TRUE(second.served().is_ok()) << second.served().message;
    EXPECT_EQ(codes[2], -SIGKILL);
    EXPECT_EQ(codes[4], 0) << "restarted rank 2";
    for (int32_t r = 0; r < kWorld; ++r) {
        const std::string reformed = read_file(r == 2 ? restarted_out : out_path(r) + ".reformed");
        EXPECT_EQ(std::vector<unsigned char>(reformed.begin(), reformed.end()), expected[static_cast<size_t>(r)])
            << "rank " << r;
        if (r != 2) {
            EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r;
            EXPECT_NE(read_file(out_path(r)).find("rank 2"), std::string::npos)
                << "rank " << r << ": " << read_file(out_path(r));
        }
        std::remove(out_path(r).c_str());
        std::remove((out_path(r) + ".reformed").c_str());
    }
    std::remove(restarted_out.c_str());
}

TEST(UcxTransport, ARankThatNeverArrivesTimesOutByName) {
    transport_config config = script_transport_config();
    config.world_size = 2;
    config.timeout = milliseconds(300);
    const auto results = on_ucx_threads(config, [](int32_t r, ucx_endpoint& endpoint) {
        if (r == 1) return status::success();  // leaves without the barrier
        status s = endpoint.barrier();
        if (endpoint.barrier().is_ok()) return status{status_code::internal, "a failed endpoint must stay failed"};
        return s;
    });
    EXPECT_TRUE(results[1].is_ok());
    EXPECT_NE(results[0].code, status_code::ok);
    EXPECT_NE(results[0].message.find("rank 1"), std::string::npos) << results[0].message;
}

TEST(UcxTransport, AbortFromAnotherThreadWakesTheWaiter) {
    transport_config config = script_transport_config();
    config.world_size = 2;
    config.timeout = milliseconds(10000);
    std::vector<ucx_endpoint*> endpoints(2, nullptr);
    std::atomic<int> ready{0};
    std::atomic<bool> aborted{false};
    std::thread aborter([&] {
        while (ready.load() < 2) std::this_thread::sleep_for(milliseconds(1));
        std::this_thread::sleep_for(milliseconds(50));
        endpoints[0]->abort("test abort");
        aborted = true;
    });
    const auto start = clock::now();
    const auto results = on_ucx_threads(config, [&](int32_t r, ucx_endpoint& endpoint) {
        endpoints[static_cast<size_t>(r)] = &endpoint;
        ++ready;
        if (r == 1) {  // stays connected until the abort, never enters the barrier
            while (!aborted.load()) std::this_thread::sleep_for(milliseconds(1));
            return status::success();
        }
        return endpoint.barrier();
    });
    aborter.join();
    EXPECT_EQ(results[0].code, status_code::aborted);
    EXPECT_NE(results[0].message.find("test abort"), std::string::npos) << results[0].message;
    EXPECT_LT(clock::now() - start, milliseconds(5000));
}

TEST(UcxTransport, RejectsOversizedCallsNamingTheLimit) {
    transport_config config = script_transport_config();
    config.world_size = 1;
    const auto results = on_ucx_threads(config, [](int32_t, ucx_endpoint& endpoint) {
        std::vector<uint64_t> big(1000);
        status s = endpoint.all_reduce(big.data(), big.size(), reduce_op::sum);
        if (s.code != status_code::invalid_argument || s.message.find("max_collective_bytes") == std::string::npos) {
            return status{status_code::internal, "expected max_collective_bytes: " + s.message};
        }
        std::vector<float> rows(64 * 9);
        logits_view out;
        s = endpoint.swap_batch_vocab({rows.data(), logits_dtype::f32, 9, 64, 64}, 0, 9, out);
        if (s.code != status_code::invalid_argument || s.message.find("max_swap_rows") == std::string::npos) {
            return status{status_code::internal, "expected max_swap_rows: " + s.message};
        }
        return endpoint.barrier();  // a rejected call does not break the endpoint
    });
    EXPECT_TRUE(results[0].is_ok()) << results[0].message;
}

// ucx_device_memory (transport/ucx_memory_path.h) as the endpoint resolves it: the cpu backend
// swaps host memory, and a device shard is refused naming the path; `direct` for the cuda backend
// either gets device swaps (a UCX with CUDA) or fails at creation saying what to set instead.
TEST(UcxTransport, ResolvesUcxDeviceMemoryAtCreation) {
    transport_config config = script_transport_config();
    config.world_size = 1;
    ucx_endpoint_options options;
    options.device_memory = ucx_memory_mode::automatic;
    auto results = on_ucx_threads(
        config,
        [](int32_t, ucx_endpoint& endpoint) {
            if (endpoint.memory_path() != ucx_memory_path::host || endpoint.swaps_device_logits()) {
                return status{status_code::internal,
                              std::string("expected host, got ") + ucx_memory_path_name(endpoint.memory_path())};
            }
            std::vector<float> rows(64);
            logits_view out;
            const status s = endpoint.swap_batch_vocab({rows.data(), logits_dtype::f32, 1, 64, 64, true}, 0, 1, out);
            if (s.code != status_code::unsupported || s.message.find("resolved to host") == std::string::npos) {
                return status{status_code::internal, "expected a refused device shard: " + s.message};
            }
            return status::success();
        },
        options);
    EXPECT_TRUE(results[0].is_ok()) << results[0].message;

    options.device_memory = ucx_memory_mode::direct;
    options.backend_on_device = true;
    results = on_ucx_threads(
        config,
        [](int32_t, ucx_endpoint& endpoint) {
            return endpoint.swaps_device_logits() ? status::success()
                                                  : status{status_code::internal, "direct without device swaps"};
        },
        options);
    if (results[0].is_ok()) return;  // this UCX and this build move CUDA memory
    EXPECT_EQ(results[0].code, status_code::unsupported) << results[0].message;
    EXPECT_NE(results[0].message.find("rank 0: ucx_device_memory = 'direct' is not available"), std::string::npos)
        << results[0].message;
    EXPECT_NE(results[0].message.find("set ucx_device_memory = auto or staged"), std::string::npos)
        << results[0].message;
}

// A rank whose endpoint cannot start (here: `direct` refused) still answers the bootstrap, so its
// peers fail at once naming it rather than waiting out the timeout.
TEST(UcxTransport, APeerThatCannotStartIsNamedAtOnce) {
    transport_config config = script_transport_config();
    config.world_size = 2;
    config.timeout = milliseconds(20000);
    ucx_endpoint_options refused;
    refused.device_memory = ucx_memory_mode::direct;
    refused.backend_on_device = !cuda_built();  // direct cannot work: no CUDA build, or the cpu backend
    rendezvous_thread rendezvous(config.world_size, config.timeout);
    ASSERT_TRUE(rendezvous.listening().is_ok()) << rendezvous.listening().message;
    status results[2];
    const auto start = clock::now();
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            tcp_bootstrap boot("127.0.0.1", rendezvous.port(), r, config.world_size, config.timeout);
            std::unique_ptr<ucx_endpoint> endpoint;
            results[r] = ucx_endpoint::create(config, r == 0 ? refused : ucx_endpoint_options{}, boot, endpoint);
        });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_LT(clock::now() - start, milliseconds(5000));
    EXPECT_EQ(results[0].code, status_code::unsupported) << results[0].message;
    EXPECT_NE(results[0].message.find("ucx_device_memory = 'direct'"), std::string::npos) << results[0].message;
    EXPECT_EQ(results[1].code, status_code::aborted) << results[1].message;
    EXPECT_NE(results[1].message.find("rank 1: rank 0 could not start its ucx endpoint"), std::string::npos)
        << results[1].message;
}

TEST(UcxTransport, RanksThatDisagreeOnTheBatchFailAlikeAndStayUsable) {
    transport_config config = script_transport_config();
    config.world_size = 2;
    const auto results = on_ucx_threads(config, [](int32_t r, ucx_endpoint& endpoint) {
        std::vector<float> rows(5 * 32);
        const logits_view shard{rows.data(), logits_dtype::f32, r == 0 ? 4 : 5, 32, 32};  // rank 1 has a row more
        logits_view out;
        status s = endpoint.swap_batch_vocab(shard, 2 * r, 2, out);
        if (s.code != status_code::invalid_argument || s.message.find("rank 1 has 5 rows") == std::string::npos) {
            return status{status_code::internal, "expected the disagreement named: " + s.message};
        }
        return endpoint.barrier();
    });
    for (const status& s : results) EXPECT_TRUE(s.is_ok()) << s.message;
}

TEST(TcpBootstrap, AMissingRankIsNamed) {
    rendezvous_thread rendezvous(3, milliseconds(300));
    ASSERT_TRUE(rendezvous.listening().is_ok());
    std::vector<status> results(2);
    std::vector<std::thread> threads;
    for (int32_t r : {0, 2}) {
        threads.emplace_back([&, r] {
            std::vector<std::string> all;
            results[static_cast<size_t>(r / 2)] =
                tcp_bootstrap("127.0.0.1", rendezvous.port(), r, 3, milliseconds(2000)).exchange("x", all);
        });
    }
    for (std::thread& t : threads) t.join();
    const status& served = rendezvous.served();
    EXPECT_EQ(served.code, status_code::timeout);
    EXPECT_NE(served.message.find("missing rank 1"), std::string::npos) << served.message;
    for (const status& s : results) EXPECT_FALSE(s.is_ok());
}

TEST(TcpBootstrap, ParsesHostAndPort) {
    const result<host_port> address = parse_host_port("10.213.0.2:4100");
    ASSERT_TRUE(address.is_ok());
    EXPECT_EQ(address->host, "10.213.0.2");
    EXPECT_EQ(address->port, 4100);
    EXPECT_FALSE(parse_host_port("localhost").is_ok());
    const result<host_port> bad_port = parse_host_port("localhost:99999");
    EXPECT_FALSE(bad_port.is_ok());
    EXPECT_NE(bad_port.error().message.find("port"), std::string::npos);
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

TEST(UcxTransport, ANewEpochRecoversFromAnAbortWhileARankStalled) {
    transport_config config = script_transport_config();
    config.max_collective_bytes = 1536 * 8;
    std::atomic<int> waiting{0};
    std::vector<ucx_endpoint*> endpoints(4, nullptr);
    std::atomic<bool> aborted{false};
    const auto results = on_ucx_threads(config, [&](int32_t r, ucx_endpoint& endpoint) {
        endpoints[static_cast<size_t>(r)] = &endpoint;
        std::vector<uint64_t> data(1536, uint64_t(r));
        endpoint.set_epoch(1);
        if (r == 1) {
            // Stalls without progressing its worker while the others push at it; then aborts all.
            while (waiting.load() < 3) std::this_thread::sleep_for(milliseconds(1));
            std::this_thread::sleep_for(milliseconds(300));
            for (ucx_endpoint* e : endpoints) e->abort("stall");
            aborted = true;
        } else {
            ++waiting;
            status s = endpoint.all_reduce(data.data(), data.size(), reduce_op::sum);
            if (s.is_ok()) return status{status_code::internal, "expected the abort"};
            while (!aborted.load()) std::this_thread::sleep_for(milliseconds(1));
        }
        endpoint.set_epoch(2);
        for (int i = 0; i < 20; ++i) {
            std::fill(data.begin(), data.end(), uint64_t(r));
            if (status s = endpoint.all_reduce(data.data(), data.size(), reduce_op::sum); !s.is_ok()) return s;
            if (data[7] != 6) return status{status_code::internal, "wrong sum"};
        }
        return endpoint.barrier();
    });
    for (const status& s : results) EXPECT_TRUE(s.is_ok()) << s.message;
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

TEST(UcxAcrossNamespaces, OneHostPerRankMatchesTheLocalTransport) {
    constexpr int32_t kWorld = 4;
    // One host per rank, the rendezvous on the hub (the coordinator's host).
    test_support::netns_hosts hosts("dsut", "10.213.0", kWorld);
    if (!hosts.unavailable().empty()) GTEST_SKIP() << "no network namespaces here: " << hosts.unavailable();
    const auto expected = local_transcripts();
    const std::string rendezvous = hosts.hub_address() + ":4100";
    const std::string timeout_ms = "5000";
    child_processes processes;
    processes.start({"ip", "netns", "exec", hosts.hub(), ucx_peer_binary(), "rendezvous", rendezvous,
                     std::to_string(kWorld), timeout_ms});
    for (int32_t r = 0; r < kWorld; ++r) {
        // UCX over tcp on the namespace's veth only: no shared memory or loopback shortcuts
        // between ranks that only look like separate hosts.
        processes.start({"ip", "netns", "exec", hosts.host(r), "env", "UCX_TLS=tcp",
                         std::string("UCX_NET_DEVICES=") + hosts.interface(), ucx_peer_binary(), std::to_string(r),
                         std::to_string(kWorld), rendezvous, "script", out_path(r), timeout_ms});
    }
    const auto codes = processes.wait_all(milliseconds(30000));
    EXPECT_EQ(codes[0], 0) << "rendezvous";
    for (int32_t r = 0; r < kWorld; ++r) {
        EXPECT_EQ(codes[static_cast<size_t>(r + 1)], 0) << "rank " << r;
        const std::string got = read_file(out_path(r));
        EXPECT_EQ(std::vector<unsigned char>(got.begin(), got.end()), expected[static_cast<size_t>(r)]) << "rank " << r;
        std::remove(out_path(r).c_str());
    }
}

}  // namespace
}  // namespace ds
